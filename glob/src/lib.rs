//! Redis's glob patterns (as `KEYS` and `PSUBSCRIBE` read them): `*` any
//! bytes, `?` one byte, `[abc]` one of a class, `[^a]` none of it, `[a-z]`
//! a range (either way round, its end may be `]`), `\x` the byte `x`
//! itself. A class left open runs to the end of the pattern, and a
//! trailing `\` is itself, as in Redis. The module parses its patterns
//! once (`Glob::parse`) when `redislock.notify` is set, so a lock command
//! only matches; the client (`Redlock::watch`) reads a server's setting
//! with the same rules, to warn when it does not cover the watched key.
#![forbid(unsafe_code)]

/// One step of a parsed pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Byte(u8),
    AnyByte,
    AnyRun,
    /// One byte in (or, `negated`, out of) the inclusive ranges.
    Class {
        negated: bool,
        ranges: Vec<(u8, u8)>,
    },
}

impl Step {
    fn matches(&self, b: u8) -> bool {
        match self {
            Step::Byte(x) => *x == b,
            Step::AnyByte => true,
            Step::AnyRun => false,
            Step::Class { negated, ranges } => ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&b)) != *negated,
        }
    }
}

/// A parsed glob pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob {
    steps: Vec<Step>,
}

impl Glob {
    /// Parses `pattern`; every byte string is a pattern.
    pub fn parse(pattern: &[u8]) -> Glob {
        let mut steps = Vec::new();
        let mut i = 0;
        while let Some(&b) = pattern.get(i) {
            i += 1;
            let step = match b {
                // Runs of stars are one star: matching stays linear in them.
                b'*' if steps.last() == Some(&Step::AnyRun) => continue,
                b'*' => Step::AnyRun,
                b'?' => Step::AnyByte,
                b'\\' => match pattern.get(i) {
                    Some(&x) => {
                        i += 1;
                        Step::Byte(x)
                    }
                    None => Step::Byte(b'\\'),
                },
                b'[' => {
                    let negated = matches!(pattern.get(i), Some(b'^'));
                    if negated {
                        i += 1;
                    }
                    let mut ranges = Vec::new();
                    while let Some(&c) = pattern.get(i) {
                        i += 1;
                        match c {
                            b']' => break,
                            b'\\' => match pattern.get(i) {
                                Some(&x) => {
                                    i += 1;
                                    ranges.push((x, x));
                                }
                                None => ranges.push((b'\\', b'\\')),
                            },
                            _ => match (pattern.get(i), pattern.get(i + 1)) {
                                (Some(b'-'), Some(&hi)) => {
                                    i += 2;
                                    ranges.push((c.min(hi), c.max(hi)));
                                }
                                _ => ranges.push((c, c)),
                            },
                        }
                    }
                    Step::Class { negated, ranges }
                }
                _ => Step::Byte(b),
            };
            steps.push(step);
        }
        Glob { steps }
    }

    /// Whether `text` matches the whole pattern. Linear backtracking to the
    /// last star only (what a glob needs): O(pattern × text) at worst.
    /// Inlinable into the module's lock commands across the crate
    /// boundary without whole-program LTO too.
    #[inline]
    pub fn matches(&self, text: &[u8]) -> bool {
        let (mut p, mut t) = (0usize, 0usize);
        // The last star seen, and the text position it was tried from.
        let mut star: Option<(usize, usize)> = None;
        loop {
            match (self.steps.get(p), text.get(t)) {
                (Some(Step::AnyRun), _) => {
                    star = Some((p, t));
                    p += 1;
                }
                (Some(step), Some(&b)) if step.matches(b) => {
                    p += 1;
                    t += 1;
                }
                (None, None) => return true,
                _ => match star {
                    // The star takes one more byte, and the rest is tried again.
                    Some((sp, st)) if st < text.len() => {
                        star = Some((sp, st + 1));
                        p = sp + 1;
                        t = st + 1;
                    }
                    _ => return false,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The syntax's meaning, written as directly as it reads (a star tries
    /// every split; any other element takes one byte), on the raw pattern:
    /// the parsed matcher must agree with it.
    fn meaning(pattern: &[u8], text: &[u8]) -> bool {
        match pattern.split_first() {
            None => text.is_empty(),
            Some((b'*', rest)) => (0..=text.len()).any(|from| text.get(from..).is_some_and(|t| meaning(rest, t))),
            Some(_) => match text.split_first() {
                None => false,
                Some((&b, text_rest)) => {
                    let (takes, len) = element(pattern, b);
                    takes && pattern.get(len..).is_some_and(|p| meaning(p, text_rest))
                }
            },
        }
    }

    /// Whether the element (not a star) that `pattern` starts with takes
    /// byte `b`, and how many pattern bytes the element is.
    fn element(pattern: &[u8], b: u8) -> (bool, usize) {
        match pattern {
            [b'?', ..] => (true, 1),
            [b'\\', x, ..] => (*x == b, 2),
            [b'[', class @ ..] => {
                let negated = class.first() == Some(&b'^');
                let mut at = usize::from(negated);
                let mut hit = false;
                loop {
                    match class.get(at..).unwrap_or_default() {
                        // Left open: the class is the rest of the pattern.
                        [] => return (hit != negated, 1 + at),
                        [b']', ..] => return (hit != negated, 1 + at + 1),
                        [b'\\', x, ..] => {
                            hit |= *x == b;
                            at += 2;
                        }
                        [from, b'-', to, ..] => {
                            hit |= (*from.min(to)..=*from.max(to)).contains(&b);
                            at += 3;
                        }
                        [x, ..] => {
                            hit |= *x == b;
                            at += 1;
                        }
                    }
                }
            }
            [x, ..] => (*x == b, 1),
            [] => (false, 0),
        }
    }

    fn m(pattern: &str, text: &str) -> bool {
        Glob::parse(pattern.as_bytes()).matches(text.as_bytes())
    }

    #[test]
    fn each_form_matches_what_redis_does() {
        assert!(m("jobs:*", "jobs:") && m("jobs:*", "jobs:42") && !m("jobs:*", "job:42") && !m("jobs:*", "xjobs:1"));
        assert!(m("*", "") && m("**", "abc") && m("a*b*c", "aXXbYYc") && !m("a*b*c", "aXXbYY"));
        assert!(m("h?llo", "hello") && !m("h?llo", "hllo") && !m("h?llo", "heello"));
        assert!(m("h[ae]llo", "hallo") && !m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo") && !m("h[^e]llo", "hello"));
        assert!(m("h[a-c]llo", "hbllo") && m("h[c-a]llo", "hbllo") && !m("h[a-c]llo", "hdllo"));
        assert!(m(r"a\*b", "a*b") && !m(r"a\*b", "aXb") && m(r"[\]]", "]") && m(r"a\", r"a\"));
        assert!(m("[abc", "b") && !m("[abc", "d"), "an open class runs to the end");
        assert!(!m("", "a") && m("", ""));
    }

    #[test]
    fn a_long_run_of_stars_stays_fast() {
        let pattern = "a*".repeat(64) + "b";
        let text = "a".repeat(4096);
        assert!(!m(&pattern, &text));
    }

    fn bytes_of(alphabet: &'static [u8], max: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(proptest::sample::select(alphabet), 0..max)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn agrees_with_the_syntax_read_directly(
            pattern in bytes_of(b"ab*?[]^-\\", 10),
            text in bytes_of(b"ab-]^\\*", 8),
        ) {
            prop_assert_eq!(Glob::parse(&pattern).matches(&text), meaning(&pattern, &text),
                "pattern {:?} text {:?}", String::from_utf8_lossy(&pattern), String::from_utf8_lossy(&text));
        }
    }
}
