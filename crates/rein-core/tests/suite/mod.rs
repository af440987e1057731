//! The test files of `rein-core`, one module each.

mod approvals;
mod conflicts;
mod contracts;
mod engine;
mod fork;
mod harness;
mod harness_contract;
mod journal;
mod metrics;
mod permissions;
mod pev;
mod plan_reference;
mod questions;
mod recovery;
mod saved;
mod shared_state_rules;
mod shared_state_store;
mod store_rules;
