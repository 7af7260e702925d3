//! How a lock value packs what it stores (`value::Exclusive`): the word
//! that holds the hold's start and both lengths (`Meta`, with the wide
//! prefix for what does not fit), the lease's mirror as a 32-bit distance
//! (`encode_mirror`), and a lowercase hex owner kept as the bytes it
//! spells (`hex_bytes`, `OwnerBytes`). Plain arithmetic on integers and
//! bytes: the allocation itself, and all its unsafe code, is `value`'s.

use std::ops::Deref;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::core::lease::{self, Lease};

/// `value::Header::meta`: when the hold began (monotonic ms, for LOCK.INFO and
/// INFO's hold times; a re-grant continues it) in the low 40 bits (34
/// years), the stored owner's length in the next 15, whether it is hex
/// (`HEX`) in the next bit, the value's length in the top 8 (0: no value;
/// `WIDE`: all three lengths are in the wide prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Meta {
    pub(super) owner_len: usize,
    pub(super) value_len: usize,
    pub(super) since: i64,
}

pub(super) const SINCE_BITS: u32 = 40;
pub(super) const OWNER_BITS: u32 = 15;
/// The owner is stored as the bytes its lowercase hex digits spell.
pub(super) const HEX: u64 = 1 << (SINCE_BITS + OWNER_BITS);
pub(super) const WIDE: u64 = 0xff;
pub(super) const VALUE_SHIFT: u32 = SINCE_BITS + OWNER_BITS + 1;
/// The wide prefix: owner length (u32), value length (u32), start (i64).
pub(super) const WIDE_PREFIX: usize = 16;

impl Meta {
    /// The packed word, or `None` when this needs the wide prefix.
    pub(super) fn packed(self) -> Option<u64> {
        let since = u64::try_from(self.since).ok().filter(|s| s >> SINCE_BITS == 0)?;
        let owner = u64::try_from(self.owner_len).ok().filter(|o| o >> OWNER_BITS == 0)?;
        let value = u64::try_from(self.value_len).ok().filter(|&v| v < WIDE)?;
        Some(since | owner << SINCE_BITS | value << VALUE_SHIFT)
    }

    /// Reads a packed word; `None` when it says wide.
    pub(super) fn unpacked(word: u64) -> Option<Meta> {
        let value = word >> VALUE_SHIFT;
        (value != WIDE).then_some(Meta {
            owner_len: ((word >> SINCE_BITS) & ((1 << OWNER_BITS) - 1)) as usize,
            value_len: value as usize,
            since: (word & ((1 << SINCE_BITS) - 1)) as i64,
        })
    }

    pub(super) fn wide_prefix(self) -> Option<[u8; WIDE_PREFIX]> {
        let mut prefix = [0u8; WIDE_PREFIX];
        prefix[..4].copy_from_slice(&u32::try_from(self.owner_len).ok()?.to_ne_bytes());
        prefix[4..8].copy_from_slice(&u32::try_from(self.value_len).ok()?.to_ne_bytes());
        prefix[8..].copy_from_slice(&self.since.to_ne_bytes());
        Some(prefix)
    }

    pub(super) fn from_wide_prefix(prefix: [u8; WIDE_PREFIX]) -> Meta {
        let [o0, o1, o2, o3, v0, v1, v2, v3, s0, s1, s2, s3, s4, s5, s6, s7] = prefix;
        Meta {
            owner_len: u32::from_ne_bytes([o0, o1, o2, o3]) as usize,
            value_len: u32::from_ne_bytes([v0, v1, v2, v3]) as usize,
            since: i64::from_ne_bytes([s0, s1, s2, s3, s4, s5, s6, s7]),
        }
    }

    /// Bytes between the header and the owner.
    pub(super) fn prefix_len(word: u64) -> usize {
        if Meta::unpacked(word).is_some() {
            0
        } else {
            WIDE_PREFIX
        }
    }
}

/// `Header::mirror` for a lease without a TTL (`lease::NO_TTL`).
pub(super) const MIRROR_NONE: i32 = i32::MIN;
/// `Header::mirror` for a mirror too far from the end to encode (the wall
/// clock moved more than 24 days against the monotonic one since the first
/// lease was stored): read back as `OFF_SCALE`.
pub(super) const MIRROR_OFF_SCALE: i32 = i32::MIN + 1;
/// The mirror an off-scale lease reads back as: never any key's TTL, so
/// the lease is taken from the key's TTL at each look (`lease::judge`), and
/// never passed by the wall clock, so no removal is taken for a step.
pub(super) const OFF_SCALE: i64 = i64::MAX - 1;

/// The wall clock less the monotonic one (ms) when the first lease with a
/// TTL was stored; `UNANCHORED` until then. A mirror is its end plus that
/// offset at the time it was taken, so it is stored as its distance from
/// the end plus this anchor: the clocks' drift and steps since, which fit
/// 32 bits for 24 days either way.
pub(super) static CLOCK_ANCHOR: AtomicI64 = AtomicI64::new(UNANCHORED);
pub(super) const UNANCHORED: i64 = i64::MIN;

pub(super) fn encode_mirror(lease: Lease) -> i32 {
    if lease.mirror == lease::NO_TTL {
        return MIRROR_NONE;
    }
    if lease.end == lease::NO_END || lease.end == lease::UNKNOWN {
        return MIRROR_OFF_SCALE;
    }
    let Some(offset) = lease.mirror.checked_sub(lease.end) else { return MIRROR_OFF_SCALE };
    let anchor = match CLOCK_ANCHOR.load(Ordering::Relaxed) {
        UNANCHORED => match CLOCK_ANCHOR.compare_exchange(UNANCHORED, offset, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => offset,
            Err(anchor) => anchor,
        },
        anchor => anchor,
    };
    offset.checked_sub(anchor).and_then(|d| i32::try_from(d).ok()).filter(|&d| d > MIRROR_OFF_SCALE).unwrap_or(MIRROR_OFF_SCALE)
}

pub(super) fn decode_mirror(end: i64, code: i32) -> i64 {
    match code {
        MIRROR_NONE => lease::NO_TTL,
        MIRROR_OFF_SCALE => OFF_SCALE,
        distance => end.saturating_add(CLOCK_ANCHOR.load(Ordering::Relaxed)).saturating_add(i64::from(distance)),
    }
}

/// The longest hex owner kept as the bytes it spells (digits).
pub(super) const HEX_OWNER_MAX: usize = 128;
pub(super) const DIGITS: &[u8; 16] = b"0123456789abcdef";

pub(super) fn hex_digits(byte: u8) -> [u8; 2] {
    [DIGITS[usize::from(byte >> 4)], DIGITS[usize::from(byte & 0xf)]]
}

/// The bytes a lowercase hex owner of an even length up to
/// `HEX_OWNER_MAX` spells, written to `out`; `None` for any other owner
/// (uppercase digits would not read back the same).
pub(super) fn hex_bytes<'a>(owner: &[u8], out: &'a mut [u8; HEX_OWNER_MAX / 2]) -> Option<&'a [u8]> {
    if owner.is_empty() || !owner.len().is_multiple_of(2) || owner.len() > HEX_OWNER_MAX {
        return None;
    }
    for (byte, pair) in out.iter_mut().zip(owner.chunks_exact(2)) {
        let (high, low) = (NIBBLES[usize::from(pair[0])], NIBBLES[usize::from(pair[1])]);
        if (high | low) & 0xf0 != 0 {
            return None;
        }
        *byte = high << 4 | low;
    }
    out.get(..owner.len() / 2)
}

/// Each byte's value as a lowercase hex digit; 0xff for any other byte.
pub(super) static NIBBLES: [u8; 256] = {
    let mut table = [0xff; 256];
    let mut digit = 0;
    while digit < 16 {
        table[DIGITS[digit] as usize] = digit as u8;
        digit += 1;
    }
    table
};

/// A lock's owner: borrowed from the lock, or spelled out again from the
/// bytes a hex owner was kept as. Reads as the owner's bytes.
pub enum OwnerBytes<'a> {
    Stored(&'a [u8]),
    Spelled([u8; HEX_OWNER_MAX], usize),
}

impl Deref for OwnerBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            OwnerBytes::Stored(bytes) => bytes,
            OwnerBytes::Spelled(digits, len) => digits.get(..*len).unwrap_or_default(),
        }
    }
}
