//! Which version of the `settle:plugin` contract a component was built for.
//!
//! A component names the contract's interfaces with their version
//! (`settle:plugin/plugin@0.1.0`). Left to the linker, a component built for
//! another version is refused with a message about a missing export or
//! import, which does not say what to do; this check runs first and names
//! both versions, so the operator knows to rebuild the plugin.

/// The package this runner serves.
pub const PACKAGE: &str = "settle:plugin";

/// Its version, as `wit/world.wit` declares it (a test keeps them equal).
pub const VERSION: &str = "0.2.0";

/// A component built for another version of the contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "it was built for {PACKAGE}@{built_for}, and this runner serves {PACKAGE}@{VERSION}: \
     rebuild it against this runner's wit/ (README, \"Writing a plugin\")"
)]
pub struct VersionMismatch {
    /// The version the component names (`unversioned` when it names none).
    pub built_for: String,
}

/// Checks the names a component imports and exports: every one of this
/// package must carry [`VERSION`]. Names of other packages (WASI) are not
/// this check's business, and a component that names none of ours is left
/// to the linker, which says what it lacks.
pub fn check<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<(), VersionMismatch> {
    let prefix = format!("{PACKAGE}/");
    for name in names {
        let Some(interface) = name.strip_prefix(&prefix) else {
            continue;
        };
        let built_for = match interface.split_once('@') {
            Some((_, version)) => version,
            None => "unversioned",
        };
        if built_for != VERSION {
            return Err(VersionMismatch {
                built_for: built_for.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_this_version_and_of_other_packages_pass() {
        let names = [
            "wasi:http/outgoing-handler@0.2.12",
            "settle:plugin/runner@0.2.0",
            "settle:plugin/plugin@0.2.0",
        ];
        assert_eq!(check(names), Ok(()));
        assert_eq!(check(["wasi:random/random@0.1.0"]), Ok(()));
    }

    #[test]
    fn another_version_is_named() {
        let err = check(["wasi:random/random@0.2.12", "settle:plugin/plugin@0.1.0"]).unwrap_err();
        assert_eq!(err.built_for, "0.1.0");
        let message = err.to_string();
        assert!(
            message.contains("built for settle:plugin@0.1.0"),
            "{message}"
        );
        assert!(message.contains("serves settle:plugin@0.2.0"), "{message}");
        assert_eq!(
            check(["settle:plugin/plugin"]).unwrap_err().built_for,
            "unversioned"
        );
    }

    #[test]
    fn the_version_is_the_one_wit_declares() {
        let wit = include_str!("../../wit/world.wit");
        let declared = format!("package {PACKAGE}@{VERSION};");
        assert!(
            wit.lines().any(|l| l.trim() == declared),
            "wit/world.wit does not declare {declared}"
        );
    }
}
