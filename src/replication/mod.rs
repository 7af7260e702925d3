//! Leaving a command, and the server's role: replication, the AOF, WATCH
//! and keyspace events through one LOCK.APPLY builder (`propagate`),
//! whether anything receives what is propagated (`audience`), and whether
//! the module may write outside a client's command (`writable`).

pub mod audience;
pub mod propagate;
pub mod writable;
