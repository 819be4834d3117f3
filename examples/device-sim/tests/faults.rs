//! Faults over real HTTP: each kind, several at once, set from parsed start-up flags and at
//! run time through `/_sim`, and cleared again.

mod common;

use std::time::Duration;

use clap::Parser;
use common::{Client, eventually, start};
use device_sim::cli::Args;
use serde_json::{Value, json};
use tokio::time::Instant;

/// Waits until device `id` has no pending commands (each was applied or dropped).
async fn drained(c: &Client, id: &str) {
    eventually("pending commands to be due", || async {
        c.inspect(id).await["pending"]
            .as_array()
            .unwrap()
            .is_empty()
            .then_some(())
    })
    .await;
}

/// Sends a target temperature and returns the value the sensors settle on.
async fn applied_target(c: &Client, id: &str, t: f64) -> Value {
    let r = c.control(id, json!({"target_temperature": t})).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.body["echo"]["target_temperature"], t,
        "the echo shows what was sent"
    );
    drained(c, id).await;
    c.reading(id).await["target_temperature"].clone()
}

#[tokio::test]
async fn offline_accepts_commands_applies_nothing_and_reports_offline() {
    let sim = start(50).await;
    let c = Client::new(&sim);
    let r = c.set_fault("ac-living", json!({"kind":"offline"})).await;
    assert_eq!(r.body, json!({"faults":[{"kind":"offline"}]}));

    let r = c.control("ac-living", json!({"power":"OFF"})).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body["result"], "accepted",
        "an offline device's API still accepts"
    );
    let reading = c.reading("ac-living").await;
    assert_eq!(reading["online"], false);
    assert_eq!(reading["power"], "On");
    assert_eq!(c.inspect("ac-living").await["pending"], json!([]));
    assert_eq!(
        c.reading("ac-bedroom").await["online"],
        true,
        "only that device"
    );

    assert_eq!(
        c.delete("/_sim/devices/ac-living/faults").await.body,
        json!({"faults":[]})
    );
    let reading = c.reading("ac-living").await;
    assert_eq!(reading["online"], true);
    assert_eq!(
        reading["power"], "On",
        "commands sent while offline stay lost"
    );
}

#[tokio::test]
async fn commands_pending_when_a_device_goes_offline_are_lost() {
    let sim = start(1000).await;
    let c = Client::new(&sim);
    c.control("ac-living", json!({"mode":"HEAT"})).await;
    c.set_fault("ac-living", json!({"kind":"offline"})).await;
    let view = c.inspect("ac-living").await;
    assert_eq!(
        view["pending"].as_array().unwrap().len(),
        1,
        "the command must still be pending when the device goes offline: {view}"
    );
    drained(&c, "ac-living").await;
    c.delete("/_sim/devices/ac-living/faults/offline").await;
    assert_eq!(c.reading("ac-living").await["mode"], "Cool");
}

#[tokio::test]
async fn offline_freezes_the_reported_values() {
    let sim = start(0).await;
    let c = Client::new(&sim);
    c.control("ac-living", json!({"target_temperature":16.0}))
        .await;
    drained(&c, "ac-living").await;
    c.set_fault("ac-living", json!({"kind":"offline"})).await;
    let frozen = c.inspect("ac-living").await;
    let first = c.reading("ac-living").await;
    // Until the online bedroom reports a later second than the frozen reading, and its
    // (unrounded) room temperature has moved on, enough time has passed to see a change.
    let bedroom_room = c.inspect("ac-bedroom").await["state"]["room_temperature"].clone();
    eventually("the online device's clock and room to move on", || async {
        let bedroom = c.reading("ac-bedroom").await;
        let moved = c.inspect("ac-bedroom").await["state"]["room_temperature"] != bedroom_room;
        (moved && bedroom["updated_at"] != first["updated_at"]).then_some(())
    })
    .await;
    assert_eq!(c.reading("ac-living").await, first);
    assert_eq!(
        c.inspect("ac-living").await["state"]["room_temperature"],
        frozen["state"]["room_temperature"],
        "the room temperature does not drift while offline"
    );
}

#[tokio::test]
async fn ignore_accepts_commands_and_drops_them_while_online() {
    let sim = start(0).await;
    let c = Client::new(&sim);
    c.set_fault("ac-bedroom", json!({"kind":"ignore"})).await;
    let r = c.control("ac-bedroom", json!({"power":"OFF"})).await;
    assert_eq!(r.status, 200);
    assert_eq!(c.inspect("ac-bedroom").await["pending"], json!([]));
    let reading = c.reading("ac-bedroom").await;
    assert_eq!(reading["online"], true);
    assert_eq!(reading["power"], "On");

    c.delete("/_sim/devices/ac-bedroom/faults/ignore").await;
    c.control("ac-bedroom", json!({"power":"OFF"})).await;
    eventually("commands to work again", || async {
        (c.reading("ac-bedroom").await["power"] == "Off").then_some(())
    })
    .await;
}

#[tokio::test]
async fn clamp_limits_the_applied_temperature_to_min_and_max() {
    let sim = start(20).await;
    let c = Client::new(&sim);
    c.set_fault("ac-living", json!({"kind":"clamp","min":20.0,"max":25.0}))
        .await;
    assert_eq!(applied_target(&c, "ac-living", 30.0).await, 25.0);
    assert_eq!(applied_target(&c, "ac-living", 16.0).await, 20.0);
    assert_eq!(applied_target(&c, "ac-living", 22.5).await, 22.5);
}

#[tokio::test]
async fn clamp_defaults_to_18_to_28() {
    let sim = start(20).await;
    let c = Client::new(&sim);
    let r = c.set_fault("ac-living", json!({"kind":"clamp"})).await;
    assert_eq!(
        r.body,
        json!({"faults":[{"kind":"clamp","min":18.0,"max":28.0,"round":false}]})
    );
    assert_eq!(applied_target(&c, "ac-living", 29.5).await, 28.0);
}

#[tokio::test]
async fn clamp_with_round_applies_whole_degrees_and_leaves_other_fields_alone() {
    let sim = start(20).await;
    let c = Client::new(&sim);
    c.set_fault("ac-living", json!({"kind":"clamp","round":true}))
        .await;
    assert_eq!(applied_target(&c, "ac-living", 22.5).await, 23.0);
    c.control(
        "ac-living",
        json!({"mode":"HEAT","target_temperature":19.5}),
    )
    .await;
    drained(&c, "ac-living").await;
    let reading = c.reading("ac-living").await;
    assert_eq!(reading["target_temperature"], 20.0);
    assert_eq!(reading["mode"], "Heat");
}

#[tokio::test]
async fn flaky_with_rate_one_fails_every_sensor_read_but_not_control() {
    let sim = start(4000).await;
    let c = Client::new(&sim);
    c.set_fault("ac-living", json!({"kind":"flaky","rate":1.0}))
        .await;
    for _ in 0..3 {
        let r = c.sensors("ac-living").await;
        assert_eq!(r.status, 503);
        assert_eq!(r.body, json!({"error":"sensor temporarily unavailable"}));
    }
    assert_eq!(
        c.control("ac-living", json!({"power":"OFF"})).await.status,
        200
    );
    assert_eq!(
        c.get("/_sim/stats").await.body["devices"]["ac-living"],
        json!({"control":1,"sensor":3}),
        "failed reads are counted"
    );
    c.delete("/_sim/devices/ac-living/faults/flaky").await;
    assert_eq!(c.sensors("ac-living").await.status, 200);
}

#[tokio::test]
async fn flaky_with_rate_zero_never_fails() {
    let sim = start(4000).await;
    let c = Client::new(&sim);
    c.set_fault("ac-living", json!({"kind":"flaky","rate":0}))
        .await;
    for _ in 0..5 {
        assert_eq!(c.sensors("ac-living").await.status, 200);
    }
}

#[tokio::test]
async fn flaky_with_a_hang_waits_before_answering_503() {
    let sim = start(4000).await;
    let c = Client::new(&sim);
    c.set_fault(
        "ac-living",
        json!({"kind":"flaky","rate":1.0,"hang_ms":300}),
    )
    .await;
    let t = Instant::now();
    let r = c.sensors("ac-living").await;
    assert_eq!(r.status, 503);
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn latency_delays_control_and_sensor_responses_of_that_device() {
    let sim = start(4000).await;
    let c = Client::new(&sim);
    c.set_fault("ac-bedroom", json!({"kind":"latency","ms":250}))
        .await;
    let t = Instant::now();
    assert_eq!(c.sensors("ac-bedroom").await.status, 200);
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "sensor: {:?}",
        t.elapsed()
    );
    let t = Instant::now();
    assert_eq!(
        c.control("ac-bedroom", json!({"power":"OFF"})).await.status,
        200
    );
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "control: {:?}",
        t.elapsed()
    );
    let t = Instant::now();
    assert_eq!(
        c.post_raw("/api/v1/devices/ac-bedroom/control", "{}")
            .await
            .status,
        400
    );
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "errors too: {:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn several_faults_can_be_active_at_once_and_cleared_one_by_one() {
    let sim = start(20).await;
    let c = Client::new(&sim);
    c.set_fault("ac-living", json!({"kind":"latency","ms":100}))
        .await;
    let r = c
        .set_fault("ac-living", json!({"kind":"clamp","max":24.0}))
        .await;
    assert_eq!(
        r.body,
        json!({"faults":[
            {"kind":"latency","ms":100},
            {"kind":"clamp","min":18.0,"max":24.0,"round":false},
        ]})
    );
    let t = Instant::now();
    assert_eq!(applied_target(&c, "ac-living", 27.0).await, 24.0);
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "control and sensor both delayed"
    );

    let r = c
        .set_fault("ac-living", json!({"kind":"latency","ms":0}))
        .await;
    assert_eq!(
        r.body["faults"].as_array().unwrap().len(),
        2,
        "same kind replaces"
    );
    let r = c.delete("/_sim/devices/ac-living/faults/clamp").await;
    assert_eq!(r.body, json!({"faults":[{"kind":"latency","ms":0}]}));
    assert_eq!(applied_target(&c, "ac-living", 27.0).await, 27.0);
}

#[tokio::test]
async fn bad_fault_requests_get_a_precise_400() {
    let sim = start(4000).await;
    let c = Client::new(&sim);
    let cases: &[(&str, &str)] = &[
        (
            r#"{"kind":"melt"}"#,
            "unknown fault kind `melt`; expected one of offline, ignore, clamp, flaky, latency",
        ),
        (r#"{}"#, "fault is missing `kind`"),
        (
            r#"{"kind":"flaky","rate":2}"#,
            "flaky rate must be from 0.0 to 1.0, got 2",
        ),
        (r#"{"kind":"flaky"}"#, "fault `flaky` needs `rate`"),
        (
            r#"{"kind":"latency","ms":"slow"}"#,
            "fault `latency` member `ms` must be a whole number of milliseconds",
        ),
        (
            r#"{"kind":"clamp","min":28,"max":18}"#,
            "clamp needs finite min <= max",
        ),
        (
            r#"{"kind":"ignore","rate":1}"#,
            "unknown member `rate` for fault `ignore`",
        ),
        ("{", "body is not valid JSON"),
    ];
    for (body, expected) in cases {
        let r = c.post_raw("/_sim/devices/ac-living/faults", body).await;
        assert_eq!(r.status, 400, "{body}: {r:?}");
        assert!(
            r.error().contains(expected),
            "{body}: {:?} lacks {expected:?}",
            r.error()
        );
    }
    let r = c.delete("/_sim/devices/ac-living/faults/melt").await;
    assert_eq!(r.status, 400);
    assert!(r.error().contains("unknown fault kind `melt`"));
    assert_eq!(c.inspect("ac-living").await["faults"], json!([]));
}

#[tokio::test]
async fn faults_from_start_up_flags_are_active_from_the_first_request() {
    let args = Args::try_parse_from([
        "device-sim",
        "--delay-ms",
        "20",
        "--fault",
        "ac-living=offline",
        "--fault",
        "ac-bedroom=clamp:round",
        "--fault",
        "ac-bedroom=latency:50",
    ])
    .unwrap();
    let sim = device_sim::spawn(args.into_config()).await.unwrap();
    let c = Client::new(&sim);
    assert_eq!(c.reading("ac-living").await["online"], false);
    assert_eq!(
        c.inspect("ac-bedroom").await["faults"],
        json!([
            {"kind":"clamp","min":18.0,"max":28.0,"round":true},
            {"kind":"latency","ms":50},
        ])
    );
    assert_eq!(applied_target(&c, "ac-bedroom", 21.5).await, 22.0);
}

#[tokio::test]
async fn start_up_faults_naming_an_unknown_device_fail_to_start() {
    let args = Args::try_parse_from(["device-sim", "--fault", "ac-garage=offline"]).unwrap();
    let err = device_sim::spawn(args.into_config()).await.unwrap_err();
    assert_eq!(
        format!("{err:#}"),
        "invalid simulator configuration: unknown device `ac-garage`"
    );
}
