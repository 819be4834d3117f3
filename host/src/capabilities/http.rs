//! Outgoing HTTP: wasmtime's `wasi:http`, with the tenant's allow-list
//! checked at the one place every request passes, the `send_request` hook.
//!
//! A denied request is the WIT error `HTTP-request-denied`, never a trap, so
//! the plugin can tell its caller what happened.

use crate::context::TenantContext;
use crate::policy::OutboundPolicy;
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
}

fn capped(wait: Option<Duration>) -> Option<Duration> {
    Some(wait.map_or(MAX_OUTBOUND_WAIT, |w| w.min(MAX_OUTBOUND_WAIT)))
}

/// Whether the policy lets a request to `uri` out.
pub fn permits(policy: &OutboundPolicy, uri: &http::Uri) -> bool {
    policy.allows(uri)
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
            self.tenant.count_denied();
            tracing::warn!(
                tenant = %self.tenant.name,
                // Without the query, which may carry a key.
                url = %format!(
                    "{}://{}{}",
                    request.uri().scheme_str().unwrap_or("?"),
                    request.uri().authority().map(|a| a.as_str()).unwrap_or("?"),
                    request.uri().path()
                ),
                "outbound request denied: origin not on the tenant's allow-list"
            );
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        let mut options = options.unwrap_or_default();
        options.connect_timeout = capped(options.connect_timeout);
        options.first_byte_timeout = capped(options.first_byte_timeout);
        options.between_bytes_timeout = capped(options.between_bytes_timeout);
        Box::new(async move {
            use http_body_util::BodyExt;
            let (response, io) =
                wasmtime_wasi_http::default_send_request(request, Some(options)).await?;
            Ok((
                response.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = Result<(), Error>> + Send>,
            ))
        })
    }
}
