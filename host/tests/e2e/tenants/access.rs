//! Who may reach a tenant: one indistinguishable 401 for every refusal,
//! and the admin and metrics endpoints off unless configured.

use super::*;

#[tokio::test]
async fn every_refusal_is_the_same_401_so_tenants_cannot_be_discovered() {
    let (_sim, _dir, t) = alice_and_bob(100).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta(false)}})
        .to_string();
    let headers = [
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/list"),
    ];
    let mut refusals = Vec::new();
    for (who, auth) in [
        ("alice", None),
        ("alice", Some("wrong".to_string())),
        ("alice", Some(token("bob"))),
        ("carol", Some(token("alice"))),
        ("carol", None),
    ] {
        let mut request = reqwest::Client::new()
            .post(t.url(who))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header(headers[0].0, headers[0].1)
            .header(headers[1].0, headers[1].1)
            .body(list.clone());
        if let Some(auth) = auth {
            request = request.bearer_auth(auth);
        }
        let response = request.send().await.unwrap();
        refusals.push((response.status().as_u16(), response.text().await.unwrap()));
    }
    assert!(refusals.iter().all(|r| r == &refusals[0]), "{refusals:?}");
    assert_eq!(refusals[0].0, 401);
    assert!(refusals[0].1.contains("bearer token"), "{refusals:?}");

    // With its own token, each tenant is served.
    for who in ["alice", "bob"] {
        let client = t.client(who).await;
        let tools = client.list_all_tools().await.unwrap();
        assert!(tools.iter().any(|tool| tool.name == "set_temperature"));
    }
    t.server.stop().await;
}

#[tokio::test]
async fn admin_and_metrics_endpoints_are_off_unless_configured() {
    let sim = sim(Duration::from_millis(100)).await;
    let dir = Dir::new();
    let config = dir.write(
        false,
        &[tenant("alice", &plugin_path(), &sim.base_url(), "")],
    );
    // The same tenant without a [server] table.
    let text = std::fs::read_to_string(&config).unwrap();
    let without_server = text[text.find("[tenant.").unwrap()..].to_string();
    std::fs::write(&config, without_server).unwrap();
    let t = Tenants::start(&config).await;
    let http = reqwest::Client::new();
    let reload = http
        .post(format!("{}/admin/reload", t.base))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(reload.status().as_u16(), 404);
    let metrics = http
        .get(format!("{}/metrics", t.base))
        .bearer_auth(METRICS)
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status().as_u16(), 404);
    t.server.stop().await;
}
