//! A DUMP payload of a lock, taken apart as the module's loader reads it
//! and put together again, so that a test can change one field of a real
//! lock and RESTORE it with a valid checksum.
//!
//! A payload is the value's RDB type (7: a module value with opcodes),
//! the module type's id (RDB length encoding), the module's fields, each
//! an opcode (2: an integer, signed ones as their two's complement; 5: a
//! string) and its data, an end opcode (0), then the RDB version (2 bytes)
//! and a CRC-64 (Jones polynomial, reflected, as Redis's crc64.c) of
//! everything before it, both little-endian.

/// A module field as the loader reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    Int(u64),
    Str(Vec<u8>),
}

impl Field {
    pub fn signed(n: i64) -> Field {
        Field::Int(n as u64)
    }

    pub fn int(&self) -> u64 {
        match self {
            Field::Int(n) => *n,
            Field::Str(s) => panic!("expected an integer field, got string {s:?}"),
        }
    }
}

/// A lock's DUMP payload: the module type's id, its fields and the RDB
/// version the server wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dump {
    pub module_id: u64,
    pub fields: Vec<Field>,
    pub rdb_version: [u8; 2],
}

const MODULE_2: u8 = 7;
const OP_EOF: u64 = 0;
const OP_UINT: u64 = 2;
const OP_STRING: u64 = 5;

/// CRC-64/Jones as Redis computes it (reflected polynomial, no table).
pub fn crc64(bytes: &[u8]) -> u64 {
    let mut crc = 0u64;
    for &b in bytes {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0x95ac_9329_ac4b_c9b5 } else { crc >> 1 };
        }
    }
    crc
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().expect("payload ends early");
        self.0 = rest;
        b
    }

    fn take(&mut self, n: usize) -> Vec<u8> {
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        taken.to_vec()
    }

    fn be(&mut self, n: usize) -> u64 {
        self.take(n).iter().fold(0, |acc, &b| acc << 8 | u64::from(b))
    }

    /// A length, or `Err(kind)` for a special string encoding (0xC0 + kind).
    fn len(&mut self) -> Result<u64, u8> {
        let first = self.byte();
        match first >> 6 {
            0 => Ok(u64::from(first & 0x3f)),
            1 => Ok(u64::from(first & 0x3f) << 8 | u64::from(self.byte())),
            2 if first == 0x80 => Ok(self.be(4)),
            2 if first == 0x81 => Ok(self.be(8)),
            2 => panic!("unknown length byte {first:#x}"),
            _ => Err(first & 0x3f),
        }
    }

    fn string(&mut self) -> Vec<u8> {
        match self.len() {
            Ok(n) => self.take(usize::try_from(n).expect("string length")),
            // Integer-encoded strings (a decimal owner of up to 11 bytes).
            Err(kind @ 0..=2) => {
                let bytes = self.take(1 << kind);
                let n = bytes.iter().rev().fold(0i64, |acc, &b| acc << 8 | i64::from(b));
                let n = match kind {
                    0 => i64::from(n as u8 as i8),
                    1 => i64::from(n as u16 as i16),
                    _ => i64::from(n as u32 as i32),
                };
                n.to_string().into_bytes()
            }
            Err(kind) => panic!("string encoding {kind} (LZF): keep test strings under 20 bytes"),
        }
    }
}

fn put_len(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.extend_from_slice(&[0x40 | (n >> 8) as u8, n as u8]);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// The module's fields up to and with the end opcode.
fn read_fields(r: &mut Reader<'_>) -> Vec<Field> {
    let mut fields = Vec::new();
    loop {
        match r.len().expect("opcode") {
            OP_EOF => return fields,
            OP_UINT => fields.push(Field::Int(r.len().expect("integer"))),
            OP_STRING => fields.push(Field::Str(r.string())),
            op => panic!("opcode {op} (the module saves integers and strings only)"),
        }
    }
}

impl Dump {
    /// Takes a DUMP payload apart, checking its checksum.
    pub fn parse(payload: &[u8]) -> Dump {
        let (body, crc) = payload.split_at(payload.len() - 8);
        assert_eq!(crc64(body).to_le_bytes(), crc, "the server's checksum is what crc64 computes");
        let (value, version) = body.split_at(body.len() - 2);
        let mut r = Reader(value);
        assert_eq!(r.byte(), MODULE_2, "a module value");
        let module_id = r.len().expect("module id");
        let fields = read_fields(&mut r);
        assert!(r.0.is_empty(), "bytes after the end opcode");
        Dump { module_id, fields, rdb_version: [version[0], version[1]] }
    }

    /// Where the value of `key` (a lock of this dump's module type) lies in
    /// an RDB file, as `value_bytes` spells it, and its fields.
    pub fn locate_in_rdb(&self, file: &[u8], key: &[u8]) -> (std::ops::Range<usize>, Vec<Field>) {
        let mut entry = vec![MODULE_2];
        put_len(&mut entry, key.len() as u64);
        entry.extend_from_slice(key);
        let mut id = Vec::new();
        put_len(&mut id, self.module_id);
        entry.extend_from_slice(&id);
        let at = file.windows(entry.len()).position(|w| w == entry).expect("the key's entry in the RDB file");
        let start = at + entry.len() - id.len();
        let mut r = Reader(&file[at + entry.len()..]);
        let fields = read_fields(&mut r);
        (start..file.len() - r.0.len(), fields)
    }

    /// The module value as the RDB holds it after the type byte: its id,
    /// fields and end opcode (what follows the key's name in an RDB file).
    pub fn value_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_len(&mut out, self.module_id);
        for field in &self.fields {
            match field {
                Field::Int(n) => {
                    put_len(&mut out, OP_UINT);
                    put_len(&mut out, *n);
                }
                Field::Str(s) => {
                    put_len(&mut out, OP_STRING);
                    put_len(&mut out, s.len() as u64);
                    out.extend_from_slice(s);
                }
            }
        }
        put_len(&mut out, OP_EOF);
        out
    }

    /// The payload RESTORE takes, with its checksum.
    pub fn payload(&self) -> Vec<u8> {
        let mut out = vec![MODULE_2];
        out.extend(self.value_bytes());
        out.extend_from_slice(&self.rdb_version);
        let crc = crc64(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }
}
