//! The test files of `rein-cli`, one module each.

mod acp;
mod agent;
mod approvals;
mod cli;
mod config;
mod crash;
mod editor;
mod escape;
mod fork;
mod goal;
mod harness;
mod llama;
mod mcp;
mod nodes;
mod openapi_client;
mod otlp;
mod pev;
mod policy;
mod postgres;
mod sandbox;
mod schemathesis;
mod serve;
mod sessions;
mod state;
mod trampoline;
mod ui;
