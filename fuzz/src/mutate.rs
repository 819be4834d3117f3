//! Mutations of corpus entries: byte-level for every target, and for JSON
//! targets value-level too (a value replaced by a wrong type, a NaN-like or
//! huge number, a deeply nested one; a key dropped).

use serde_json::{Value as Json, json};

/// xorshift64*: fast, seeded, so a run is reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Values a device or a client should not send.
fn hostile_value(rng: &mut Rng) -> Json {
    match rng.below(16) {
        0 => Json::Null,
        1 => json!(true),
        2 => json!(""),
        3 => json!("x".repeat(rng.below(5000))),
        4 => json!(u64::MAX),
        5 => json!(i64::MIN),
        6 => json!(1e308),
        7 => json!(-1e308),
        8 => json!(f64::MIN_POSITIVE),
        9 => json!(-0.0),
        10 => json!([]),
        11 => json!({}),
        12 => {
            let mut v = json!(1);
            for _ in 0..rng.below(200) {
                v = json!([v]);
            }
            v
        }
        13 => json!(0.1 + 0.2),
        14 => json!("NaN"),
        _ => json!(rng.next() as i64),
    }
}

/// Replaces, drops or adds values anywhere in `value`.
fn mutate_json(rng: &mut Rng, value: &mut Json, depth: usize) {
    match value {
        Json::Object(map) if !map.is_empty() && depth < 8 => {
            let keys: Vec<String> = map.keys().cloned().collect();
            let key = &keys[rng.below(keys.len())];
            match rng.below(6) {
                0 => {
                    map.remove(key);
                }
                1 => {
                    map.insert(key.clone(), hostile_value(rng));
                }
                2 => {
                    map.insert(format!("{key}_{}", rng.below(9)), hostile_value(rng));
                }
                _ => mutate_json(rng, map.get_mut(key).unwrap(), depth + 1),
            }
        }
        Json::Array(items) if !items.is_empty() && depth < 8 => {
            let at = rng.below(items.len());
            match rng.below(4) {
                0 => {
                    items.remove(at);
                }
                1 => items[at] = hostile_value(rng),
                _ => mutate_json(rng, &mut items[at], depth + 1),
            }
        }
        other => *other = hostile_value(rng),
    }
}

/// Interesting bytes for byte-level mutation.
const BYTES: &[u8] = b"{}[]\":,\\\n\r\t 0-9eE.+nulltruefalse\x00\xff\xc3";

/// One mutated input from `seeds`. `json`: the seeds are JSON after that
/// many leading bytes, which value-level mutations then keep.
pub fn mutate(rng: &mut Rng, seeds: &[Vec<u8>], json: Option<usize>) -> Vec<u8> {
    let mut input = seeds[rng.below(seeds.len())].clone();
    if let Some(prefix) = json
        && rng.below(2) == 0
        && let Ok(mut value) = serde_json::from_slice::<Json>(&input[prefix.min(input.len())..])
    {
        for _ in 0..1 + rng.below(3) {
            mutate_json(rng, &mut value, 0);
        }
        input.truncate(prefix);
        input.extend_from_slice(value.to_string().as_bytes());
        return input;
    }
    for _ in 0..1 + rng.below(4) {
        let len = input.len();
        match rng.below(8) {
            0 if len > 0 => {
                let at = rng.below(len);
                input[at] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let at = rng.below(len);
                input[at] = BYTES[rng.below(BYTES.len())];
            }
            2 => {
                let at = rng.below(len + 1);
                input.insert(at, BYTES[rng.below(BYTES.len())]);
            }
            3 if len > 0 => {
                let from = rng.below(len);
                let to = (from + 1 + rng.below(16)).min(len);
                input.drain(from..to);
            }
            4 if len > 0 => {
                // Repeat a slice many times: long strings, deep brackets.
                let from = rng.below(len);
                let to = (from + 1 + rng.below(8)).min(len);
                let piece = input[from..to].to_vec();
                let times = 1 + rng.below(64);
                for _ in 0..times {
                    input.splice(from..from, piece.iter().copied());
                }
            }
            5 => {
                // Splice another seed's tail.
                let other = &seeds[rng.below(seeds.len())];
                let at = rng.below(len + 1);
                let from = rng.below(other.len() + 1);
                input.truncate(at);
                input.extend_from_slice(&other[from..]);
            }
            6 if len > 0 => input.truncate(rng.below(len)),
            _ => {}
        }
    }
    input
}
