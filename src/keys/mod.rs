//! What a key holds, and keeping it whatever Redis does to keys: the
//! stored values (`value`, an exclusive lock, packed by `packing`;
//! `group`, a lock held shared), reading them as the core sees them (`grants`), locks Redis
//! evicted or a clock step expired put back (`rescue`), TTLs set again
//! after a wall-clock step (`realign`), and token registers (`register`,
//! LOCK.FENCED).

pub mod grants;
pub mod group;
mod packing;
pub mod realign;
pub mod register;
pub mod rescue;
pub mod value;
