//! `rein-core`'s integration tests, as one test binary (one link, one run):
//! each file of `suite/` is a module; run one with
//! `cargo test -p rein-core --test all -- suite::MODULE::`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod suite;
