//! `rein-test-support`: what rein's tests and benchmarks share, and nothing
//! a rein binary ships. A dev-dependency of the crates whose tests use it (and
//! a dependency of `rein-bench`, which measures against the same parts).
//!
//! Layout, one line a module:
//! - [`engine`]: an engine over a real SQLite store in a directory of its
//!   own, with the settings most tests want, built step by step.
//! - [`postgres`]: a throwaway PostgreSQL cluster (Debian's server binaries),
//!   shared by a test binary or started alone, with TLS and a relay that can
//!   cut connections.
//! - [`model`]: a fake model server for the hosted APIs rein cannot reach
//!   here (OpenAI-compatible chat completions, streamed or whole; Responses;
//!   Anthropic Messages; a llama.cpp-like server), speaking their exact wire
//!   formats and playing scripts keyed by the prompt.
//! - [`npm`]: the npm packages tests drive (the ACP test agent on the ACP
//!   SDK, the MCP reference servers), installed on first use.

pub mod engine;
pub mod model;
pub mod npm;
pub mod postgres;
