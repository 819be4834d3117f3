//! What operators can see, per tenant, in the Prometheus text format at
//! `/metrics`: plugin calls and their latency, tasks by outcome, denied
//! outbound requests, plugin faults and plugin swaps, and what the HTTP
//! server's limits did (open and refused connections, header-read
//! timeouts, open and refused listen streams, rate-limited requests),
//! which route each MCP POST took (served directly or through rmcp),
//! whether each call's fresh instance was made ahead of it or for it, and
//! who answered each `tasks/get` (the runner, from an ended task's kept
//! view, or the plugin).
//!
//! Labels are tenant names, call names, outcomes and statuses only: never a
//! token, a URL or anything a device reported.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tenant: String,
    call: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    tenant: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    tenant: String,
    route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InstanceLabels {
    tenant: String,
    made: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AnsweredLabels {
    tenant: String,
    answered_by: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FaultLabels {
    tenant: String,
    kind: String,
}

fn latency_histogram() -> Histogram {
    // 100 µs to about 6.5 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

/// The runner's metrics.
pub struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    latency: Family<TenantLabels, Histogram, fn() -> Histogram>,
    tasks: Family<StatusLabels, Counter>,
    denied: Family<TenantLabels, Counter>,
    faults: Family<FaultLabels, Counter>,
    swaps: Family<StatusLabels, Counter>,
    connections: Gauge,
    connections_refused: Counter,
    header_timeouts: Counter,
    listen_streams: Family<TenantLabels, Gauge>,
    listen_refused: Family<TenantLabels, Counter>,
    rate_limited: Family<TenantLabels, Counter>,
    mcp_requests: Family<RouteLabels, Counter>,
    instances: Family<InstanceLabels, Counter>,
    instances_waiting: Gauge,
    task_reads: Family<AnsweredLabels, Counter>,
    relay_dropped: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("settle");
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "plugin_calls",
            "Plugin calls by tenant, call and outcome",
            calls.clone(),
        );
        let latency = Family::<TenantLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "plugin_call_seconds",
            "Wall time of plugin calls by tenant",
            latency.clone(),
        );
        let tasks = Family::<StatusLabels, Counter>::default();
        registry.register(
            "tasks",
            "Tasks by tenant and status: created, and each way they ended",
            tasks.clone(),
        );
        let denied = Family::<TenantLabels, Counter>::default();
        registry.register(
            "outbound_denied",
            "Outbound requests the tenant's allow-list refused",
            denied.clone(),
        );
        let faults = Family::<FaultLabels, Counter>::default();
        registry.register(
            "plugin_faults",
            "Plugin calls stopped by a deadline, the memory limit or a trap",
            faults.clone(),
        );
        let swaps = Family::<StatusLabels, Counter>::default();
        registry.register(
            "plugin_swaps",
            "Plugin swaps by tenant and result (loaded, refused)",
            swaps.clone(),
        );
        let instances_waiting = Gauge::default();
        registry.register(
            "plugin_instances_waiting",
            "Plugin instances held in tenants' slots now, across tenants: spares made ahead of a call, and finished instances waiting to be dropped off their call's path",
            instances_waiting.clone(),
        );
        let connections = Gauge::default();
        registry.register(
            "http_connections",
            "HTTP connections open now",
            connections.clone(),
        );
        let connections_refused = Counter::default();
        registry.register(
            "http_connections_refused",
            "HTTP connections answered 503 and closed because --max-connections were open",
            connections_refused.clone(),
        );
        let header_timeouts = Counter::default();
        registry.register(
            "http_header_timeouts",
            "HTTP connections closed because a request's headers (or an idle connection's next request) did not arrive within --header-read-timeout-ms",
            header_timeouts.clone(),
        );
        let relay_dropped = Counter::default();
        registry.register(
            "relay_notices_dropped",
            "Change notices not relayed to the other replicas because the relay's backlog was full (the shared store slow or unreachable)",
            relay_dropped.clone(),
        );
        let listen_streams = Family::<TenantLabels, Gauge>::default();
        registry.register(
            "listen_streams",
            "Open subscriptions/listen streams by tenant",
            listen_streams.clone(),
        );
        let listen_refused = Family::<TenantLabels, Counter>::default();
        registry.register(
            "listen_refused",
            "subscriptions/listen requests refused because the tenant had --max-listen-streams open",
            listen_refused.clone(),
        );
        let rate_limited = Family::<TenantLabels, Counter>::default();
        registry.register(
            "rate_limited",
            "Requests answered 429 because the tenant exceeded --max-requests-per-second",
            rate_limited.clone(),
        );
        let mcp_requests = Family::<RouteLabels, Counter>::default();
        registry.register(
            "mcp_requests",
            "MCP POSTs by tenant and route: direct (a stateless tools/call or tasks/get served without rmcp's per-request service) or rmcp",
            mcp_requests.clone(),
        );
        let instances = Family::<InstanceLabels, Counter>::default();
        registry.register(
            "plugin_instances",
            "Fresh plugin instances calls ran in, by tenant and when each was made: ahead (a spare, made while the tenant's previous call waited) or inline (made for the call)",
            instances.clone(),
        );
        let task_reads = Family::<AnsweredLabels, Counter>::default();
        registry.register(
            "task_reads",
            "tasks/get requests by tenant and who answered: the runner (an ended task's view, kept since it ended) or the plugin",
            task_reads.clone(),
        );
        Metrics {
            registry,
            calls,
            latency,
            tasks,
            denied,
            faults,
            swaps,
            connections,
            connections_refused,
            header_timeouts,
            listen_streams,
            listen_refused,
            rate_limited,
            mcp_requests,
            instances,
            instances_waiting,
            task_reads,
            relay_dropped,
        }
    }
}

impl Metrics {
    /// A plugin call ended; `outcome` is `ok` or a fault kind.
    pub fn call(&self, tenant: &str, call: &str, outcome: &str, took: Duration) {
        self.calls
            .get_or_create(&CallLabels {
                tenant: tenant.to_string(),
                call: call.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
        self.latency
            .get_or_create(&TenantLabels {
                tenant: tenant.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// A plugin call was stopped.
    pub fn fault(&self, tenant: &str, kind: &str) {
        self.faults
            .get_or_create(&FaultLabels {
                tenant: tenant.to_string(),
                kind: kind.to_string(),
            })
            .inc();
    }

    /// A task was created, or ended with `status`.
    pub fn task(&self, tenant: &str, status: &str) {
        self.tasks
            .get_or_create(&StatusLabels {
                tenant: tenant.to_string(),
                status: status.to_string(),
            })
            .inc();
    }

    /// An outbound request was refused.
    pub fn denied(&self, tenant: &str) {
        self.denied
            .get_or_create(&TenantLabels {
                tenant: tenant.to_string(),
            })
            .inc();
    }

    /// A plugin swap was tried; `result` is `loaded` or `refused`.
    pub fn swap(&self, tenant: &str, result: &str) {
        self.swaps
            .get_or_create(&StatusLabels {
                tenant: tenant.to_string(),
                status: result.to_string(),
            })
            .inc();
    }

    /// An HTTP connection was taken (`true`) or has closed (`false`).
    pub fn connection(&self, open: bool) {
        if open {
            self.connections.inc();
        } else {
            self.connections.dec();
        }
    }

    /// An HTTP connection was refused at the connection cap.
    pub fn connection_refused(&self) {
        self.connections_refused.inc();
    }

    /// An HTTP connection was closed by the header-read timeout.
    pub fn header_timeout(&self) {
        self.header_timeouts.inc();
    }

    /// The counter of notices the relay had no room for ([`crate::events::Hub::relay_to`]).
    pub fn relay_dropped(&self) -> Counter {
        self.relay_dropped.clone()
    }

    /// A listen stream of `tenant` opened (`true`) or ended (`false`).
    pub fn listen_stream(&self, tenant: &str, open: bool) {
        let gauge = self.listen_streams.get_or_create(&TenantLabels {
            tenant: tenant.to_string(),
        });
        if open {
            gauge.inc();
        } else {
            gauge.dec();
        }
    }

    /// A listen stream of `tenant` was refused at the tenant's cap.
    pub fn listen_refused(&self, tenant: &str) {
        self.listen_refused
            .get_or_create(&TenantLabels {
                tenant: tenant.to_string(),
            })
            .inc();
    }

    /// A request of `tenant` was answered 429.
    pub fn rate_limited(&self, tenant: &str) {
        self.rate_limited
            .get_or_create(&TenantLabels {
                tenant: tenant.to_string(),
            })
            .inc();
    }

    /// An MCP POST of `tenant` took `route` (`direct` or `rmcp`).
    pub fn mcp_request(&self, tenant: &str, route: &'static str) {
        self.mcp_requests
            .get_or_create(&RouteLabels {
                tenant: tenant.to_string(),
                route,
            })
            .inc();
    }

    /// A call of `tenant` got its fresh instance: a spare made `ahead` of
    /// it, or one made inline. Shows operators whether spares are used, and
    /// lets a test see that one was.
    pub fn instance(&self, tenant: &str, ahead: bool) {
        self.instances
            .get_or_create(&InstanceLabels {
                tenant: tenant.to_string(),
                made: if ahead { "ahead" } else { "inline" },
            })
            .inc();
    }

    /// `n` instances wait in tenants' slots now (spares and retired ones).
    /// Bounded by the runner; a number that only grows would be a leak of
    /// pool slots.
    pub fn instances_waiting(&self, n: usize) {
        self.instances_waiting
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A `tasks/get` of `tenant` was answered by the runner from an ended
    /// task's kept view (`by_runner`), or by the plugin. Shows operators
    /// how much of the polling costs no plugin call.
    pub fn task_read(&self, tenant: &str, by_runner: bool) {
        self.task_reads
            .get_or_create(&AnsweredLabels {
                tenant: tenant.to_string(),
                answered_by: if by_runner { "runner" } else { "plugin" },
            })
            .inc();
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_rendered_per_tenant() {
        let m = Metrics::default();
        m.call("alice", "call-tool", "ok", Duration::from_millis(3));
        m.fault("bob", "deadline");
        m.task("alice", "completed");
        m.denied("bob");
        m.swap("alice", "loaded");
        m.connection(true);
        m.connection_refused();
        m.header_timeout();
        m.listen_stream("alice", true);
        m.listen_refused("bob");
        m.rate_limited("alice");
        m.instance("alice", true);
        m.instance("alice", true);
        m.instance("bob", false);
        m.task_read("alice", true);
        m.task_read("alice", true);
        m.task_read("alice", false);
        m.relay_dropped().inc();
        let text = m.render();
        for line in [
            "settle_http_connections 1",
            "settle_http_connections_refused_total 1",
            "settle_http_header_timeouts_total 1",
            "settle_relay_notices_dropped_total 1",
            r#"settle_listen_streams{tenant="alice"} 1"#,
            r#"settle_listen_refused_total{tenant="bob"} 1"#,
            r#"settle_rate_limited_total{tenant="alice"} 1"#,
            r#"settle_plugin_instances_total{tenant="alice",made="ahead"} 2"#,
            r#"settle_plugin_instances_total{tenant="bob",made="inline"} 1"#,
            r#"settle_task_reads_total{tenant="alice",answered_by="runner"} 2"#,
            r#"settle_task_reads_total{tenant="alice",answered_by="plugin"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(
            text.contains(
                r#"settle_plugin_calls_total{tenant="alice",call="call-tool",outcome="ok"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"settle_plugin_faults_total{tenant="bob",kind="deadline"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"settle_tasks_total{tenant="alice",status="completed"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"settle_outbound_denied_total{tenant="bob"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"settle_plugin_swaps_total{tenant="alice",status="loaded"} 1"#),
            "{text}"
        );
        assert!(text.contains("settle_plugin_call_seconds_bucket"), "{text}");
    }
}
