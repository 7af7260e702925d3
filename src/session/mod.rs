//! Ending the holds of a connection that closed (`disconnect`): a flow
//! above the changes and the waiters. The bindings themselves (which
//! connection a hold is bound to) are the server's state
//! (`server::bindings`), which the changes keep; this ends what they say
//! a closed connection held, through `change::end_closed`, and serves the
//! lines that frees.

pub mod disconnect;
