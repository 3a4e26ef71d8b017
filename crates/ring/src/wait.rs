//! Wait strategies and the notifier that parks and wakes waiting threads.
//!
//! Every strategy ends in parking: on a 2-core machine a thread that spins while idle
//! steals the core the thread it waits for needs. The strategies differ only in how long
//! they try before parking.

use crate::sync::{fence, lock, spin_hint, yield_now, AtomicUsize, Condvar, Mutex, Ordering};

/// How a consumer waits for events and a producer waits for space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitStrategy {
    /// Spin briefly, yield the core a few times, then park until woken (the default: idle
    /// threads use no CPU once parked).
    #[default]
    Blocking,
    /// Spin briefly, yield the core a number of times, then park.
    Yielding,
    /// Spin for a long bounded time (lowest latency when cores are free), then park.
    Spinning,
}

/// `yield_now` calls of `Blocking` between its spins and parking.
const BLOCKING_YIELDS: u32 = 4;

impl WaitStrategy {
    /// Busy-wait iterations before yielding or parking.
    fn spins_max(self) -> u32 {
        if cfg!(loom) {
            return 1;
        }
        match self {
            Self::Blocking | Self::Yielding => 64,
            Self::Spinning => 1 << 14,
        }
    }

    /// `yield_now` calls before parking.
    fn yields_max(self) -> u32 {
        if cfg!(loom) {
            return 0;
        }
        match self {
            // A few yields before parking let the thread being waited for run first when
            // threads outnumber cores: with 4 consumers on 2 cores, parking at once made
            // every batch a futex wake-up per consumer and halved the ring's throughput
            // (docs/benchmarks/ring.md, "Yields before parking").
            Self::Blocking => BLOCKING_YIELDS,
            Self::Spinning => 0,
            Self::Yielding => 256,
        }
    }
}

/// Parks threads until a condition holds; wakes them cheaply when nobody is parked.
///
/// Lost-wakeup freedom: a waiter registers in `waiters`, issues a SeqCst fence and then
/// re-checks its condition; a signaller changes the condition, issues a SeqCst fence and
/// then reads `waiters`. The fences order the two, so either the waiter sees the change or
/// the signaller sees the waiter. The waiter re-checks under `lock`, and the signaller takes
/// `lock` before notifying, so the notification cannot fall between check and sleep.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    waiters: AtomicUsize,
    lock: Mutex<()>,
    condvar: Condvar,
}

impl Notifier {
    /// Returns the first `Some` that `ready` yields, spinning, yielding and parking per
    /// `strategy` in between.
    pub(crate) fn wait_until<R>(
        &self,
        strategy: WaitStrategy,
        mut ready: impl FnMut() -> Option<R>,
    ) -> R {
        for _ in 0..strategy.spins_max() {
            if let Some(r) = ready() {
                return r;
            }
            spin_hint();
        }
        for _ in 0..strategy.yields_max() {
            if let Some(r) = ready() {
                return r;
            }
            yield_now();
        }
        let mut guard = lock(&self.lock);
        loop {
            self.waiters.fetch_add(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if let Some(r) = ready() {
                self.waiters.fetch_sub(1, Ordering::SeqCst);
                return r;
            }
            guard = self
                .condvar
                .wait(guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            self.waiters.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Wakes every parked waiter. Call after the change a waiter may be waiting for.
    pub(crate) fn notify(&self) {
        fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            drop(lock(&self.lock));
            self.condvar.notify_all();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn waiter_parked_before_signal_is_woken() {
        for strategy in [
            WaitStrategy::Blocking,
            WaitStrategy::Yielding,
            WaitStrategy::Spinning,
        ] {
            let notifier = Arc::new(Notifier::default());
            let flag = Arc::new(AtomicBool::new(false));
            let waiter = {
                let (notifier, flag) = (notifier.clone(), flag.clone());
                std::thread::spawn(move || {
                    notifier.wait_until(strategy, || flag.load(Ordering::Acquire).then_some(7))
                })
            };
            flag.store(true, Ordering::Release);
            notifier.notify();
            assert_eq!(waiter.join().unwrap(), 7);
        }
    }

    #[test]
    fn ready_condition_returns_without_parking() {
        let notifier = Notifier::default();
        assert_eq!(notifier.wait_until(WaitStrategy::Blocking, || Some(3)), 3);
        assert_eq!(notifier.waiters.load(Ordering::SeqCst), 0);
    }
}
