//! The live view at `/ui` over plain HTTP (the browser test, `browser.rs`,
//! drives the page itself): off by default, behind its token, the plugin's
//! files with their content types, 404 for a file the plugin does not
//! have, and no way out of the page's files. Also a tenant's view, opened
//! by its own token or the admin's, and the tenant's MCP endpoint taking
//! the admin token only while the view is on.

use crate::common::*;
use std::io::Write;
use std::time::Duration;

const TOKEN: &str = "ui-secret-token";

/// The server's root, from its MCP URL.
fn root(server: &Server) -> String {
    server.url.trim_end_matches("/mcp").to_string()
}

async fn get(url: &str, bearer: Option<&str>) -> (u16, String, String, Option<String>) {
    let client = reqwest::Client::new();
    let mut request = client.get(url);
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("request reaches settle");
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    };
    let content_type = header("content-type").unwrap_or_default();
    let cookie = header("set-cookie");
    (status, content_type, response.text().await.unwrap(), cookie)
}

/// A GET sent byte for byte (an HTTP client would normalise `..` away).
async fn raw_get(root: &str, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = root.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"))
}

async fn device_server(extra: &[&str]) -> (device_sim::RunningSim, Server) {
    let sim = sim(Duration::from_millis(100)).await;
    let api = sim.base_url();
    let mut argv = vec!["--device-api", api.as_str()];
    argv.extend_from_slice(extra);
    let server = serve_http(&argv).await;
    (sim, server)
}

#[tokio::test]
async fn the_view_is_off_unless_turned_on() {
    let (_sim, server) = device_server(&[]).await;
    let root = root(&server);
    for path in ["/ui", "/ui/app.js"] {
        let (status, ..) = get(&format!("{root}{path}"), Some(TOKEN)).await;
        assert_eq!(status, 404, "{path} while the view is off");
    }
    server.stop().await;
}

#[tokio::test]
async fn turning_it_on_needs_a_token() {
    // An empty token is no token (and given on the command line, the test
    // does not depend on SETTLE_UI_TOKEN being unset).
    for token in ["", "  "] {
        let args = serve_args(&[
            "settle",
            "serve",
            "--ui",
            "--ui-token",
            token,
            "--store",
            "memory",
        ]);
        let error = settle::config::RunnerConfig::from_args(&args)
            .err()
            .expect("--ui without a token is refused")
            .to_string();
        assert!(error.contains("SETTLE_UI_TOKEN"), "{error}");
    }
}

#[tokio::test]
async fn the_token_opens_the_page_and_its_files() {
    let (_sim, server) = device_server(&["--ui", "--ui-token", TOKEN]).await;
    let root = root(&server);

    // Once by address: the page, and a cookie scoped to the view that
    // carries the token on its files and on reloads.
    let (status, content_type, body, cookie) = get(&format!("{root}/ui?token={TOKEN}"), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(content_type, "text/html; charset=utf-8");
    assert!(body.contains("<script src=\"app.js\""), "{body}");
    let cookie = cookie.expect("the first visit sets the cookie");
    assert!(
        cookie.starts_with(&format!("settle_ui={TOKEN};")),
        "{cookie}"
    );
    for attribute in ["Path=/ui", "HttpOnly", "SameSite=Strict"] {
        assert!(cookie.contains(attribute), "{attribute} in {cookie}");
    }
    let with_cookie = reqwest::Client::new()
        .get(format!("{root}/ui/style.css"))
        .header("cookie", format!("settle_ui={TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(with_cookie.status().as_u16(), 200);
    assert_eq!(
        with_cookie.headers()["content-type"],
        "text/css; charset=utf-8"
    );

    // By bearer token, as a script would.
    let (status, content_type, body, _) = get(&format!("{root}/ui/app.js"), Some(TOKEN)).await;
    assert_eq!(status, 200);
    assert_eq!(content_type, "text/javascript; charset=utf-8");
    assert!(body.contains("subscriptions/listen"));
    let (status, content_type, ..) = get(&format!("{root}/ui/"), Some(TOKEN)).await;
    assert_eq!(
        (status, content_type.as_str()),
        (200, "text/html; charset=utf-8")
    );

    // The page may only load its own files and talk to its own origin.
    let response = reqwest::Client::new()
        .get(format!("{root}/ui"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"));
    assert_eq!(response.headers()["referrer-policy"], "no-referrer");
    server.stop().await;
}

#[tokio::test]
async fn a_missing_or_wrong_token_is_refused_and_the_page_says_so() {
    let (_sim, server) = device_server(&["--ui", "--ui-token", TOKEN]).await;
    let root = root(&server);
    for (url, bearer) in [
        (format!("{root}/ui"), None),
        (format!("{root}/ui/app.js"), None),
        (format!("{root}/ui?token=wrong"), None),
        (format!("{root}/ui?token="), None),
        (format!("{root}/ui"), Some("wrong")),
        (format!("{root}/ui/app.js"), Some("ui-secret-toke")),
    ] {
        let (status, content_type, body, cookie) = get(&url, bearer).await;
        assert_eq!(status, 401, "{url} with {bearer:?}");
        assert_eq!(content_type, "text/html; charset=utf-8");
        assert!(body.contains("needs a token"), "{body}");
        assert!(cookie.is_none(), "no cookie for a refused token");
    }
    let wrong_cookie = reqwest::Client::new()
        .get(format!("{root}/ui"))
        .header("cookie", "settle_ui=wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_cookie.status().as_u16(), 401);
    server.stop().await;
}

#[tokio::test]
async fn files_the_plugin_does_not_have_are_404_and_no_path_leaves_the_page() {
    let (_sim, server) = device_server(&["--ui", "--ui-token", TOKEN]).await;
    let root = root(&server);
    for path in ["/ui/nothing.js", "/ui/app.js.map", "/ui/img/logo.png"] {
        let (status, _, body, _) = get(&format!("{root}{path}"), Some(TOKEN)).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    // Traversal, sent as is: encoded or not, `..` and `.` segments,
    // backslashes and control characters are refused before the plugin
    // is asked; none of them reaches a file outside the page.
    for path in [
        "/ui/%2e%2e/Cargo.toml",
        "/ui/..%2fCargo.toml",
        "/ui/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
        "/ui/./app.js",
        "/ui/a/../app.js",
        "/ui/..%5c..%5cCargo.toml",
        "/ui/app.js%00.html",
        "/ui//etc/passwd",
    ] {
        let status = raw_get(&root, path).await;
        assert!(
            status == 400 || status == 404,
            "{path}: answered {status}, not refused"
        );
        assert_ne!(status, 200, "{path}");
    }
    // A plain `..` that reaches the router unnormalised is refused too.
    assert_eq!(raw_get(&root, "/ui/../ui/app.js").await, 400);
    // And the runner keeps serving.
    let (status, ..) = get(&format!("{root}/ui/app.js"), Some(TOKEN)).await;
    assert_eq!(status, 200);
    server.stop().await;
}

#[tokio::test]
async fn a_plugin_without_a_page_answers_404() {
    let server = serve_http_config(config_for(
        &hello_plugin_path(),
        &["--ui", "--ui-token", TOKEN],
    ))
    .await;
    let (status, ..) = get(&format!("{}/ui", root(&server)), Some(TOKEN)).await;
    assert_eq!(status, 404);
    server.stop().await;
}

/// A tenants file with two tenants and an admin token; `ui` as given.
fn tenants_file(dir: &tempfile::TempDir, api: &str, ui: bool) -> std::path::PathBuf {
    let path = dir.path().join("settle.toml");
    let plugin = plugin_path();
    let mut file = std::fs::File::create(&path).unwrap();
    write!(
        file,
        r#"[server]
admin_token_file = "admin.token"
ui = {ui}

[tenant.home]
plugin = "{plugin}"
token_file = "home.token"
device_api = "{api}"

[tenant.office]
plugin = "{plugin}"
token_file = "office.token"
device_api = "{api}"
"#,
        plugin = plugin.display()
    )
    .unwrap();
    path
}

#[tokio::test]
async fn each_tenant_has_its_own_view_and_the_admin_sees_them_all() {
    let sim = sim(Duration::from_millis(100)).await;
    let dir = tempfile::tempdir().unwrap();
    for (name, token) in [
        ("admin", "admin-secret"),
        ("home", "home-secret"),
        ("office", "office-secret"),
    ] {
        std::fs::write(dir.path().join(format!("{name}.token")), token).unwrap();
    }
    for ui in [true, false] {
        let path = tenants_file(&dir, &sim.base_url(), ui);
        let tenants = crate::tenants::Tenants::start(&path).await;
        let root = tenants.base.clone();
        let view = |tenant: &str| format!("{root}/t/{tenant}/ui");
        let listed = |token: &'static str, tenant: &'static str| {
            let root = root.clone();
            async move {
                let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
                let bearer = format!("Bearer {token}");
                post(
                    &format!("{root}/t/{tenant}/mcp"),
                    body,
                    &[
                        ("mcp-protocol-version", MODERN),
                        ("mcp-method", "tools/list"),
                        ("authorization", &bearer),
                    ],
                )
                .await
                .0
            }
        };
        if ui {
            assert_eq!(get(&view("home"), Some("home-secret")).await.0, 200);
            assert_eq!(get(&view("home"), Some("admin-secret")).await.0, 200);
            assert_eq!(get(&view("office"), Some("admin-secret")).await.0, 200);
            // Another tenant's token opens nothing here, and a tenant
            // that does not exist looks the same as a wrong token.
            assert_eq!(get(&view("office"), Some("home-secret")).await.0, 401);
            assert_eq!(get(&view("nobody"), Some("admin-secret")).await.0, 401);
            assert_eq!(
                get(&format!("{}/app.js", view("nobody")), None).await.0,
                401
            );
            let (_, _, _, cookie) = get(&format!("{}?token=home-secret", view("home")), None).await;
            assert!(cookie.unwrap().contains("Path=/t/home/ui"));
            // The admin's view talks to the tenant's endpoint.
            assert_eq!(listed("admin-secret", "office").await, 200);
        } else {
            assert_eq!(get(&view("home"), Some("home-secret")).await.0, 404);
            // Without the view, the admin token is no tenant's token.
            assert_eq!(listed("admin-secret", "office").await, 401);
        }
        assert_eq!(listed("office-secret", "office").await, 200);
        assert_eq!(listed("home-secret", "office").await, 401);
        tenants.server.stop().await;
    }
}
