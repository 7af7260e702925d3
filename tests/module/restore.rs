//! RESTORE takes only locks the commands make (issue 55). Fuzzing found
//! payloads with valid checksums that restored token 0, a group without
//! holders, one owner twice in a semaphore, two readers with one token and
//! a holder without a deadline. Here a DUMP of a real lock has one field
//! changed and its checksum recomputed (`common::dump`): each is refused
//! with `Bad data format` and a log line that says why, leaves no key and
//! a server that answers; the same payload unchanged still restores, and
//! of thousands of random changes none restores a lock that breaks a rule.

use crate::common;

use common::dump::{crc64, Dump, Field};
use common::*;
use redis::{Connection, Value};

fn dump(c: &mut Connection, key: &str) -> Vec<u8> {
    match ok_cmd(c, cmd("DUMP").arg(key)) {
        Value::BulkString(b) => b,
        other => panic!("DUMP {key}: {other:?}"),
    }
}

/// Owners and tokens of a parsed lock, whatever its shape.
fn holders(d: &Dump) -> Vec<(Vec<u8>, u64)> {
    let f = &d.fields;
    match f[0].int() {
        0 | 3 => vec![(owner(&f[1]), f[2].int())],
        // Members' values: the resized mark after the limit, each holder
        // with its permits and value.
        5 => f[4..].chunks(5).map(|h| (owner(&h[0]), h[1].int())).collect(),
        shape => {
            let per = if shape == 2 || shape == 4 { 4 } else { 3 };
            f[3..].chunks(per).map(|h| (owner(&h[0]), h[1].int())).collect()
        }
    }
}

fn owner(f: &Field) -> Vec<u8> {
    match f {
        Field::Str(s) => s.clone(),
        other => panic!("an owner field: {other:?}"),
    }
}

/// `payload` RESTOREd as `x` is refused as a bad payload, leaves no key,
/// and the log gives `reason` (when given); the server still answers.
fn assert_refused(s: &Server, c: &mut Connection, what: &str, payload: &[u8], reason: Option<&str>) {
    let e = expect_err(c, cmd("RESTORE").arg("x").arg(0).arg(payload));
    assert!(e.contains("Bad data format"), "{what}: {e}");
    assert!(!exists(c, b"x"), "{what}: the key is absent");
    assert_eq!(ok_cmd(c, &cmd("PING")), Value::SimpleString("PONG".into()), "{what}: the server answers");
    if let Some(reason) = reason {
        let line = format!("redislock: refused a restored lock value: {reason}");
        assert!(s.log_text().contains(&line), "{what}: the log says {line:?}:\n{}", s.log_tail(10));
    }
}

/// The unchanged payload, taken apart and put together again, is the
/// server's own byte for byte, and restores the same holders.
fn assert_round_trip(c: &mut Connection, key: &str, payload: &[u8]) {
    let d = Dump::parse(payload);
    assert_eq!(d.payload(), payload, "{key}: the codec is the server's");
    let copy = format!("{key}-copy");
    ok_cmd(c, cmd("RESTORE").arg(&copy).arg(60_000).arg(d.payload()));
    assert_eq!(holders(&Dump::parse(&dump(c, &copy))), holders(&d), "{key}: restored as dumped");
    ok_cmd(c, cmd("DEL").arg(&copy));
}

fn changed(base: &Dump, change: impl FnOnce(&mut Vec<Field>)) -> Vec<u8> {
    let mut d = base.clone();
    change(&mut d.fields);
    d.payload()
}

#[test]
fn the_dump_codec_is_redis_s() {
    // The check value of Redis's crc64.c.
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    let s = Server::start();
    let mut c = s.conn();
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("num").arg("12345").arg(60_000));
    let d = Dump::parse(&dump(&mut c, "num"));
    assert_eq!(d.fields[1], Field::Str(b"12345".to_vec()), "an integer-encoded owner reads as its digits");
    let payload = d.payload();
    ok_cmd(&mut c, cmd("RESTORE").arg("num2").arg(0).arg(payload.as_slice()));
    assert_eq!(info(&mut c, b"num2").expect("restored").owner, b"12345");
    let mut broken = payload.clone();
    let last = broken.len() - 1;
    broken[last] ^= 1;
    let e = expect_err(&mut c, cmd("RESTORE").arg("x").arg(0).arg(broken.as_slice()));
    assert!(e.contains("checksum"), "a wrong checksum is told apart from a refused value: {e}");
}

#[test]
fn crafted_exclusive_locks_are_refused() {
    let s = Server::start();
    let mut c = s.conn();
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("redislock.max-owner-len").arg(1 << 20));
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("e").arg("alice").arg(60_000));
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("v").arg("alice").arg(60_000).arg("VALUE").arg("host:1"));
    let (e, v) = (dump(&mut c, "e"), dump(&mut c, "v"));
    let (exclusive, valued) = (Dump::parse(&e), Dump::parse(&v));
    // Shape, owner, token (and value).
    assert_eq!((exclusive.fields.len(), exclusive.fields[0].int(), valued.fields[0].int()), (3, 0, 3));
    let too_long = vec![b'o'; (1 << 20) + 1];
    let cases: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        ("token 0", changed(&exclusive, |f| f[2] = Field::Int(0)), Some("token 0 (tokens start at 1)")),
        ("a negative token", changed(&exclusive, |f| f[2] = Field::signed(-5)), Some("token -5 (tokens start at 1)")),
        ("an empty owner", changed(&exclusive, |f| f[1] = Field::Str(Vec::new())), Some("an empty owner")),
        (
            "an owner beyond any max-owner-len",
            changed(&exclusive, |f| f[1] = Field::Str(too_long.clone())),
            Some("an owner of 1048577 bytes (at most 1048576)"),
        ),
        (
            "a value beyond any max-owner-len",
            changed(&valued, |f| f[3] = Field::Str(too_long.clone())),
            Some("a value of 1048577 bytes (at most 1048576)"),
        ),
        ("token 0 with a value", changed(&valued, |f| f[2] = Field::Int(0)), Some("token 0 (tokens start at 1)")),
        ("a shape no version saves", changed(&exclusive, |f| f[0] = Field::Int(9)), Some("shape 9, which this module does not know")),
    ];
    for (what, payload, reason) in cases {
        assert_refused(&s, &mut c, what, &payload, reason);
    }
    assert_round_trip(&mut c, "e", &e);
    assert_round_trip(&mut c, "v", &v);
    // The longest owner and value a command could store still restore.
    let longest = vec![b'o'; 1 << 20];
    let payload = changed(&valued, |f| {
        f[1] = Field::Str(longest.clone());
        f[3] = Field::Str(longest.clone());
    });
    ok_cmd(&mut c, cmd("RESTORE").arg("x").arg(0).arg(payload.as_slice()));
    assert_eq!(info(&mut c, b"x").expect("restored").owner, longest);
}

/// Field positions of a group: shape, limit, count, then per holder
/// owner, token, deadline (and permits in shape 2).
const OWNER: usize = 3;
const TOKEN: usize = 4;
const DEADLINE: usize = 5;

#[test]
fn crafted_groups_are_refused() {
    let s = Server::start();
    let mut c = s.conn();
    for owner in ["a", "b"] {
        ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("sem").arg(owner).arg(60_000).arg("SHARED").arg("LIMIT").arg(3));
        ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("rw").arg(owner).arg(60_000).arg("SHARED"));
    }
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("w").arg("a").arg(60_000).arg("SHARED").arg("LIMIT").arg(5).arg("PERMITS").arg(2));
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("w").arg("b").arg(60_000).arg("SHARED").arg("LIMIT").arg(5));
    let (sem_bytes, rw_bytes, w_bytes) = (dump(&mut c, "sem"), dump(&mut c, "rw"), dump(&mut c, "w"));
    let (sem, rw, weighted) = (Dump::parse(&sem_bytes), Dump::parse(&rw_bytes), Dump::parse(&w_bytes));
    let ints = |d: &Dump| d.fields[..3].iter().map(Field::int).collect::<Vec<_>>();
    assert_eq!((ints(&sem), ints(&rw), ints(&weighted)), (vec![1, 3, 2], vec![1, 0, 2], vec![2, 5, 2]));
    let first = sem.fields[TOKEN].int();
    let rw_first = rw.fields[TOKEN].int();
    let ten_years = now_unix_ms() + 10 * 365 * 86_400_000;
    let token_twice = format!("token {first} held twice");
    let readers_twice = format!("token {rw_first} held twice");
    let far = format!("deadline {ten_years} (Unix ms), which no lease of at most a year from now reaches");
    let end_of_time = format!("deadline {} (Unix ms), which no lease of at most a year from now reaches", i64::MAX);
    let cases: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        (
            "a semaphore without holders",
            changed(&sem, |f| {
                f.truncate(3);
                f[2] = Field::Int(0);
            }),
            Some("a shared lock without holders"),
        ),
        (
            "a read-write lock without holders",
            changed(&rw, |f| {
                f.truncate(3);
                f[2] = Field::Int(0);
            }),
            Some("a shared lock without holders"),
        ),
        ("one owner twice in a semaphore", changed(&sem, |f| f[OWNER + 3] = f[OWNER].clone()), Some("one owner holding twice")),
        ("two permits with one token", changed(&sem, |f| f[TOKEN + 3] = Field::Int(first)), Some(&token_twice)),
        ("two readers with one token", changed(&rw, |f| f[TOKEN + 3] = Field::Int(rw_first)), Some(&readers_twice)),
        ("a holder with token 0", changed(&sem, |f| f[TOKEN + 3] = Field::Int(0)), Some("token 0 (tokens start at 1)")),
        ("a reader with token 0", changed(&rw, |f| f[TOKEN] = Field::Int(0)), Some("token 0 (tokens start at 1)")),
        ("a holder without a deadline", changed(&sem, |f| f[DEADLINE] = Field::Int(0)), Some("a holder without a deadline")),
        ("a reader without a deadline", changed(&rw, |f| f[DEADLINE + 3] = Field::Int(0)), Some("a holder without a deadline")),
        ("a deadline ten years ahead", changed(&sem, |f| f[DEADLINE] = Field::signed(ten_years)), Some(&far)),
        ("a deadline at the end of time", changed(&rw, |f| f[DEADLINE] = Field::signed(i64::MAX)), Some(&end_of_time)),
        ("an empty owner", changed(&rw, |f| f[OWNER] = Field::Str(Vec::new())), Some("an empty owner")),
        ("a limit beyond 100000", changed(&sem, |f| f[1] = Field::Int(100_001)), Some("LIMIT 100001 (at most 100000)")),
        ("two holders of a semaphore of one", changed(&sem, |f| f[1] = Field::Int(1)), Some("2 permits taken of LIMIT 1")),
        ("more holders counted than given", changed(&sem, |f| f[2] = Field::Int(3)), Some("a truncated or malformed value")),
        (
            "a holder taking no permit",
            changed(&weighted, |f| f[DEADLINE + 1] = Field::Int(0)),
            Some("a holder taking 0 permits of LIMIT 5"),
        ),
        ("more permits taken than the limit", changed(&weighted, |f| f[DEADLINE + 1] = Field::Int(5)), Some("6 permits taken of LIMIT 5")),
        (
            "two permits of a read-write lock",
            changed(&rw, |f| {
                f[0] = Field::Int(2);
                f.insert(DEADLINE + 4, Field::Int(1));
                f.insert(DEADLINE + 1, Field::Int(2));
            }),
            Some("a holder taking 2 permits of a lock without LIMIT"),
        ),
    ];
    for (what, payload, reason) in cases {
        assert_refused(&s, &mut c, what, &payload, reason);
    }
    assert_round_trip(&mut c, "sem", &sem_bytes);
    assert_round_trip(&mut c, "rw", &rw_bytes);
    assert_round_trip(&mut c, "w", &w_bytes);
    // Every lock still works after the refusals.
    assert_eq!(release(&mut c, b"sem", b"a"), 1);
    assert_eq!(release(&mut c, b"sem", b"b"), 1);
    assert!(!exists(&mut c, b"sem"), "the last release deletes the key");
}

/// A group's key outlives its holders when the holder with the latest
/// deadline leaves first (its TTL never shrinks). Such a key was saved
/// without holders; it is saved with the holder whose lease ended last,
/// so it restores elsewhere as the free key it is.
#[test]
fn a_group_whose_leases_all_ended_is_saved_with_a_holder_and_restores_free() {
    let s = Server::start();
    let mut c = s.conn();
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("g").arg("short").arg(300).arg("SHARED"));
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("g").arg("long").arg(60_000).arg("SHARED"));
    assert_eq!(release(&mut c, b"g", b"long"), 1);
    wait_until(std::time::Duration::from_secs(10), "the short lease to end", || {
        info_fields(ok_cmd(&mut c, cmd("LOCK.INFO").arg("g"))).is_none()
    });
    assert!(exists(&mut c, b"g"), "the key outlives its holders");
    let payload = dump(&mut c, "g");
    let d = Dump::parse(&payload);
    assert_eq!(d.fields[2], Field::Int(1), "saved with one holder: {:?}", d.fields);
    assert_eq!(d.fields[OWNER], Field::Str(b"short".to_vec()));
    let deadline = d.fields[DEADLINE].int() as i64;
    assert!(deadline > 0 && deadline <= now_unix_ms(), "its deadline has passed: {deadline}");
    let other = Server::start();
    let mut o = other.conn();
    ok_cmd(&mut o, cmd("RESTORE").arg("g").arg(60_000).arg(payload.as_slice()));
    assert!(info_fields(ok_cmd(&mut o, cmd("LOCK.INFO").arg("g"))).is_none(), "restored free");
    assert!(acquire(&mut o, b"g", b"next", 1000).is_some(), "and taken at once");
    // Reloaded here, likewise.
    ok_cmd(&mut c, cmd("DEBUG").arg("RELOAD"));
    assert!(acquire(&mut c, b"g", b"next", 1000).is_some());
}

/// A server's own RDB written by an earlier version (a group saved without
/// holders, made here by editing the file) still loads at startup: an
/// upgrade must not leave a server unable to read its data.
#[test]
fn an_empty_group_in_the_server_s_own_rdb_still_loads() {
    let mut s = Server::start();
    let mut c = s.conn();
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("g").arg("a").arg(60_000).arg("SHARED").arg("LIMIT").arg(3));
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("o").arg(60_000));
    let d = Dump::parse(&dump(&mut c, "g"));
    ok_cmd(&mut c, &cmd("SAVE"));
    drop(c);
    s.kill9();
    let path = s.dir.join("dump.rdb");
    let mut file = std::fs::read(&path).expect("dump.rdb");
    let (span, fields) = d.locate_in_rdb(&file, b"g");
    assert_eq!(fields[..3], d.fields[..3], "the value found is the group's");
    let empty = Dump { fields: vec![Field::Int(1), Field::Int(3), Field::Int(0)], ..d.clone() };
    file.splice(span, empty.value_bytes());
    let body = file.len() - 8;
    let crc = crc64(&file[..body]);
    file[body..].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &file).expect("write dump.rdb");
    s.start_again();
    let mut c = s.conn();
    assert!(exists(&mut c, b"g"), "the group loaded");
    assert!(info_fields(ok_cmd(&mut c, cmd("LOCK.INFO").arg("g"))).is_none(), "as a free key");
    assert_eq!(info(&mut c, b"k").expect("the other lock loaded").owner, b"o");
    assert!(acquire(&mut c, b"g", b"b", 1000).is_some());
    assert!(!s.log_text().contains("refused a"), "nothing refused:\n{}", s.log_tail(20));
}

struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        // Knuth's MMIX constants.
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// What the server holds after an accepted RESTORE keeps every rule: a
/// token of at least 1 and a non-empty owner; in a group, a holder or
/// more, each owner and each token once, a deadline each, permits within
/// the limit.
fn assert_sound(d: &Dump, tried: &[Field]) {
    let f = &d.fields;
    let shape = f[0].int();
    let valid_token = |t: u64| (1..=i64::MAX as u64).contains(&t);
    if shape == 0 || shape == 3 {
        assert!(valid_token(f[2].int()) && !owner(&f[1]).is_empty(), "restored {f:?} from {tried:?}");
        return;
    }
    let per = if shape == 2 || shape == 4 { 4 } else { 3 };
    let holders: Vec<&[Field]> = f[3..].chunks(per).collect();
    assert!(!holders.is_empty(), "restored without holders: {f:?} from {tried:?}");
    let mut owners: Vec<Vec<u8>> = holders.iter().map(|h| owner(&h[0])).collect();
    let mut tokens: Vec<u64> = holders.iter().map(|h| h[1].int()).collect();
    assert!(owners.iter().all(|o| !o.is_empty()) && tokens.iter().all(|&t| valid_token(t)), "{f:?} from {tried:?}");
    assert!(holders.iter().all(|h| h[2].int() != 0), "a holder without a deadline: {f:?} from {tried:?}");
    let limit = f[1].int();
    let taken: u64 = holders.iter().map(|h| if per == 4 { h[3].int() } else { 1 }).sum();
    // A resized semaphore (shape 4) may hold more than its limit after a
    // shrink, never more than any limit allows.
    let room = if shape == 4 { 100_000 } else { limit };
    assert!(limit == 0 && shape != 4 && taken == holders.len() as u64 || limit != 0 && taken <= room, "permits: {f:?} from {tried:?}");
    owners.sort();
    owners.dedup();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!((owners.len(), tokens.len()), (holders.len(), holders.len()), "an owner or a token twice: {f:?} from {tried:?}");
}

/// Random changes of one to three fields of real locks' DUMPs (values
/// near the bounds, fields copied, dropped or repeated): whatever is
/// restored keeps every rule, everything else is `Bad data format`, and
/// the server keeps answering.
#[test]
fn random_mutations_never_restore_a_lock_that_breaks_a_rule() {
    let s = Server::start();
    let mut c = s.conn();
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("e").arg("alice").arg(600_000));
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("v").arg("alice").arg(600_000).arg("VALUE").arg("hi"));
    for owner in ["a", "b", "c"] {
        ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("s").arg(owner).arg(600_000).arg("SHARED").arg("LIMIT").arg(4));
        ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("r").arg(owner).arg(600_000).arg("SHARED"));
    }
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("w").arg("a").arg(600_000).arg("SHARED").arg("LIMIT").arg(5).arg("PERMITS").arg(2));
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("w").arg("b").arg(600_000).arg("SHARED").arg("LIMIT").arg(5).arg("PERMITS").arg(3));
    let bases: Vec<Dump> = ["e", "v", "s", "r", "w"].iter().map(|k| Dump::parse(&dump(&mut c, k))).collect();
    let near_bounds = [0, 1, 2, 3, 4, 5, 100_000, 100_001, 1 << 24, 1 << 32, i64::MAX as u64, 1 << 63, u64::MAX];
    let texts: [&[u8]; 4] = [b"", b"a", b"b", b"alice"];
    let mut rng = Lcg(55);
    let (mut restored, mut refused) = (0, 0);
    for _ in 0..8_000 {
        let mut d = bases[rng.below(bases.len())].clone();
        for _ in 0..1 + rng.below(3) {
            let f = &mut d.fields;
            let i = rng.below(f.len());
            match rng.below(100) {
                0..15 if f.len() > 3 => f[i] = f[3 + rng.below(f.len() - 3)].clone(),
                15..25 if f.len() > 1 => drop(f.remove(i)),
                25..35 => f.insert(i, f[rng.below(f.len())].clone()),
                _ => {
                    f[i] = match &f[i] {
                        Field::Int(n) => Field::Int(match rng.below(3) {
                            0 => near_bounds[rng.below(near_bounds.len())],
                            1 => n.wrapping_add(rng.below(7) as u64).wrapping_sub(3),
                            _ => (rng.below(1 << 30) as u64) << 34 | rng.below(1 << 30) as u64,
                        }),
                        Field::Str(s) if rng.below(4) == 0 => Field::Str([s.as_slice(), b"x"].concat()),
                        Field::Str(_) => Field::Str(texts[rng.below(texts.len())].to_vec()),
                    }
                }
            }
        }
        ok_cmd(&mut c, cmd("DEL").arg("x"));
        match try_cmd(&mut c, cmd("RESTORE").arg("x").arg(0).arg(d.payload())) {
            Ok(_) => {
                restored += 1;
                assert_sound(&Dump::parse(&dump(&mut c, "x")), &d.fields);
                ok_cmd(&mut c, cmd("LOCK.INFO").arg("x"));
            }
            Err(e) => {
                assert!(e.contains("Bad data format"), "{e}: {:?}", d.fields);
                refused += 1;
            }
        }
    }
    assert_eq!(ok_cmd(&mut c, &cmd("PING")), Value::SimpleString("PONG".into()));
    assert!(restored > 800 && refused > 800, "the changes reach both sides: {restored} restored, {refused} refused");
}
