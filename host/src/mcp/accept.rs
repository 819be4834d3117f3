//! The HTTP server's accept loop: the per-connection limits.
//!
//! `axum::serve` sets neither a header-read timeout (hyper has one, but
//! it needs a timer axum does not give it) nor a connection cap, so settle
//! accepts connections itself and serves each with hyper's HTTP/1.1
//! server:
//! - a request's headers must arrive within the header-read timeout, and an
//!   idle kept-alive connection must start its next request within it, or
//!   the connection is closed (a slowloris connection sending a header line
//!   every few seconds is closed at the timeout);
//! - at most `max_connections` are open; one more is answered `503` with
//!   `Retry-After: 1` and closed, so connections already open, a normal
//!   client's among them, keep being served.
//!
//! HTTP/1.1 only: MCP's Streamable HTTP clients speak it, and hyper's
//! HTTP/2 detection would wait for a connection's first bytes with no
//! deadline at all.

use super::limits::HttpLimits;
use crate::metrics::Metrics;
use crate::self_wake::AbsorbSelfWakes;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Serves `app` on `listener` under `limits` until `stopping` is
/// cancelled; then takes no new connections, lets each open one finish
/// the request it is serving (idle ones close at once), and returns when
/// all are closed.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: &HttpLimits,
    metrics: Arc<Metrics>,
    stopping: CancellationToken,
) {
    let max = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(max));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of file descriptors, or a connection reset
                    // before it was taken: wait a moment, keep serving.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            _ = stopping.cancelled() => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            metrics.connection_refused();
            tokio::spawn(refuse(tcp));
            continue;
        };
        // Small JSON-RPC answers must not wait for Nagle's algorithm and the
        // peer's delayed ACK (40 ms each on Linux).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY: {e}");
        }
        metrics.connection(true);
        let connection =
            http.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(app.clone()));
        let (metrics, stopping) = (metrics.clone(), stopping.clone());
        // The connection, the calls it serves and their device reads run
        // in this one task, and hand work to each other by waking it: those
        // wakes poll again here instead of waking another worker thread.
        tokio::spawn(AbsorbSelfWakes::new(Box::pin(async move {
            let mut connection = std::pin::pin!(connection);
            let mut shutting_down = false;
            let ended = loop {
                tokio::select! {
                    ended = connection.as_mut() => break ended,
                    _ = stopping.cancelled(), if !shutting_down => {
                        shutting_down = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
            };
            match ended {
                Err(e) if e.is_timeout() => metrics.header_timeout(),
                Err(e) => tracing::debug!("HTTP connection: {e}"),
                Ok(()) => {}
            }
            metrics.connection(false);
            drop(slot);
        })));
    }
    // Every slot back means every connection has closed.
    let _ = slots.acquire_many(max as u32).await;
}

/// How long to wait after a failed accept before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// How long a refused connection is given to take its 503.
const REFUSE_LINGER: Duration = Duration::from_secs(1);

/// Answers a connection over the cap `503` and closes it. What the client
/// already sent is read and dropped for a moment, so the close does not
/// reset the connection before the answer is read.
async fn refuse(mut tcp: TcpStream) {
    let body = "settle: too many open connections; retry in a second\n";
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\nconnection: close\r\n\
         content-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(REFUSE_LINGER, async {
        tcp.write_all(answer.as_bytes()).await?;
        tcp.shutdown().await?;
        let mut sink = [0u8; 1024];
        while tcp.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}
