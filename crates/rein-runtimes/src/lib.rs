//! `rein-runtimes`: the agent runtimes behind rein's harness contract.
//!
//! - [`plugin`]: out-of-process harness plugins — a manifest and a child
//!   process speaking newline-delimited JSON-RPC 2.0 over stdio — registered in
//!   a [`rein_core::harness::HarnessRegistry`] like any harness.
//!
//! - [`agent`]: agent steps — the selected plugin harness, or the built-in
//!   agent loop with its journal and workspace tools.
//! - [`completion`]: isolated completions, dispatched to the runtime the
//!   selection policy picks (a plugin, or rein's chat client with no tools).
//! - [`openai`]: a streaming client of the OpenAI-compatible chat-completions
//!   API, for the built-in runtime; [`responses`]: one of OpenAI's Responses
//!   API; [`anthropic`]: one of Anthropic's Messages API; [`provider`]: which
//!   provider is which, and their settings.
//! - [`budget`]: what an agent step's model calls may spend, and the
//!   question to a person when a turn would pass it.
//! - [`context`]: models' context windows, and compaction of a conversation
//!   that would not fit.
//! - [`mcp`]: MCP tool servers (stdio in the step's sandbox, or streamable
//!   HTTP) whose tools agent steps are offered, through the official SDK.
//!
//! - [`acp`]: external agents that speak the Agent Client Protocol, declared
//!   by a plugin manifest with `protocol = "acp"`.
//! - [`manifest`]: what every harness a manifest declares shares: how its
//!   command is started, and the harness methods its declaration answers.

pub mod acp;
pub mod agent;
pub mod anthropic;
pub mod budget;
pub mod completion;
pub mod context;
pub mod manifest;
pub mod mcp;
pub mod openai;
pub mod plugin;
pub mod provider;
pub mod responses;

pub use agent::AgentExecutor;
pub use completion::{Completions, ProfileSpec};
pub use plugin::{PluginError, load_manifest, register_plugin};
