//! A fake of Home Assistant's REST API, limited to what settle's driver uses
//! and shaped after Home Assistant's REST documentation
//! (<https://developers.home-assistant.io/docs/api/rest/>):
//!
//! - every request needs `Authorization: Bearer <long-lived token>`;
//!   without it the answer is `401` with the body `401: Unauthorized`;
//! - `GET /api/` answers `{"message": "API running."}`;
//! - `GET /api/states` lists state objects; `GET /api/states/<entity_id>`
//!   answers one, or `404` `{"message": "Entity not found."}`;
//! - `POST /api/services/climate/<service>` with a JSON body runs
//!   `turn_on`, `turn_off`, `set_hvac_mode`, `set_temperature`,
//!   `set_fan_mode`, `set_swing_mode` and `set_swing_horizontal_mode`, and
//!   answers `200` with the list of states it changed. A value the entity
//!   does not list is a `400` with a message, as Home Assistant's service
//!   validation gives. The documentation does not say what a call naming a
//!   missing entity gets; this fake answers `400` with a message.
//!
//! A state object is `{entity_id, state, attributes, last_changed,
//! last_updated, context}`; a climate entity's state is its HVAC mode
//! (`off`, `cool`, …) or `unavailable`, and its attributes hold the lists it
//! accepts (`hvac_modes`, `fan_modes`, `swing_modes`,
//! `swing_horizontal_modes`, `min_temp`, `max_temp`, `target_temp_step`)
//! and what it reports (`temperature`, `current_temperature`, `fan_mode`,
//! `swing_mode`, `swing_horizontal_mode`).
//!
//! What a test controls: a delay before a service call shows in the state
//! (the real entity lags the device), entities that accept calls and never
//! change, and entities that do not report some attribute.

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// One climate entity.
#[derive(Clone, Debug)]
pub struct Entity {
    /// `off`, an HVAC mode, or `unavailable`.
    pub state: String,
    /// Home Assistant's attributes, as JSON.
    pub attributes: Map<String, Value>,
    /// Accept service calls but never change (a unit that ignores them).
    pub ignores_calls: bool,
    /// The last mode other than `off`, which `turn_on` returns to.
    pub last_on_mode: String,
    last_changed: SystemTime,
}

impl Entity {
    /// A typical split unit: every list and attribute present.
    pub fn split_unit(name: &str) -> Entity {
        let attributes = json!({
            "hvac_modes": ["off", "cool", "heat", "dry", "fan_only", "auto"],
            "min_temp": 16.0, "max_temp": 30.0, "target_temp_step": 0.5,
            "fan_modes": ["auto", "low", "medium", "high"],
            "swing_modes": ["off", "vertical", "horizontal", "both"],
            "swing_horizontal_modes": ["off", "on"],
            "current_temperature": 26.5, "temperature": 24.0,
            "fan_mode": "auto", "swing_mode": "off", "swing_horizontal_mode": "off",
            "friendly_name": name, "supported_features": 937,
        });
        Entity {
            state: "cool".into(),
            attributes: attributes.as_object().cloned().unwrap_or_default(),
            ignores_calls: false,
            last_on_mode: "cool".into(),
            last_changed: SystemTime::now(),
        }
    }

    fn to_json(&self, entity_id: &str) -> Value {
        let stamp = humantime::format_rfc3339_micros(self.last_changed).to_string();
        json!({
            "entity_id": entity_id,
            "state": self.state,
            "attributes": self.attributes,
            "last_changed": stamp,
            "last_updated": stamp,
            "context": {"id": "01J0000000000000000000000", "parent_id": null, "user_id": null},
        })
    }

    /// The list attribute `list` names, as strings.
    fn listed(&self, list: &str) -> Vec<String> {
        self.attributes
            .get(list)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The fake's state, shared with the test that runs it.
#[derive(Clone)]
pub struct Fake {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    token: String,
    entities: BTreeMap<String, Entity>,
    delay: Duration,
    /// Service calls received, for assertions: (service, body).
    calls: Vec<(String, Value)>,
}

impl Fake {
    /// Two climate entities (`climate.living_room`, a full split unit, and
    /// `climate.bedroom`, which lists swing modes but does not report the
    /// current one) and a sensor, behind `token`; changes show after `delay`.
    pub fn new(token: &str, delay: Duration) -> Fake {
        let mut entities = BTreeMap::new();
        entities.insert(
            "climate.living_room".into(),
            Entity::split_unit("Living room"),
        );
        let mut bedroom = Entity::split_unit("Bedroom");
        bedroom.attributes.remove("swing_mode");
        bedroom.attributes.remove("swing_horizontal_modes");
        bedroom.attributes.remove("swing_horizontal_mode");
        entities.insert("climate.bedroom".into(), bedroom);
        Fake {
            inner: Arc::new(Mutex::new(Inner {
                token: token.to_string(),
                entities,
                delay,
                calls: Vec::new(),
            })),
        }
    }

    /// Changes one entity (to make it ignore calls, drop an attribute, …).
    pub fn edit(&self, entity_id: &str, change: impl FnOnce(&mut Entity)) {
        let mut inner = self.inner.lock().unwrap();
        change(inner.entities.get_mut(entity_id).expect("a known entity"));
    }

    /// One entity as it stands.
    pub fn entity(&self, entity_id: &str) -> Option<Entity> {
        self.inner.lock().unwrap().entities.get(entity_id).cloned()
    }

    /// Every service call received so far: (service, body).
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.inner.lock().unwrap().calls.clone()
    }

    /// The routes under `/api`.
    pub fn router(&self) -> Router {
        Router::new()
            .route(
                "/api/",
                axum::routing::get(|| async { axum::Json(json!({"message": "API running."})) }),
            )
            .route("/api/states", axum::routing::get(list_states))
            .route("/api/states/{entity_id}", axum::routing::get(get_state))
            .route(
                "/api/services/climate/{service}",
                axum::routing::post(call_service),
            )
            .layer(middleware::from_fn_with_state(self.clone(), require_token))
            .with_state(self.clone())
    }
}

async fn require_token(State(fake): State<Fake>, request: Request, next: Next) -> Response {
    let expected = format!("Bearer {}", fake.inner.lock().unwrap().token);
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if given != Some(expected.as_str()) {
        return (StatusCode::UNAUTHORIZED, "401: Unauthorized").into_response();
    }
    next.run(request).await
}

async fn list_states(State(fake): State<Fake>) -> Response {
    let inner = fake.inner.lock().unwrap();
    let mut states: Vec<Value> = inner.entities.iter().map(|(id, e)| e.to_json(id)).collect();
    // Not every entity is a climate entity.
    states.push(json!({
        "entity_id": "sensor.outdoor_temperature", "state": "11.2",
        "attributes": {"unit_of_measurement": "°C", "friendly_name": "Outdoor"},
        "last_changed": "2026-11-29T10:00:00+00:00", "last_updated": "2026-11-29T10:00:00+00:00",
        "context": {"id": "01J0000000000000000000001", "parent_id": null, "user_id": null},
    }));
    axum::Json(Value::Array(states)).into_response()
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"message": "Entity not found."})),
    )
        .into_response()
}

fn bad_request(message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"message": message})),
    )
        .into_response()
}

async fn get_state(State(fake): State<Fake>, Path(entity_id): Path<String>) -> Response {
    match fake.inner.lock().unwrap().entities.get(&entity_id) {
        Some(entity) => axum::Json(entity.to_json(&entity_id)).into_response(),
        None => not_found(),
    }
}

/// A change a service call makes to an entity, applied when it "reaches
/// the device".
type Change = Box<dyn FnOnce(&mut Entity) + Send>;

/// Checks a service call against the entity and returns the change it makes.
fn plan(service: &str, body: &Value, entity: &Entity) -> Result<Change, String> {
    let text = |key: &str| {
        body.get(key)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("required key not provided @ data['{key}']"))
    };
    let listed = |list: &str, key: &str, value: &str| {
        if entity.listed(list).iter().any(|v| v == value) {
            Ok(())
        } else {
            Err(format!(
                "{key} {value} is not valid. Valid {list} are: {}",
                entity.listed(list).join(", ")
            ))
        }
    };
    match service {
        "turn_on" => Ok(Box::new(|e: &mut Entity| e.state = e.last_on_mode.clone())),
        "turn_off" => Ok(Box::new(|e: &mut Entity| e.state = "off".into())),
        "set_hvac_mode" => {
            let mode = text("hvac_mode")?;
            listed("hvac_modes", "hvac_mode", &mode)?;
            Ok(Box::new(move |e: &mut Entity| {
                if mode != "off" {
                    e.last_on_mode = mode.clone();
                }
                e.state = mode;
            }))
        }
        "set_temperature" => {
            let t = body
                .get("temperature")
                .and_then(Value::as_f64)
                .ok_or("required key not provided @ data['temperature']")?;
            let bound = |k: &str| entity.attributes.get(k).and_then(Value::as_f64);
            let (min, max) = (
                bound("min_temp").unwrap_or(7.0),
                bound("max_temp").unwrap_or(35.0),
            );
            if !(min..=max).contains(&t) {
                return Err(format!(
                    "Provided temperature {t} is not valid. Accepted range is {min} to {max}"
                ));
            }
            Ok(Box::new(move |e: &mut Entity| {
                e.attributes.insert("temperature".into(), json!(t));
            }))
        }
        "set_fan_mode" | "set_swing_mode" | "set_swing_horizontal_mode" => {
            let (key, list) = match service {
                "set_fan_mode" => ("fan_mode", "fan_modes"),
                "set_swing_mode" => ("swing_mode", "swing_modes"),
                _ => ("swing_horizontal_mode", "swing_horizontal_modes"),
            };
            let value = text(key)?;
            listed(list, key, &value)?;
            let reported = entity.attributes.contains_key(key);
            Ok(Box::new(move |e: &mut Entity| {
                // An entity that does not report the attribute keeps not
                // reporting it.
                if reported {
                    e.attributes.insert(key.into(), json!(value));
                }
            }))
        }
        other => Err(format!("Action climate.{other} not found.")),
    }
}

async fn call_service(
    State(fake): State<Fake>,
    Path(service): Path<String>,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    let Some(entity_id) = body
        .get("entity_id")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return bad_request("required key not provided @ data['entity_id']".into());
    };
    let (change, delay) = {
        let mut inner = fake.inner.lock().unwrap();
        inner.calls.push((service.clone(), body.clone()));
        let Some(entity) = inner.entities.get(&entity_id) else {
            return bad_request(format!(
                "Referenced entities {entity_id} are missing or not currently available"
            ));
        };
        match plan(&service, &body, entity) {
            Ok(change) => (change, inner.delay),
            Err(message) => return bad_request(message),
        }
    };
    let apply = {
        let (fake, entity_id) = (fake.clone(), entity_id.clone());
        move || {
            let mut inner = fake.inner.lock().unwrap();
            if let Some(entity) = inner.entities.get_mut(&entity_id)
                && !entity.ignores_calls
            {
                change(entity);
                entity.last_changed = SystemTime::now();
            }
        }
    };
    if delay.is_zero() {
        apply();
    } else {
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            apply();
        });
    }
    // Home Assistant answers with the states that changed during the call;
    // with the change still on its way to the device, that is none.
    axum::Json(json!([])).into_response()
}

/// A fake serving on `127.0.0.1:0` in the background.
pub struct RunningFake {
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// Its state.
    pub fake: Fake,
    _server: tokio::task::JoinHandle<()>,
}

/// Starts a fake with `token` and `delay` on a free loopback port.
pub async fn spawn(token: &str, delay: Duration) -> anyhow::Result<RunningFake> {
    let fake = Fake::new(token, delay);
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
