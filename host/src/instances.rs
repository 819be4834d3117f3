//! Making the fresh plugin instance each call runs in, ahead of the call
//! when the runner has time to spare.
//!
//! Making an instance (a `Store` with the tenant's limits, then
//! instantiating into it) costs about 15 µs, and none of it needs the
//! call. So each tenant keeps one **spare**: a fresh, never-used instance of
//! its current plugin. A call takes it and gives it its own deadline and
//! notifier; taking it asks for the next spare, which is made on a task of
//! its own while the call waits (for the device, or for the client's next
//! request). A call that finds no spare (the first one, or one after a
//! swap) makes its own, as does every call while the tenant has others in
//! flight: then every core is busy anyway, and the spare would cost the
//! same CPU and a task switch besides.
//!
//! Isolation does not change: a spare has run nothing, is handed to
//! exactly one call, and is dropped when the plugin it was made of is no
//! longer the tenant's.
//!
//! Dropping a finished instance costs about as much as making one (its
//! pool slot's memory is reset), and none of that needs the call either.
//! So a call that ends alone **retires** its instance to the tenant's
//! slot instead of dropping it before its answer goes out, and the task
//! that makes the next spare drops it first, while the next call waits for
//! its device. A retired instance is never run again; it only waits to be
//! dropped, and counts against [`MAX_SPARES`] like a spare.

use crate::bindings::McpPlugin;
use crate::capabilities::pool::ConnectionPool;
use crate::capabilities::runner::RequestNotifier;
use crate::context::TenantContext;
use crate::plugin::Plugin;
use crate::state::{HostState, STDERR_CAPTURE_BYTES};
use crate::store::Store as StateStore;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use wasmtime::{Engine, Store};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

/// Spares and retired instances that may wait at once, across all
/// tenants: each holds a slot of the pooling allocator and its memory, so
/// a runner with many tenants keeps them only for some of them. Tenants
/// live as long as the runner that serves them, so an instance is counted
/// off only when it is taken from its slot.
const MAX_SPARES: usize = 64;

/// A fresh instance and what its call needs to judge how it ended.
pub struct Fresh {
    /// The instance's store: its memory, handles and limits.
    pub store: Store<HostState>,
    /// The instance.
    pub instance: McpPlugin,
    /// Set when the instance hit its memory limit.
    pub memory_hit: Arc<AtomicBool>,
    /// What the instance wrote to stderr (a panic's message).
    pub stderr: MemoryOutputPipe,
    /// The plugin it is an instance of.
    pub plugin: Arc<Plugin>,
}

impl Fresh {
    /// Gives the instance its call's deadline, `timeout` from now, and the
    /// client request its progress goes to.
    ///
    /// Every epoch tick a running plugin hands its thread back to the
    /// executor, so a plugin that never returns delays nobody else's calls;
    /// once the call's time is up it is stopped.
    pub fn arm(&mut self, timeout: Duration, request: Option<Arc<dyn RequestNotifier>>) {
        self.store.data_mut().request = request;
        arm_deadline(&mut self.store, timeout);
    }
}

fn arm_deadline(store: &mut Store<HostState>, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if Instant::now() >= deadline {
            Ok(wasmtime::UpdateDeadline::Interrupt)
        } else {
            // tokio's yield, not wasmtime's plain self-wake: it lets the
            // runtime read sockets before the plugin runs again, and a
            // connection's task does not absorb it (`self_wake`).
            Ok(wasmtime::UpdateDeadline::YieldCustom(
                1,
                Box::pin(tokio::task::yield_now()),
            ))
        }
    });
}

/// What every instance is made from: the engine, the store plugins' data
/// lives in, and the outbound connections.
#[derive(Clone)]
pub struct Maker {
    engine: Engine,
    store: StateStore,
    pool: Arc<ConnectionPool>,
}

impl Maker {
    /// A maker of instances on `engine`.
    pub fn new(engine: Engine, store: StateStore, pool: Arc<ConnectionPool>) -> Maker {
        Maker {
            engine,
            store,
            pool,
        }
    }

    /// A fresh instance of `plugin` under `context`'s limits, armed with
    /// `request` and a deadline of the tenant's call timeout. The error is
    /// wasmtime's reason, in full.
    pub async fn make(
        &self,
        context: &Arc<TenantContext>,
        plugin: Arc<Plugin>,
        request: Option<Arc<dyn RequestNotifier>>,
    ) -> Result<Fresh, String> {
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE_BYTES);
        let state = HostState::new(
            context.clone(),
            self.store.clone(),
            stderr.clone(),
            request,
            self.pool.clone(),
            plugin.keeps_ended,
        );
        let memory_hit = state.limiter.hit.clone();
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        arm_deadline(&mut store, context.limits.call_timeout);
        let instance = plugin
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| format!("{e:#}"))?;
        Ok(Fresh {
            store,
            instance,
            memory_hit,
            stderr,
            plugin,
        })
    }
}

/// Where a tenant's spare waits.
#[derive(Default)]
pub struct Slot {
    state: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    spare: Option<Fresh>,
    /// A finished call's instance, to be dropped off the call's path.
    retired: Option<Store<HostState>>,
    /// A spare is being made for this slot.
    filling: bool,
    /// The plugin a spare could not be made of: not tried again until the
    /// tenant's plugin changes, so a plugin that cannot start costs one
    /// failed attempt, not one per call.
    refused: Option<Weak<Plugin>>,
}

/// Counts and makes the spares of every tenant.
pub struct Spares {
    maker: Maker,
    /// Spares and retired instances waiting in slots now.
    waiting: Arc<AtomicUsize>,
}

impl Spares {
    /// Spares made with `maker`.
    pub fn new(maker: Maker) -> Spares {
        Spares {
            maker,
            waiting: Arc::default(),
        }
    }

    /// The spare in `slot`, if it is an instance of `plugin`; a spare of an
    /// earlier plugin is dropped. With `refill`, the next spare is made on
    /// a task of its own (unless one is being made already, the plugin
    /// could not be made a spare of before, or [`MAX_SPARES`] wait), which
    /// first drops the instance retired to the slot; without, that instance
    /// is dropped here.
    pub fn take(
        &self,
        slot: &Arc<Slot>,
        context: &Arc<TenantContext>,
        plugin: &Arc<Plugin>,
        refill: bool,
    ) -> Option<Fresh> {
        let (spare, retired, refill) = {
            let mut state = slot.state.lock().unwrap_or_else(|e| e.into_inner());
            if state
                .refused
                .as_ref()
                .is_some_and(|refused| !refused.ptr_eq(&Arc::downgrade(plugin)))
            {
                state.refused = None;
            }
            let spare = state.spare.take();
            let retired = state.retired.take();
            let refill = refill
                && !state.filling
                && state.refused.is_none()
                && self.waiting.load(Ordering::Relaxed) < MAX_SPARES;
            if refill {
                state.filling = true;
            }
            (spare, retired, refill)
        };
        let taken = usize::from(spare.is_some()) + usize::from(retired.is_some());
        if taken > 0 {
            let left = self
                .waiting
                .fetch_sub(taken, Ordering::Relaxed)
                .saturating_sub(taken);
            context.metrics.instances_waiting(left);
        }
        if refill {
            let (maker, waiting) = (self.maker.clone(), self.waiting.clone());
            let (slot, context, plugin) = (slot.clone(), context.clone(), plugin.clone());
            tokio::spawn(async move {
                drop(retired);
                fill(maker, slot, context, plugin, waiting).await
            });
        } else {
            drop(retired);
        }
        // A spare of an earlier plugin is dropped here.
        spare.filter(|spare| Arc::ptr_eq(&spare.plugin, plugin))
    }

    /// Leaves the finished instance `store` in `slot` for the task that
    /// makes the slot's next spare to drop. It is dropped now instead when
    /// the slot already holds one, or [`MAX_SPARES`] wait.
    pub fn retire(&self, slot: &Slot, context: &TenantContext, store: Store<HostState>) {
        let mut state = slot.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.retired.is_some() || self.waiting.load(Ordering::Relaxed) >= MAX_SPARES {
            drop(state);
            drop(store);
            return;
        }
        state.retired = Some(store);
        let waiting = self.waiting.fetch_add(1, Ordering::Relaxed) + 1;
        context.metrics.instances_waiting(waiting);
    }
}

/// Makes a spare of `plugin` for `slot`.
async fn fill(
    maker: Maker,
    slot: Arc<Slot>,
    context: Arc<TenantContext>,
    plugin: Arc<Plugin>,
    waiting: Arc<AtomicUsize>,
) {
    let made = maker.make(&context, plugin.clone(), None).await;
    let mut state = slot.state.lock().unwrap_or_else(|e| e.into_inner());
    state.filling = false;
    match made {
        // Only one spare is made for a slot at a time, and every take
        // empties the slot: it is empty here.
        Ok(fresh) => {
            debug_assert!(state.spare.is_none(), "a slot filled twice");
            state.spare = Some(fresh);
            let waiting = waiting.fetch_add(1, Ordering::Relaxed) + 1;
            context.metrics.instances_waiting(waiting);
        }
        Err(reason) => {
            tracing::debug!(
                tenant = %context.name,
                "no spare instance for this plugin: {reason}"
            );
            state.refused = Some(Arc::downgrade(&plugin));
        }
    }
}
