//! The runner's shape, checked by reading `host/src` (no runner needed):
//! no module depends on a module that depends back on it, at the level of
//! files and at the level of the top-level modules, and only the command
//! line knows a device setting by name.
//!
//! Dependencies are read from the code: every `crate::`, `super::` and
//! `self::` path, grouped imports included, resolved to the deepest module
//! it names. A module and its own submodules count as one (a parent
//! declaring and re-exporting its children is not a cycle); comments (doc
//! links) and test modules are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Words only a device plugin has reason to use, and the device settings
/// the runner takes as aliases in `cli.rs` alone.
const DEVICE_WORDS: [&str; 9] = [
    "target_temperature",
    "fan_speed",
    "vane_",
    "homeassistant",
    "sensibo",
    "device_api",
    "device_token",
    "device_profile",
    "driver",
];

/// The `src` directory of a crate of the workspace.
fn src(krate: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("src")
}

/// Every module of the library in `src` by path (`""` is the crate root),
/// with its code: comments and test modules left out.
fn modules(src: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, prefix: &[String], out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_str().unwrap().to_string();
            if path.is_dir() {
                let mut inner = prefix.to_vec();
                inner.push(name);
                walk(&path, &inner, out);
                continue;
            }
            let mut module = prefix.to_vec();
            if !matches!(name.as_str(), "mod" | "lib") {
                module.push(name.clone());
            }
            // The binary is not part of the library; `tests.rs` files are
            // test modules.
            if matches!(name.as_str(), "main" | "tests") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = match text.find("#[cfg(test)]\nmod tests") {
                Some(end) => &text[..end],
                None => &text,
            };
            let code: String = code
                .lines()
                .map(|line| match line.find("//") {
                    Some(comment) => &line[..comment],
                    None => line,
                })
                .collect::<Vec<_>>()
                .join("\n");
            out.insert(module.join("::"), code);
        }
    }
    let mut out = BTreeMap::new();
    walk(src, &[], &mut out);
    out
}

fn segments(module: &str) -> Vec<String> {
    if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").map(String::from).collect()
    }
}

/// The paths a source names: each `crate::a::b`, `super::c` or
/// `self::d::{e, f::g}` as absolute segments.
fn paths(module: &str, code: &str) -> Vec<Vec<String>> {
    let here = segments(module);
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !is_ident(bytes[i - 1]);
        let rest = &bytes[i..];
        if !starts_word {
            i += 1;
        } else if rest.starts_with(b"crate::") {
            i = tree(bytes, i + "crate::".len(), Vec::new(), &mut out);
        } else if rest.starts_with(b"super::") || rest.starts_with(b"self::") {
            let mut base = here.clone();
            while i < bytes.len() {
                if bytes[i..].starts_with(b"super::") {
                    base.pop();
                    i += "super::".len();
                } else if bytes[i..].starts_with(b"self::") {
                    i += "self::".len();
                } else {
                    break;
                }
            }
            i = tree(bytes, i, base, &mut out);
        } else {
            i += 1;
        }
    }
    out
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Reads `a::b::{c, d::e}` at `at` below `base` into `out`; returns where
/// it ended.
fn tree(bytes: &[u8], mut at: usize, mut base: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    if bytes.get(at) == Some(&b'{') {
        at += 1;
        loop {
            while at < bytes.len() && (bytes[at].is_ascii_whitespace() || bytes[at] == b',') {
                at += 1;
            }
            if at >= bytes.len() || bytes[at] == b'}' {
                return at + 1;
            }
            let next = tree(bytes, at, base.clone(), out);
            // Anything unreadable (`*`, `as`): skip a byte rather than loop.
            at = next.max(at + 1);
        }
    }
    let start = at;
    while at < bytes.len() && is_ident(bytes[at]) {
        at += 1;
    }
    let name = String::from_utf8_lossy(&bytes[start..at]).into_owned();
    let named = !name.is_empty();
    if named && name != "self" {
        base.push(name);
    }
    if named && bytes[at..].starts_with(b"::") {
        return tree(bytes, at + 2, base, out);
    }
    out.push(base);
    at
}

/// Module → the modules it depends on (none of them its ancestor or
/// descendant).
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules(src);
    let known: BTreeSet<Vec<String>> = modules.keys().map(|m| segments(m)).collect();
    let mut graph = BTreeMap::new();
    for (module, code) in &modules {
        let here = segments(module);
        let mut targets = BTreeSet::new();
        for path in paths(module, code) {
            let Some(target) = (0..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| known.contains(p))
            else {
                continue;
            };
            let related = target.starts_with(&here) || here.starts_with(&target);
            if !related {
                targets.insert(target.join("::"));
            }
        }
        graph.insert(module.clone(), targets);
    }
    graph
}

/// A cycle in `graph`, as the modules along it, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

/// Fails on a cycle in `graph`, file by file and between top-level modules.
fn assert_acyclic(krate: &str, graph: &BTreeMap<String, BTreeSet<String>>) {
    if let Some(cycle) = cycle(graph) {
        panic!(
            "{krate}: modules depend on each other: {}",
            cycle.join(" -> ")
        );
    }
    let first = |m: &str| m.split("::").next().unwrap_or_default().to_string();
    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, targets) in graph {
        let entry = top.entry(first(module)).or_default();
        entry.extend(
            targets
                .iter()
                .map(|t| first(t))
                .filter(|t| *t != first(module)),
        );
    }
    if let Some(cycle) = cycle(&top) {
        panic!(
            "{krate}: top-level modules depend on each other: {}",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn no_runner_module_depends_on_one_that_depends_back_on_it() {
    let graph = graph(&src("host"));
    assert!(graph.contains_key("mcp::handler"), "modules are found");
    assert!(
        graph["app"].contains("runtime"),
        "dependencies are found: {:?}",
        graph["app"]
    );
    assert_acyclic("host", &graph);
}

/// Every plugin, and the SDK they share.
#[test]
fn no_plugin_module_depends_on_one_that_depends_back_on_it() {
    for krate in [
        "guest",
        "guest/sdk",
        "examples/conformance-fixtures",
        "examples/hostile-plugin",
        "examples/hello-plugin",
    ] {
        let graph = graph(&src(krate));
        assert!(!graph.is_empty(), "{krate}: modules are found");
        assert_acyclic(krate, &graph);
    }
}

#[test]
fn the_checker_finds_a_cycle_and_grouped_imports() {
    let found = paths(
        "mcp::listen",
        "use super::{frame, handler::Settle};\nuse crate::a::{b::{c, d}, e};",
    );
    let found: Vec<String> = found.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        found,
        [
            "mcp::frame",
            "mcp::handler::Settle",
            "a::b::c",
            "a::b::d",
            "a::e"
        ]
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), ["b".to_string()].into()),
        ("b".to_string(), ["a".to_string()].into()),
    ]
    .into();
    assert_eq!(
        cycle(&graph),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
}

#[test]
fn only_the_command_line_names_device_settings() {
    for (module, code) in modules(&src("host")) {
        if module == "cli" {
            continue;
        }
        for word in DEVICE_WORDS {
            assert!(
                !code.contains(word),
                "host/src module {module} names {word:?}: device settings belong to the plugin (and their aliases to cli.rs)"
            );
        }
    }
}
