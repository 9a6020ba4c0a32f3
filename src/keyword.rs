//! Case-insensitive keyword matching in one integer compare: every call
//! parses several keywords, so each costs a few instructions, not a loop
//! over names.

/// `word` folded to upper case and packed into a u64 (at most 8 bytes).
/// Clearing bit 5 maps exactly the letters onto `A`..`Z`, so a word equals
/// a letters-only name, ignoring case, when their lengths and folds agree.
pub const fn fold(word: &[u8]) -> Option<u64> {
    let len = word.len();
    if len > 8 {
        return None;
    }
    // The bytes packed little-endian: from 4 on, two overlapping 4-byte
    // reads (a shared byte lands on the same place in both).
    let packed = if len >= 4 {
        let first = u32::from_le_bytes([word[0], word[1], word[2], word[3]]) as u64;
        let at = len - 4;
        let last = u32::from_le_bytes([word[at], word[at + 1], word[at + 2], word[at + 3]]) as u64;
        first | last << (8 * at)
    } else {
        let mut packed = 0u64;
        let mut i = 0;
        while i < len {
            packed |= (word[i] as u64) << (8 * i);
            i += 1;
        }
        packed
    };
    Some(packed & 0xDFDF_DFDF_DFDF_DFDF)
}

/// A vocabulary table's C-string name as text, at compile time (names
/// are ASCII).
pub const fn text(name: &'static std::ffi::CStr) -> &'static str {
    match std::str::from_utf8(name.to_bytes()) {
        Ok(text) => text,
        Err(_) => panic!("names are ASCII"),
    }
}

/// A letters-only name to match against, folded at compile time.
pub struct Keyword {
    len: usize,
    folded: u64,
}

impl Keyword {
    pub const fn new(name: &str) -> Keyword {
        let bytes = name.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            assert!(bytes[i].is_ascii_alphabetic(), "keywords are letters only");
            i += 1;
        }
        match fold(bytes) {
            Some(folded) => Keyword {
                len: bytes.len(),
                folded,
            },
            None => panic!("keywords are at most 8 letters"),
        }
    }

    /// The length and fold a word must have to be this keyword, for
    /// matching several keywords in one `match`.
    pub const fn key(&self) -> (usize, u64) {
        (self.len, self.folded)
    }

    pub fn matches(&self, word: &[u8]) -> bool {
        word.len() == self.len && fold(word) == Some(self.folded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn matches_any_case_and_nothing_else() {
        const LIMIT: Keyword = Keyword::new("LIMIT");
        for yes in [&b"LIMIT"[..], b"limit", b"LiMiT"] {
            assert!(LIMIT.matches(yes), "{yes:?}");
        }
        for no in [
            &b"LIMITS"[..],
            b"LIMI",
            b"LIMIT\0",
            b"L\x09MIT",
            b"",
            b"lim1t",
        ] {
            assert!(!LIMIT.matches(no), "{no:?}");
        }
    }

    proptest! {
        #[test]
        fn agrees_with_eq_ignore_ascii_case(word in proptest::collection::vec(any::<u8>(), 0..10)) {
            for name in ["ALGO", "LIMIT", "WINDOW", "BURST", "META", "COST", "fixed", "sliding"] {
                let keyword = Keyword::new(name);
                prop_assert_eq!(keyword.matches(&word), word.eq_ignore_ascii_case(name.as_bytes()));
            }
        }
    }
}
