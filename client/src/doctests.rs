//! README.md and the book's chapters (docs/*.md) as doc comments, so that
//! their Rust examples are compiled as this crate's doc tests
//! (`cargo test --doc -p redlock`; `make test` runs them in its redis-7.0
//! suite): an example that no longer compiles against the library fails
//! the tests. Examples that need running servers are `rust,no_run`
//! (compiled, not run); blocks in other languages name theirs (`sh`,
//! `console`, `text`, `toml`, `python`, `js`, ...), which rustdoc leaves
//! alone. Built only for doc tests (`cfg(doctest)`): none of it is in the
//! library.

macro_rules! markdown {
    ($($name:ident = $path:literal),* $(,)?) => {
        $(
            #[doc = include_str!($path)]
            pub struct $name;
        )*
    };
}

markdown! {
    Readme = "../../README.md",
    Guide = "../../docs/guide.md",
    Commands = "../../docs/commands.md",
    Client = "../../docs/client.md",
    Python = "../../docs/python.md",
    Node = "../../docs/node.md",
    Serve = "../../docs/serve.md",
    Election = "../../docs/election.md",
    Operations = "../../docs/operations.md",
    Safety = "../../docs/safety.md",
    Benchmarks = "../../docs/benchmarks.md",
    Architecture = "../../docs/architecture.md",
    DesignMonotonicLeases = "../../docs/design-monotonic-leases.md",
    DesignLockFamily = "../../docs/design-lock-family.md",
    DesignHandoff = "../../docs/design-handoff.md",
    DesignFairLines = "../../docs/design-fair-lines.md",
    DesignMulti = "../../docs/design-multi.md",
    DesignBindingCalls = "../../docs/design-binding-calls.md",
    DesignControl = "../../docs/design-control.md",
}
