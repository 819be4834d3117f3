//! The plugin built into the binary (see `host/build.rs`), so that an
//! installed `settle` serves with no `--plugin`.
//!
//! It is named by a path that is no file, [`NAME`], wherever a plugin path
//! goes (the `--plugin` default, a tenants file's `plugin`), and loading
//! reads its bytes from the binary instead of the disk. It never changes
//! while the binary runs, so the file watcher never swaps it; `--plugin`
//! with a file overrides it.

use std::borrow::Cow;
use std::path::Path;

/// The plugin path that stands for the built-in plugin.
pub const NAME: &str = "builtin";

/// The component's bytes, when this binary was built with one.
pub fn bytes() -> Option<&'static [u8]> {
    #[cfg(settle_builtin)]
    return Some(include_bytes!(env!("SETTLE_BUILTIN_WASM")));
    #[cfg(not(settle_builtin))]
    None
}

/// Whether a plugin path names the built-in plugin.
pub fn is_builtin(path: &Path) -> bool {
    path == Path::new(NAME)
}

/// Whether a plugin path names a plugin that can be loaded: the built-in
/// one when this binary has it, or an existing file.
pub fn exists(path: &Path) -> bool {
    if is_builtin(path) {
        bytes().is_some()
    } else {
        path.is_file()
    }
}

/// A plugin's bytes: the built-in plugin's, or the file's.
pub fn read(path: &Path) -> std::io::Result<Cow<'static, [u8]>> {
    if is_builtin(path) {
        return bytes().map(Cow::Borrowed).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "this settle was built without a built-in plugin (SETTLE_BUILTIN_PLUGIN=none); give --plugin",
            )
        });
    }
    std::fs::read(path).map(Cow::Owned)
}

/// Where `make build` leaves the device plugin.
pub const MADE_PLUGIN: &str = "target/wasm32-wasip2/release/settle_devices.wasm";

/// The `--plugin` default: the built-in plugin when there is one, else the
/// path where `make build` leaves the plugin.
pub fn default_plugin() -> &'static str {
    if bytes().is_some() { NAME } else { MADE_PLUGIN }
}

/// What `settle --version` says: settle's version, and the built-in
/// plugin's package, version and SHA-256 (the digest a swap and the log
/// name it by).
pub fn version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(describe)
}

fn describe() -> String {
    let settle = env!("CARGO_PKG_VERSION");
    match bytes() {
        None => format!("{settle} (no built-in plugin)"),
        Some(bytes) => {
            use sha2::Digest;
            let digest = format!("{:x}", sha2::Sha256::digest(bytes));
            format!(
                "{settle} (built-in plugin {} {}, component sha256 {digest})",
                option_env!("SETTLE_BUILTIN_NAME").unwrap_or("unknown"),
                option_env!("SETTLE_BUILTIN_VERSION").unwrap_or("unknown"),
            )
        }
    }
}
