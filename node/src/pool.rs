//! The runners: tasks that run handler jobs one at a time and are reused, so that a
//! message costs a queue push and a wake-up, not a task.
//!
//! Why not `tokio::spawn` per message: a task is an allocation aligned to a cache line
//! (glibc's `memalign` path and `malloc_consolidate`), its registration in and removal
//! from the runtime's task list (two locks), and the copy of the future into the task. On
//! the node's echo server at 100 requests in flight, perf put those at about 8% of the
//! server's time, and the row at 0.78-0.88 of the code that ran handlers on the driver.
//! A runner is spawned only when a job finds none idle, and stays for the next job, so
//! under a steady load the same few tasks run every job; each still runs one job at a
//! time, so a handler that blocks or waits holds only its own runner (the next job goes to
//! another, or to a new one), and on a multi-thread runtime runners run in parallel.
//!
//! Bounds: runners that are running or waiting for a slot are bounded by the node's
//! limits (`runtime.rs`); idle runners beyond [`MAX_IDLE`] end. When the node is gone
//! (its `Runtime` dropped), every idle runner ends.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::runtime::{run_job, Job};

/// Idle runners kept for the next jobs; more end when they find nothing to do.
const MAX_IDLE: usize = 8;

/// The jobs waiting for a runner and the runners waiting for a job.
#[derive(Default)]
pub(crate) struct Pool {
    jobs: Mutex<VecDeque<Job>>,
    /// Runners waiting for a job (registered on `work`).
    idle: AtomicUsize,
    /// Wakes one idle runner per job.
    work: Notify,
    /// Set when the node is gone: idle runners end.
    closed: AtomicBool,
}

impl Pool {
    /// Hands `job` to an idle runner, or to a new one when none is idle.
    pub(crate) fn run(self: &Arc<Self>, job: Job) {
        self.jobs.lock().push_back(job);
        // A runner counts itself idle after registering for a wake-up and before its last
        // look at the queue: if it is counted here, it is woken or it finds the job; if it
        // is not, a new runner takes the job (at worst one runner too many).
        if self.idle.load(Ordering::SeqCst) > 0 {
            self.work.notify_one();
        } else {
            tokio::spawn(runner(Arc::clone(self)));
        }
    }

    /// Ends every idle runner (the node is gone).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.work.notify_waiters();
    }

    fn next(&self) -> Option<Job> {
        self.jobs.lock().pop_front()
    }
}

/// Runs jobs until none comes and enough runners are idle, or the pool closes.
async fn runner(pool: Arc<Pool>) {
    loop {
        if let Some(job) = pool.next() {
            run_job(job).await;
            continue;
        }
        let work = pool.work.notified();
        tokio::pin!(work);
        work.as_mut().enable();
        let idle = pool.idle.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(job) = pool.next() {
            pool.idle.fetch_sub(1, Ordering::SeqCst);
            run_job(job).await;
            continue;
        }
        if idle > MAX_IDLE || pool.closed.load(Ordering::SeqCst) {
            pool.idle.fetch_sub(1, Ordering::SeqCst);
            // A job pushed while we were counted idle is ours to run.
            match pool.next() {
                Some(job) => {
                    run_job(job).await;
                    continue;
                }
                None => return,
            }
        }
        work.await;
        pool.idle.fetch_sub(1, Ordering::SeqCst);
    }
}
