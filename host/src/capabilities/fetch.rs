//! `settle:plugin/outbound`: one HTTP exchange in one host call.
//!
//! Through `wasi:http` a device read is a request resource, its headers,
//! its body stream, a pollable per wait, the response resource and its
//! body stream, some twenty host calls; and wasmtime runs the request and
//! its connection on two spawned tasks, so each wait is a hand-over to
//! whichever worker thread ran them. Here the whole exchange runs in the
//! plugin call's own future: the allow-list check, the pooled connection
//! ([`super::pool`]), the answer read to its end, under one deadline.

use super::http::{MAX_OUTBOUND_WAIT, PolicyHooks, refuse};
use crate::bindings::settle::plugin::outbound as wit;
use bytes::Bytes;
use futures::FutureExt;
use http_body_util::{BodyExt, Full};
use std::time::Duration;
use wasmtime::component::{HasData, Linker};
use wasmtime_wasi_http::{Error, RequestOptions};

/// The largest answer body read, whatever the plugin asks: it is held in
/// the runner's memory, outside the plugin's limit, until it is copied in.
pub const MAX_FETCH_BODY: u64 = 4 << 20;

/// A header a plugin may not set: one `wasi:http` forbids, or
/// `content-length`, which the runner takes from the body.
fn forbidden(name: &http::HeaderName) -> bool {
    *name == http::header::CONTENT_LENGTH
        || wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS.contains(name)
}

/// The view the generated `Host` trait is implemented for.
pub struct FetchView<'a> {
    /// The tenant's allow-list, and the runner's connections.
    pub hooks: &'a PolicyHooks,
}

struct HasFetch;

impl HasData for HasFetch {
    type Data<'a> = FetchView<'a>;
}

/// Adds `settle:plugin/outbound` to the linker.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    view: fn(&mut T) -> FetchView<'_>,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasFetch>(linker, view)
}

impl wit::Host for FetchView<'_> {
    async fn fetch(
        &mut self,
        request: wit::HttpRequest,
    ) -> wasmtime::Result<Result<wit::HttpResponse, wit::FetchError>> {
        Ok(exchange(self.hooks, request).await)
    }
}

/// The exchange `request` asks for, within its deadline.
async fn exchange(
    hooks: &PolicyHooks,
    request: wit::HttpRequest,
) -> Result<wit::HttpResponse, wit::FetchError> {
    crate::timeline!("outbound exchange starts");
    let deadline = Duration::from_millis(request.timeout_ms).min(MAX_OUTBOUND_WAIT);
    let limit = request.max_body_bytes.min(MAX_FETCH_BODY);
    let deadline_ms = deadline.as_millis() as u64;
    let outgoing = build(request)?;
    if !super::http::permits(&hooks.tenant.policy, outgoing.uri()) {
        refuse(&hooks.tenant, outgoing.uri());
        return Err(wit::FetchError::Denied);
    }
    let options = RequestOptions {
        connect_timeout: Some(deadline),
        first_byte_timeout: Some(deadline),
        between_bytes_timeout: Some(deadline),
    };
    let pool = hooks.pool.clone();
    let tenant = hooks.tenant.name.clone();
    let writes = hooks.writes.clone();
    let exchange = async move {
        super::http::before_sending(&writes, outgoing.method())
            .await
            .map_err(|e| wit::FetchError::Failed(format!("not sent: {e}")))?;
        let (response, io) = pool
            .send(&tenant, outgoing, options)
            .await
            .map_err(|e| failed(e, deadline_ms))?;
        crate::timeline!("answer head in");
        // A pooled connection's I/O was driven by `send` itself and this is
        // already done; an `https` connection's is not, and runs on.
        let mut io = Box::into_pin(io);
        if io.as_mut().now_or_never().is_none() {
            tokio::spawn(async move {
                if let Err(e) = io.await {
                    tracing::debug!("outbound connection ended: {e}");
                }
            });
        }
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut read = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.map_err(|e| failed(e, deadline_ms))?.into_data() {
                read.extend_from_slice(&data);
                if read.len() as u64 > limit {
                    return Err(wit::FetchError::TooLarge(limit));
                }
            }
        }
        crate::timeline!("answer body read");
        Ok(wit::HttpResponse { status, body: read })
    };
    tokio::time::timeout(deadline, exchange)
        .await
        .unwrap_or(Err(wit::FetchError::Late(deadline_ms)))
}

/// The request as hyper takes it; what cannot be made is `failed`.
fn build(
    request: wit::HttpRequest,
) -> Result<http::Request<wasmtime_wasi_http::WasiBody>, wit::FetchError> {
    let bad = |what: &str| wit::FetchError::Failed(what.to_string());
    let uri: http::Uri = request
        .url
        .parse()
        .map_err(|_| bad("the URL is not valid"))?;
    let authority = match (uri.scheme_str(), uri.authority()) {
        (Some("http" | "https"), Some(authority)) => authority.as_str().to_string(),
        _ => return Err(bad("the URL is not an absolute http or https URL")),
    };
    let method = http::Method::from_bytes(request.method.as_bytes())
        .map_err(|_| bad("the method is not valid"))?;
    // Origin-form needs a path: `http://h:1?x=1` asks for `/?x=1`.
    let uri = match uri.path_and_query().map(|p| p.as_str()) {
        Some(target) if !target.starts_with('/') => {
            let mut parts = uri.clone().into_parts();
            parts.path_and_query = Some(
                format!("/{target}")
                    .parse()
                    .map_err(|_| bad("the URL is not valid"))?,
            );
            http::Uri::from_parts(parts).map_err(|_| bad("the URL is not valid"))?
        }
        _ => uri,
    };
    let mut builder = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::HOST, authority);
    for (name, value) in &request.headers {
        let name = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| bad(&format!("the header name {name:?} is not valid")))?;
        // What `wasi:http` forbids a plugin to set, and the body's length:
        // the runner sets these (`host` from the URL, which the allow-list
        // checked).
        if forbidden(&name) {
            return Err(bad(&format!("the header {name} is set by the runner")));
        }
        let value = http::HeaderValue::from_bytes(value)
            .map_err(|_| bad(&format!("the value of header {name} is not valid")))?;
        builder = builder.header(name, value);
    }
    let body = Full::new(Bytes::from(request.body.unwrap_or_default()))
        .map_err(|never| match never {})
        .boxed_unsync();
    builder
        .body(body)
        .map_err(|e| bad(&format!("the request could not be made: {e}")))
}

/// An exchange that failed on the way: a refused connection and a
/// timeout (of `deadline_ms`) by name, anything else described.
fn failed(error: Error, deadline_ms: u64) -> wit::FetchError {
    match error {
        Error::ConnectionRefused => wit::FetchError::Refused,
        Error::Connect(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            wit::FetchError::Refused
        }
        Error::ConnectionTimeout
        | Error::ConnectionReadTimeout
        | Error::ConnectionWriteTimeout
        | Error::HttpResponseTimeout => wit::FetchError::Late(deadline_ms),
        other => wit::FetchError::Failed(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::pool::ConnectionPool;
    use crate::context::TenantContext;
    use crate::policy::{AllowedOrigin, OutboundPolicy};
    use axum::routing::{get, post};

    /// A device API on loopback: `/small` answers 2 bytes, `/big` 64 KiB,
    /// `/slow` after 5 s, `/echo` its request's body and `x-probe` header.
    async fn api() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .route("/small", get(|| async { "ok" }))
            .route("/big", get(|| async { vec![b'x'; 64 << 10] }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "late"
                }),
            )
            .route(
                "/echo",
                post(|headers: axum::http::HeaderMap, body: Bytes| async move {
                    let probe = headers
                        .get("x-probe")
                        .map(|v| v.to_str().unwrap().to_string())
                        .unwrap_or_default();
                    format!("{probe}:{}", String::from_utf8_lossy(&body))
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        origin
    }

    fn hooks(allowed: &str) -> PolicyHooks {
        let policy = OutboundPolicy::new(vec![AllowedOrigin::parse(allowed).unwrap()]);
        PolicyHooks {
            tenant: TenantContext::for_tests("t", policy),
            pool: ConnectionPool::new(),
            writes: crate::store::Store::memory(),
        }
    }

    fn get_request(url: &str) -> wit::HttpRequest {
        wit::HttpRequest {
            method: "GET".into(),
            url: url.into(),
            headers: vec![],
            body: None,
            timeout_ms: 2_000,
            max_body_bytes: 1 << 20,
        }
    }

    #[tokio::test]
    async fn an_answer_comes_back_whole_with_its_status() {
        let origin = api().await;
        let hooks = hooks(&origin);
        let answer = exchange(&hooks, get_request(&format!("{origin}/small")))
            .await
            .unwrap();
        assert_eq!((answer.status, answer.body), (200, b"ok".to_vec()));
        let bare = exchange(&hooks, get_request(&format!("{origin}?q=1")))
            .await
            .unwrap();
        assert_eq!(bare.status, 404, "a URL with no path asks for /");
        let missing = exchange(&hooks, get_request(&format!("{origin}/none")))
            .await
            .unwrap();
        assert_eq!(missing.status, 404);
        let mut echo = get_request(&format!("{origin}/echo"));
        echo.method = "POST".into();
        echo.headers = vec![("x-probe".into(), b"p".to_vec())];
        echo.body = Some(b"{\"on\":true}".to_vec());
        let answer = exchange(&hooks, echo).await.unwrap();
        assert_eq!(String::from_utf8(answer.body).unwrap(), "p:{\"on\":true}");
        assert_eq!(hooks.pool.idle_count(), 1, "one connection, kept for reuse");
    }

    #[tokio::test]
    async fn an_origin_off_the_allow_list_is_denied_and_counted() {
        let origin = api().await;
        let hooks = hooks("http://127.0.0.1:9");
        let denied = exchange(&hooks, get_request(&format!("{origin}/small"))).await;
        assert!(matches!(denied, Err(wit::FetchError::Denied)), "{denied:?}");
        assert!(
            hooks
                .tenant
                .metrics
                .render()
                .contains(r#"settle_outbound_denied_total{tenant="t"} 1"#)
        );
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_too_large() {
        let origin = api().await;
        let hooks = hooks(&origin);
        let mut request = get_request(&format!("{origin}/big"));
        request.max_body_bytes = 1_000;
        let answer = exchange(&hooks, request).await;
        assert!(
            matches!(answer, Err(wit::FetchError::TooLarge(1_000))),
            "{answer:?}"
        );
        let mut request = get_request(&format!("{origin}/big"));
        request.max_body_bytes = u64::MAX;
        let whole = exchange(&hooks, request).await.unwrap();
        assert_eq!(
            whole.body.len(),
            64 << 10,
            "a limit past the cap still reads"
        );
    }

    #[tokio::test]
    async fn an_exchange_past_its_deadline_is_late() {
        let origin = api().await;
        let hooks = hooks(&origin);
        let mut request = get_request(&format!("{origin}/slow"));
        request.timeout_ms = 100;
        let started = std::time::Instant::now();
        let answer = exchange(&hooks, request).await;
        assert!(
            matches!(answer, Err(wit::FetchError::Late(100))),
            "{answer:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn a_closed_port_is_refused() {
        // Bound and dropped: nothing listens there now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let origin = format!("http://127.0.0.1:{port}");
        let hooks = hooks(&origin);
        let answer = exchange(&hooks, get_request(&format!("{origin}/x"))).await;
        assert!(
            matches!(answer, Err(wit::FetchError::Refused)),
            "{answer:?}"
        );
    }

    #[tokio::test]
    async fn a_request_that_cannot_be_made_says_why() {
        let hooks = hooks("http://127.0.0.1:9");
        for (url, method, header, expected) in [
            ("not a url", "GET", "accept", "not valid"),
            (
                "ftp://127.0.0.1:9/x",
                "GET",
                "accept",
                "absolute http or https",
            ),
            ("/relative", "GET", "accept", "absolute http or https"),
            ("http://127.0.0.1:9/x", "GE T", "accept", "method"),
            ("http://127.0.0.1:9/x", "GET", "bad header", "header name"),
            ("http://127.0.0.1:9/x", "GET", "host", "set by the runner"),
            (
                "http://127.0.0.1:9/x",
                "GET",
                "Transfer-Encoding",
                "set by the runner",
            ),
            (
                "http://127.0.0.1:9/x",
                "GET",
                "content-length",
                "set by the runner",
            ),
        ] {
            let mut request = get_request(url);
            request.method = method.into();
            request.headers = vec![(header.into(), b"v".to_vec())];
            match exchange(&hooks, request).await {
                Err(wit::FetchError::Failed(why)) => {
                    assert!(why.contains(expected), "{url} {method}: {why}")
                }
                other => panic!("{url} {method}: {other:?}"),
            }
        }
    }
}
