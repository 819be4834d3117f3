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
//! A pooled connection has no task of its own: the request that uses it
//! drives its I/O, and reads the response's body to its end (up to
//! [`BUFFER_LIMIT`]) before handing the response to the plugin. hyper's
//! usual shape, a task per connection fed by channels, cost every device
//! read several hand-overs between tasks (the request to the connection's
//! task, the head back, the body on request, and a task to return the
//! connection), each one a wake-up of the other worker thread when it sat
//! idle. A larger body is streamed as before, its connection then driven by
//! a task of its own and not reused.
//!
//! Only `http` is pooled; `https` still goes through wasmtime's own path
//! (a connection per request), unchanged.

use bytes::Bytes;
use futures::FutureExt;
use http::uri::Scheme;
use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper::client::conn::http1::SendRequest;
use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

/// Idle connections kept per tenant and origin; more are closed once their
/// response is read. Bounds the sockets a burst leaves behind.
pub const MAX_IDLE_PER_ORIGIN: usize = 64;

/// An idle connection older than this is closed instead of reused: servers
/// close idle connections on their own schedule, and an old one is the
/// likeliest to be half-closed already.
pub const IDLE_FOR: Duration = Duration::from_secs(30);

/// The most of a response body read ahead of the plugin. Device answers
/// are a few hundred bytes; a body past this is streamed to the plugin as
/// it arrives, and its connection is not reused.
pub const BUFFER_LIMIT: usize = 256 << 10;

/// The response and the future wasi:http drives beside it.
pub type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
);

/// A connection's I/O: a future that reads and writes the socket for the
/// requests sent on it, and ends when the connection closes.
type Io = hyper::client::conn::http1::Connection<TokioIo<TcpStream>, WasiBody>;

/// One HTTP/1 connection; `io` is `None` once it has ended.
struct Connection {
    sender: SendRequest<WasiBody>,
    io: Option<Io>,
}

impl Connection {
    /// Whether the connection can take a request now. Polls its I/O once,
    /// which is how a close by the server is noticed while no task drives
    /// it.
    fn is_usable(&mut self) -> bool {
        self.io
            .as_mut()
            .is_some_and(|io| io.now_or_never().is_none() && self.sender.is_ready())
    }
}

/// One idle connection, and since when.
struct Idle {
    connection: Connection,
    since: Instant,
}

impl Idle {
    fn is_usable(&mut self) -> bool {
        self.since.elapsed() < IDLE_FOR && self.connection.is_usable()
    }
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
            .values_mut()
            .flatten()
            .map(Idle::is_usable)
            .filter(|&usable| usable)
            .count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Idle>>> {
        // A panic while holding the lock leaves a map that is still valid.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The most recently used live connection to `key`, if any.
    fn take(&self, key: &str) -> Option<Connection> {
        let mut idle = self.lock();
        let list = idle.get_mut(key)?;
        while let Some(mut entry) = list.pop() {
            if entry.is_usable() {
                return Some(entry.connection);
            }
        }
        None
    }

    fn put(&self, key: String, connection: Connection) {
        let mut idle = self.lock();
        let list = idle.entry(key).or_default();
        // Only the age here: checking every idle connection for a close
        // would poll each one on every response. `take` checks the one it
        // hands out.
        list.retain(|e| e.since.elapsed() < IDLE_FOR);
        if list.len() < MAX_IDLE_PER_ORIGIN {
            list.push(Idle {
                connection,
                since: Instant::now(),
            });
        }
    }

    /// Sends `request` on an idle connection of `tenant` to its origin, or
    /// on a new one, and reads the response (its body too, up to
    /// [`BUFFER_LIMIT`]); the connection then goes back to the pool.
    /// `https` is sent by wasmtime's default path, a connection per
    /// request.
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
        while let Some(mut connection) = self.take(&key) {
            let response = connection.sender.try_send_request(request);
            crate::timeline!("pooled connection taken");
            match drive(&mut connection.io, timeout(first_byte, response)).await? {
                Ok(response) => return Ok(self.read(key, connection, response, &options).await),
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) => request = unsent,
                    None => return Err(failed.into_error().into()),
                },
            }
        }
        let mut connection = connect(&address, &options).await?;
        let response = connection.sender.send_request(request);
        let response = drive(&mut connection.io, timeout(first_byte, response)).await??;
        Ok(self.read(key, connection, response, &options).await)
    }

    /// Reads the response's body on `connection` (at most [`BUFFER_LIMIT`]
    /// of it, each frame within the request's between-bytes timeout) and
    /// returns the connection to the pool once the body has ended. A longer
    /// body streams on, its connection driven by a task of its own; a body
    /// that fails ends, for the plugin, with the same failure.
    async fn read(
        self: Arc<Self>,
        key: String,
        mut connection: Connection,
        response: http::Response<hyper::body::Incoming>,
        options: &RequestOptions,
    ) -> Sent {
        let between = options
            .between_bytes_timeout
            .unwrap_or(IDLE_FOR)
            .max(Duration::from_nanos(1));
        let (head, mut incoming) = response.into_parts();
        let mut frames = VecDeque::new();
        let mut buffered = 0;
        let tail = loop {
            if buffered > BUFFER_LIMIT {
                if let Some(io) = connection.io {
                    tokio::spawn(async move {
                        if let Err(e) = io.await {
                            tracing::debug!("outbound connection ended: {e}");
                        }
                    });
                }
                break Tail::Streaming(TimedBody::new(incoming, between));
            }
            match drive(&mut connection.io, timeout(between, incoming.frame())).await {
                Ok(Some(Ok(frame))) => {
                    buffered += frame.data_ref().map_or(0, Bytes::len);
                    frames.push_back(frame);
                }
                Ok(None) => {
                    if connection.is_usable() {
                        self.put(key, connection);
                    }
                    break Tail::End;
                }
                Ok(Some(Err(e))) => break Tail::Failed(Some(body_error(e))),
                Err(timed_out) => break Tail::Failed(Some(timed_out)),
            }
        };
        let body = ReadAhead { frames, tail }.boxed_unsync();
        (
            http::Response::from_parts(head, body),
            Box::new(async { Ok(()) }),
        )
    }
}

/// Polls the connection's I/O beside `f` until `f` is done: its reads and
/// writes happen in the task that waits for them. A connection that ends
/// is dropped at once, which settles what it still held: a request not yet
/// written comes back unsent, one awaiting its answer fails, and a body
/// still arriving ends (with an error if it was cut short). `f` carries its
/// own timeout, so it ends either way. The two hand the request and the
/// answer to each other through channels that wake this very task; on a
/// connection's task those wakes poll again at once
/// ([`crate::self_wake`]).
async fn drive<F: Future>(io: &mut Option<Io>, f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| {
        if let Some(connection) = io.as_mut()
            && let Poll::Ready(ended) = Pin::new(connection).poll(cx)
        {
            if let Err(e) = ended {
                tracing::debug!("outbound connection ended: {e}");
            }
            *io = None;
        }
        f.as_mut().poll(cx)
    })
    .await
}

fn body_error(e: hyper::Error) -> Error {
    if e.is_timeout() {
        Error::HttpResponseTimeout
    } else {
        e.into()
    }
}

async fn timeout<T>(limit: Duration, f: impl Future<Output = T>) -> Result<T, Error> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| Error::ConnectionReadTimeout)
}

/// A new HTTP/1 connection to `address`.
async fn connect(address: &str, options: &RequestOptions) -> Result<Connection, Error> {
    let limit = options.connect_timeout.unwrap_or(IDLE_FOR);
    let stream = tokio::time::timeout(limit, TcpStream::connect(address))
        .await
        .map_err(|_| Error::ConnectionTimeout)?
        .map_err(Error::Connect)?;
    // Requests are small and written whole: do not hold them back.
    stream.set_nodelay(true).map_err(Error::Connect)?;
    let (sender, io) = tokio::time::timeout(
        limit,
        hyper::client::conn::http1::Builder::new().handshake(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| Error::ConnectionTimeout)??;
    Ok(Connection {
        sender,
        io: Some(io),
    })
}

/// What follows the frames read ahead.
enum Tail {
    /// The body ended there.
    End,
    /// It failed there; the failure is handed over once.
    Failed(Option<Error>),
    /// The rest is still arriving.
    Streaming(TimedBody),
}

/// A response body whose first frames (or all of them) were read before
/// the response was handed over.
struct ReadAhead {
    frames: VecDeque<Frame<Bytes>>,
    tail: Tail,
}

impl hyper::body::Body for ReadAhead {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        if let Some(frame) = self.frames.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        match &mut self.tail {
            Tail::End => Poll::Ready(None),
            Tail::Failed(failure) => Poll::Ready(failure.take().map(Err)),
            Tail::Streaming(rest) => Pin::new(rest).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty()
            && match &self.tail {
                Tail::End | Tail::Failed(None) => true,
                Tail::Failed(Some(_)) => false,
                Tail::Streaming(rest) => rest.is_end_stream(),
            }
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        let ahead: usize = self
            .frames
            .iter()
            .map(|f| f.data_ref().map_or(0, Bytes::len))
            .sum();
        match &self.tail {
            Tail::Streaming(rest) => {
                let mut hint = rest.size_hint();
                hint.set_lower(hint.lower() + ahead as u64);
                if let Some(upper) = hint.upper() {
                    hint.set_upper(upper + ahead as u64);
                }
                hint
            }
            Tail::End | Tail::Failed(None) => hyper::body::SizeHint::with_exact(ahead as u64),
            // It will fail after these: how much comes is not known.
            Tail::Failed(Some(_)) => {
                let mut hint = hyper::body::SizeHint::new();
                hint.set_lower(ahead as u64);
                hint
            }
        }
    }
}

/// A response body that fails when the server goes quiet for longer than
/// the request's between-bytes timeout.
struct TimedBody {
    incoming: hyper::body::Incoming,
    timer: tokio::time::Interval,
}

impl TimedBody {
    fn new(incoming: hyper::body::Incoming, between: Duration) -> TimedBody {
        let mut timer = tokio::time::interval(between);
        timer.reset();
        TimedBody { incoming, timer }
    }
}

impl hyper::body::Body for TimedBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                self.timer.reset();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(body_error(e)))),
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
        // The pooled connection is seen to be closed.
        eventually(|| pool.idle_count() == 0).await;
        assert_eq!(&fetch(&pool, "t", &format!("{origin}/x")).await[..], b"ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        server.abort();
    }

    #[tokio::test]
    async fn requests_right_after_a_close_go_on_new_connections() {
        let (origin, accepted, server) = one_shot_server().await;
        let pool = ConnectionPool::new();
        // No waiting between them: each may take the connection the server
        // is closing, and must then go out on a new one, not fail.
        for _ in 0..20 {
            assert_eq!(&fetch(&pool, "t", &format!("{origin}/x")).await[..], b"ok");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 20);
        server.abort();
    }

    #[tokio::test]
    async fn an_unread_response_does_not_cost_its_connection() {
        let (origin, accepted, server) = counting_server().await;
        let pool = ConnectionPool::new();
        let (response, _io) = pool
            .clone()
            .send("t", get(&format!("{origin}/x")), RequestOptions::default())
            .await
            .unwrap();
        // Its body was read ahead, so the connection is back already.
        drop(response);
        fetch(&pool, "t", &format!("{origin}/x")).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        server.abort();
    }

    /// A server answering `/big` with `size` bytes, counting connections.
    async fn big_body_server(
        size: usize,
    ) -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let listener = listener.tap_io(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        let body = Bytes::from(vec![b'x'; size]);
        let app =
            axum::Router::new().route("/big", axum::routing::get(move || async move { body }));
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        (origin, accepted, server)
    }

    #[tokio::test]
    async fn a_body_past_the_buffer_limit_streams_whole_on_a_connection_not_reused() {
        let size = BUFFER_LIMIT * 4;
        let (origin, accepted, server) = big_body_server(size).await;
        let pool = ConnectionPool::new();
        let url = format!("{origin}/big");
        for round in 1..=2 {
            let body = fetch(&pool, "t", &url).await;
            assert_eq!(body.len(), size);
            assert!(body.iter().all(|&b| b == b'x'));
            assert_eq!(accepted.load(Ordering::SeqCst), round);
        }
        server.abort();
    }

    #[tokio::test]
    async fn a_body_cut_short_fails_for_the_plugin() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = socket.read(&mut buf).await.unwrap();
            // Ten bytes announced, five sent, then the connection closes.
            socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello")
                .await
                .unwrap();
        });
        let pool = ConnectionPool::new();
        let (response, _io) = pool
            .clone()
            .send("t", get(&format!("{origin}/x")), RequestOptions::default())
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let read = response.into_body().collect().await;
        assert!(read.is_err(), "a truncated body read as complete");
        assert_eq!(pool.idle_count(), 0);
        server.abort();
    }
}
