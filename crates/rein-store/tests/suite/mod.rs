//! The test files of `rein-store`, one module each.

mod conformance;
mod postgres;
mod sqlite;
mod workspaces;
