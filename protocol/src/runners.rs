//! Runners: tasks that run handler jobs one at a time and are reused, so that a message
//! costs a queue push and a wake-up, not a task. [`request_fn`](crate::request_fn) and
//! [`tick_fn`](crate::tick_fn) run their handlers on them, and so does the node layer.
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
//! Bounds: idle runners beyond `MAX_IDLE` (8) end; busy ones are as many as jobs in progress
//! (the node layer bounds those). [`Runners::close`] ends every idle runner; the owner
//! calls it when it is gone.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

/// One unit of work for a runner.
pub trait Job: Send + 'static {
    /// Runs the job to its end.
    fn run(self) -> impl Future<Output = ()> + Send;
}

/// Idle runners kept for the next jobs; more end when they find nothing to do.
const MAX_IDLE: usize = 8;

/// The room for waiting jobs an empty queue keeps (a burst past it gives the rest back).
const KEEP_JOBS: usize = 256;

/// The jobs waiting for a runner and the runners waiting for a job.
pub struct Runners<J> {
    jobs: Mutex<VecDeque<J>>,
    /// Runners waiting for a job (registered on `work`).
    idle: AtomicUsize,
    /// Wakes one idle runner per job.
    work: Notify,
    /// Set while a runner woken or started to take jobs left behind is on its way: until
    /// it arrives no other is called (at most one more at a time, so that a burst of quick
    /// jobs does not start a task per job). Every runner clears it when it looks.
    helper: AtomicBool,
    /// Set when the node is gone: idle runners end.
    closed: AtomicBool,
}

impl<J> Default for Runners<J> {
    fn default() -> Self {
        Runners {
            jobs: Mutex::new(VecDeque::new()),
            idle: AtomicUsize::new(0),
            work: Notify::new(),
            helper: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }
}

impl<J> std::fmt::Debug for Runners<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runners")
            .field("idle", &self.idle.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<J: Job> Runners<J> {
    /// No runner yet: the first job starts one.
    pub fn new() -> Arc<Runners<J>> {
        Arc::default()
    }

    /// Hands `job` to an idle runner, or to a new one when none is idle. Must be called
    /// inside a tokio runtime.
    pub fn run(self: &Arc<Self>, job: J) {
        self.jobs.lock().push_back(job);
        // A runner counts itself idle after registering for a wake-up and before its last
        // look at the queue: if it is counted here, it is woken or it finds the job; if it
        // is not, a new runner takes the job (at worst one runner too many).
        self.wake_or_start();
    }

    /// Wakes an idle runner, or starts one when none is idle.
    fn wake_or_start(self: &Arc<Self>) {
        if self.idle.load(Ordering::SeqCst) > 0 {
            self.work.notify_one();
        } else {
            tokio::spawn(runner(Arc::clone(self)));
        }
    }

    /// A runner started or woken is looking at the queue.
    fn started(&self) {
        self.helper.store(false, Ordering::SeqCst);
    }

    /// Ends every idle runner, now and as each busy one finishes (the owner is gone).
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.work.notify_waiters();
    }

    fn next(&self) -> Option<J> {
        let mut jobs = self.jobs.lock();
        let job = jobs.pop_front();
        // A burst grows the queue (jobs pushed faster than runners start: 4,096 of them
        // when 50,000 requests park at once); emptied, it gives
        // that room back instead of holding its high-water mark for the node's life.
        if jobs.is_empty() && jobs.capacity() > KEEP_JOBS {
            jobs.shrink_to(KEEP_JOBS);
        }
        job
    }

    /// A job that had to wait holds this runner: if jobs are left behind it and no runner
    /// is on its way, wakes or starts one for them. (A burst pushed while one runner was
    /// idle woke only that one: the wake-ups of one idle runner fold into one. Without
    /// this, the burst would wait behind a slow job; jobs that end at their first poll,
    /// the common case, never call anyone, so a burst of quick jobs is not a task each.)
    fn hand_on(self: &Arc<Self>) {
        if !self.jobs.lock().is_empty() && !self.helper.swap(true, Ordering::SeqCst) {
            self.wake_or_start();
        }
    }
}

/// Runs jobs until none comes and enough runners are idle, or the pool closes.
async fn runner<J: Job>(pool: Arc<Runners<J>>) {
    pool.started();
    loop {
        if let Some(job) = pool.next() {
            run(&pool, job).await;
            continue;
        }
        let work = pool.work.notified();
        tokio::pin!(work);
        work.as_mut().enable();
        let idle = pool.idle.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(job) = pool.next() {
            pool.idle.fetch_sub(1, Ordering::SeqCst);
            run(&pool, job).await;
            continue;
        }
        if idle > MAX_IDLE || pool.closed.load(Ordering::SeqCst) {
            pool.idle.fetch_sub(1, Ordering::SeqCst);
            // Perhaps the one called: it looks before it goes.
            pool.started();
            // A job pushed while we were counted idle is ours to run.
            match pool.next() {
                Some(job) => {
                    run(&pool, job).await;
                    continue;
                }
                None => return,
            }
        }
        work.await;
        pool.idle.fetch_sub(1, Ordering::SeqCst);
        pool.started();
    }
}

/// Runs a job; if it has to wait at its first poll, hands the jobs behind it on.
async fn run<J: Job>(pool: &Arc<Runners<J>>, job: J) {
    let mut work = std::pin::pin!(job.run());
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(work.as_mut().poll(cx))).await;
    if first.is_pending() {
        pool.hand_on();
        work.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job that waits for its gate, then counts itself done.
    struct Gated(Arc<tokio::sync::Semaphore>, Arc<AtomicUsize>);

    impl Job for Gated {
        async fn run(self) {
            let _ = self.0.acquire().await;
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_queue_emptied_after_a_burst_gives_its_room_back() {
        let pool: Arc<Runners<Gated>> = Runners::new();
        let (gate, done) = (Arc::new(tokio::sync::Semaphore::new(0)), Arc::default());
        // Pushed without yielding: on this one thread no runner starts before the last,
        // so all 5,000 wait in the queue.
        for _ in 0..5_000 {
            pool.run(Gated(gate.clone(), Arc::clone(&done)));
        }
        assert!(pool.jobs.lock().capacity() >= 5_000);
        gate.add_permits(tokio::sync::Semaphore::MAX_PERMITS);
        while done.load(Ordering::SeqCst) < 5_000 {
            tokio::task::yield_now().await;
        }
        let jobs = pool.jobs.lock();
        assert!(jobs.is_empty());
        assert!(jobs.capacity() <= KEEP_JOBS, "kept {}", jobs.capacity());
    }
}
