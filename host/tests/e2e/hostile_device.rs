//! A hostile device API: once a device has been sent a command, its sensors
//! answer with a 10 MiB body, a body that never ends, a body that trickles
//! for longer than the exchange's deadline, or garbage. Each is a sensor
//! outage, never a verdict: the task stays `working` and fails at its TTL,
//! and the runner keeps serving throughout.
//!
//! The hostile API is a small proxy in front of the real simulator, so a
//! command is really sent and the sensors are what turns hostile.

use crate::common::*;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use device_sim::{DeviceSpec, SimConfig};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How each hostile device's sensors answer once it was sent a command.
const HOSTILE: [&str; 4] = ["huge", "endless", "slow", "garbage"];

#[derive(Clone)]
struct Proxy {
    upstream: String,
    http: reqwest::Client,
    commanded: Arc<Mutex<HashSet<String>>>,
}

/// The device and the endpoint (`sensors`, `control`) of a device path.
fn device_endpoint(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/api/v1/devices/")?;
    rest.split_once('/')
}

async fn forward(State(proxy): State<Proxy>, method: Method, uri: Uri, body: Bytes) -> Response {
    let endpoint = device_endpoint(uri.path());
    if let Some((device, "sensors")) = endpoint
        && proxy.commanded.lock().unwrap().contains(device)
    {
        return hostile(device);
    }
    let answer = proxy
        .http
        .request(method, format!("{}{}", proxy.upstream, uri))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("the simulator answers the proxy");
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap();
    let bytes = answer.bytes().await.unwrap();
    if let Some((device, "control")) = endpoint
        && HOSTILE.contains(&device)
    {
        proxy.commanded.lock().unwrap().insert(device.to_string());
    }
    (status, bytes).into_response()
}

/// A sensors answer no device should give.
fn hostile(device: &str) -> Response {
    match device {
        // 10 MiB of otherwise valid JSON.
        "huge" => {
            let mut body = br#"{"online": true, "pad": ""#.to_vec();
            body.resize(body.len() + (10 << 20), b'x');
            body.extend_from_slice(br#""}"#);
            (StatusCode::OK, body).into_response()
        }
        // Whitespace, fast, forever.
        "endless" => {
            let chunks = futures::stream::repeat_with(|| {
                Ok::<_, std::convert::Infallible>(Bytes::from(vec![b' '; 16 << 10]))
            });
            Response::new(Body::from_stream(chunks))
        }
        // Valid JSON, a byte every 200 ms: each gap is short, the whole is
        // far longer than the exchange's deadline.
        "slow" => {
            let text =
                br#"{"online": true, "power": "ON", "mode": "COOL", "target_temperature": 25}"#;
            let bytes = futures::stream::unfold(0usize, move |at| async move {
                if at > 0 {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                text.get(at).map(|b| {
                    (
                        Ok::<_, std::convert::Infallible>(Bytes::from(vec![*b])),
                        at + 1,
                    )
                })
            });
            Response::new(Body::from_stream(bytes))
        }
        _ => (
            StatusCode::OK,
            [("content-type", "application/json")],
            r#"{"online": tru"#,
        )
            .into_response(),
    }
}

#[tokio::test]
async fn a_hostile_device_api_is_a_sensor_outage_until_the_ttl_and_the_runner_stays_healthy() {
    let mut devices: Vec<DeviceSpec> = HOSTILE.iter().map(|id| DeviceSpec::new(*id, *id)).collect();
    devices.push(DeviceSpec::new("calm", "A well-behaved device"));
    let sim = device_sim::spawn(SimConfig {
        devices,
        delay: Duration::from_millis(200),
        ..SimConfig::default()
    })
    .await
    .expect("simulator starts");
    let proxy = Proxy {
        upstream: sim.base_url().trim_end_matches('/').to_string(),
        http: reqwest::Client::new(),
        commanded: Arc::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(
            listener,
            axum::Router::new().fallback(forward).with_state(proxy),
        )
        .await
    });
    const TTL_MS: u64 = 5_000;
    let settings = format!(
        "poll_interval_ms=200,settle_window_ms=30000,ttl_ms={TTL_MS},http_timeout_ms=1000,http_max_body_bytes=1048576"
    );
    let server = serve_http(&[
        "--device-api",
        &api,
        "--plugin-config",
        &settings,
        "--inline-wait-ms",
        "0",
    ])
    .await;
    let client = modern_http_client(&server.url, Declares::default()).await;
    let started = Instant::now();
    let mut tasks = HashMap::new();
    for device in HOSTILE {
        let task = structured(&complete(
            call(
                &client,
                "set_temperature",
                json!({"device_id": device, "temperature": 25}),
            )
            .await,
        ));
        assert_eq!(task["status"], "working", "{device}: {task}");
        tasks.insert(device, task["taskId"].as_str().unwrap().to_string());
    }
    let healthz = server.url.replace("/mcp", "/healthz");
    let ended = eventually("every hostile device's task ends", async || {
        // The runner serves throughout: health, and a calm device's reading.
        assert_eq!(
            reqwest::get(&healthz).await.unwrap().status(),
            200,
            "healthy"
        );
        let calm = structured(&complete(
            call(&client, "get_device_state", json!({"device_id": "calm"})).await,
        ));
        assert_eq!(calm["online"], true, "{calm}");
        let mut ended = HashMap::new();
        for (device, id) in &tasks {
            let task = structured(&complete(
                call(&client, "get_task", json!({"task_id": id})).await,
            ));
            match task["status"].as_str().unwrap() {
                "working" => {}
                "failed" => {
                    ended.insert(*device, task);
                }
                other => panic!("{device}: a hostile answer is no verdict, yet {other}: {task}"),
            }
        }
        if ended.len() == tasks.len() {
            Ok(ended)
        } else {
            Err(format!("ended so far: {:?}", ended.keys()))
        }
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(TTL_MS),
        "the tasks failed at their TTL, not before: {:?}",
        started.elapsed()
    );
    for (device, task) in ended {
        let message = task["statusMessage"].as_str().unwrap_or_default();
        assert!(
            message.contains("TTL"),
            "{device} failed at its TTL: {task}"
        );
    }
    let metrics = metrics_text(&reqwest::Client::new(), &server.url).await;
    assert!(
        !metrics.contains("settle_plugin_faults_total{"),
        "no plugin call was stopped: {metrics}"
    );
    server.stop().await;
}
