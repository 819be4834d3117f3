//! Counting calls in flight, so shutdown can wait for them to finish.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// How long shutdown waits for calls in flight before it stops anyway.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// The count of calls in flight; clones share it.
#[derive(Clone, Default)]
pub struct Drain {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    in_flight: AtomicUsize,
    idle: Notify,
}

/// Held for the length of one call.
pub struct InFlight {
    inner: Arc<Inner>,
}

impl Drain {
    /// Counts a call until the returned guard is dropped.
    pub fn enter(&self) -> InFlight {
        self.inner.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight {
            inner: self.inner.clone(),
        }
    }

    /// Calls running now.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::SeqCst)
    }

    /// Waits until no call is in flight, or `limit` passes. Returns how many
    /// were still running.
    pub async fn wait_idle(&self, limit: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let idle = self.inner.idle.notified();
            let n = self.in_flight();
            if n == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.in_flight();
            }
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.inner.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.inner.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_for_the_last_call() {
        let drain = Drain::default();
        let call = drain.enter();
        let waiter = tokio::spawn({
            let drain = drain.clone();
            async move { drain.wait_idle(Duration::from_secs(10)).await }
        });
        drop(call);
        assert_eq!(waiter.await.unwrap(), 0);
    }

    #[tokio::test]
    async fn gives_up_after_the_limit() {
        let drain = Drain::default();
        let _call = drain.enter();
        assert_eq!(drain.wait_idle(Duration::from_millis(20)).await, 1);
    }
}
