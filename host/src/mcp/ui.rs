//! `GET /ui` and `/ui/...`: the plugin's own page (WIT `ui-asset`), for
//! the people who run settle. Off unless the operator turns it on.
//!
//! The runner only serves bytes the plugin embeds, behind a token: it
//! neither knows nor reads what the page shows. The page is an MCP client
//! of the same tenant's endpoint, so it can see nothing an agent with the
//! same token could not.
//!
//! # The token
//! A browser cannot set `Authorization` on the page's own address, so the
//! page is opened once as `/ui?token=TOKEN` (which moves to `/ui/`, where
//! the page's relative links resolve, keeping the query). A right token is answered with
//! the page and an `HttpOnly`, `SameSite=Strict` cookie scoped to this
//! `/ui` path, which carries it on the page's script and style requests and
//! on reloads; the page's script keeps the token in `sessionStorage`, sends
//! it as `Authorization: Bearer` on its MCP requests, and removes it from
//! the address bar. `Referrer-Policy: no-referrer` keeps it out of other
//! sites' logs, and nothing here logs a URI. `Authorization: Bearer` on
//! `/ui` itself is accepted too (for scripts). A missing or wrong token is
//! a 401 whose page says how to open the view.

use super::auth::presented;
use super::handler::Settle;
use crate::secret::Secret;
use axum::Router;
use axum::extract::{Path, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// The cookie that carries the token after the first visit.
const COOKIE: &str = "settle_ui";

/// The longest asset path looked up; the page's files are short names.
const MAX_PATH: usize = 256;

/// What every answer of `/ui` carries: the page may load only its own
/// script and style and talk only to its own origin, may not be framed,
/// and its address (which may hold the token) is never sent as a referrer.
const SECURITY_HEADERS: [(header::HeaderName, &str); 5] = [
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "no-referrer"),
    (header::CACHE_CONTROL, "no-store"),
    (header::X_FRAME_OPTIONS, "DENY"),
];

/// The `/ui` routes of one tenant's server; `tokens` are those that open
/// it (the tenant's own, and the admin's); `root` is where the view is
/// reached from outside (`/ui`, or `/t/NAME/ui`), the cookie's scope.
pub fn router(settle: Settle, tokens: Vec<Secret>, root: String) -> Router {
    let view = Arc::new(View {
        settle,
        tokens,
        root,
    });
    let page = {
        let view = view.clone();
        move |request: Request| {
            let view = view.clone();
            async move { view.serve(request, "index.html").await }
        }
    };
    // The page's files are linked relative to it, which from `/ui` would
    // mean the server's root: `/ui` sends the browser to `/ui/`, its query
    // (the token) kept.
    let to_page = {
        let root = view.root.clone();
        move |request: Request| {
            let location = match request.uri().query() {
                Some(query) => format!("{root}/?{query}"),
                None => format!("{root}/"),
            };
            async move {
                let mut response = axum::response::Redirect::permanent(&location).into_response();
                add_security_headers(response.headers_mut());
                response
            }
        }
    };
    let file = move |Path(path): Path<String>, request: Request| {
        let view = view.clone();
        async move { view.serve(request, &path).await }
    };
    Router::new()
        .route("/ui", axum::routing::get(to_page))
        .route("/ui/", axum::routing::get(page))
        .route("/ui/{*path}", axum::routing::get(file))
}

/// Answers `/t/{anything}/ui` for names that are not tenants with the
/// same 401 a wrong token gets, so the view does not tell which tenants
/// there are.
pub fn unknown_tenants() -> Router {
    let refuse = || async { unauthorized() };
    Router::new()
        .route("/t/{tenant}/ui", axum::routing::get(refuse))
        .route("/t/{tenant}/ui/", axum::routing::get(refuse))
        .route("/t/{tenant}/ui/{*path}", axum::routing::get(refuse))
}

/// One tenant's view.
struct View {
    settle: Settle,
    tokens: Vec<Secret>,
    root: String,
}

impl View {
    /// Checks the token, then the path, then asks the plugin.
    async fn serve(&self, request: Request, path: &str) -> Response {
        let (settle, tokens) = (&self.settle, &self.tokens);
        // Read before any await: a request's body is not `Sync`.
        let via = presented_token(&request, tokens);
        drop(request);
        let Some(via) = via else {
            return unauthorized();
        };
        if let Err(why) = check_path(path) {
            return plain(StatusCode::BAD_REQUEST, &format!("bad asset path: {why}\n"));
        }
        let asset = match settle.ui_asset(path).await {
            Ok(Some(asset)) => asset,
            Ok(None) => return plain(StatusCode::NOT_FOUND, "no such file in this view\n"),
            Err(fault) => {
                tracing::error!(tenant = %settle.tenant_name(), "ui-asset: {fault}");
                return plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the plugin failed to serve this file\n",
                );
            }
        };
        let mut response =
            ([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response();
        add_security_headers(response.headers_mut());
        if let Via::Query(token) = via {
            let scope = &self.root;
            if let Ok(value) =
                format!("{COOKIE}={token}; Path={scope}; HttpOnly; SameSite=Strict").parse()
            {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
        }
        response
    }
}

/// How the request presented a right token.
enum Via {
    /// `Authorization: Bearer` or the cookie: nothing more to do.
    Kept,
    /// `?token=`: the answer sets the cookie, so later requests carry it.
    Query(String),
}

/// The right token the request presents, and how, or `None`.
fn presented_token(request: &Request, tokens: &[Secret]) -> Option<Via> {
    let right = |given: &[u8]| {
        tokens.iter().fold(false, |any, t| {
            any | bool::from(given.ct_eq(t.expose().as_bytes()))
        })
    };
    if presented(request).is_some_and(right) {
        return Some(Via::Kept);
    }
    let from_query = request.uri().query().and_then(|q| {
        url::form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "token")
            .map(|(_, v)| v.into_owned())
    });
    if let Some(token) = from_query {
        // Only a token that could be a cookie value is taken from the
        // address (every right one is: tokens are set by the operator).
        let cookie_safe = token
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b';' | b',' | b'"' | b'\\'));
        return (cookie_safe && right(token.as_bytes())).then_some(Via::Query(token));
    }
    let cookie = request
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_string());
    cookie.filter(|c| right(c.as_bytes())).map(|_| Via::Kept)
}

/// Refuses paths that could mean anything but one file of the page: empty
/// segments, `.` and `..` (also percent-encoded, which the router has
/// decoded by now), backslashes, control characters, and long ones.
fn check_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("empty");
    }
    if path.len() > MAX_PATH {
        return Err("too long");
    }
    if path.chars().any(|c| c.is_control() || c == '\\') {
        return Err("a backslash or control character");
    }
    if path
        .split('/')
        .any(|segment| segment.is_empty() || segment == "." || segment == "..")
    {
        return Err("an empty, `.` or `..` segment");
    }
    Ok(())
}

fn add_security_headers(headers: &mut HeaderMap) {
    for (name, value) in SECURITY_HEADERS {
        headers.insert(name, header::HeaderValue::from_static(value));
    }
}

fn plain(status: StatusCode, text: &str) -> Response {
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text.to_string(),
    )
        .into_response();
    add_security_headers(response.headers_mut());
    response
}

/// The refusal, as a page a person can read.
fn unauthorized() -> Response {
    let mut response = (
        StatusCode::UNAUTHORIZED,
        [
            (header::WWW_AUTHENTICATE, "Bearer realm=\"settle\""),
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        ],
        UNAUTHORIZED_PAGE,
    )
        .into_response();
    add_security_headers(response.headers_mut());
    response
}

/// The 401's page.
const UNAUTHORIZED_PAGE: &str = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>settle: token needed</title></head><body>\n<h1>401: this view needs a token</h1>\n\
<p>Open it once as <code>/ui?token=TOKEN</code>, with the token the operator gave you (the \
one in <code>SETTLE_UI_TOKEN</code>, the tenant's token, or the admin token). The token was \
missing or not right.</p>\n</body></html>\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_pass() {
        for good in ["index.html", "app.js", "img/logo.svg", "a..b"] {
            assert!(check_path(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "..",
            "../Cargo.toml",
            "a/../../b",
            "./app.js",
            "a//b",
            "/etc/passwd",
            "a\\..\\b",
            "a\0b",
            "app.js/",
        ] {
            assert!(check_path(bad).is_err(), "{bad:?}");
        }
        assert!(check_path(&"a".repeat(MAX_PATH + 1)).is_err());
    }
}
