//! The test files of `rein-runtimes`, one module each.

mod acp;
mod agent;
mod budget;
mod context;
mod fallback;
mod fork;
mod openai;
mod plugins;
