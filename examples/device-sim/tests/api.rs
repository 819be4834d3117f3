//! The `/api/v1` contract over real HTTP: listing, control validation, the actuation delay,
//! sensors, the token, hidden fields and request counting.

mod common;

use std::time::Duration;

use common::{Client, eventually, start};
use device_sim::{SensorField, SimConfig};
use serde_json::json;
use tokio::time::Instant;

#[tokio::test]
async fn listing_returns_the_two_default_devices() {
    let sim = start(4000).await;
    let r = Client::new(&sim).get("/api/v1/devices").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body,
        json!({"devices":[
            {"id":"ac-living","name":"Living room","kind":"air_conditioner"},
            {"id":"ac-bedroom","name":"Bedroom","kind":"air_conditioner"},
        ]})
    );
}

#[tokio::test]
async fn sensors_report_the_initial_state_in_sensor_spelling() {
    let sim = start(4000).await;
    let body = Client::new(&sim).reading("ac-living").await;
    let obj = body.as_object().unwrap();
    let mut keys: Vec<_> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "fan_speed",
            "mode",
            "online",
            "power",
            "room_temperature",
            "target_temperature",
            "updated_at",
            "vane_horizontal",
            "vane_vertical",
        ]
    );
    assert_eq!(body["power"], "On");
    assert_eq!(body["mode"], "Cool");
    assert_eq!(body["target_temperature"], 26.0);
    assert!(
        body["target_temperature"].is_f64(),
        "numbers are floats: {body}"
    );
    let room = body["room_temperature"].as_f64().unwrap();
    assert!((26.0..=27.4).contains(&room), "{room}");
    assert_eq!(body["fan_speed"], "Auto");
    assert_eq!(body["vane_vertical"], "Middle");
    assert_eq!(body["vane_horizontal"], "Center");
    assert_eq!(body["online"], true);
    let updated = body["updated_at"].as_str().unwrap();
    assert!(updated.ends_with('Z') && updated.len() == 20, "{updated}");
    humantime::parse_rfc3339(updated).expect("updated_at is RFC 3339");
}

#[tokio::test]
async fn unknown_devices_are_404_on_every_device_endpoint() {
    let sim = start(4000).await;
    let c = Client::new(&sim);
    for r in [
        c.control("ac-garage", json!({"power":"ON"})).await,
        c.sensors("ac-garage").await,
        c.get("/_sim/devices/ac-garage").await,
        c.set_fault("ac-garage", json!({"kind":"offline"})).await,
        c.delete("/_sim/devices/ac-garage/faults").await,
    ] {
        assert_eq!(r.status, 404, "{r:?}");
        assert_eq!(r.error(), "unknown device");
    }
}

#[tokio::test]
async fn a_valid_command_is_accepted_and_echoed_in_control_spelling() {
    let sim = start(4000).await;
    let c = Client::new(&sim);
    let r = c
        .control(
            "ac-living",
            json!({"mode":"HEAT","target_temperature":22,"vane_vertical":"SWING"}),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["result"], "accepted");
    assert_eq!(
        r.body["echo"],
        json!({"mode":"HEAT","target_temperature":22.0,"vane_vertical":"SWING"})
    );
    let first = r.body["request_id"].as_str().unwrap().to_owned();
    let second = c.control("ac-living", json!({"power":"OFF"})).await;
    assert_ne!(
        second.body["request_id"].as_str().unwrap(),
        first,
        "request ids are unique"
    );
}

#[tokio::test]
async fn each_kind_of_invalid_control_body_gets_a_precise_400() {
    let sim = start(4000).await;
    let c = Client::new(&sim);
    let cases: &[(&str, &str)] = &[
        (
            r#"{"mode":"Cool"}"#,
            r#"field `mode` must be one of "COOL", "HEAT", "DRY", "FAN", "AUTO""#,
        ),
        (
            r#"{"power":"on"}"#,
            r#"field `power` must be one of "ON", "OFF""#,
        ),
        (
            r#"{"fan_speed":"TURBO"}"#,
            r#""AUTO", "LOW", "MEDIUM", "HIGH""#,
        ),
        (
            r#"{"vane_vertical":"LEFT"}"#,
            r#""AUTO", "UP", "MIDDLE", "DOWN", "SWING""#,
        ),
        (
            r#"{"vane_horizontal":"UP"}"#,
            r#""AUTO", "LEFT", "CENTER", "RIGHT", "SWING""#,
        ),
        (
            r#"{"room_temperature":22.0}"#,
            "field `room_temperature` is read-only",
        ),
        (
            r#"{"humidity":40}"#,
            "unknown field `humidity`; writable fields are power, mode",
        ),
        (r#"{"power":1}"#, "field `power` must be a string"),
        (
            r#"{"target_temperature":"22"}"#,
            "field `target_temperature` must be a number from 16.0 to 30.0",
        ),
        (
            r#"{"target_temperature":31}"#,
            "must be from 16.0 to 30.0; got 31",
        ),
        (
            r#"{"target_temperature":22.25}"#,
            "must be a multiple of 0.5; got 22.25",
        ),
        ("{}", "body must set at least one writable field"),
        (
            "[]",
            "body must be a JSON object of control fields, got an array",
        ),
        (
            "\"ON\"",
            "body must be a JSON object of control fields, got a string",
        ),
        ("{\"power\":", "body is not valid JSON"),
    ];
    for (body, expected) in cases {
        let r = c.post_raw("/api/v1/devices/ac-living/control", body).await;
        assert_eq!(r.status, 400, "{body}: {r:?}");
        assert!(
            r.error().contains(expected),
            "{body}: {:?} lacks {expected:?}",
            r.error()
        );
    }
    let view = c.inspect("ac-living").await;
    assert_eq!(
        view["pending"],
        json!([]),
        "rejected commands are not queued"
    );
}

#[tokio::test]
async fn an_accepted_command_is_pending_and_invisible_until_its_delay() {
    let sim = start(60_000).await;
    let c = Client::new(&sim);
    let r = c
        .control("ac-living", json!({"target_temperature":21.0,"power":"ON"}))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(c.reading("ac-living").await["target_temperature"], 26.0);
    let view = c.inspect("ac-living").await;
    let pending = view["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["request_id"], r.body["request_id"]);
    assert_eq!(
        pending[0]["command"],
        json!({"power":"ON","target_temperature":21.0})
    );
    assert!(
        pending[0]["apply_in_ms"].as_u64().unwrap() > 50_000,
        "{view}"
    );
}

#[tokio::test]
async fn an_accepted_command_becomes_visible_after_its_delay_and_not_before() {
    let sim = start(200).await;
    let c = Client::new(&sim);
    let sent = Instant::now();
    let r = c
        .control("ac-living", json!({"mode":"DRY","fan_speed":"LOW"}))
        .await;
    assert_eq!(r.status, 200);
    let body = eventually("the command to apply", || async {
        let b = c.reading("ac-living").await;
        (b["mode"] == "Dry").then_some(b)
    })
    .await;
    assert!(
        sent.elapsed() >= Duration::from_millis(200),
        "applied before its delay"
    );
    assert_eq!(
        body["fan_speed"], "Low",
        "fields of one command apply together"
    );
    assert_eq!(c.inspect("ac-living").await["pending"], json!([]));
}

#[tokio::test]
async fn commands_apply_in_acceptance_order() {
    let sim = start(100).await;
    let c = Client::new(&sim);
    for t in [20.0, 21.0, 22.5] {
        assert_eq!(
            c.control("ac-bedroom", json!({"target_temperature": t}))
                .await
                .status,
            200
        );
    }
    eventually("all commands to apply", || async {
        c.inspect("ac-bedroom").await["pending"]
            .as_array()
            .unwrap()
            .is_empty()
            .then_some(())
    })
    .await;
    assert_eq!(c.reading("ac-bedroom").await["target_temperature"], 22.5);
}

#[tokio::test]
async fn the_delay_can_be_changed_at_run_time() {
    let sim = start(60_000).await;
    let c = Client::new(&sim);
    let r = c
        .post("/_sim/devices/ac-living/delay", json!({"delay_ms":0}))
        .await;
    assert_eq!(r.body, json!({"delay_ms":0,"jitter_ms":0}));
    c.control("ac-living", json!({"power":"OFF"})).await;
    eventually("the command to apply", || async {
        (c.reading("ac-living").await["power"] == "Off").then_some(())
    })
    .await;
    assert_eq!(
        c.inspect("ac-bedroom").await["delay_ms"],
        60_000,
        "other devices keep theirs"
    );

    let bad = c
        .post("/_sim/devices/ac-living/delay", json!({"delay_ms":"fast"}))
        .await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.error()
            .contains("`delay_ms` must be a whole number of milliseconds")
    );
    let bad = c
        .post("/_sim/devices/ac-living/delay", json!({"wait":1}))
        .await;
    assert!(bad.error().contains("unknown member `wait`"), "{bad:?}");
}

#[tokio::test]
async fn room_temperature_drifts_toward_the_target_while_cooling() {
    let sim = start(0).await;
    let c = Client::new(&sim);
    c.control("ac-living", json!({"target_temperature":16.0}))
        .await;
    let start = c.reading("ac-living").await["room_temperature"]
        .as_f64()
        .unwrap();
    eventually("the room to cool", || async {
        let now = c.reading("ac-living").await["room_temperature"]
            .as_f64()
            .unwrap();
        (now < start).then_some(())
    })
    .await;
}

#[tokio::test]
async fn with_a_token_api_requests_need_the_bearer_header_but_sim_requests_do_not() {
    let sim = device_sim::spawn(SimConfig {
        token: Some("s3cret".into()),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let anonymous = Client::new(&sim);
    let wrong = Client::new(&sim).with_token("guess");
    let right = Client::new(&sim).with_token("s3cret");
    for c in [&anonymous, &wrong] {
        for r in [
            c.get("/api/v1/devices").await,
            c.sensors("ac-living").await,
            c.control("ac-living", json!({"power":"OFF"})).await,
            c.sensors("ac-garage").await,
        ] {
            assert_eq!(r.status, 401, "{r:?}");
            assert_eq!(r.body, json!({"error":"unauthorized"}));
        }
    }
    assert_eq!(right.get("/api/v1/devices").await.status, 200);
    assert_eq!(right.sensors("ac-living").await.status, 200);
    assert_eq!(anonymous.get("/_sim/stats").await.status, 200);
    assert_eq!(anonymous.inspect("ac-living").await["pending"], json!([]));
    assert_eq!(
        sim.sim().stats().devices["ac-living"].sensor,
        1,
        "unauthorised requests are not counted"
    );
}

#[tokio::test]
async fn stats_count_requests_per_device_and_reset() {
    let sim = start(4000).await;
    let c = Client::new(&sim);
    c.control("ac-living", json!({"power":"OFF"})).await;
    c.control("ac-living", json!({"power":"Off"})).await; // 400, still counted
    c.sensors("ac-living").await;
    c.sensors("ac-bedroom").await;
    c.sensors("ac-bedroom").await;
    c.sensors("ac-garage").await; // unknown, not counted
    c.get("/api/v1/devices").await; // names no device
    let r = c.get("/_sim/stats").await;
    assert_eq!(
        r.body,
        json!({"devices":{
            "ac-living":{"control":2,"sensor":1},
            "ac-bedroom":{"control":0,"sensor":2},
        }})
    );
    assert_eq!(
        c.inspect("ac-bedroom").await["requests"],
        json!({"control":0,"sensor":2})
    );
    assert_eq!(c.delete("/_sim/stats").await.status, 204);
    let r = c.get("/_sim/stats").await;
    assert_eq!(
        r.body["devices"]["ac-living"],
        json!({"control":0,"sensor":0})
    );
    assert_eq!(
        r.body["devices"]["ac-bedroom"],
        json!({"control":0,"sensor":0})
    );
}

#[tokio::test]
async fn hidden_fields_are_omitted_from_that_device_only() {
    let sim = device_sim::spawn(SimConfig {
        hidden_fields: vec![("ac-living".into(), SensorField::VaneHorizontal)],
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let c = Client::new(&sim);
    let living = c.reading("ac-living").await;
    assert!(living.get("vane_horizontal").is_none(), "{living}");
    assert_eq!(living["vane_vertical"], "Middle");
    assert_eq!(c.reading("ac-bedroom").await["vane_horizontal"], "Center");

    let r = c
        .post(
            "/_sim/devices/ac-living/hidden-fields",
            json!({"fields":["room_temperature","fan_speed"]}),
        )
        .await;
    assert_eq!(r.body, json!({"fields":["fan_speed","room_temperature"]}));
    let living = c.reading("ac-living").await;
    assert!(living.get("room_temperature").is_none() && living.get("fan_speed").is_none());
    assert_eq!(
        living["vane_horizontal"], "Center",
        "the set is replaced, not extended"
    );

    let bad = c
        .post(
            "/_sim/devices/ac-living/hidden-fields",
            json!({"fields":["online"]}),
        )
        .await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.error()
            .contains("unknown sensor field `online`; expected one of power")
    );
    let bad = c
        .post("/_sim/devices/ac-living/hidden-fields", json!(["mode"]))
        .await;
    assert!(bad.error().contains("must be a JSON object"), "{bad:?}");
}

#[tokio::test]
async fn ten_thousand_devices_are_listed_and_counted() {
    let sim = device_sim::spawn(SimConfig {
        devices: device_sim::DeviceSpec::numbered(10_000),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let c = Client::new(&sim);
    let list = c.get("/api/v1/devices").await.body;
    let devices = list["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 10_000);
    assert_eq!(devices[9_999]["id"], "ac-09999");
    assert_eq!(c.reading("ac-09999").await["power"], "On");
    assert_eq!(
        c.get("/_sim/stats").await.body["devices"]
            .as_object()
            .unwrap()
            .len(),
        10_000
    );
}

#[tokio::test]
async fn a_shut_down_simulator_refuses_connections() {
    let sim = start(4000).await;
    let c = Client::new(&sim);
    assert_eq!(c.get("/api/v1/devices").await.status, 200);
    let url = format!("{}/api/v1/devices", sim.base_url());
    sim.shutdown().await.expect("clean shutdown");
    let fresh = reqwest::Client::builder().no_proxy().build().unwrap();
    assert!(fresh.get(url).send().await.is_err());
}

#[tokio::test]
async fn the_side_door_says_when_each_command_took_effect() {
    let sim = start(100).await;
    let c = Client::new(&sim);
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let r = c
        .control("ac-living", json!({"target_temperature": 21.5}))
        .await;
    let settled = eventually("the command to settle", || async {
        let view = c.inspect("ac-living").await;
        let settled = view["settled"].as_array().unwrap().clone();
        (!settled.is_empty()).then_some(settled)
    })
    .await;
    assert_eq!(settled[0]["request_id"], r.body["request_id"]);
    assert_eq!(settled[0]["applied"], true);
    assert_eq!(settled[0]["command"], json!({"target_temperature": 21.5}));
    let at = settled[0]["settled_at_ms"].as_u64().unwrap();
    assert!(
        at >= before + 100,
        "took effect after its delay: {at} vs {before}"
    );
}

#[tokio::test]
async fn a_value_set_by_hand_takes_effect_at_once_and_is_not_a_command() {
    let sim = start(60_000).await;
    let c = Client::new(&sim);
    let r = c
        .post(
            "/_sim/devices/ac-living/state",
            json!({"target_temperature": 19.5}),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["applied"], true);
    assert_eq!(c.reading("ac-living").await["target_temperature"], 19.5);
    let view = c.inspect("ac-living").await;
    assert_eq!(view["settled"], json!([]));
    assert_eq!(view["requests"]["control"], 0);
    let bad = c
        .post(
            "/_sim/devices/ac-living/state",
            json!({"target_temperature": 99}),
        )
        .await;
    assert_eq!(bad.status, 400, "{bad:?}");
}
