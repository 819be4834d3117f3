//! The fault soak's short budget (`make soak` runs the full size): the
//! same code as `host/examples/soak`, with 300 tasks over 10 devices, at
//! least 3 replica kills and 1 Redis restart, and no invariant violated.
//! About 25 s with a release runner (the example, these settings) and 39 s
//! with the debug runner `make test` builds (measured alone).

#[path = "../../examples/soak/chaos.rs"]
mod chaos;
#[path = "../../examples/soak/check.rs"]
mod check;
#[path = "../../examples/soak/cluster.rs"]
mod cluster;
#[path = "../../examples/soak/ledger.rs"]
mod ledger;
#[path = "../../examples/soak/load.rs"]
mod load;
#[path = "../../examples/soak/mcp.rs"]
mod mcp;
#[path = "../../examples/soak/run.rs"]
mod run;

use crate::common::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_keeps_every_invariant_through_kills_restarts_and_faults() {
    let _alone = cpu_heavy().await;
    let work = tempfile::tempdir().unwrap();
    let report = run::soak(run::Options {
        tasks: 300,
        devices: 10,
        kills: 3,
        redis_restarts: 1,
        chaos_every: Duration::from_millis(3_000),
        max_down: Duration::from_millis(1_500),
        delay: Duration::from_millis(200),
        jitter: Duration::from_millis(200),
        ttl_ms: 8_000,
        poll_interval_ms: 250,
        http_timeout_ms: 1_000,
        lease_ms: 3_000,
        margin_ms: 8_000,
        follow_share: 0.6,
        settle: env!("CARGO_BIN_EXE_settle").into(),
        plugin: Some(plugin_path()),
        cache_dir: Some(cache_dir()),
        work_dir: work.path().to_path_buf(),
    })
    .await
    .expect("the soak runs");
    let figures = report.describe();
    println!("{figures}");
    assert_eq!(report.acked, 300, "{figures}");
    assert!(report.kills >= 3 && report.redis_restarts >= 1, "{figures}");
    assert!(report.faults > 0, "{figures}");
    assert!(
        report.passed(),
        "{figures}\nlogs: {}",
        work.keep().display()
    );
}
