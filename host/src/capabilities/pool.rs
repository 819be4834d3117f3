//! Keep-alive connections for outbound plain-HTTP requests.
//!
//! wasmtime's `default_send_request` opens a TCP connection for every
//! request and closes it with the response. Every plugin call that reaches
//! out then pays a connect, a handshake and, on the server's side, an
//! accept; on loopback that was the largest single cost of a plugin call
//! that makes one request (see `docs/performance.md`). This pool keeps HTTP/1
//! connections open once a response has been read to its end and hands them
//! to the next request for the same tenant and origin.
//!
//! Only `http` is pooled; `https` still goes through wasmtime's own path
//! (a connection per request), unchanged.

use bytes::Bytes;
use http::uri::Scheme;
use http_body_util::BodyExt;
use hyper::client::conn::http1::SendRequest;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

/// Idle connections kept per tenant and origin; more are closed once their
/// response is read. Bounds the sockets a burst leaves behind.
pub const MAX_IDLE_PER_ORIGIN: usize = 64;

/// An idle connection older than this is closed instead of reused: servers
/// close idle connections on their own schedule, and an old one is the
/// likeliest to be half-closed already.
pub const IDLE_FOR: Duration = Duration::from_secs(30);

/// The response and the future wasi:http drives beside it.
pub type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
);

/// One idle connection, and since when.
struct Idle {
    sender: SendRequest<WasiBody>,
    since: Instant,
}

/// Idle outbound connections, by tenant and origin.
#[derive(Default)]
pub struct ConnectionPool {
    idle: Mutex<HashMap<String, Vec<Idle>>>,
}

impl ConnectionPool {
    /// An empty pool.
    pub fn new() -> Arc<ConnectionPool> {
        Arc::new(ConnectionPool::default())
    }

    /// Idle connections now held that are still open, over all origins.
    pub fn idle_count(&self) -> usize {
        self.lock()
            .values()
            .flatten()
            .filter(|e| !e.sender.is_closed())
            .count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Idle>>> {
        // A panic while holding the lock leaves a map that is still valid.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The most recently used live connection to `key`, if any.
    fn take(&self, key: &str) -> Option<SendRequest<WasiBody>> {
        let mut idle = self.lock();
        let list = idle.get_mut(key)?;
        while let Some(entry) = list.pop() {
            if entry.since.elapsed() < IDLE_FOR && entry.sender.is_ready() {
                return Some(entry.sender);
            }
        }
        None
    }

    fn put(&self, key: String, sender: SendRequest<WasiBody>) {
        let mut idle = self.lock();
        let list = idle.entry(key).or_default();
        list.retain(|e| e.since.elapsed() < IDLE_FOR && !e.sender.is_closed());
        if list.len() < MAX_IDLE_PER_ORIGIN {
            list.push(Idle {
                sender,
                since: Instant::now(),
            });
        }
    }

    /// Sends `request` on an idle connection of `tenant` to its origin, or
    /// on a new one; once the response has been read to its end, the
    /// connection goes back to the pool. `https` is sent by wasmtime's
    /// default path, a connection per request.
    pub async fn send(
        self: Arc<Self>,
        tenant: &str,
        mut request: http::Request<WasiBody>,
        options: RequestOptions,
    ) -> Result<Sent, Error> {
        if request.uri().scheme() != Some(&Scheme::HTTP) {
            let (response, io) =
                wasmtime_wasi_http::default_send_request(request, Some(options)).await?;
            return Ok((response.map(BodyExt::boxed_unsync), Box::new(io)));
        }
        let authority = request
            .uri()
            .authority()
            .ok_or(Error::HttpRequestUriInvalid)?;
        let address = match authority.port() {
            Some(_) => authority.to_string(),
            None => format!("{authority}:80"),
        };
        let key = format!("{tenant}\n{address}");
        // A connection carries origin-form targets; the origin is its own.
        let target = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse()
            .map_err(|_| Error::HttpRequestUriInvalid)?;
        *request.uri_mut() = target;
        let first_byte = options.first_byte_timeout.unwrap_or(IDLE_FOR);

        // An idle connection the server closed meanwhile gives the request
        // back unsent; it then goes on a new connection.
        while let Some(mut sender) = self.take(&key) {
            match timeout(first_byte, sender.try_send_request(request)).await? {
                Ok(response) => return Ok(self.finish(key, sender, response, &options)),
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) => request = unsent,
                    None => return Err(failed.into_error().into()),
                },
            }
        }
        let mut sender = connect(&address, &options).await?;
        let response = timeout(first_byte, sender.send_request(request)).await??;
        Ok(self.finish(key, sender, response, &options))
    }

    /// The response with its between-bytes timeout; the connection returns
    /// to the pool once the response has been read to its end (dropped
    /// unread, hyper closes it instead).
    fn finish(
        self: Arc<Self>,
        key: String,
        mut sender: SendRequest<WasiBody>,
        response: http::Response<hyper::body::Incoming>,
        options: &RequestOptions,
    ) -> Sent {
        tokio::spawn(async move {
            if sender.ready().await.is_ok() {
                self.put(key, sender);
            }
        });
        let between = options
            .between_bytes_timeout
            .unwrap_or(IDLE_FOR)
            .max(Duration::from_nanos(1));
        let response = response.map(|incoming| {
            let mut timer = tokio::time::interval(between);
            timer.reset();
            TimedBody { incoming, timer }.boxed_unsync()
        });
        (response, Box::new(async { Ok(()) }))
    }
}

async fn timeout<T>(limit: Duration, f: impl Future<Output = T>) -> Result<T, Error> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| Error::ConnectionReadTimeout)
}

/// A new HTTP/1 connection to `address`, its I/O driven by its own task
/// until both sides let go of it.
async fn connect(address: &str, options: &RequestOptions) -> Result<SendRequest<WasiBody>, Error> {
    let limit = options.connect_timeout.unwrap_or(IDLE_FOR);
    let stream = tokio::time::timeout(limit, tokio::net::TcpStream::connect(address))
        .await
        .map_err(|_| Error::ConnectionTimeout)?
        .map_err(Error::Connect)?;
    // Requests are small and written whole: do not hold them back.
    stream.set_nodelay(true).map_err(Error::Connect)?;
    let (sender, connection) = tokio::time::timeout(
        limit,
        hyper::client::conn::http1::Builder::new().handshake(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| Error::ConnectionTimeout)??;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("outbound connection ended: {e}");
        }
    });
    Ok(sender)
}

/// A response body that fails when the server goes quiet for longer than
/// the request's between-bytes timeout.
struct TimedBody {
    incoming: hyper::body::Incoming,
    timer: tokio::time::Interval,
}

impl hyper::body::Body for TimedBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Error>>> {
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                self.timer.reset();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) if e.is_timeout() => {
                Poll::Ready(Some(Err(Error::HttpResponseTimeout)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                ready!(self.timer.poll_tick(cx));
                Poll::Ready(Some(Err(Error::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.incoming.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::ListenerExt;
    use http_body_util::Empty;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A server answering `ok` that counts the connections it accepted.
    async fn counting_server() -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let listener = listener.tap_io(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        let app = axum::Router::new().route("/x", axum::routing::get(|| async { "ok" }));
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        (origin, accepted, server)
    }

    fn get(url: &str) -> http::Request<WasiBody> {
        let body = Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed_unsync();
        http::Request::get(url)
            .header(http::header::HOST, "127.0.0.1")
            .body(body)
            .unwrap()
    }

    /// Sends one GET and reads its body to the end.
    async fn fetch(pool: &Arc<ConnectionPool>, tenant: &str, url: &str) -> Bytes {
        let (response, _io) = pool
            .clone()
            .send(tenant, get(url), RequestOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(response.status(), 200);
        response.into_body().collect().await.unwrap().to_bytes()
    }

    async fn eventually(condition: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !condition() {
            assert!(Instant::now() < deadline, "not within 5 s");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    async fn eventually_idle(pool: &ConnectionPool, n: usize) {
        eventually(|| pool.idle_count() == n).await;
    }

    #[tokio::test]
    async fn requests_in_turn_share_one_connection() {
        let (origin, accepted, server) = counting_server().await;
        let pool = ConnectionPool::new();
        for _ in 0..5 {
            assert_eq!(&fetch(&pool, "t", &format!("{origin}/x")).await[..], b"ok");
            eventually_idle(&pool, 1).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        server.abort();
    }

    #[tokio::test]
    async fn tenants_do_not_share_connections() {
        let (origin, accepted, server) = counting_server().await;
        let pool = ConnectionPool::new();
        fetch(&pool, "a", &format!("{origin}/x")).await;
        eventually_idle(&pool, 1).await;
        fetch(&pool, "b", &format!("{origin}/x")).await;
        eventually_idle(&pool, 2).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        server.abort();
    }

    /// A server that answers one request per connection and then closes
    /// it, although it said nothing about closing.
    async fn one_shot_server() -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let server = tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                counter.fetch_add(1, Ordering::SeqCst);
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.ends_with(b"\r\n\r\n") {
                    let n = socket.read(&mut buf).await.unwrap();
                    assert!(n > 0, "the request ended early");
                    request.extend_from_slice(&buf[..n]);
                }
                socket
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await
                    .unwrap();
            }
        });
        (origin, accepted, server)
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_not_reused() {
        let (origin, accepted, server) = one_shot_server().await;
        let pool = ConnectionPool::new();
        fetch(&pool, "t", &format!("{origin}/x")).await;
        // The task that returns the connection has ended (it held the last
        // other reference to the pool), and nothing open is pooled.
        eventually(|| Arc::strong_count(&pool) == 1 && pool.idle_count() == 0).await;
        assert_eq!(&fetch(&pool, "t", &format!("{origin}/x")).await[..], b"ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        server.abort();
    }

    #[tokio::test]
    async fn an_unread_response_closes_its_connection() {
        let (origin, accepted, server) = counting_server().await;
        let pool = ConnectionPool::new();
        let (response, _io) = pool
            .clone()
            .send("t", get(&format!("{origin}/x")), RequestOptions::default())
            .await
            .unwrap();
        drop(response);
        fetch(&pool, "t", &format!("{origin}/x")).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        server.abort();
    }
}
