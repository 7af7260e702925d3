//! The server's state, below every flow: the holds bound to a connection
//! (`bindings`), the monotonic clock (`clock`),
//! the module's configuration (`config`; `notify`, the keys whose every
//! change is announced), the token counter (`fencing`),
//! the restart quarantine (`quarantine`), the holds LOCK.REVOKE took away
//! (`revoked`), what INFO shows (`stats`, `histogram`) and whether the
//! module is inside its own call (`reentry`).

pub mod bindings;
pub mod clock;
pub mod config;
pub mod fencing;
pub mod histogram;
pub mod notify;
pub mod quarantine;
pub mod reentry;
pub mod revoked;
pub mod stats;
