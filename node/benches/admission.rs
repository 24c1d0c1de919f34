//! What one handler slot costs to take and give back: the node's admission counter (a
//! compare-and-swap below the bound, a subtraction to give it back: `take_below` and
//! `give_back` in `node/src/serving/runtime.rs`) against `tokio::sync::Semaphore`'s
//! `try_acquire` and the permit's drop, which takes the semaphore's waiters' lock on every
//! release.
//!
//! `cargo bench -p node --bench admission`. Group `slot`: `counter` and `semaphore`, each
//! alone and with a second thread taking and giving back slots of the same bound at the
//! same time (`contended`), as two runtime threads do on a busy node. PERFORMANCE.md has
//! the figures.

// criterion's macros generate undocumented functions.
#![allow(missing_docs)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tokio::sync::Semaphore;

/// The node's default `max_concurrent_handlers`.
const MAX: usize = 1024;

/// The runtime's take: one place below `bound`, if there is one.
fn take_below(count: &AtomicUsize, bound: usize) -> bool {
    let mut now = count.load(Ordering::SeqCst);
    loop {
        if now >= bound {
            return false;
        }
        match count.compare_exchange_weak(now, now + 1, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => return true,
            Err(seen) => now = seen,
        }
    }
}

/// One slot taken and given back on the counter.
fn counter_round(count: &AtomicUsize) {
    if take_below(count, MAX) {
        count.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One permit taken and given back on the semaphore.
fn semaphore_round(slots: &Semaphore) {
    if let Ok(permit) = slots.try_acquire() {
        drop(std::hint::black_box(permit));
    }
}

/// Runs `round` on another thread until the returned guard is dropped.
struct Rival {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Rival {
    fn start(round: impl Fn() + Send + 'static) -> Rival {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                round();
            }
        });
        Rival {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Rival {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn slot(c: &mut Criterion) {
    let mut group = c.benchmark_group("slot");
    group.measurement_time(Duration::from_secs(3));

    let count = Arc::new(AtomicUsize::new(0));
    group.bench_function("counter", |b| b.iter(|| counter_round(&count)));
    let slots = Arc::new(Semaphore::new(MAX));
    group.bench_function("semaphore", |b| b.iter(|| semaphore_round(&slots)));

    {
        let rival = Arc::clone(&count);
        let _rival = Rival::start(move || counter_round(&rival));
        group.bench_function("counter/contended", |b| b.iter(|| counter_round(&count)));
    }
    {
        let rival = Arc::clone(&slots);
        let _rival = Rival::start(move || semaphore_round(&rival));
        group.bench_function("semaphore/contended", |b| {
            b.iter(|| semaphore_round(&slots))
        });
    }
    group.finish();
}

criterion_group!(benches, slot);
criterion_main!(benches);
