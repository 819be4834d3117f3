//! Run with `cargo run -p device-sim -- --delay-ms 2000 --fault ac-bedroom=clamp:18-28`,
//! or start it in-process from a test with [`spawn`].
//!
//! A simulated air-conditioner cloud API with separate control and sensor endpoints
//! (`docs/device-api.md` in the repository). A `200` from the control endpoint says only that the API
//! took the request; the sensors show the change `delay` later, or never, depending on the
//! faults injected. That is the situation settle exists to handle, so this crate makes it
//! reproducible: strict validation, lazily applied commands, per-device faults, and a `/_sim`
//! side door for tests.
//!
//! # Layout
//! - `model`: settings with their control/sensor spellings, state, commands.
//! - `control`: strict parsing of control bodies, with precise error messages.
//! - `fault`: fault kinds, their JSON and flag forms, the per-device fault set.
//! - `device`: one device as a pure state machine (time passed in, commands applied lazily).
//! - `sim`: the shared [`Sim`] handle, configuration, stats, per-device locks.
//! - `api`: the `/api/v1` HTTP handlers and the token check.
//! - `side_door`: the `/_sim` HTTP handlers (no token).
//! - `server`: [`app`], [`serve`], [`spawn`] and [`RunningSim`].
//! - `cli`: flags and environment variables.
//! - `error`: [`SimError`] and the HTTP error body.

#![deny(missing_docs)]

mod api;
pub mod cli;
mod control;
mod device;
mod error;
mod fault;
mod model;
mod server;
mod side_door;
mod sim;

pub use device::ROOM_DRIFT_PER_SECOND;
pub use error::SimError;
pub use fault::{Fault, FaultKind};
pub use model::{
    AcState, Command, FanSpeed, Mode, Power, SensorField, TARGET_MAX, TARGET_MIN, TARGET_STEP,
    VaneHorizontal, VaneVertical,
};
pub use server::{RunningSim, SHUTDOWN_GRACE, app, serve, spawn};
pub use sim::{
    DeviceSpec, DeviceStats, DeviceView, PendingView, SettledView, Sim, SimConfig, Stats,
};
