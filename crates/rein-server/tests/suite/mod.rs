//! The test files of `rein-server`, one module each.

mod api;
mod openapi;
