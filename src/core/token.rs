//! Fencing tokens as numbers: what a token is and which one follows.
//! The counter itself, persisted and raised from the wall clock, is the
//! glue's (`fencing`).

/// Tokens are Redis integers: non-negative and at most `i64::MAX`.
pub type Token = i64;

/// The token that follows `counter` given a floor of `min`; `None` when
/// the token space is exhausted.
pub fn next_token(counter: Token, min: Token) -> Option<Token> {
    Some(counter.checked_add(1)?.max(min))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_token_is_above_the_counter_and_at_least_the_floor() {
        assert_eq!(next_token(5, 0), Some(6));
        assert_eq!(next_token(5, 9), Some(9));
        assert_eq!(next_token(i64::MAX, 0), None);
    }
}
