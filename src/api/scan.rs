//! Walking the keyspace of the selected database (RM_Scan), with a Rust
//! closure called for each key.

use std::ffi::c_void;
use std::mem::ManuallyDrop;

use redis_module::raw;

use super::{rm, Arg, Ctx, Key, RedisModuleCtx, RedisModuleKey, RedisModuleString};

/// Where a walk of the keyspace stands; destroyed on drop.
pub struct ScanCursor(*mut raw::RedisModuleScanCursor);

impl ScanCursor {
    /// A cursor at the start of a walk; `None` if Redis made none.
    pub fn new() -> Option<ScanCursor> {
        let cursor = rm!(RedisModule_ScanCursorCreate() else std::ptr::null_mut());
        (!cursor.is_null()).then_some(ScanCursor(cursor))
    }

    /// One step of the walk of `ctx`'s selected database: `visit(name,
    /// key)` for each key of one bucket (a few keys). The key handle is
    /// the scan's, read-only and only lent. False when the walk has ended.
    pub fn step<F: FnMut(&Arg, &Key)>(&self, ctx: Ctx, visit: &mut F) -> bool {
        let data = (visit as *mut F).cast::<c_void>();
        rm!(RedisModule_Scan(ctx.raw(), self.0, Some(visit_one::<F>), data) else 0) != 0
    }

    /// Back to the start, for a walk of another database.
    pub fn restart(&self) {
        rm!(RedisModule_ScanCursorRestart(self.0) else ());
    }
}

impl Drop for ScanCursor {
    fn drop(&mut self) {
        rm!(RedisModule_ScanCursorDestroy(self.0) else ());
    }
}

/// Walks the whole selected database of `ctx` in one go, calling
/// `visit(name, key)` for each key (see `ScanCursor::step`); false if
/// Redis made no cursor.
pub fn scan_keys(ctx: Ctx, mut visit: impl FnMut(&Arg, &Key)) -> bool {
    let Some(cursor) = ScanCursor::new() else {
        return false;
    };
    while cursor.step(ctx, &mut visit) {}
    true
}

unsafe extern "C" fn visit_one<F: FnMut(&Arg, &Key)>(
    _ctx: *mut RedisModuleCtx,
    name: *mut RedisModuleString,
    key: *mut RedisModuleKey,
    data: *mut c_void,
) {
    // SAFETY: `step` passed its `&mut F` for the length of the scan call.
    let Some(visit) = (unsafe { data.cast::<F>().as_mut() }) else {
        return;
    };
    let name = Arg(name);
    // The scan owns the key handle: borrowed, never closed here.
    let key = ManuallyDrop::new(Key(key));
    visit(&name, &key);
}
