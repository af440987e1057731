//! The fake chat-completions server (it speaks the streaming wire format; the
//! hosted API cannot be reached here) with a `rein` pointed at it.
#![allow(dead_code)]

pub use rein_test_support::model as fake;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// A running fake model server and what it was asked.
pub struct Model {
    _runtime: tokio::runtime::Runtime,
    pub base: String,
    pub seen: fake::Seen,
}

pub fn model() -> Model {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (base, seen) = runtime.block_on(fake::fake_model());
    Model {
        _runtime: runtime,
        base,
        seen,
    }
}

impl Model {
    /// `rein --data-dir DATA` asking this server (model `gpt-test`).
    pub fn rein(&self, data: &Path) -> Command {
        let mut cmd = crate::common::rein(data);
        cmd.env("OPENAI_BASE_URL", &self.base)
            .env("OPENAI_API_KEY", "sk-test")
            .env("REIN_MODEL", "gpt-test");
        cmd
    }

    pub fn requests(&self) -> Vec<Value> {
        self.seen.0.lock().unwrap().clone()
    }

    /// The decomposition requests: those whose prompt is a goal.
    pub fn decompositions(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r.to_string().contains("Goal: "))
            .collect()
    }
}
