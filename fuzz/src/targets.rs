//! What each input is fed to. A target's run may return anything, an error
//! included; only a panic is a crash.

use crate::corpus;
use bytes::BytesMut;
use serde_json::{Value as Json, json};
use settle::config::TenantsFile;
use settle::mcp::{frame, listen};
use settle_devices::app::{Caller, Client, Context};
use settle_devices::driver::profile::{Profile, SIM_PROFILE};
use settle_devices::driver::{
    Accepted, DeviceInfo, Driver, DriverError, Reading, classify_response, homeassistant,
};
use settle_devices::model::{Field, FieldSpec, Value};
use settle_devices::platform::memory::MemoryPlatform;
use settle_devices::settings::Settings;
use tokio_util::codec::{Decoder, LinesCodec};

/// Runs one input.
pub type Run = Box<dyn FnMut(&[u8])>;

/// One fuzz target.
pub struct Target {
    pub name: &'static str,
    /// Its share of the inputs (its inputs are cheaper or dearer).
    pub weight: u64,
    pub corpus: fn() -> Vec<Vec<u8>>,
    /// JSON after this many leading bytes, for value-level mutations.
    pub json: Option<usize>,
    pub setup: fn() -> Run,
}

pub const ALL: [Target; 6] = [
    Target {
        name: "http",
        weight: 30,
        corpus: corpus::jsonrpc,
        json: Some(0),
        setup: http,
    },
    Target {
        name: "stdio",
        weight: 20,
        corpus: corpus::jsonrpc,
        json: Some(0),
        setup: stdio,
    },
    Target {
        name: "tenants",
        weight: 5,
        corpus: corpus::tenants,
        json: None,
        setup: tenants,
    },
    Target {
        name: "profile",
        weight: 10,
        corpus: corpus::profiles,
        json: Some(0),
        setup: profile,
    },
    Target {
        name: "answer",
        weight: 25,
        corpus: corpus::answers,
        json: Some(2),
        setup: answer,
    },
    Target {
        name: "tools",
        weight: 10,
        corpus: corpus::tool_calls,
        json: Some(1),
        setup: tools,
    },
];

/// The check both transports make before rmcp sees a message.
fn check_message(bytes: &[u8]) {
    if let Ok(mut message) = frame::check(bytes) {
        listen::rename_listen(&mut message);
    } else if let Err(rejection) = frame::check(bytes) {
        let _ = rejection.to_json().to_string();
    }
}

fn http() -> Run {
    Box::new(check_message)
}

/// The stdio transport's line framing (4 MiB lines), then each line.
fn stdio() -> Run {
    Box::new(|bytes| {
        let mut codec = LinesCodec::new_with_max_length(settle::mcp::stdio::MAX_LINE_BYTES);
        let mut buffer = BytesMut::from(bytes);
        loop {
            match codec.decode(&mut buffer) {
                Ok(Some(line)) => check_message(line.as_bytes()),
                Ok(None) => break,
                Err(_) => break,
            }
        }
        if let Ok(Some(line)) = codec.decode_eof(&mut buffer) {
            check_message(line.as_bytes());
        }
    })
}

fn tenants() -> Run {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("p.wasm"), b"plugin").unwrap();
    let path = dir.path().join("settle.toml");
    Box::new(move |bytes| {
        let _keep = &dir;
        let text = String::from_utf8_lossy(bytes);
        let env = |name: &str| (name.len() < 40).then(|| format!("{name}-value"));
        if let Ok(file) = TenantsFile::parse(&path, &text, &env) {
            let _ = file.limits.check();
        }
    })
}

fn profile() -> Run {
    let sensors = json!({"online": true, "power": "ON", "mode": "COOL", "target_temperature": 24});
    Box::new(move |bytes| {
        let text = String::from_utf8_lossy(bytes);
        if let Ok(profile) = Profile::parse(&text) {
            let _ = profile.specs(None);
            let _ = profile.specs(Some(&sensors));
            let _ = profile.parse_sensors(&sensors);
        }
    })
}

/// A device API's answer through the drivers' parsing.
fn answer() -> Run {
    let sim = Profile::parse(SIM_PROFILE).expect("the sim profile parses");
    let sensibo = Profile::parse(include_str!("../../profiles/sensibo.json"))
        .expect("the sensibo profile parses");
    Box::new(move |bytes| {
        let status = u16::from_be_bytes([
            bytes.first().copied().unwrap_or(0),
            bytes.get(1).copied().unwrap_or(0),
        ]) % 600;
        let body = bytes.get(2..).unwrap_or_default();
        if let Ok(json) = classify_response(status, body) {
            for profile in [&sim, &sensibo] {
                let _ = profile.parse_sensors(&json);
                let _ = profile.parse_devices(&json);
                let _ = profile.specs(Some(&json));
            }
            let _ = homeassistant::reading_of(&json);
            let _ = homeassistant::specs_of(&json);
        }
    })
}

/// A device API that always answers, from the sim profile.
struct Answering {
    profile: Profile,
    sensors: Json,
}

impl Driver for Answering {
    fn list_devices(&self) -> Result<Vec<DeviceInfo>, DriverError> {
        self.profile.parse_devices(&json!({"devices": [
            {"id": "ac-living", "name": "Living", "kind": "air_conditioner"},
            {"id": "ac-bedroom", "name": "Bedroom", "kind": "air_conditioner"},
        ]}))
    }

    fn read(&self, _device_id: &str) -> Result<Reading, DriverError> {
        self.profile.parse_sensors(&self.sensors)
    }

    fn send(&self, _device_id: &str, command: &[(Field, Value)]) -> Result<Accepted, DriverError> {
        self.profile.control_body(command)?;
        Ok(Accepted { request_id: None })
    }

    fn specs(&self, _device_id: &str) -> Result<Vec<FieldSpec>, DriverError> {
        Ok(self.profile.specs(Some(&self.sensors)))
    }

    fn advertised(&self) -> Result<Vec<FieldSpec>, DriverError> {
        Ok(self.profile.specs(None))
    }
}

/// Tool arguments through the device plugin's tools over the in-memory
/// platform; a fresh platform every so often keeps memory bounded.
fn tools() -> Run {
    const NAMES: [&str; 7] = [
        "list_devices",
        "get_device_state",
        "set_power_mode",
        "set_temperature",
        "set_fan",
        "get_task",
        "cancel_task",
    ];
    let fresh = || MemoryPlatform::new(1_764_547_200_000, &[("device_api", "http://fuzz.invalid")]);
    let mut platform = fresh();
    let mut calls = 0u64;
    Box::new(move |bytes| {
        calls += 1;
        if calls.is_multiple_of(2000) {
            platform = fresh();
        }
        // Past the per-device command limit, so that commands are tried.
        platform.advance(3_000);
        let tool = NAMES[usize::from(bytes.first().copied().unwrap_or(0)) % NAMES.len()];
        let flags = bytes.first().copied().unwrap_or(0) >> 4;
        let arguments: Json = serde_json::from_slice(bytes.get(1..).unwrap_or_default())
            .unwrap_or_else(|_| Json::String(String::from_utf8_lossy(bytes).into_owned()));
        let settings = Settings::from_lookup(|key| {
            Ok((key == "device_api").then(|| "http://fuzz.invalid".to_string()))
        })
        .expect("default settings");
        let driver = Answering {
            profile: Profile::parse(SIM_PROFILE).expect("the sim profile parses"),
            sensors: json!({"online": true, "power": "ON", "mode": "COOL", "target_temperature": 24.0,
                "fan_speed": "AUTO", "vane_vertical": "AUTO", "vane_horizontal": "AUTO", "room_temperature": 26.0}),
        };
        let ctx = Context::with_driver(&platform, settings, Box::new(driver));
        let caller = Caller {
            client: Client {
                tasks: flags & 1 == 1,
                elicitation: flags & 2 == 2,
            },
            input_responses: None,
            request_state: None,
            info: Default::default(),
            arguments: &arguments,
        };
        let _ = settle_devices::tools::call(&ctx, tool, &arguments, &caller);
    })
}
