//! Polling a future so that the wakes it raises on its own task, while it
//! is being polled, poll it again at once instead of rescheduling the task.
//!
//! tokio treats a task woken during its own poll as a yield: the task goes
//! to the back of its worker's queue and a parked worker thread is woken to
//! steal it; that worker, once it has found the task, wakes the next one
//! (tokio keeps one worker searching). A call served on a connection's task
//! wakes itself twice in the ordinary course of things:
//! - reading the request's body asks hyper's server connection, driven by
//!   the same task, for more (`want`), which wakes the task;
//! - a device read's pooled connection is driven by the same task too
//!   ([`crate::capabilities::pool`]), and hyper's client hands the request
//!   to it, and the answer back, through channels that wake the task.
//!
//! Measured on `get_device_state` at concurrency 1 with settle as its own
//! process: 3.5 `futex` calls and 4.5 context switches per call, all of it
//! those hand-overs; under [`AbsorbSelfWakes`], 0.01 and 2.0, and 17 % less
//! CPU per call (`docs/performance.md`, eighth round).
//!
//! A yield that means "let others run" still reaches the executor. tokio's
//! own yields (`tokio::task::yield_now`, a spent cooperative budget) do not
//! wake the task during the poll: they hand its waker to the scheduler,
//! which wakes it once it has looked for I/O, so the wrapper never sees
//! them. A plugin's epoch yield is one of those (`runtime.rs`); wasmtime's
//! default yield, a plain self-wake, would be absorbed here, up to
//! [`MAX_POLLS`] ticks at a time.

use futures::task::AtomicWaker;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Wake, Waker};

/// Polls in a row before a future that keeps waking itself is handed back
/// to the executor anyway, so it cannot hold a worker for long (hyper's
/// own connection loop stops at the same count).
const MAX_POLLS: usize = 16;

/// Not being polled: a wake goes to the task.
const IDLE: u8 = 0;
/// Being polled: a wake is noted.
const POLLING: u8 = 1;
/// Being polled, and woken meanwhile: poll again.
const WOKEN: u8 = 2;

/// The waker handed to the inner future.
struct Relay {
    state: AtomicU8,
    task: AtomicWaker,
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // A wake from any thread while the future is being polled only
        // marks it; the poll loop sees the mark before it returns.
        if let Err(IDLE) =
            self.state
                .compare_exchange(POLLING, WOKEN, Ordering::AcqRel, Ordering::Acquire)
        {
            self.task.wake();
        }
    }
}

/// `inner`, polled so that its wakes of its own task during a poll poll it
/// again instead of rescheduling the task.
pub struct AbsorbSelfWakes<F> {
    inner: F,
    relay: Arc<Relay>,
    waker: Waker,
}

impl<F: Future + Unpin> AbsorbSelfWakes<F> {
    /// Wraps `inner`; polling the wrapper polls it.
    pub fn new(inner: F) -> AbsorbSelfWakes<F> {
        let relay = Arc::new(Relay {
            state: AtomicU8::new(IDLE),
            task: AtomicWaker::new(),
        });
        AbsorbSelfWakes {
            inner,
            waker: Waker::from(relay.clone()),
            relay,
        }
    }

    /// One or more polls of `inner`, until it is ready, waits, or asks to
    /// yield.
    fn poll_inner(&mut self, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.relay.task.register(cx.waker());
        for _ in 0..MAX_POLLS {
            self.relay.state.store(POLLING, Ordering::Release);
            let mut inner_cx = Context::from_waker(&self.waker);
            if let Poll::Ready(output) = Pin::new(&mut self.inner).poll(&mut inner_cx) {
                self.relay.state.store(IDLE, Ordering::Release);
                return Poll::Ready(output);
            }
            if !tokio::task::coop::has_budget_remaining() {
                break;
            }
            // Not woken while polled: whatever wakes it later reaches the
            // task through `task`.
            if self
                .relay
                .state
                .compare_exchange(POLLING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Poll::Pending;
            }
        }
        // tokio's budget for this poll is spent, or the future was woken on
        // every pass: the executor decides what runs next. A wake noted
        // meanwhile is passed on now; one still to come reaches the task
        // through `task`.
        if self.relay.state.swap(IDLE, Ordering::AcqRel) == WOKEN {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

impl<F: Future + Unpin> Future for AbsorbSelfWakes<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.poll_inner(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Wakes itself `left` times while polled, then is ready.
    struct WakesItself {
        left: usize,
    }

    impl Future for WakesItself {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.left == 0 {
                return Poll::Ready(());
            }
            self.left -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// Counts the wakes the task receives.
    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> Arc<CountingWaker> {
        Arc::new(CountingWaker(AtomicUsize::new(0)))
    }

    fn poll_once<F: Future + Unpin>(f: &mut F, task: &Arc<CountingWaker>) -> Poll<F::Output> {
        let waker = Waker::from(task.clone());
        Pin::new(f).poll(&mut Context::from_waker(&waker))
    }

    fn wakes(task: &Arc<CountingWaker>) -> usize {
        task.0.load(Ordering::SeqCst)
    }

    #[test]
    fn self_wakes_poll_again_without_waking_the_task() {
        let task = counter();
        let mut f = AbsorbSelfWakes::new(WakesItself { left: 3 });
        assert!(poll_once(&mut f, &task).is_ready());
        assert_eq!(wakes(&task), 0);
    }

    #[test]
    fn a_future_that_keeps_waking_itself_yields_after_the_limit() {
        let task = counter();
        let mut f = AbsorbSelfWakes::new(WakesItself {
            left: MAX_POLLS + 1,
        });
        assert!(poll_once(&mut f, &task).is_pending());
        assert_eq!(wakes(&task), 1, "handed back once, as a yield");
        assert!(poll_once(&mut f, &task).is_ready());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn tokios_yield_is_passed_on_not_absorbed() {
        // tokio defers a yield's wake until it has looked for I/O: the
        // wrapper sees no wake during the poll and hands the task back.
        let task = counter();
        let mut f = AbsorbSelfWakes::new(Box::pin(tokio::task::yield_now()));
        assert!(poll_once(&mut f, &task).is_pending());
        assert_eq!(wakes(&task), 0, "not woken during the poll");
        eventually_woken(&task).await;
        assert!(poll_once(&mut f, &task).is_ready());
    }

    /// Lets the runtime run its deferred wakes until `task` has one.
    async fn eventually_woken(task: &Arc<CountingWaker>) {
        for _ in 0..100 {
            if wakes(task) > 0 {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the deferred wake never came");
    }

    #[test]
    fn a_wake_from_another_thread_after_the_poll_reaches_the_task() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let task = counter();
        let mut f = AbsorbSelfWakes::new(rx);
        assert!(poll_once(&mut f, &task).is_pending());
        std::thread::spawn(move || tx.send(7).unwrap())
            .join()
            .unwrap();
        assert_eq!(wakes(&task), 1);
        assert!(matches!(poll_once(&mut f, &task), Poll::Ready(Ok(7))));
    }
}
