//! The HTTP server's limits, and the per-tenant half of them: a request
//! rate (a token bucket answering 429 with `Retry-After`) and a cap on open
//! `subscriptions/listen` streams. The per-connection half (the header-read
//! timeout and the connection cap) is applied where connections are
//! accepted, in [`super::accept`].
//!
//! Each limit is counted in `/metrics` ([`Metrics`]) whenever it acts.

use crate::metrics::Metrics;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What the HTTP server allows; `settle serve` flags or the tenants file's
/// `[server]` table set them.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpLimits {
    /// How long a connection may take to send a request's headers, and how
    /// long an idle kept-alive connection waits for its next request; then
    /// it is closed. This is what ends a slowloris connection.
    pub header_read_timeout: Duration,
    /// Connections open at once. One more is answered 503 with
    /// `Retry-After` and closed at once, rather than left waiting in the
    /// kernel's queue: connections already open (a normal client's
    /// kept-alive one) go on being served, and the header-read timeout
    /// frees the slots slow connections hold.
    pub max_connections: usize,
    /// Open `subscriptions/listen` streams per tenant; one more is refused
    /// with a JSON-RPC error (HTTP 429).
    pub max_listen_streams: usize,
    /// Requests per second per tenant, with bursts of as many; 0 turns
    /// the limit off. One over is answered 429 with `Retry-After`.
    pub max_requests_per_second: u32,
}

impl Default for HttpLimits {
    /// Far above what agents do (a person's agent sends a few requests a
    /// second), low enough that one flooding tenant cannot take the
    /// machine from the others, and a slowloris connection is gone within
    /// 10 s.
    fn default() -> Self {
        HttpLimits {
            header_read_timeout: Duration::from_secs(10),
            max_connections: 4096,
            max_listen_streams: 256,
            max_requests_per_second: 5000,
        }
    }
}

/// One tenant's request rate and listen streams.
pub struct Throttle {
    tenant: String,
    metrics: Arc<Metrics>,
    bucket: Option<Mutex<Bucket>>,
    rate: u32,
    streams: Arc<Semaphore>,
    max_streams: usize,
}

/// A token bucket: `rate` tokens a second, holding at most `rate`.
struct Bucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// Takes a token, or says how long until there is one.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }
}

/// An open listen stream; dropping it (the stream ended) frees its place.
pub struct StreamSlot {
    _permit: OwnedSemaphorePermit,
    throttle: Arc<Throttle>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.throttle
            .metrics
            .listen_stream(&self.throttle.tenant, false);
    }
}

impl Throttle {
    /// The limits of `tenant`.
    pub fn new(tenant: &str, limits: &HttpLimits, metrics: Arc<Metrics>) -> Arc<Throttle> {
        let rate = f64::from(limits.max_requests_per_second);
        Arc::new(Throttle {
            tenant: tenant.to_string(),
            metrics,
            bucket: (limits.max_requests_per_second > 0).then(|| {
                Mutex::new(Bucket {
                    rate,
                    tokens: rate,
                    last: Instant::now(),
                })
            }),
            rate: limits.max_requests_per_second,
            streams: Arc::new(Semaphore::new(limits.max_listen_streams)),
            max_streams: limits.max_listen_streams,
        })
    }

    /// A place for one more listen stream, or `None` at the cap (counted).
    pub fn open_stream(self: &Arc<Self>) -> Option<StreamSlot> {
        match self.streams.clone().try_acquire_owned() {
            Ok(permit) => {
                self.metrics.listen_stream(&self.tenant, true);
                Some(StreamSlot {
                    _permit: permit,
                    throttle: self.clone(),
                })
            }
            Err(_) => {
                self.metrics.listen_refused(&self.tenant);
                None
            }
        }
    }

    /// How many listen streams the tenant may hold open.
    pub fn max_streams(&self) -> usize {
        self.max_streams
    }

    /// Admits one request, or says how long until the next may come.
    fn admit(&self) -> Result<(), Duration> {
        let Some(bucket) = &self.bucket else {
            return Ok(());
        };
        // A poisoned lock only means a panic elsewhere mid-update; the
        // bucket's numbers are still usable.
        let mut bucket = bucket.lock().unwrap_or_else(|e| e.into_inner());
        bucket.take(Instant::now())
    }
}

/// Answers a request over the tenant's rate 429 with `Retry-After` (whole
/// seconds, at least 1); passes the others on.
pub async fn rate_limit(throttle: Arc<Throttle>, request: Request, next: Next) -> Response {
    match throttle.admit() {
        Ok(()) => next.run(request).await,
        Err(wait) => {
            throttle.metrics.rate_limited(&throttle.tenant);
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            let seconds = seconds.max(1);
            (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, seconds.to_string())],
                format!(
                    "too many requests: this tenant may send {} a second; retry after {seconds} s\n",
                    throttle.rate
                ),
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_a_burst_then_says_when_the_next_token_comes() {
        let start = Instant::now();
        let mut bucket = Bucket {
            rate: 4.0,
            tokens: 4.0,
            last: start,
        };
        for _ in 0..4 {
            assert!(bucket.take(start).is_ok());
        }
        let wait = bucket.take(start).unwrap_err();
        assert!(
            (wait.as_secs_f64() - 0.25).abs() < 1e-6,
            "one token in a quarter second: {wait:?}"
        );
        assert!(bucket.take(start + Duration::from_millis(250)).is_ok());
        // Idle time fills the bucket to its size, no further.
        let later = start + Duration::from_secs(60);
        for _ in 0..4 {
            assert!(bucket.take(later).is_ok());
        }
        assert!(bucket.take(later).is_err());
    }

    #[test]
    fn listen_streams_are_capped_and_freed_when_they_end() {
        let metrics = Arc::new(Metrics::default());
        let limits = HttpLimits {
            max_listen_streams: 2,
            ..HttpLimits::default()
        };
        let throttle = Throttle::new("alice", &limits, metrics.clone());
        let a = throttle.open_stream().expect("first");
        let _b = throttle.open_stream().expect("second");
        assert!(throttle.open_stream().is_none(), "third is over the cap");
        drop(a);
        assert!(throttle.open_stream().is_some(), "a place was freed");
        let text = metrics.render();
        assert!(
            text.contains(r#"settle_listen_refused_total{tenant="alice"} 1"#),
            "{text}"
        );
    }
}
