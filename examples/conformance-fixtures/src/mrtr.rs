//! Sealed MRTR `requestState`: what a tool remembers between the rounds of a
//! multi-round request, kept by the client.
//!
//! A plugin instance lives for one call, so whatever a tool learnt in round
//! one must travel with the client to round two. The client must not be able
//! to forge or edit it, so the state is signed with HMAC-SHA256 under the
//! plugin's sealing key (kept in its key-value bucket, or the operator's
//! `request_state_key`), and bound to the tool and round it was issued for. A fresh nonce in every state makes each round's state differ,
//! even when the data does not.
//!
//! The wire form is `base64url(payload) "." base64url(mac)`, the mac taken
//! over the encoded payload, so verification never parses untrusted JSON.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use sha2::Sha256;

/// What the plugin keeps in a `requestState`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// The tool (or prompt) that issued it: a state is no good elsewhere.
    pub tool: String,
    /// The round that asked the questions this state travels with.
    pub round: u32,
    /// Random per issue, so two states never look alike.
    pub nonce: String,
    /// What the tool collected so far.
    pub data: Json,
}

/// Why a `requestState` was refused.
#[derive(Debug, PartialEq)]
pub enum StateError {
    /// Not signed by this runner's key, or altered since.
    Integrity,
    /// Signed, but issued for another tool or prompt.
    WrongTool(String),
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateError::Integrity => f.write_str("requestState integrity check failed"),
            StateError::WrongTool(tool) => write!(
                f,
                "requestState integrity check failed: it was issued for {tool:?}"
            ),
        }
    }
}

/// Seals and opens states under one key.
pub struct Sealer {
    key: Vec<u8>,
}

impl Sealer {
    pub fn new(key: &[u8]) -> Sealer {
        Sealer { key: key.to_vec() }
    }

    fn mac(&self) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes keys of any length")
    }

    /// The opaque string to hand the client.
    pub fn seal(&self, state: &State) -> String {
        let payload =
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(state).expect("states always serialize"));
        let mut mac = self.mac();
        mac.update(payload.as_bytes());
        let tag = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        format!("{payload}.{tag}")
    }

    /// The state inside `sealed`, if this key signed it for `tool`.
    pub fn open(&self, tool: &str, sealed: &str) -> Result<State, StateError> {
        let (payload, tag) = sealed.split_once('.').ok_or(StateError::Integrity)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| StateError::Integrity)?;
        let mut mac = self.mac();
        mac.update(payload.as_bytes());
        // `verify_slice` compares in constant time.
        mac.verify_slice(&tag).map_err(|_| StateError::Integrity)?;
        let bytes = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| StateError::Integrity)?;
        let state: State = serde_json::from_slice(&bytes).map_err(|_| StateError::Integrity)?;
        if state.tool != tool {
            return Err(StateError::WrongTool(state.tool));
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state(round: u32, nonce: &str) -> State {
        State {
            tool: "multi_round".into(),
            round,
            nonce: nonce.into(),
            data: json!({"name": "Alice"}),
        }
    }

    #[test]
    fn a_sealed_state_opens_to_itself() {
        let sealer = Sealer::new(b"key");
        let sealed = sealer.seal(&state(2, "n1"));
        assert_eq!(sealer.open("multi_round", &sealed), Ok(state(2, "n1")));
    }

    #[test]
    fn a_suffix_appended_to_the_state_fails_the_integrity_check() {
        let sealer = Sealer::new(b"key");
        let tampered = format!("{}-TAMPERED", sealer.seal(&state(1, "n1")));
        assert_eq!(
            sealer.open("multi_round", &tampered),
            Err(StateError::Integrity)
        );
    }

    #[test]
    fn an_edited_payload_fails_the_integrity_check() {
        let sealer = Sealer::new(b"key");
        let sealed = sealer.seal(&state(1, "n1"));
        let (_, tag) = sealed.split_once('.').unwrap();
        let forged_payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&state(9, "n1")).unwrap());
        assert_eq!(
            sealer.open("multi_round", &format!("{forged_payload}.{tag}")),
            Err(StateError::Integrity)
        );
    }

    #[test]
    fn a_state_sealed_under_another_key_is_refused() {
        let sealed = Sealer::new(b"other key").seal(&state(1, "n1"));
        assert_eq!(
            Sealer::new(b"key").open("multi_round", &sealed),
            Err(StateError::Integrity)
        );
    }

    #[test]
    fn a_state_issued_for_another_tool_is_refused() {
        let sealer = Sealer::new(b"key");
        let sealed = sealer.seal(&state(1, "n1"));
        assert_eq!(
            sealer.open("tampered_state", &sealed),
            Err(StateError::WrongTool("multi_round".into()))
        );
    }

    #[test]
    fn garbage_is_refused_without_a_panic() {
        let sealer = Sealer::new(b"key");
        for junk in ["", ".", "abc", "a.b", "!!!.???", "e30.e30"] {
            assert_eq!(
                sealer.open("multi_round", junk),
                Err(StateError::Integrity),
                "{junk}"
            );
        }
    }

    #[test]
    fn two_states_with_the_same_data_differ_by_their_nonce() {
        let sealer = Sealer::new(b"key");
        assert_ne!(sealer.seal(&state(1, "n1")), sealer.seal(&state(1, "n2")));
    }
}
