//! The unit tests of command argument parsing.

use super::*;

const MAX: i64 = 3_600_000;
const OWNER: i64 = 256;
const KEYS: i64 = 1024;

fn argv<'a>(words: &[&'a str]) -> Vec<&'a [u8]> {
    words.iter().map(|w| w.as_bytes()).collect()
}

fn message(e: ArgError) -> String {
    e.message().to_string_lossy().into_owned()
}

#[test]
fn integers_are_parsed_strictly() {
    assert_eq!(parse_i64(b"0"), Some(0));
    assert_eq!(parse_i64(b"42"), Some(42));
    assert_eq!(parse_i64(b"-7"), Some(-7));
    assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
    assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
    for bad in ["", "-", "-0", "007", "+5", " 5", "5 ", "1e3", "1.5", "abc", "9223372036854775808", "5\0"] {
        assert_eq!(parse_i64(bad.as_bytes()), None, "{bad:?} must not parse");
    }
}

#[test]
fn beyond_64_bits_is_told_apart_from_not_a_number() {
    assert_eq!(parse_int(b"9223372036854775807"), Ok(i64::MAX));
    assert_eq!(parse_int(b"9223372036854775808"), Err(IntError::TooLarge));
    assert_eq!(parse_int(b"99999999999999999999999"), Err(IntError::TooLarge));
    assert_eq!(parse_int(b"-9223372036854775808"), Ok(i64::MIN));
    assert_eq!(parse_int(b"-9223372036854775809"), Err(IntError::TooSmall));
    for bad in ["99999999999999999999999x", "099999999999999999999999", "+99999999999999999999999", "9 9"] {
        assert_eq!(parse_int(bad.as_bytes()), Err(IntError::Invalid), "{bad:?}");
    }
}

#[test]
fn the_owner_a_grant_stores_is_bounded() {
    let at_limit = "o".repeat(256);
    let a = argv(&["LOCK.ACQUIRE", "k", &at_limit, "10"]);
    assert_eq!(parse_acquire(&a, MAX, OWNER).expect("256 bytes").owner.len(), 256);
    let over = "o".repeat(257);
    let a = argv(&["LOCK.ACQUIRE", "k", &over, "10"]);
    let err = parse_acquire(&a, MAX, OWNER).expect_err("257 bytes");
    assert_eq!(message(err), "ERR owner is longer than redislock.max-owner-len (256 bytes)");
    assert!(parse_acquire(&a, MAX, 257).is_ok());
    // RELEASE and EXTEND compare, they store nothing: any length.
    assert!(parse_release(&argv(&["LOCK.RELEASE", "k", &over])).is_ok());
    assert!(parse_extend(&argv(&["LOCK.EXTEND", "k", &over, "10"]), MAX).is_ok());
}

#[test]
fn acquire_parses_the_plain_form() {
    let a = argv(&["LOCK.ACQUIRE", "k", "me", "1000"]);
    let req = parse_acquire(&a, MAX, OWNER).expect("valid");
    assert_eq!(*req.key, b"k".as_slice());
    assert_eq!(*req.owner, b"me".as_slice());
    assert_eq!(req.request.ttl_ms, 1000);
    assert_eq!(req.request.fence, 0);
}

#[test]
fn acquire_parses_fence_in_any_case() {
    for word in ["FENCE", "fence", "FeNcE"] {
        let a = argv(&["LOCK.ACQUIRE", "k", "me", "1000", word, "77"]);
        assert_eq!(parse_acquire(&a, MAX, OWNER).expect("valid").request.fence, 77);
    }
}

#[test]
fn acquire_parses_wait_and_fence_in_any_order() {
    let a = argv(&["LOCK.ACQUIRE", "k", "me", "1000", "wait", "0", "FENCE", "9"]);
    let req = parse_acquire(&a, MAX, OWNER).expect("valid");
    assert_eq!((req.wait, req.request.fence), (Some(0), 9));
    let a = argv(&["LOCK.ACQUIRE", "k", "me", "1000", "WAIT", "250"]);
    assert_eq!(parse_acquire(&a, MAX, OWNER).expect("valid").wait, Some(250));
    let a = argv(&["LOCK.ACQUIRE", "k", "me", "1000"]);
    assert_eq!(parse_acquire(&a, MAX, OWNER).expect("valid").wait, None);
}

#[test]
fn acquire_rejects_bad_input_with_clear_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["LOCK.ACQUIRE", "k", "me"], "ERR wrong number of arguments for 'lock.acquire' command"),
        (&["LOCK.ACQUIRE"], "ERR wrong number of arguments for 'lock.acquire' command"),
        (&["LOCK.ACQUIRE", "k", "", "10"], "ERR owner must not be empty"),
        (&["LOCK.ACQUIRE", "k", "me", "0"], "ERR ttl must be a positive integer (milliseconds)"),
        (&["LOCK.ACQUIRE", "k", "me", "-5"], "ERR ttl must be a positive integer (milliseconds)"),
        (&["LOCK.ACQUIRE", "k", "me", "1.5"], "ERR ttl must be a positive integer (milliseconds)"),
        (&["LOCK.ACQUIRE", "k", "me", "3600001"], "ERR ttl exceeds redislock.max-ttl (3600000 ms)"),
        (&["LOCK.ACQUIRE", "k", "me", "10", "FENCE"], "ERR FENCE needs a token"),
        (&["LOCK.ACQUIRE", "k", "me", "10", "FENCE", "-1"], "ERR token must be a non-negative integer"),
        (&["LOCK.ACQUIRE", "k", "me", "10", "FENCE", "x"], "ERR token must be a non-negative integer"),
        (&["LOCK.ACQUIRE", "k", "me", "10", "FENCE", "1", "FENCE", "2"], "ERR FENCE given more than once"),
        (&["LOCK.ACQUIRE", "k", "me", "10", "NX"], "ERR unknown option 'NX'"),
        (&["LOCK.ACQUIRE", "k", "me", "10", "WAIT"], "ERR WAIT needs a timeout"),
        (&["LOCK.ACQUIRE", "k", "me", "10", "WAIT", "-1"], "ERR timeout must be a non-negative integer (milliseconds)"),
        (&["LOCK.ACQUIRE", "k", "me", "10", "WAIT", "x"], "ERR timeout must be a non-negative integer (milliseconds)"),
        (&["LOCK.ACQUIRE", "k", "me", "10", "WAIT", "1", "wait", "2"], "ERR WAIT given more than once"),
        (&["LOCK.ACQUIRE", "k", "me", "10", "FENCE", "1", "bogus", "2"], "ERR unknown option 'bogus'"),
        // Beyond 64 bits: too large, not "not a number".
        (&["LOCK.ACQUIRE", "k", "me", "99999999999999999999999"], "ERR ttl exceeds redislock.max-ttl (3600000 ms)"),
        (&["LOCK.ACQUIRE", "k", "me", "9223372036854775808"], "ERR ttl exceeds redislock.max-ttl (3600000 ms)"),
        (&["LOCK.ACQUIRE", "k", "me", "-99999999999999999999999"], "ERR ttl must be a positive integer (milliseconds)"),
        (&["LOCK.ACQUIRE", "k", "me", "99999999999999999999999x"], "ERR ttl must be a positive integer (milliseconds)"),
        (&["LOCK.ACQUIRE", "k", "me", "10", "FENCE", "99999999999999999999999"], "ERR token is too large (at most 9223372036854775807)"),
        (&["LOCK.ACQUIRE", "k", "me", "10", "FENCE", "-99999999999999999999999"], "ERR token must be a non-negative integer"),
        (
            &["LOCK.ACQUIRE", "k", "me", "10", "WAIT", "99999999999999999999999"],
            "ERR timeout is too large (at most 9223372036854775807 milliseconds; 0 waits without limit)",
        ),
        (
            &["LOCK.ACQUIRE", "k", "me", "10", "WAIT", "-99999999999999999999999"],
            "ERR timeout must be a non-negative integer (milliseconds)",
        ),
    ];
    for (words, expected) in cases {
        let a = argv(words);
        let err = parse_acquire(&a, MAX, OWNER).expect_err("must be refused");
        assert_eq!(message(err), *expected, "for {words:?}");
    }
}

#[test]
fn error_messages_never_carry_protocol_bytes() {
    let option: &[u8] = b"x\r\n-ERR\0injected";
    let a: Vec<&[u8]> = vec![b"LOCK.ACQUIRE", b"k", b"me", b"10", option];
    let text = message(parse_acquire(&a, MAX, OWNER).expect_err("unknown option"));
    assert_eq!(text, "ERR unknown option 'x??-ERR?injected'");
    let long = vec![b'a'; 1000];
    let a: Vec<&[u8]> = vec![b"LOCK.ACQUIRE", b"k", b"me", b"10", &long];
    let text = message(parse_acquire(&a, MAX, OWNER).expect_err("unknown option"));
    assert!(text.len() < 100, "{text}");
}

#[test]
fn release_extend_info_apply_check_their_arity() {
    assert!(parse_release(&argv(&["LOCK.RELEASE", "k", "me"])).is_ok());
    assert_eq!(
        message(parse_release(&argv(&["LOCK.RELEASE", "k"])).expect_err("arity")),
        "ERR wrong number of arguments for 'lock.release' command"
    );
    assert_eq!(
        message(parse_release(&argv(&["LOCK.RELEASE", "k", "me", "x"])).expect_err("arity")),
        "ERR wrong number of arguments for 'lock.release' command"
    );
    assert_eq!(parse_extend(&argv(&["LOCK.EXTEND", "k", "me", "5"]), MAX).expect("valid").ttl_ms, 5);
    assert_eq!(
        message(parse_extend(&argv(&["LOCK.EXTEND", "k", "me", "0"]), MAX).expect_err("ttl")),
        "ERR ttl must be a positive integer (milliseconds)"
    );
    assert_eq!(
        message(parse_extend(&argv(&["LOCK.EXTEND", "k", "me"]), MAX).expect_err("arity")),
        "ERR wrong number of arguments for 'lock.extend' command"
    );
    assert!(parse_info(&argv(&["LOCK.INFO", "k"])).is_ok());
    assert_eq!(message(parse_info(&argv(&["LOCK.INFO"])).expect_err("arity")), "ERR wrong number of arguments for 'lock.info' command");
    let words = argv(&["LOCK.APPLY", "k", "me", "9", "0"]);
    let apply = parse_apply(&words).expect("valid");
    assert_eq!((apply.token, apply.deadline_ms), (9, 0));
    assert_eq!(parse_apply(&argv(&["LOCK.APPLY", "k", "me", "9", "-1"])).expect_err("deadline"), ArgError::BadDeadline);
    assert_eq!(parse_apply(&argv(&["LOCK.APPLY", "k", "", "9", "1"])).expect_err("owner"), ArgError::EmptyOwner);
}

#[test]
fn shared_and_limit_parse_in_any_order_and_limit_needs_shared() {
    let a = argv(&["LOCK.ACQUIRE", "k", "me", "100", "LIMIT", "4", "WAIT", "5", "shared"]);
    let req = parse_acquire(&a, MAX, OWNER).expect("valid");
    assert_eq!((req.request.mode, req.request.limit, req.wait), (Mode::Shared, Some(4), Some(5)));
    let a = argv(&["LOCK.ACQUIRE", "k", "me", "100", "SHARED"]);
    let req = parse_acquire(&a, MAX, OWNER).expect("valid");
    assert_eq!((req.request.mode, req.request.limit), (Mode::Shared, None));
    let a = argv(&["LOCK.ACQUIRE", "k", "me", "100", "LIMIT", "4"]);
    assert_eq!(parse_acquire(&a, MAX, OWNER).expect_err("no SHARED"), ArgError::LimitWithoutShared);
    for bad in ["0", "-1", "x", "100001", "99999999999999999999"] {
        let a = argv(&["LOCK.ACQUIRE", "k", "me", "100", "SHARED", "LIMIT", bad]);
        assert_eq!(parse_acquire(&a, MAX, OWNER).expect_err(bad), ArgError::BadLimit, "{bad}");
    }
    let a = argv(&["LOCK.ACQUIRE", "k", "me", "100", "SHARED", "SHARED"]);
    assert_eq!(parse_acquire(&a, MAX, OWNER).expect_err("twice"), ArgError::Repeated("SHARED"));
    let a = argv(&["LOCK.ACQUIRE", "k", "me", "100", "SHARED", "LIMIT"]);
    assert_eq!(parse_acquire(&a, MAX, OWNER).expect_err("no value"), ArgError::MissingValue("LIMIT"));
}

#[test]
fn the_shared_apply_form_carries_limit_and_key_deadline() {
    let a = argv(&["LOCK.APPLY", "k", "me", "9", "1000", "SHARED", "0", "2000"]);
    let req = parse_apply(&a).expect("valid");
    assert_eq!(req.shared, Some(ApplyShared { limit: 0, key_deadline_ms: 2000, permits: 1 }));
    let a = argv(&["LOCK.APPLY", "k", "me", "9", "1000", "SHARED", "4", "0"]);
    assert_eq!(parse_apply(&a).expect("valid").shared, Some(ApplyShared { limit: 4, key_deadline_ms: 0, permits: 1 }));
    let a = argv(&["LOCK.APPLY", "k", "me", "9", "1000", "SHARED", "4", "0", "PERMITS", "3"]);
    assert_eq!(parse_apply(&a).expect("valid").shared, Some(ApplyShared { limit: 4, key_deadline_ms: 0, permits: 3 }));
    // Above the limit: a holder a LOCK.RESIZE shrank the semaphore under.
    let a = argv(&["LOCK.APPLY", "k", "me", "9", "1000", "SHARED", "4", "0", "PERMITS", "5"]);
    assert_eq!(parse_apply(&a).expect("valid").shared, Some(ApplyShared { limit: 4, key_deadline_ms: 0, permits: 5 }));
    for bad in ["0", "100001", "x"] {
        let a = argv(&["LOCK.APPLY", "k", "me", "9", "1000", "SHARED", "4", "0", "PERMITS", bad]);
        assert_eq!(parse_apply(&a).expect_err(bad), ArgError::BadPermits);
    }
    let a = argv(&["LOCK.APPLY", "k", "me", "9", "1000", "SHARED", "0", "0", "PERMITS", "2"]);
    assert_eq!(parse_apply(&a).expect_err("a lock without LIMIT"), ArgError::BadPermits);
    let a = argv(&["LOCK.APPLY", "k", "me", "9", "1000", "SHARED", "4", "0", "PERMITS"]);
    assert!(matches!(parse_apply(&a).expect_err("no k"), ArgError::Arity(_)));
    let a = argv(&["LOCK.APPLY", "k", "me", "9", "1000", "SHARED", "4", "-5"]);
    assert_eq!(parse_apply(&a).expect_err("deadline"), ArgError::BadDeadline);
    let a = argv(&["LOCK.APPLY", "k", "me", "9", "1000", "OTHER", "4", "5"]);
    assert!(matches!(parse_apply(&a).expect_err("word"), ArgError::Arity(_)));
}

#[test]
fn top_takes_an_optional_count() {
    assert_eq!(parse_top(&argv(&["LOCK.TOP"])).ok(), Some(TOP_DEFAULT_COUNT));
    assert_eq!(parse_top(&argv(&["LOCK.TOP", "count", "3"])).ok(), Some(3));
    assert_eq!(parse_top(&argv(&["LOCK.TOP", "COUNT", "0"])).ok(), Some(0));
    for (bad, expected) in [
        (vec!["LOCK.TOP", "COUNT", "-1"], "ERR COUNT must be a non-negative integer"),
        (vec!["LOCK.TOP", "COUNT", "x"], "ERR COUNT must be a non-negative integer"),
        (vec!["LOCK.TOP", "LIMIT", "3"], "ERR unknown option"),
        (vec!["LOCK.TOP", "COUNT"], "ERR wrong number of arguments for 'lock.top' command"),
        (vec!["LOCK.TOP", "COUNT", "1", "2"], "ERR wrong number of arguments for 'lock.top' command"),
    ] {
        let e = parse_top(&argv(&bad)).err().map(message).unwrap_or_default();
        assert!(e.starts_with(expected), "{bad:?}: {e}");
    }
}

#[test]
fn macquire_takes_numkeys_keys_and_acquire_s_options() {
    let a = argv(&["LOCK.MACQUIRE", "2", "a", "b", "me", "1000", "shared", "FENCE", "7", "SESSION"]);
    let req = parse_macquire(&a, MAX, OWNER, KEYS).expect("valid");
    assert_eq!(req.keys.len(), 2);
    assert_eq!(req.keys[1], b"b".as_slice());
    assert_eq!(*req.owner, b"me".as_slice());
    assert_eq!((req.set.request.mode, req.set.semaphore), (Mode::Shared, None));
    assert_eq!((req.set.request.ttl_ms, req.set.request.fence, req.set.request.session, req.wait), (1000, 7, Some(0), None));
    let one = argv(&["LOCK.MACQUIRE", "1", "a", "me", "10", "WAIT", "5"]);
    let req = parse_macquire(&one, MAX, OWNER, KEYS).expect("one key");
    assert_eq!((req.keys.len(), req.wait), (1, Some(5)));
}

#[test]
fn macquire_refuses_bad_numkeys_a_key_twice_and_limit() {
    let err = |words: &[&str]| message(parse_macquire(&argv(words), MAX, OWNER, KEYS).expect_err(&words.join(" ")));
    let numkeys = "ERR numkeys must be a positive integer, at most the number of keys given";
    assert_eq!(err(&["LOCK.MACQUIRE", "0", "a", "me", "10"]), numkeys);
    assert_eq!(err(&["LOCK.MACQUIRE", "-1", "a", "me", "10"]), numkeys);
    assert_eq!(err(&["LOCK.MACQUIRE", "x", "a", "me", "10"]), numkeys);
    assert_eq!(err(&["LOCK.MACQUIRE", "9", "a", "me", "10"]), numkeys);
    assert_eq!(err(&["LOCK.MACQUIRE", "3", "a", "me", "10"]), "ERR wrong number of arguments for 'lock.macquire' command");
    assert_eq!(err(&["LOCK.MACQUIRE", "1"]), numkeys);
    assert_eq!(err(&["LOCK.MACQUIRE"]), "ERR wrong number of arguments for 'lock.macquire' command");
    assert_eq!(err(&["LOCK.MACQUIRE", "3", "a", "b", "a", "me", "10"]), "ERR key 'a' is named twice");
    assert_eq!(
        err(&["LOCK.MACQUIRE", "1", "a", "me", "10", "SHARED", "LIMIT", "2"]),
        "ERR LOCK.MACQUIRE takes no LIMIT: each key of a set is a lock, exclusive or SHARED"
    );
    assert_eq!(err(&["LOCK.MACQUIRE", "1", "a", "me", "0"]), "ERR ttl must be a positive integer (milliseconds)");
    assert_eq!(err(&["LOCK.MACQUIRE", "1", "a", "", "10"]), "ERR owner must not be empty");
}

#[test]
fn macquire_takes_a_semaphore_as_its_last_key() {
    let a = argv(&["LOCK.MACQUIRE", "3", "s0", "s1", "rec", "me", "1000", "semaphore", "4", "WAIT", "5"]);
    let req = parse_macquire(&a, MAX, OWNER, KEYS).expect("valid");
    assert_eq!((req.keys.len(), req.set.semaphore, req.wait), (3, Some(4), Some(5)));
    assert_eq!(req.set.request.mode, Mode::Exclusive);
    let permit = req.set.member(2, 3);
    assert_eq!((permit.mode, permit.limit, permit.permits, permit.ttl_ms), (Mode::Shared, Some(4), 1, 1000));
    assert_eq!(req.set.member(1, 3), req.set.request, "the others are the set's locks");
    let err = |words: &[&str]| message(parse_macquire(&argv(words), MAX, OWNER, KEYS).expect_err(&words.join(" ")));
    let bad = "ERR SEMAPHORE must be an integer from 1 to 100000";
    assert_eq!(err(&["LOCK.MACQUIRE", "2", "a", "r", "me", "10", "SEMAPHORE", "0"]), bad);
    assert_eq!(err(&["LOCK.MACQUIRE", "2", "a", "r", "me", "10", "SEMAPHORE", "100001"]), bad);
    assert_eq!(err(&["LOCK.MACQUIRE", "2", "a", "r", "me", "10", "SEMAPHORE", "x"]), bad);
    assert_eq!(err(&["LOCK.MACQUIRE", "2", "a", "r", "me", "10", "SEMAPHORE"]), "ERR SEMAPHORE needs a limit");
    assert_eq!(
        err(&["LOCK.MACQUIRE", "2", "a", "r", "me", "10", "SEMAPHORE", "2", "SEMAPHORE", "2"]),
        "ERR SEMAPHORE given more than once"
    );
    assert_eq!(
        err(&["LOCK.MACQUIRE", "1", "r", "me", "10", "SEMAPHORE", "2"]),
        "ERR SEMAPHORE needs two keys at least: the set's locks, then the semaphore"
    );
    assert_eq!(
        err(&["LOCK.MACQUIRE", "2", "a", "r", "me", "10", "SHARED", "SEMAPHORE", "2"]),
        "ERR SEMAPHORE takes no SHARED: the set's locks are exclusive"
    );
    let one = |words: &[&str]| message(parse_acquire(&argv(words), MAX, OWNER).expect_err(&words.join(" ")));
    assert_eq!(
        one(&["LOCK.ACQUIRE", "a", "me", "10", "SEMAPHORE", "2"]),
        "ERR SEMAPHORE belongs to LOCK.MACQUIRE (one key's semaphore: SHARED LIMIT n)"
    );
}

/// `redislock.max-set-keys` bounds every set command, before its keys are
/// looked at (a key named twice beyond the bound is not searched for),
/// and where Redis asks for the keys.
#[test]
fn numkeys_above_max_set_keys_is_refused_by_every_set_command() {
    let over = "ERR numkeys exceeds redislock.max-set-keys (2 keys)";
    let three = ["a", "b", "a"];
    fn words<'a>(cmd: &'a str, n: &'a str, keys: &[&'a str], tail: &[&'a str]) -> Vec<&'a [u8]> {
        let mut w = vec![cmd, n];
        w.extend_from_slice(keys);
        w.extend_from_slice(tail);
        argv(&w)
    }
    let acquire = words("LOCK.MACQUIRE", "3", &three, &["me", "1000"]);
    assert_eq!(message(parse_macquire(&acquire, MAX, OWNER, 2).expect_err("over")), over);
    assert_eq!(message(parse_mrelease(&words("LOCK.MRELEASE", "3", &three, &["me"]), 2).expect_err("over")), over);
    assert_eq!(message(parse_mextend(&words("LOCK.MEXTEND", "3", &three, &["me", "10"]), MAX, 2).expect_err("over")), over);
    let huge = words("LOCK.MACQUIRE", "99999999999999999999", &three, &["me", "1000"]);
    assert_eq!(message(parse_macquire(&huge, MAX, OWNER, 2).expect_err("beyond 64 bits")), over);
    // At the bound: accepted.
    let two = argv(&["LOCK.MACQUIRE", "2", "a", "b", "me", "1000"]);
    assert_eq!(parse_macquire(&two, MAX, OWNER, 2).expect("at the bound").keys.len(), 2);
    assert_eq!(numkeys(&two, 2), Some(2));
    assert_eq!(numkeys(&two, 1), None, "no key reported beyond the bound");
    assert_eq!(numkeys(&acquire, 2), None);
}

#[test]
fn mrelease_and_mextend_take_exactly_their_arguments() {
    let words = argv(&["LOCK.MRELEASE", "2", "a", "b", "me"]);
    let r = parse_mrelease(&words, KEYS).expect("valid");
    assert_eq!((r.keys.len(), r.owner), (2, b"me".as_slice()));
    let words = argv(&["LOCK.MEXTEND", "1", "a", "me", "500"]);
    let e = parse_mextend(&words, MAX, KEYS).expect("valid");
    assert_eq!((e.keys.len(), e.owner, e.ttl_ms), (1, b"me".as_slice(), 500));
    let arity = |e: ArgError| message(e).contains("wrong number of arguments");
    assert!(arity(parse_mrelease(&argv(&["LOCK.MRELEASE", "1", "a", "me", "extra"]), KEYS).expect_err("too many")));
    assert!(arity(parse_mextend(&argv(&["LOCK.MEXTEND", "2", "a", "b", "me"]), MAX, KEYS).expect_err("no ttl")));
    assert_eq!(
        message(parse_mrelease(&argv(&["LOCK.MRELEASE", "2", "a", "a", "me"]), KEYS).expect_err("twice")),
        "ERR key 'a' is named twice"
    );
}

#[test]
fn permits_take_k_of_a_semaphore_s_limit() {
    let a = argv(&["LOCK.ACQUIRE", "k", "me", "1000", "SHARED", "LIMIT", "5", "PERMITS", "3"]);
    let req = parse_acquire(&a, MAX, OWNER).expect("valid");
    assert_eq!((req.request.limit, req.request.permits), (Some(5), 3));
    let a = argv(&["LOCK.ACQUIRE", "k", "me", "1000", "PERMITS", "5", "SHARED", "LIMIT", "5"]);
    assert_eq!(parse_acquire(&a, MAX, OWNER).expect("any order").request.permits, 5);
    let a = argv(&["LOCK.ACQUIRE", "k", "me", "1000", "SHARED", "LIMIT", "5"]);
    assert_eq!(parse_acquire(&a, MAX, OWNER).expect("one").request.permits, 1);
    let err = |words: &[&str]| message(parse_acquire(&argv(words), MAX, OWNER).expect_err(&words.join(" ")));
    for bad in ["6", "0", "-1", "x"] {
        assert_eq!(
            err(&["LOCK.ACQUIRE", "k", "me", "1000", "SHARED", "LIMIT", "5", "PERMITS", bad]),
            "ERR PERMITS must be between 1 and LIMIT"
        );
    }
    assert_eq!(err(&["LOCK.ACQUIRE", "k", "me", "1000", "SHARED", "PERMITS", "2"]), "ERR syntax error: PERMITS needs SHARED LIMIT");
    assert_eq!(err(&["LOCK.ACQUIRE", "k", "me", "1000", "SHARED", "LIMIT", "5", "PERMITS"]), "ERR PERMITS needs a number of permits");
    assert_eq!(
        err(&["LOCK.ACQUIRE", "k", "me", "1000", "SHARED", "LIMIT", "5", "PERMITS", "1", "PERMITS", "1"]),
        "ERR PERMITS given more than once"
    );
    assert_eq!(
        message(
            parse_macquire(&argv(&["LOCK.MACQUIRE", "1", "k", "me", "1000", "SHARED", "PERMITS", "2"]), MAX, OWNER, KEYS).expect_err("set")
        ),
        "ERR syntax error: PERMITS needs SHARED LIMIT"
    );
}

#[test]
fn a_value_travels_with_an_exclusive_grant_and_is_bounded() {
    let a = argv(&["LOCK.ACQUIRE", "k", "me", "10", "VALUE", "host:1", "WAIT", "0"]);
    let req = parse_acquire(&a, MAX, OWNER).expect("valid");
    assert_eq!(req.value.copied(), Some(&b"host:1"[..]));
    assert_eq!(req.wait, Some(0));
    assert!(parse_acquire(&argv(&["LOCK.ACQUIRE", "k", "me", "10"]), MAX, OWNER).expect("valid").value.is_none());
    // A shared holder stores its own value (a group member's address).
    let member = argv(&["LOCK.ACQUIRE", "k", "me", "10", "SHARED", "LIMIT", "3", "PERMITS", "2", "VALUE", "10.0.0.1:80"]);
    let req = parse_acquire(&member, MAX, OWNER).expect("valid");
    assert_eq!((req.value.copied(), req.request.permits), (Some(&b"10.0.0.1:80"[..]), 2));
    let at_limit = "v".repeat(256);
    assert!(parse_acquire(&argv(&["LOCK.ACQUIRE", "k", "me", "10", "value", &at_limit]), MAX, OWNER).is_ok());
    let over = "v".repeat(257);
    let cases = [
        (vec!["LOCK.ACQUIRE", "k", "me", "10", "VALUE", &over], "ERR value is longer than redislock.max-owner-len (256 bytes)"),
        (vec!["LOCK.ACQUIRE", "k", "me", "10", "VALUE"], "ERR VALUE needs a text"),
        (vec!["LOCK.ACQUIRE", "k", "me", "10", "VALUE", "a", "VALUE", "b"], "ERR VALUE given more than once"),
        (vec!["LOCK.ACQUIRE", "k", "me", "10", "SHARED", "VALUE", &over], "ERR value is longer than redislock.max-owner-len (256 bytes)"),
    ];
    for (words, expected) in cases {
        assert_eq!(message(parse_acquire(&argv(&words), MAX, OWNER).expect_err("refused")), expected, "{words:?}");
    }
    let set = argv(&["LOCK.MACQUIRE", "2", "a", "b", "me", "10", "VALUE", "x"]);
    assert_eq!(
        message(parse_macquire(&set, MAX, OWNER, KEYS).expect_err("refused")),
        "ERR LOCK.MACQUIRE takes no VALUE: a value belongs to one lock (LOCK.ACQUIRE)"
    );
}

#[test]
fn a_proclamation_names_key_owner_and_value() {
    let p = argv(&["LOCK.PROCLAIM", "k", "me", "host:2"]);
    let req = parse_proclaim(&p, OWNER).expect("valid");
    assert_eq!((*req.key, req.owner, req.value), (&b"k"[..], &b"me"[..], &b"host:2"[..]));
    assert_eq!(parse_proclaim(&argv(&["LOCK.PROCLAIM", "k", "me", ""]), OWNER).expect("empty clears").value, b"");
    let over = "v".repeat(257);
    assert_eq!(
        message(parse_proclaim(&argv(&["LOCK.PROCLAIM", "k", "me", &over]), OWNER).expect_err("long")),
        "ERR value is longer than redislock.max-owner-len (256 bytes)"
    );
    assert_eq!(
        message(parse_proclaim(&argv(&["LOCK.PROCLAIM", "k", "me"]), OWNER).expect_err("arity")),
        "ERR wrong number of arguments for 'lock.proclaim' command"
    );
    assert_eq!(message(parse_proclaim(&argv(&["LOCK.PROCLAIM", "k", "", "v"]), OWNER).expect_err("owner")), "ERR owner must not be empty");
}

#[test]
fn apply_carries_a_value() {
    let a = argv(&["LOCK.APPLY", "k", "me", "7", "1000", "VALUE", "host:3"]);
    let req = parse_apply(&a).expect("valid");
    assert_eq!((req.token, req.deadline_ms, req.value), (7, 1000, &b"host:3"[..]));
    assert_eq!(parse_apply(&argv(&["LOCK.APPLY", "k", "me", "7", "1000"])).expect("valid").value, b"");
    assert!(parse_apply(&argv(&["LOCK.APPLY", "k", "me", "7", "1000", "VALUE"])).is_err());
    // A shared holder's value comes last, after its PERMITS.
    let a = argv(&["LOCK.APPLY", "k", "me", "7", "1000", "SHARED", "4", "0", "PERMITS", "2", "VALUE", "10.0.0.1"]);
    let req = parse_apply(&a).expect("valid");
    assert_eq!((req.shared.map(|s| s.permits), req.value), (Some(2), &b"10.0.0.1"[..]));
    let a = argv(&["LOCK.APPLY", "k", "me", "7", "1000", "SHARED", "0", "0", "VALUE", "x"]);
    assert_eq!(parse_apply(&a).expect("valid").value, b"x");
    let a = argv(&["LOCK.APPLY", "k", "me", "7", "1000", "SHARED", "0", "0", "VALUE"]);
    assert!(parse_apply(&a).is_err(), "VALUE without its text");
}

/// The words of a LOCK.APPLY as its encoder lays them out (what a replica
/// or an AOF load receives), after the command and the key.
fn rendered(pieces: &[crate::api::Piece<'_>]) -> Vec<Vec<u8>> {
    use crate::api::Piece;
    let mut words = vec![APPLY.to_bytes().to_vec(), b"k".to_vec()];
    for piece in pieces {
        words.push(match *piece {
            Piece::Bytes(bytes) => bytes.to_vec(),
            Piece::Int(n) => n.to_string().into_bytes(),
            Piece::Word(word) => word.to_bytes().to_vec(),
            Piece::Arg(_) => panic!("no command argument here"),
        });
    }
    words
}

fn shared_terms() -> impl proptest::strategy::Strategy<Value = Option<ApplyShared>> {
    use proptest::prelude::*;
    prop_oneof![
        Just(None),
        (0i64..=i64::MAX).prop_map(|key_deadline_ms| Some(ApplyShared { limit: 0, key_deadline_ms, permits: 1 })),
        (1u32..=1000, 0i64..=i64::MAX, any::<prop::sample::Index>()).prop_map(|(limit, key_deadline_ms, k)| {
            let permits = u32::try_from(k.index(usize::try_from(limit).unwrap_or(1))).unwrap_or(0) + 1;
            Some(ApplyShared { limit, key_deadline_ms, permits })
        }),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..proptest::prelude::ProptestConfig::default() })]

    /// What the one encoder of LOCK.APPLY lays out, its parser reads back
    /// as it was: owner, token, deadline, a shared holder's terms (its
    /// permits above 1 only), the holder's value, exclusive or shared.
    #[test]
    fn the_apply_encoder_and_parser_agree(
        owner in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..24),
        token in 0i64..=i64::MAX,
        deadline_ms in 0i64..=i64::MAX,
        shared in shared_terms(),
        value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24),
    ) {
        let encoded = encode_apply(crate::api::Piece::Bytes(&owner), token, deadline_ms, shared, &value);
        let words = rendered(encoded.pieces());
        let argv: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
        let apply = parse_apply(&argv).expect("what the encoder writes parses");
        proptest::prop_assert_eq!(apply.owner, &owner[..]);
        proptest::prop_assert_eq!(apply.token, token);
        proptest::prop_assert_eq!(apply.deadline_ms, deadline_ms);
        proptest::prop_assert_eq!(apply.shared, shared);
        proptest::prop_assert_eq!(apply.value, &value[..]);
        let weighted = shared.is_some_and(|terms| terms.permits > 1);
        let valued = if value.is_empty() { 0 } else { 2 };
        proptest::prop_assert_eq!(argv.len(), 5 + valued + if shared.is_some() { 3 + if weighted { 2 } else { 0 } } else { 0 });
    }
}

/// `SEMAPHORE n LARGEST m` (m from n to 100000) and `SHARED n` (the last
/// n lock keys shared, at least one exclusive): LOCK.MACQUIRE's alone.
#[test]
fn macquire_takes_largest_and_a_count_of_shared_keys() {
    let a = argv(&["LOCK.MACQUIRE", "5", "s1", "s2", "s3", "s4", "rec", "me", "1000", "SHARED", "3", "SEMAPHORE", "2", "largest", "5"]);
    let req = parse_macquire(&a, MAX, OWNER, KEYS).expect("valid");
    assert_eq!((req.set.semaphore, req.set.largest, req.set.shared), (Some(2), Some(5), 3));
    let modes: Vec<Mode> = (0..5).map(|i| req.set.member(i, 5).mode).collect();
    assert_eq!(modes, [Mode::Exclusive, Mode::Shared, Mode::Shared, Mode::Shared, Mode::Shared], "the record is a permit");
    assert_eq!(req.set.member(4, 5).limit, Some(2));
    assert_eq!((req.set.strict(4, 5), req.set.strict(3, 5)), (Some((2, 5)), None));
    let plain = argv(&["LOCK.MACQUIRE", "3", "a", "b", "c", "me", "10", "SHARED", "1"]);
    let req = parse_macquire(&plain, MAX, OWNER, KEYS).expect("valid");
    let modes: Vec<Mode> = (0..3).map(|i| req.set.member(i, 3).mode).collect();
    assert_eq!(modes, [Mode::Exclusive, Mode::Exclusive, Mode::Shared]);
    let equal = argv(&["LOCK.MACQUIRE", "2", "a", "r", "me", "10", "SEMAPHORE", "3", "LARGEST", "3"]);
    assert_eq!(parse_macquire(&equal, MAX, OWNER, KEYS).expect("valid").set.largest, Some(3));

    let err = |words: &[&str]| message(parse_macquire(&argv(words), MAX, OWNER, KEYS).expect_err(&words.join(" ")));
    let bad = "ERR LARGEST must be an integer from the SEMAPHORE limit to 100000";
    assert_eq!(err(&["LOCK.MACQUIRE", "2", "a", "r", "me", "10", "SEMAPHORE", "3", "LARGEST", "2"]), bad);
    assert_eq!(err(&["LOCK.MACQUIRE", "2", "a", "r", "me", "10", "SEMAPHORE", "3", "LARGEST", "100001"]), bad);
    assert_eq!(err(&["LOCK.MACQUIRE", "2", "a", "r", "me", "10", "SEMAPHORE", "3", "LARGEST", "x"]), bad);
    assert_eq!(
        err(&["LOCK.MACQUIRE", "2", "a", "r", "me", "10", "LARGEST", "3"]),
        "ERR syntax error: LARGEST needs SEMAPHORE (LOCK.MACQUIRE)"
    );
    let count = "ERR SHARED n must be from 1 to the number of lock keys less one: at least one key is held exclusively";
    assert_eq!(err(&["LOCK.MACQUIRE", "2", "a", "b", "me", "10", "SHARED", "2"]), count);
    assert_eq!(err(&["LOCK.MACQUIRE", "2", "a", "b", "me", "10", "SHARED", "0"]), count);
    assert_eq!(err(&["LOCK.MACQUIRE", "2", "a", "b", "me", "10", "SHARED", "-1"]), count);
    assert_eq!(err(&["LOCK.MACQUIRE", "2", "a", "b", "me", "10", "SHARED", "99999999999999999999"]), count);
    assert_eq!(err(&["LOCK.MACQUIRE", "2", "a", "r", "me", "10", "SHARED", "1", "SEMAPHORE", "2"]), count, "the record is not counted");
    assert_eq!(err(&["LOCK.MACQUIRE", "3", "a", "b", "c", "me", "10", "SHARED", "1", "SHARED"]), "ERR SHARED given more than once");
    assert_eq!(err(&["LOCK.MACQUIRE", "3", "a", "b", "c", "me", "10", "SHARED", "SHARED", "1"]), "ERR SHARED given more than once");
    let one = |words: &[&str]| message(parse_acquire(&argv(words), MAX, OWNER).expect_err(&words.join(" ")));
    assert_eq!(one(&["LOCK.ACQUIRE", "a", "me", "10", "SHARED", "2"]), "ERR SHARED n belongs to LOCK.MACQUIRE (one key: SHARED)");
    assert_eq!(
        one(&["LOCK.ACQUIRE", "a", "me", "10", "SHARED", "LIMIT", "2", "LARGEST", "3"]),
        "ERR syntax error: LARGEST needs SEMAPHORE (LOCK.MACQUIRE)"
    );
}
