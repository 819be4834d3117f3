//! The seeds: real inputs of each kind, as settle meets them.

use serde_json::json;

fn lines(items: &[serde_json::Value]) -> Vec<Vec<u8>> {
    items.iter().map(|v| v.to_string().into_bytes()).collect()
}

/// JSON-RPC messages a client sends (both eras).
pub fn jsonrpc() -> Vec<Vec<u8>> {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    lines(&[
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta}}),
        json!({"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {"name": "set_temperature", "arguments": {"device_id": "ac-living", "temperature": 24}, "_meta": meta}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "subscriptions/listen", "params": {"notifications": {"taskIds": ["x"]}, "_meta": meta}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/get", "params": {"taskId": "0123456789abcdef0123456789abcdef"}}),
        json!({"jsonrpc": "2.0", "id": 5, "result": {}}),
        json!([{"jsonrpc": "2.0", "id": 6, "method": "ping"}]),
        json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32600, "message": "x"}}),
    ])
}

/// The example tenants file, its plugin path made `p.wasm` (a file the
/// target creates next to it).
pub fn tenants() -> Vec<Vec<u8>> {
    let example = include_str!("../../examples/settle.toml").replace(
        "../target/wasm32-wasip2/release/settle_devices.wasm",
        "p.wasm",
    );
    let small = "[tenant.a]\nplugin = \"p.wasm\"\ntoken_env = \"T\"\nallow_outbound = [\"http://127.0.0.1:8081\"]\n[tenant.a.plugin_config]\nttl_ms = 1000\n";
    let server = "[server]\nmax_connections = 10\nheader_read_timeout_ms = 5\n[tenant.b]\nplugin = \"p.wasm\"\ntoken_file = \"p.wasm\"\ndevice_api = \"http://h:1/x\"\ndriver = \"sim\"\n";
    vec![
        example.into_bytes(),
        small.as_bytes().to_vec(),
        server.as_bytes().to_vec(),
    ]
}

/// The device profiles settle ships.
pub fn profiles() -> Vec<Vec<u8>> {
    vec![
        include_bytes!("../../profiles/sim.json").to_vec(),
        include_bytes!("../../profiles/sensibo.json").to_vec(),
    ]
}

/// What device APIs answer: a status (the first two bytes, big-endian)
/// and a body.
pub fn answers() -> Vec<Vec<u8>> {
    let bodies = [
        json!({"id": "ac-living", "online": true, "power": "ON", "mode": "COOL", "target_temperature": 24.0, "fan_speed": "AUTO", "vane_vertical": "AUTO", "vane_horizontal": "AUTO", "room_temperature": 26.1, "updated_at": "2026-12-01T10:00:00Z"}),
        json!({"devices": [{"id": "ac-living", "name": "Living room", "kind": "air_conditioner"}, {"id": "ac-bedroom", "name": "Bedroom", "kind": "air_conditioner"}]}),
        json!({"entity_id": "climate.living", "state": "cool", "attributes": {
            "hvac_modes": ["off", "cool", "heat", "dry", "fan_only", "auto"],
            "min_temp": 16.0, "max_temp": 30.0, "target_temp_step": 0.5,
            "fan_modes": ["auto", "low", "medium", "high"],
            "swing_modes": ["off", "vertical", "horizontal", "both"],
            "current_temperature": 26.5, "temperature": 24.0, "fan_mode": "auto", "swing_mode": "off",
            "friendly_name": "Living", "supported_features": 937}, "last_updated": "2026-12-01T10:00:00+00:00"}),
        json!({"status": "success", "result": [{"id": "abc", "room": {"name": "Living"}, "acState": {"on": true, "mode": "cool", "targetTemperature": 24, "fanLevel": "auto"}, "measurements": {"temperature": 26.1}, "connectionStatus": {"isAlive": true}}]}),
        json!({"error": "device is busy"}),
    ];
    let mut seeds = Vec::new();
    for (status, body) in [
        (200u16, 0),
        (200, 1),
        (200, 2),
        (200, 3),
        (409, 4),
        (503, 4),
        (404, 4),
    ] {
        let mut seed = status.to_be_bytes().to_vec();
        seed.extend_from_slice(bodies[body].to_string().as_bytes());
        seeds.push(seed);
    }
    seeds
}

/// Tool calls: the tool's index (the first byte) and its arguments.
pub fn tool_calls() -> Vec<Vec<u8>> {
    let calls = [
        (0u8, json!({})),
        (1, json!({"device_id": "ac-living"})),
        (
            2,
            json!({"device_id": "ac-living", "power": "on", "mode": "cool"}),
        ),
        (3, json!({"device_id": "ac-living", "temperature": 24.5})),
        (
            4,
            json!({"device_id": "ac-bedroom", "speed": "low", "vane_vertical": "down"}),
        ),
        (5, json!({"task_id": "0123456789abcdef0123456789abcdef"})),
        (6, json!({"task_id": "0123456789abcdef0123456789abcdef"})),
        (
            3,
            json!({"device_id": "ac-living", "temperature": 31, "confirm": true}),
        ),
    ];
    calls
        .iter()
        .map(|(tool, args)| {
            let mut seed = vec![*tool];
            seed.extend_from_slice(args.to_string().as_bytes());
            seed
        })
        .collect()
}
