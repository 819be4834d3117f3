//! One hash for what must come out the same in every process, build and
//! restart: a device's place on the poll grid, its cluster of task ids, a
//! command's digest in a confirmation. std's hasher is seeded per process,
//! so it cannot serve any of them.

/// 64-bit FNV-1a of `text`: small, fixed, and spreads short ids well.
pub fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_fnv1a_as_published() {
        // The published FNV-1a 64-bit values for "" and "a".
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
