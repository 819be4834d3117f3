//! A plugin: a component compiled and linked once, ready to instantiate
//! for every call, with what it said about itself when it was admitted.
//!
//! Compiling is the slow part of loading, so compiled components are kept
//! in a cache on disk under a key of their bytes and the engine's
//! configuration; start-up and a swap to a known version skip Cranelift.

use crate::bindings::McpPluginPre;
use crate::bindings::settle::plugin::types::Tool;
use crate::state::HostState;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wasmtime::Engine;
use wasmtime::component::{Component, Linker};

/// A compiled, linked plugin, ready to instantiate.
pub struct Plugin {
    pub(crate) pre: McpPluginPre<HostState>,
    /// Where it was loaded from, for logs and errors.
    pub source: PathBuf,
    /// SHA-256 of the component's bytes (hex): a reload of the same bytes
    /// is not a swap.
    pub digest: String,
    /// The tool list, read once: it must not change while the plugin does not.
    pub(crate) tools: tokio::sync::OnceCell<Arc<Vec<Tool>>>,
    /// What it serves beyond tools, and its instructions; read once it
    /// accepted its configuration.
    pub(crate) info: tokio::sync::OnceCell<Arc<PluginInfo>>,
    /// It imports `forget-tasks`, so it tells the runner before it removes
    /// a task, and the runner may answer `tasks/get` of its ended tasks
    /// itself ([`crate::ended`]).
    pub keeps_ended: bool,
}

/// What a plugin says about the MCP server it serves through the runner
/// (its `server-info`), read once per loaded plugin.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PluginInfo {
    /// What it serves beyond tools: MCP `ServerCapabilities` JSON.
    pub capabilities: serde_json::Value,
    /// The server instructions, passed to clients verbatim.
    pub instructions: Option<String>,
}

/// What loading needs from the runtime: its engine and linker, and the
/// artifact cache.
pub(crate) struct Loader<'a> {
    pub engine: &'a Engine,
    pub linker: &'a Linker<HostState>,
    /// `None` compiles every time.
    pub cache_dir: Option<&'a Path>,
}

/// Why a plugin was refused at load time.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read plugin {path}: {reason}")]
    Read {
        /// The plugin path.
        path: PathBuf,
        /// Why reading failed.
        reason: std::io::Error,
    },
    /// The bytes are not a component wasmtime can compile.
    #[error("{path} is not a valid WebAssembly component: {message}")]
    Compile {
        /// The plugin path.
        path: PathBuf,
        /// wasmtime's reason.
        message: String,
    },
    /// The component was built for another version of the contract.
    #[error("{path}: {mismatch}")]
    Version {
        /// The plugin path.
        path: PathBuf,
        /// The versions.
        mismatch: crate::contract::VersionMismatch,
    },
    /// The component imports something the runner does not give, or does not
    /// export the plugin interface.
    #[error("{path} does not fit the settle:plugin/mcp-plugin world: {message}")]
    Interface {
        /// The plugin path.
        path: PathBuf,
        /// wasmtime's reason.
        message: String,
    },
}

impl Plugin {
    /// Compiles (or takes from the cache), checks and links the component
    /// at `path`.
    pub(crate) fn load(loader: &Loader<'_>, path: &Path) -> Result<Plugin, LoadError> {
        let bytes = crate::builtin::read(path).map_err(|reason| LoadError::Read {
            path: path.to_path_buf(),
            reason,
        })?;
        let digest = {
            use sha2::Digest;
            format!("{:x}", sha2::Sha256::digest(&bytes))
        };
        let component = compile(loader, path, &bytes, &digest)?;
        let ty = component.component_type();
        let keeps_ended = imports_forget_tasks(loader.engine, &ty);
        let names = ty
            .imports(loader.engine)
            .map(|(name, _)| name)
            .chain(ty.exports(loader.engine).map(|(name, _)| name));
        crate::contract::check(names).map_err(|mismatch| LoadError::Version {
            path: path.to_path_buf(),
            mismatch,
        })?;
        let interface = |e: wasmtime::Error| LoadError::Interface {
            path: path.to_path_buf(),
            message: format!("{e:#}"),
        };
        let pre = loader
            .linker
            .instantiate_pre(&component)
            .map_err(interface)?;
        let pre = McpPluginPre::new(pre).map_err(interface)?;
        Ok(Plugin {
            pre,
            source: path.to_path_buf(),
            digest,
            tools: tokio::sync::OnceCell::new(),
            info: tokio::sync::OnceCell::new(),
            keeps_ended,
        })
    }

    /// The tool list, if it has been read already.
    pub fn cached_tools(&self) -> Option<&[Tool]> {
        self.tools.get().map(|t| t.as_slice())
    }

    /// What it said about its server, if that has been read already.
    pub fn cached_info(&self) -> Option<&PluginInfo> {
        self.info.get().map(|c| c.as_ref())
    }
}

/// Whether the component imports the runner's `forget-tasks`. A component
/// imports only the functions its code calls, so this says the plugin
/// tells the runner when it removes a task.
fn imports_forget_tasks(engine: &Engine, ty: &wasmtime::component::types::Component) -> bool {
    let runner = format!(
        "{}/runner@{}",
        crate::contract::PACKAGE,
        crate::contract::VERSION
    );
    ty.imports(engine).any(|(name, item)| {
        name == runner
            && matches!(item.ty, wasmtime::component::types::ComponentItem::ComponentInstance(instance)
                if instance.exports(engine).any(|(function, _)| function == "forget-tasks"))
    })
}

/// Compiles a component, or loads the artifact an earlier compile left in
/// the cache. The cache key covers the component's bytes, the engine's
/// compatibility hash (its settings and wasmtime's version) and settle's
/// version, so an artifact is never loaded into an engine it was not made
/// for; wasmtime checks the same again when it loads one.
fn compile(
    loader: &Loader<'_>,
    path: &Path,
    bytes: &[u8],
    digest: &str,
) -> Result<Component, LoadError> {
    let compile_error = |e: wasmtime::Error| LoadError::Compile {
        path: path.to_path_buf(),
        message: format!("{e:#}"),
    };
    let Some(dir) = loader.cache_dir else {
        return Component::new(loader.engine, bytes).map_err(compile_error);
    };
    let artifact = dir.join(format!("{}.cwasm", artifact_key(loader.engine, digest)));
    if artifact.is_file() {
        // SAFETY: settle writes this directory with `Component::serialize`
        // of an engine whose compatibility hash is part of the name.
        match unsafe { Component::deserialize_file(loader.engine, &artifact) } {
            Ok(component) => return Ok(component),
            Err(e) => tracing::warn!(
                "ignoring cached artifact {}: {e:#}; compiling again",
                artifact.display()
            ),
        }
    }
    let component = Component::new(loader.engine, bytes).map_err(compile_error)?;
    if let Err(e) = write_artifact(dir, &artifact, &component) {
        tracing::warn!("cannot cache the compiled plugin in {}: {e}", dir.display());
    }
    Ok(component)
}

fn artifact_key(engine: &Engine, digest: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!(
        "{digest}-{:016x}-{}",
        hasher.finish(),
        env!("CARGO_PKG_VERSION")
    )
}

/// Writes a compiled component next to its final name, then renames it, so
/// a concurrent reader never sees half a file.
fn write_artifact(dir: &Path, artifact: &Path, component: &Component) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let bytes = component
        .serialize()
        .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
    let partial = artifact.with_extension(format!("partial-{}", std::process::id()));
    std::fs::write(&partial, bytes)?;
    std::fs::rename(&partial, artifact)
}
