//! Marks along one request's way through the runner, for the
//! benchmark's `timeline` part: the breakdown of a `get_device_state`
//! call by stage (`docs/performance.md`) comes from them.
//!
//! A mark is a `tracing` event at TRACE on the target [`TARGET`] whose
//! message names the stage. Nothing listens to it unless a subscriber asks
//! for that target, so an unobserved mark costs a check of tracing's level
//! filter. `settle`'s log leaves it out unless asked
//! (`RUST_LOG=info,settle::timeline=trace` prints every mark with its time).

/// The target every mark is sent on.
pub const TARGET: &str = "settle::timeline";

/// Marks that the request in hand reached `$stage` (a string literal). The
/// crate using it needs `tracing` among its dependencies.
#[macro_export]
macro_rules! timeline {
    ($stage:literal) => {
        ::tracing::trace!(target: $crate::timeline::TARGET, $stage)
    };
}
