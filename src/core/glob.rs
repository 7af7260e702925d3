//! Redis's glob patterns (as `KEYS` and `PSUBSCRIBE` read them): `*` any
//! bytes, `?` one byte, `[abc]` one of a class, `[^a]` none of it, `[a-z]`
//! a range (either way round, its end may be `]`), `\x` the byte `x`
//! itself. A class left open runs to the end of the pattern, and a
//! trailing `\` is itself, as in Redis (`stringmatchlen`). Patterns are
//! parsed once (`Glob::parse`) when `redislock.notify` is set, so a lock
//! command only matches.

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

    /// A direct transcription of Redis's `stringmatchlen` (recursive at
    /// each star), the reference the parsed matcher must agree with.
    fn reference(pattern: &[u8], text: &[u8]) -> bool {
        let (mut p, mut t) = (0usize, 0usize);
        while p < pattern.len() && t < text.len() {
            match pattern[p] {
                b'*' => {
                    while p + 1 < pattern.len() && pattern[p + 1] == b'*' {
                        p += 1;
                    }
                    if p + 1 == pattern.len() {
                        return true;
                    }
                    return (t..=text.len()).any(|from| reference(&pattern[p + 1..], &text[from..]));
                }
                b'?' => t += 1,
                b'[' => {
                    p += 1;
                    let not = p < pattern.len() && pattern[p] == b'^';
                    if not {
                        p += 1;
                    }
                    let mut hit = false;
                    loop {
                        if p >= pattern.len() {
                            p -= 1;
                            break;
                        }
                        if pattern[p] == b'\\' && p + 1 < pattern.len() {
                            p += 1;
                            hit |= pattern[p] == text[t];
                        } else if pattern[p] == b']' {
                            break;
                        } else if p + 2 < pattern.len() && pattern[p + 1] == b'-' {
                            let (lo, hi) = (pattern[p].min(pattern[p + 2]), pattern[p].max(pattern[p + 2]));
                            p += 2;
                            hit |= (lo..=hi).contains(&text[t]);
                        } else {
                            hit |= pattern[p] == text[t];
                        }
                        p += 1;
                    }
                    if hit == not {
                        return false;
                    }
                    t += 1;
                }
                c => {
                    let c = if c == b'\\' && p + 1 < pattern.len() {
                        p += 1;
                        pattern[p]
                    } else {
                        c
                    };
                    if c != text[t] {
                        return false;
                    }
                    t += 1;
                }
            }
            p += 1;
        }
        t == text.len() && pattern[p..].iter().all(|&c| c == b'*')
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
        fn agrees_with_redis_stringmatchlen(
            pattern in bytes_of(b"ab*?[]^-\\", 10),
            text in bytes_of(b"ab-]^\\*", 8),
        ) {
            prop_assert_eq!(Glob::parse(&pattern).matches(&text), reference(&pattern, &text),
                "pattern {:?} text {:?}", String::from_utf8_lossy(&pattern), String::from_utf8_lossy(&text));
        }
    }
}
