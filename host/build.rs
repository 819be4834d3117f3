//! Builds the device plugin (`guest/`, package `settle-devices`) for
//! `wasm32-wasip2` and embeds it, so one `settle` binary serves it with no
//! `--plugin` (`cargo install --locked --path host`).
//!
//! The plugin is built by a second cargo in a target directory of its own
//! (`<target>/builtin-plugin`): a nested cargo on the outer target
//! directory would wait for the lock the outer cargo holds. It builds only
//! `settle-devices`, which does not depend on this crate, so it does not
//! recurse.
//!
//! `SETTLE_BUILTIN_PLUGIN` changes that:
//! - a path to a `.wasm`: embed that component, built already (the Makefile
//!   points it at the plugin `make guest` built, so nothing is built twice);
//! - `none`: embed nothing; `--plugin` is then required (its default is the
//!   path `make build` leaves the plugin at).

use std::path::{Path, PathBuf};
use std::process::Command;

const PACKAGE: &str = "settle-devices";
const ARTIFACT: &str = "settle_devices.wasm";

fn main() {
    println!("cargo:rerun-if-env-changed=SETTLE_BUILTIN_PLUGIN");
    println!("cargo:rustc-check-cfg=cfg(settle_builtin)");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let workspace = manifest.parent().unwrap().to_path_buf();
    let wasm = match std::env::var("SETTLE_BUILTIN_PLUGIN").ok().as_deref() {
        Some("none") => return,
        Some(path) if !path.is_empty() => {
            let path = PathBuf::from(path);
            let path = if path.is_relative() {
                workspace.join(path)
            } else {
                path
            };
            println!("cargo:rerun-if-changed={}", path.display());
            if !path.is_file() {
                panic!(
                    "SETTLE_BUILTIN_PLUGIN={} does not exist; build it (make guest) or unset it",
                    path.display()
                );
            }
            path
        }
        _ => build(&workspace),
    };
    println!("cargo:rustc-cfg=settle_builtin");
    println!("cargo:rustc-env=SETTLE_BUILTIN_WASM={}", wasm.display());
    println!("cargo:rustc-env=SETTLE_BUILTIN_NAME={PACKAGE}");
    println!(
        "cargo:rustc-env=SETTLE_BUILTIN_VERSION={}",
        version(&workspace)
    );
}

/// Builds the plugin with a cargo of its own and returns the component.
fn build(workspace: &Path) -> PathBuf {
    for input in ["guest", "wit", "Cargo.lock", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", workspace.join(input).display());
    }
    let target_dir = outer_target_dir().join("builtin-plugin");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace)
        .args(["build", "--locked", "--release", "-p", PACKAGE])
        .args(["--target", "wasm32-wasip2", "--target-dir"])
        .arg(&target_dir);
    // What the outer cargo set for this build script (its target, flags,
    // profile, jobserver) is not for the plugin's build.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if (key.starts_with("CARGO_") && key != "CARGO_HOME")
            || matches!(
                key.as_ref(),
                "RUSTFLAGS" | "RUSTC_WORKSPACE_WRAPPER" | "TARGET" | "HOST" | "OPT_LEVEL"
            )
        {
            command.env_remove(key.as_ref());
        }
    }
    // The plugin is optimised as one program, as `make guest` builds it
    // (the Makefile's PLUGIN_OPTIMISE says why).
    command
        .env("CARGO_PROFILE_RELEASE_LTO", "fat")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1");
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the built-in plugin: {e}"));
    if !status.success() {
        panic!(
            "building the built-in plugin ({PACKAGE} for wasm32-wasip2) failed. It needs the \
             target: `rustup target add wasm32-wasip2`. To build settle without it, set \
             SETTLE_BUILTIN_PLUGIN=none (then give --plugin) or a path to a prebuilt .wasm."
        );
    }
    target_dir.join("wasm32-wasip2/release").join(ARTIFACT)
}

/// The target directory of the build this script belongs to: `OUT_DIR` is
/// `<target>/[<triple>/]<profile>/build/<crate>-<hash>/out`.
fn outer_target_dir() -> PathBuf {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    out.ancestors()
        .find(|dir| dir.file_name().is_some_and(|name| name == "build"))
        .and_then(|build| build.parent()?.parent())
        .map(Path::to_path_buf)
        .unwrap_or(out)
}

/// The plugin's version: its package's, which it takes from the workspace.
fn version(workspace: &Path) -> String {
    let read = |path: PathBuf| std::fs::read_to_string(path).unwrap_or_default();
    let line = |text: &str| {
        text.lines()
            .map(str::trim)
            .find(|l| l.starts_with("version") && l.contains('"'))
            .and_then(|l| l.split('"').nth(1).map(String::from))
    };
    line(&read(workspace.join("guest/Cargo.toml")))
        .or_else(|| line(&read(workspace.join("Cargo.toml"))))
        .unwrap_or_else(|| "unknown".into())
}
