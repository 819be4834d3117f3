# settle: build, run, test, bench.
#
# `make run` and `make test` work on a fresh machine with a Rust toolchain:
# they install what they need. Both add the wasm32-wasip2 target (rustup);
# `make test` also installs redis-server and chromium (apt-get, with sudo
# when not root)
# and, under .conformance/, Node 22 and the pinned MCP conformance suite and
# Inspector (npm).

CARGO ?= cargo
PLUGIN := target/wasm32-wasip2/release/settle_devices.wasm
# Every plugin of the workspace, as cargo package arguments.
PLUGINS := -p settle-devices -p settle-fixtures -p settle-hostile -p settle-hello
# The plugin built into `settle` (host/build.rs): the one `make guest`
# built, so cargo does not build it a second time in a target of its own.
export SETTLE_BUILTIN_PLUGIN ?= $(CURDIR)/$(PLUGIN)
# The device plugin is optimised as one program (fat LTO, one codegen unit):
# code from serde_json and the standard library is inlined into the
# plugin's own. The plugin's part of a call took about 8 % less time
# (docs/performance.md, "Twelfth round").
# Only the plugin's build gets it: the runner's would take many minutes
# longer. host/build.rs sets the same for the plugin it builds itself.
PLUGIN_OPTIMISE := CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1
# No incremental compilation: make's builds start from a clean tree on CI,
# where incremental state only costs time and disk (6.5 GB of the debug
# target's 14 GB on a working tree here; a CI run failed with "No
# space left on device"). Plain `cargo` commands keep their own default.
export CARGO_INCREMENTAL ?= 0
SIM_ADDR ?= 127.0.0.1:8081
HTTP_ADDR ?= 127.0.0.1:8080
RUN_DIR := .run

FUZZ_INPUTS ?= 10000000
# make test's share of the fuzzer: about 15 s of a debug build.
FUZZ_SHORT ?= 60000

.PHONY: soak fuzz fuzz-short bench-slowloris install-check all build guest fixtures host run run-cluster redis chromium test test-all lint test-unit test-e2e conformance bench bench-verdicts bench-scale fmt clean wasm-target

all: build

wasm-target:
	@rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2

# The device plugin, as a WASI component.
guest: wasm-target
	$(PLUGIN_OPTIMISE) $(CARGO) build -p settle-devices --target wasm32-wasip2 --release

# The conformance suite's fixtures, the hostile plugin the isolation tests
# run, and the hello plugin (a plugin author's starting point): three more
# plugins.
fixtures: wasm-target
	$(CARGO) build -p settle-fixtures -p settle-hostile -p settle-hello --target wasm32-wasip2 --release

host: guest
	$(CARGO) build --release -p settle -p device-sim

build: guest host

# Starts the simulator and settle (HTTP, embedded store) and prints how to
# connect a client. Ctrl-C stops both.
run: build
	@mkdir -p $(RUN_DIR)
	@./scripts/run.sh "$(SIM_ADDR)" "$(HTTP_ADDR)" "$(RUN_DIR)"

# Two replicas on one Redis, and the simulator: prints both URLs.
run-cluster: build redis
	@mkdir -p $(RUN_DIR)
	@./scripts/run-cluster.sh "$(SIM_ADDR)" "$(RUN_DIR)"

# Clippy twice: natively for every crate (the plugins' pure modules and unit
# tests included), and for wasm32-wasip2 on the plugins, where their exports
# are compiled.
lint: guest
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy $(PLUGINS) --target wasm32-wasip2 -- -D warnings

# Redis for the tests of the shared store (the tests start their own
# servers; this only makes sure the binary is there).
redis:
	@command -v redis-server >/dev/null || { \
	  echo "installing redis-server"; \
	  (apt-get update -qq && apt-get install -y -qq redis-server >/dev/null) \
	  || (sudo apt-get update -qq && sudo apt-get install -y -qq redis-server >/dev/null); }

# Debian's Chromium for the live view's browser test (host/tests/e2e/
# browser.rs drives it headless over the DevTools protocol). Without its
# recommends (systemd, perl, samba, printing: 130 packages with them):
# headless Chromium needs only its dependencies, fonts included.
chromium:
	@command -v chromium >/dev/null || { \
	  echo "installing chromium"; \
	  (apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null) \
	  || (sudo apt-get update -qq && sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null); }

# Unit tests of every crate, the plugins' pure modules included (native).
test-unit: guest
	$(CARGO) test --workspace --lib --bins

# End-to-end: the real component in the real runtime against the simulator,
# through real MCP clients, and Redis where the store is shared.
test-e2e: guest fixtures redis
	$(CARGO) test --workspace --test '*'

# Unit and end-to-end tests in one cargo invocation, so every dependency is
# built once. Redis is installed, so the store contract suite must run
# against it too (it is skipped, and says so, only without redis-server);
# Chromium likewise, so the live view's browser test must run.
# The fuzzer's short budget (FUZZ_SHORT inputs) is one of these tests.
test-all: guest fixtures redis chromium
	SETTLE_REQUIRE_REDIS=1 SETTLE_REQUIRE_CHROMIUM=1 FUZZ_SHORT=$(FUZZ_SHORT) $(CARGO) test --workspace

# `settle` built the way `cargo install --locked --path host` builds it (a
# debug build, in the workspace's target directory), then the test that
# serves its built-in plugin with no --plugin. Its own target, not part of
# make test: cargo install resolves features for settle alone, so it shares
# almost nothing with the test build and costs a second build of the runner
# (about 6.5 minutes on 2 cores). make test serves the test build's
# built-in plugin, embedded by the same build script.
INSTALL_ROOT := $(CURDIR)/target/install
install-check: guest fixtures
	CARGO_TARGET_DIR=$(CURDIR)/target $(CARGO) install --locked --debug --quiet --path host --root $(INSTALL_ROOT)
	SETTLE_INSTALLED_BINARY=$(INSTALL_ROOT)/bin/settle $(CARGO) test --workspace --test e2e -- install::

# The MCP conformance suite (2026-07-28, 2025-11-25, every tasks scenario)
# against settle serving the fixture plugin, and the MCP Inspector CLI
# against settle serving the device plugin. Installs pinned Node packages
# (and Node 22) under .conformance/. Uses the binaries the tests built.
conformance: guest fixtures
	$(CARGO) test --workspace --no-run
	./scripts/conformance.sh

# The fuzzer (fuzz/): FUZZ_INPUTS mutated inputs over every target, with
# the count and crashes of each; crashing inputs go to fuzz/crashes/.
fuzz:
	$(CARGO) run --release -p settle-fuzz -- $(FUZZ_INPUTS)

fuzz-short:
	$(CARGO) run -p settle-fuzz -- $(FUZZ_SHORT)

test: lint test-all conformance

bench: guest fixtures
	$(CARGO) build --release -p settle --bin settle
	$(CARGO) run --release -p settle --example bench
	$(CARGO) run --release -p settle --example bench_tenants
	$(CARGO) run --release -p settle --example bench_lag

# A normal client's p99 idle and while 1,000 slowloris connections attack.
bench-slowloris: guest
	$(CARGO) run --release -p settle --example bench_slowloris

# The fault soak (host/examples/soak): two replicas on one Redis and the
# simulator, 10,000 tasks over 100 devices through rmcp clients, simulator
# faults switched at random, replicas and Redis killed with kill -9 at
# random (at least 24 and 6), then the invariant checker; prints the
# figures, exits non-zero on any violation. SOAK_ARGS scales it, e.g.
# SOAK_ARGS="--tasks 1000 --devices 20"; make test runs 300 tasks
# (host/tests/e2e/soak.rs).
SOAK_ARGS ?=
soak: guest redis
	$(CARGO) build --release -p settle --bin settle
	$(CARGO) run --release -p settle --example soak -- $(SOAK_ARGS)

# The plugin's verdicts against a reference device over 100,000 random
# command sequences (make test runs 300 of them).
bench-verdicts:
	VERDICT_SEQUENCES=$(VERDICT_SEQUENCES) $(CARGO) test --release -p settle-devices --test verdicts -- --nocapture
VERDICT_SEQUENCES ?= 100000

# Very many tasks in flight: one runner on the embedded store, then two
# replicas on Redis. TASKS, DEVICES, DELAY_MS, DELAY_SPREAD_MS (device i
# acts DELAY_MS + DELAY_SPREAD_MS * i / DEVICES after its first command; 0
# has every device act at once) and POLL_MS scale it.
TASKS ?= 1000000
DEVICES ?= 10000
DELAY_MS ?= 2400000
DELAY_SPREAD_MS ?= 600000
POLL_MS ?= 30000
SCALE_ARGS = --tasks $(TASKS) --devices $(DEVICES) --delay-ms $(DELAY_MS) --delay-spread-ms $(DELAY_SPREAD_MS) --poll-ms $(POLL_MS)
bench-scale: build redis
	$(CARGO) run --release -p settle --example bench_scale -- --store redb $(SCALE_ARGS)
	$(CARGO) run --release -p settle --example bench_scale -- --store redis $(SCALE_ARGS)

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
	rm -rf $(RUN_DIR)
