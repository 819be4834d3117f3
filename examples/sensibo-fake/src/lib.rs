//! A fake of the Sensibo cloud API (v2), limited to what settle's
//! `profiles/sensibo.json` uses, shaped after Sensibo's public API
//! documentation (<https://sensibo.github.io/>):
//!
//! - every request carries the API key as the `apiKey` query parameter; a
//!   wrong or missing key gets `403` `{"status": "error", "reason": ...}`;
//! - `GET /api/v2/users/me/pods?fields=id,room` lists the pods (devices);
//! - `GET /api/v2/pods/{id}?fields=...` answers `{"status": "success",
//!   "result": {acState, measurements, connectionStatus,
//!   remoteCapabilities}}`;
//! - `POST /api/v2/pods/{id}/acStates` takes `{"acState": {...}}`, the
//!   whole state (Sensibo replaces it), and answers with the new state's
//!   record; an unknown mode is a `400`.
//!
//! What a test controls: the delay before a new state shows in reads, a pod
//! that ignores commands, and a pod that is offline.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One pod (an air conditioner behind a Sensibo unit).
#[derive(Clone, Debug)]
pub struct Pod {
    pub room: String,
    /// `on`, `mode`, `targetTemperature`, `temperatureUnit`, `fanLevel`,
    /// `swing`.
    pub ac_state: Value,
    pub alive: bool,
    pub ignores_commands: bool,
    /// The modes its remote has, with what each allows.
    pub modes: Value,
}

/// The fake's state, shared with the test that runs it.
#[derive(Clone)]
pub struct Fake {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    api_key: String,
    pods: BTreeMap<String, Pod>,
    delay: Duration,
    /// Every acState posted, by pod.
    posted: Vec<(String, Value)>,
}

impl Fake {
    /// Two pods, `Ab12Cd34` (living room, cooling at 24 °C) and `Ef56Gh78`
    /// (bedroom, off, whose remote has no heat mode).
    pub fn new(api_key: &str, delay: Duration) -> Fake {
        let state = |on: bool, mode: &str| {
            json!({"on": on, "mode": mode, "targetTemperature": 24, "temperatureUnit": "C",
                   "fanLevel": "auto", "swing": "stopped"})
        };
        let modes = |list: &[&str]| {
            let mut map = serde_json::Map::new();
            for m in list {
                map.insert(
                    m.to_string(),
                    json!({"temperatures": {"C": {"values": (16..=30).collect::<Vec<_>>()}},
                           "fanLevels": ["low", "medium", "high", "auto"],
                           "swing": ["stopped", "rangeFull"]}),
                );
            }
            Value::Object(map)
        };
        let mut pods = BTreeMap::new();
        pods.insert(
            "Ab12Cd34".to_string(),
            Pod {
                room: "Living room".into(),
                ac_state: state(true, "cool"),
                alive: true,
                ignores_commands: false,
                modes: modes(&["cool", "heat", "fan", "dry", "auto"]),
            },
        );
        pods.insert(
            "Ef56Gh78".to_string(),
            Pod {
                room: "Bedroom".into(),
                ac_state: state(false, "cool"),
                alive: true,
                ignores_commands: false,
                modes: modes(&["cool", "fan", "dry"]),
            },
        );
        Fake {
            inner: Arc::new(Mutex::new(Inner {
                api_key: api_key.to_string(),
                pods,
                delay,
                posted: Vec::new(),
            })),
        }
    }

    /// Changes one pod.
    pub fn edit(&self, id: &str, change: impl FnOnce(&mut Pod)) {
        change(
            self.inner
                .lock()
                .unwrap()
                .pods
                .get_mut(id)
                .expect("a known pod"),
        );
    }

    /// Every acState posted so far: (pod, acState).
    pub fn posted(&self) -> Vec<(String, Value)> {
        self.inner.lock().unwrap().posted.clone()
    }

    /// The routes.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/api/v2/users/me/pods", axum::routing::get(list_pods))
            .route("/api/v2/pods/{id}", axum::routing::get(get_pod))
            .route(
                "/api/v2/pods/{id}/acStates",
                axum::routing::post(post_state),
            )
            .with_state(self.clone())
    }

    /// The refusal a request without the right `apiKey` gets, if it gets one.
    fn refusal(&self, query: &HashMap<String, String>) -> Option<Response> {
        if query.get("apiKey") == Some(&self.inner.lock().unwrap().api_key) {
            return None;
        }
        Some(
            (
                StatusCode::FORBIDDEN,
                axum::Json(json!({"status": "error", "reason": "Invalid api key"})),
            )
                .into_response(),
        )
    }
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"status": "error", "reason": "Pod not found"})),
    )
        .into_response()
}

async fn list_pods(State(fake): State<Fake>, Query(q): Query<HashMap<String, String>>) -> Response {
    if let Some(refusal) = fake.refusal(&q) {
        return refusal;
    }
    let inner = fake.inner.lock().unwrap();
    let pods: Vec<Value> = inner
        .pods
        .iter()
        .map(|(id, pod)| json!({"id": id, "room": {"name": pod.room, "icon": "lounge"}}))
        .collect();
    axum::Json(json!({"status": "success", "result": pods})).into_response()
}

async fn get_pod(
    State(fake): State<Fake>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(refusal) = fake.refusal(&q) {
        return refusal;
    }
    let inner = fake.inner.lock().unwrap();
    let Some(pod) = inner.pods.get(&id) else {
        return not_found();
    };
    axum::Json(json!({"status": "success", "result": {
        "id": id,
        "acState": pod.ac_state,
        "measurements": {"temperature": 25.8, "humidity": 48,
                         "time": {"time": "2026-11-29T10:00:00.000000Z", "secondsAgo": 12}},
        "connectionStatus": {"isAlive": pod.alive, "lastSeen": {"secondsAgo": 12}},
        "remoteCapabilities": {"modes": pod.modes},
    }}))
    .into_response()
}

async fn post_state(
    State(fake): State<Fake>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    if let Some(refusal) = fake.refusal(&q) {
        return refusal;
    }
    let new_state = body["acState"].clone();
    let delay = {
        let mut inner = fake.inner.lock().unwrap();
        let Some(pod) = inner.pods.get(&id) else {
            return not_found();
        };
        // Sensibo replaces the whole state, so it wants all of it.
        for key in ["on", "mode", "targetTemperature", "fanLevel"] {
            if new_state.get(key).is_none() {
                return (
                    StatusCode::BAD_REQUEST,
                    axum::Json(
                        json!({"status": "error", "reason": format!("acState.{key} is missing")}),
                    ),
                )
                    .into_response();
            }
        }
        let mode = new_state["mode"].as_str().unwrap_or_default();
        if pod.modes.get(mode).is_none() {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(
                    json!({"status": "error", "reason": format!("Unsupported mode {mode}")}),
                ),
            )
                .into_response();
        }
        inner.posted.push((id.clone(), new_state.clone()));
        inner.delay
    };
    let apply = {
        let (fake, id, state) = (fake.clone(), id.clone(), new_state.clone());
        move || {
            let mut inner = fake.inner.lock().unwrap();
            if let Some(pod) = inner.pods.get_mut(&id)
                && !pod.ignores_commands
            {
                pod.ac_state = state;
            }
        }
    };
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        apply();
    });
    axum::Json(json!({"status": "success", "result": {
        "id": "x1", "status": "Success", "reason": "UserRequest", "acState": new_state,
        "changedProperties": []}}))
    .into_response()
}

/// A fake serving on `127.0.0.1:0` in the background.
pub struct RunningFake {
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    pub fake: Fake,
    _server: tokio::task::JoinHandle<()>,
}

/// Starts a fake with `api_key` and `delay` on a free loopback port.
pub async fn spawn(api_key: &str, delay: Duration) -> anyhow::Result<RunningFake> {
    let fake = Fake::new(api_key, delay);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let base_url = format!("http://{}", listener.local_addr()?);
    let router = fake.router();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok(RunningFake {
        base_url,
        fake,
        _server: server,
    })
}
