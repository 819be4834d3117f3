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

/// The same hash fed piece by piece, as a [`std::fmt::Write`]: what is
/// formatted into it is hashed without first being gathered in a `String`.
pub struct Fnv1a(u64);

impl Fnv1a {
    pub fn new() -> Fnv1a {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }

    /// The hash of everything written so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a {
    fn default() -> Fnv1a {
        Fnv1a::new()
    }
}

impl std::fmt::Write for Fnv1a {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        self.0 = text.bytes().fold(self.0, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write;

    #[test]
    fn written_in_pieces_it_is_the_hash_of_the_whole() {
        let mut hash = Fnv1a::new();
        hash.write_str("ac-1|").unwrap();
        write!(hash, "{:?}", [1.5, 2.0]).unwrap();
        assert_eq!(hash.finish(), fnv1a("ac-1|[1.5, 2.0]"));
        assert_eq!(Fnv1a::new().finish(), fnv1a(""));
    }

    #[test]
    fn it_is_fnv1a_as_published() {
        // The published FNV-1a 64-bit values for "" and "a".
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
