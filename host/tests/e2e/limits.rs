//! The HTTP server's limits against hostile clients: slowloris connections
//! closed at the header-read timeout, the connection cap holding while a
//! normal client is served, 429 with `Retry-After` over a tenant's request
//! rate, and the cap on a tenant's listen streams; each counted in
//! `/metrics`. Small limits keep each test quick.

use crate::common::*;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The `host:port` of a server's URL.
fn authority(url: &str) -> String {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string()
}

/// Opens a connection and starts a request whose headers never end.
async fn slow_connection(url: &str) -> TcpStream {
    let mut tcp = TcpStream::connect(authority(url)).await.unwrap();
    tcp.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    tcp
}

/// A `tools/list` over `client` (which keeps its connection between
/// requests); the HTTP status.
async fn tools_list(client: &reqwest::Client, url: &str) -> u16 {
    let response = tools_list_request(client, url)
        .send()
        .await
        .expect("the normal client is answered");
    let status = response.status().as_u16();
    // Read to the end, so the connection goes back to the client's pool.
    response.bytes().await.unwrap();
    status
}

/// Sends one more header line every `every` (if given) until the server
/// closes the connection; how long that took.
async fn trickle_until_closed(mut tcp: TcpStream, every: Option<Duration>) -> Duration {
    let start = Instant::now();
    let mut buffer = [0u8; 1024];
    let mut ticks = tokio::time::interval(every.unwrap_or(Duration::from_secs(3600)));
    ticks.tick().await;
    loop {
        assert!(
            start.elapsed() < DEADLINE,
            "the slow connection is still open after {DEADLINE:?}"
        );
        tokio::select! {
            read = tcp.read(&mut buffer) => match read {
                Ok(0) | Err(_) => return start.elapsed(),
                // hyper may answer 408 before closing: keep reading.
                Ok(_) => {}
            },
            _ = ticks.tick(), if every.is_some() => {
                if tcp.write_all(b"X-Slow: 1\r\n").await.is_err() {
                    return start.elapsed();
                }
            }
        }
    }
}

#[tokio::test]
async fn slowloris_and_idle_connections_are_closed_at_the_header_read_timeout() {
    let server = serve_http(&["--header-read-timeout-ms", "1000"]).await;
    // One sends a header line every 200 ms (each well within any per-line
    // timeout), one sends nothing after its first line.
    let trickling = slow_connection(&server.url).await;
    let idle = TcpStream::connect(authority(&server.url)).await.unwrap();
    let (trickled, idled) = tokio::join!(
        trickle_until_closed(trickling, Some(Duration::from_millis(200))),
        trickle_until_closed(idle, None),
    );
    for (what, took) in [("trickling", trickled), ("idle", idled)] {
        assert!(
            took >= Duration::from_millis(900),
            "the {what} connection was closed by the timeout, not at once: {took:?}"
        );
        assert!(
            took < Duration::from_secs(10),
            "the {what} connection was closed within 10 s: {took:?}"
        );
    }
    let client = reqwest::Client::new();
    assert_eq!(tools_list(&client, &server.url).await, 200, "still serving");
    let metrics = metrics_text(&client, &server.url).await;
    assert!(
        metrics.contains("settle_http_header_timeouts_total 2"),
        "{metrics}"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_connection_cap_holds_while_a_normal_client_is_served() {
    let server = serve_http(&[
        "--max-connections",
        "4",
        "--header-read-timeout-ms",
        "60000",
    ])
    .await;
    // The normal client keeps one connection between its requests.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    assert_eq!(tools_list(&client, &server.url).await, 200);
    // Three slow connections fill the cap; two more are refused.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(slow_connection(&server.url).await);
    }
    for _ in 0..2 {
        let mut refused = slow_connection(&server.url).await;
        let mut answer = Vec::new();
        tokio::time::timeout(DEADLINE, refused.read_to_end(&mut answer))
            .await
            .expect("a refused connection is answered and closed")
            .ok();
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 503") && answer.contains("retry-after: 1"),
            "{answer}"
        );
    }
    for _ in 0..3 {
        assert_eq!(
            tools_list(&client, &server.url).await,
            200,
            "the normal client is still served at the cap"
        );
    }
    let metrics = metrics_text(&client, &server.url).await;
    for line in [
        "settle_http_connections 4",
        "settle_http_connections_refused_total 2",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    drop(held);
    drop(client);
    server.stop().await;
}

#[tokio::test]
async fn requests_over_a_tenants_rate_get_429_with_retry_after() {
    let server = serve_http(&["--max-requests-per-second", "5"]).await;
    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..20 {
        let response = tools_list_request(&client, &server.url)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        if status == 429 {
            retry_after = response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
        }
        statuses.push(status);
    }
    assert_eq!(statuses[0], 200, "{statuses:?}");
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert!(
        refused >= 5,
        "20 requests at once, 5 a second allowed: {statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    let retry_after = retry_after.expect("a 429 says when to retry");
    assert!((1..=2).contains(&retry_after), "Retry-After {retry_after}");
    // /metrics and /healthz are not the tenant's requests.
    let metrics = metrics_text(&client, &server.url).await;
    let line = format!(r#"settle_rate_limited_total{{tenant="default"}} {refused}"#);
    assert!(metrics.contains(&line), "{line} in {metrics}");
    // After the wait it names, the tenant is served again.
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    assert_eq!(tools_list(&client, &server.url).await, 200);
    server.stop().await;
}

#[tokio::test]
async fn a_tenants_listen_streams_are_capped() {
    let server = serve_http(&["--max-listen-streams", "1"]).await;
    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let mut first = Listen::open(&server.url, 1, json!({"taskIds": ["a"]}), caps.clone()).await;
    assert_eq!(first.status(), 200);
    first
        .next(DEADLINE)
        .await
        .expect("the first stream is acknowledged");
    let mut second = Listen::open(&server.url, 2, json!({"taskIds": ["b"]}), caps).await;
    assert_eq!(second.status(), 429);
    let refusal = second
        .next(DEADLINE)
        .await
        .expect("the refusal is a JSON-RPC error");
    assert_eq!(refusal["id"], 2, "{refusal}");
    assert_eq!(refusal["error"]["code"], -32000, "{refusal}");
    assert!(
        refusal["error"]["message"]
            .as_str()
            .unwrap()
            .contains("may hold 1 open"),
        "{refusal}"
    );
    let metrics = metrics_text(&reqwest::Client::new(), &server.url).await;
    for line in [
        r#"settle_listen_streams{tenant="default"} 1"#,
        r#"settle_listen_refused_total{tenant="default"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    // The open stream is unaffected.
    assert!(first.next(Duration::from_millis(100)).await.is_none());
    drop(first);
    server.stop().await;
}
