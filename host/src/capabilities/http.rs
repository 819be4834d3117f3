//! Outgoing HTTP: wasmtime's `wasi:http`, with the tenant's allow-list
//! checked at the one place every request passes, the `send_request` hook
//! (and in [`super::fetch`], the one-call exchange, with the same check).
//!
//! A denied request is the WIT error `HTTP-request-denied`, never a trap, so
//! the plugin can tell its caller what happened.

use super::pool::ConnectionPool;
use crate::context::TenantContext;
use crate::policy::OutboundPolicy;
use crate::store::{Store, StoreError};
use std::sync::Arc;
use std::time::Duration;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

/// The longest any single wait of an outbound request may be, whatever the
/// plugin asks for: a plugin cannot hold a runner connection open for long.
pub const MAX_OUTBOUND_WAIT: Duration = Duration::from_secs(30);

/// The outbound hooks of one call.
pub struct PolicyHooks {
    /// Whose request this is: the allow-list, and where denials are counted
    /// and logged.
    pub tenant: Arc<TenantContext>,
    /// Keep-alive connections shared by every call of the runner.
    pub pool: Arc<ConnectionPool>,
    /// The call's handle on the store, flushed before a request that may
    /// change something leaves ([`before_sending`]).
    pub writes: Store,
}

/// Puts everything committed so far on disk before a request with an
/// unsafe method leaves: a device must never act on a command whose task
/// a crash could still lose, nor on a decision made from such a write. A
/// safe method (GET, HEAD, OPTIONS, TRACE: RFC 9110, section 9.2.1) asks
/// the server to change nothing, so it does not wait.
pub async fn before_sending(writes: &Store, method: &http::Method) -> Result<(), StoreError> {
    if method.is_safe() {
        return Ok(());
    }
    writes.flush().await
}

fn capped(wait: Option<Duration>) -> Option<Duration> {
    Some(wait.map_or(MAX_OUTBOUND_WAIT, |w| w.min(MAX_OUTBOUND_WAIT)))
}

/// Whether the policy lets a request to `uri` out.
pub fn permits(policy: &OutboundPolicy, uri: &http::Uri) -> bool {
    policy.allows(uri)
}

/// Counts and logs a request the allow-list refused.
pub fn refuse(tenant: &TenantContext, uri: &http::Uri) {
    tenant.count_denied();
    tracing::warn!(
        tenant = %tenant.name,
        // Without the query, which may carry a key.
        url = %format!(
            "{}://{}{}",
            uri.scheme_str().unwrap_or("?"),
            uri.authority().map(|a| a.as_str()).unwrap_or("?"),
            uri.path()
        ),
        "outbound request denied: origin not on the tenant's allow-list"
    );
}

type ResponseFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                ),
                Error,
            >,
        > + Send,
>;

impl WasiHttpHooks for PolicyHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> ResponseFuture {
        if !permits(&self.tenant.policy, request.uri()) {
            refuse(&self.tenant, request.uri());
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        let mut options = options.unwrap_or_default();
        options.connect_timeout = capped(options.connect_timeout);
        options.first_byte_timeout = capped(options.first_byte_timeout);
        options.between_bytes_timeout = capped(options.between_bytes_timeout);
        let (pool, tenant) = (self.pool.clone(), self.tenant.name.clone());
        let writes = self.writes.clone();
        Box::new(async move {
            before_sending(&writes, request.method())
                .await
                .map_err(|e| Error::InternalError(Some(format!("not sent: {e}"))))?;
            pool.send(&tenant, request, options).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::AllowedOrigin;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Empty};

    fn request(url: &str) -> http::Request<WasiBody> {
        let body = Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed_unsync();
        http::Request::get(url).body(body).unwrap()
    }

    fn hooks(allowed: &str) -> PolicyHooks {
        let policy = OutboundPolicy::new(vec![AllowedOrigin::parse(allowed).unwrap()]);
        PolicyHooks {
            tenant: TenantContext::for_tests("t", policy),
            pool: ConnectionPool::new(),
            writes: Store::memory(),
        }
    }

    fn no_io() -> Box<dyn Future<Output = Result<(), Error>> + Send> {
        Box::new(async { Ok(()) })
    }

    #[tokio::test]
    async fn a_request_off_the_allow_list_is_denied_and_counted() {
        let mut hooks = hooks("http://127.0.0.1:9");
        for url in [
            "http://127.0.0.1:10/x",  // another port
            "https://127.0.0.1:9/x",  // another scheme
            "http://localhost:9/x",   // another host name
            "http://example.com:9/x", // another host
        ] {
            let sent = Box::into_pin(hooks.send_request(request(url), None, no_io())).await;
            assert!(
                matches!(sent, Err(Error::HttpRequestDenied)),
                "{url} was not denied"
            );
        }
        let metrics = hooks.tenant.metrics.render();
        assert!(
            metrics.contains(r#"settle_outbound_denied_total{tenant="t"} 4"#),
            "{metrics}"
        );
    }

    #[tokio::test]
    async fn a_request_on_the_allow_list_goes_out() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().route("/x", axum::routing::get(|| async { "ok" }));
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let mut hooks = hooks(&origin);
        let sent =
            Box::into_pin(hooks.send_request(request(&format!("{origin}/x")), None, no_io())).await;
        let (response, io) = sent.unwrap_or_else(|e| panic!("denied or failed: {e}"));
        let io = tokio::spawn(Box::into_pin(io));
        assert_eq!(response.status(), 200);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"ok");
        assert!(
            !hooks
                .tenant
                .metrics
                .render()
                .contains("settle_outbound_denied_total{")
        );
        io.abort();
        server.abort();
    }

    #[test]
    fn every_wait_is_capped() {
        assert_eq!(capped(None), Some(MAX_OUTBOUND_WAIT));
        assert_eq!(
            capped(Some(Duration::from_secs(1))),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            capped(Some(Duration::from_secs(3600))),
            Some(MAX_OUTBOUND_WAIT)
        );
    }
}
