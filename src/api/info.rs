//! This module's INFO section: the callback Redis calls is a trampoline
//! here, calling the plain Rust function registered.

use std::ffi::{c_int, CStr};
use std::sync::OnceLock;

use redis_module::raw;

use super::{rm, Ctx, ERR, OK};

/// Where an INFO callback adds its section and fields.
#[derive(Clone, Copy)]
pub struct InfoCtx(*mut raw::RedisModuleInfoCtx);

impl InfoCtx {
    /// Starts the default section, named after the module; false when
    /// INFO did not ask for it.
    pub fn default_section(self) -> bool {
        rm!(RedisModule_InfoAddSection(self.0, std::ptr::null()) else ERR) == OK
    }

    /// An integer field of the section.
    pub fn field(self, name: &CStr, value: i64) {
        rm!(RedisModule_InfoAddFieldLongLong(self.0, name.as_ptr(), value) else ERR);
    }
}

/// The function INFO runs: the fields, and whether it runs for a crash
/// report.
type Section = fn(InfoCtx, bool);

static SECTION: OnceLock<Section> = OnceLock::new();

/// At load: `section` adds this module's fields to INFO.
pub fn register_info(ctx: Ctx, section: Section) -> bool {
    // A second registration keeps the first function (there is none).
    let _ = SECTION.set(section);
    rm!(RedisModule_RegisterInfoFunc(ctx.raw(), Some(on_info)) else ERR) == OK
}

unsafe extern "C" fn on_info(ctx: *mut raw::RedisModuleInfoCtx, for_crash_report: c_int) {
    if let Some(section) = SECTION.get() {
        section(InfoCtx(ctx), for_crash_report != 0);
    }
}
