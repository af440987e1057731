//! The test files of `rein-protocol`, one module each.

mod names;
mod schemas;
mod shared_state;
mod unset;
