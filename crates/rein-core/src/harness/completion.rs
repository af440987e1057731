//! Isolated completions as rein asks for them (spec harness-sdk §4): a prompt
//! on a model route, served by the runtime selection chooses, with no tools;
//! its answer checked against a JSON Schema when the caller gives one.
//!
//! The engine knows only the [`Completer`] trait; the runtimes crate provides
//! the one that selects a harness and dispatches to it (or to rein's own
//! chat client).

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::SelectionError;
use super::isolated::CompletionError;

/// Which model route serves a completion; unset parts take the configured
/// defaults.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub provider: Option<String>,
    pub model: Option<String>,
    /// `auto`, `rein` or a harness id.
    pub runtime: Option<String>,
}

/// One completion asked for.
#[derive(Debug, Clone)]
pub struct CompletionRequest {
    pub prompt: String,
    pub system: Option<String>,
    pub route: Route,
    /// One deadline for the whole completion, every attempt included.
    pub timeout: Duration,
    /// Its token limit and the schema its answer must match, where the
    /// runtime can ask for them.
    pub shape: super::isolated::AnswerShape,
    /// Whether empty visible text is an answer (rule 20).
    pub policy: super::isolated::OutputTextPolicy,
}

pub use rein_protocol::harness::Completion;

/// The journal (of a step id no plan can have) where a task's own model
/// calls — its goal's decompositions, its one-line summary — are metered.
pub const METER_JOURNAL: &str = "rein:completions";

/// Meters `completion`, made for `task` as `what` (`decompose`, `summary`),
/// like an agent turn: a journal entry with its usage, counted once in the
/// store's model usage. A completion whose runtime counted nothing is
/// skipped; a failure to write is logged, not the task's.
pub async fn meter(
    store: &std::sync::Arc<dyn crate::store::Store>,
    task: &rein_protocol::TaskId,
    what: &str,
    completion: &Completion,
) {
    let Some(usage) = completion.usage else {
        return;
    };
    let used = rein_protocol::TurnUsage {
        provider: completion.selection.provider.clone(),
        model: completion
            .selection
            .model
            .clone()
            .unwrap_or_else(|| completion.selection.selected.clone()),
        served_model: None,
        step: Some(what.to_owned()),
        session: None,
        usage,
    };
    let journal = crate::journal::Journal::new(std::sync::Arc::clone(store), task, METER_JOURNAL);
    let written = async {
        journal.load().await?;
        journal
            .append(&[serde_json::json!({ "usage": used, "completion": what })])
            .await
    };
    if let Err(e) = written.await {
        tracing::warn!(task = %task, error = %e, "the completion's usage was not metered");
    }
}

/// Why a completion gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompletionFailure {
    /// No runtime serves the route.
    #[error(transparent)]
    Selection(#[from] SelectionError),
    /// The runtime was asked and failed (or answered what rule 20 refuses).
    #[error(transparent)]
    Completion(#[from] CompletionError),
    /// The answer is not JSON that the schema accepts.
    #[error("the answer does not match the schema: {}", .0.join("; "))]
    Invalid(Vec<String>),
    /// The schema itself cannot be used.
    #[error("the schema is not a usable JSON Schema: {0}")]
    BadSchema(String),
    /// Nothing is configured to answer.
    #[error("{0}")]
    NotConfigured(String),
}

impl CompletionFailure {
    /// The failure as said to a person: where the fix is a setting of the
    /// machine rein runs on, what to set and where to look.
    pub fn advised(&self) -> String {
        match self {
            CompletionFailure::NotConfigured(m) => format!(
                "{m}: set OPENAI_BASE_URL (and OPENAI_API_KEY, REIN_MODEL) where rein runs to a model server, or register a harness with --plugin"
            ),
            CompletionFailure::Completion(_) => format!(
                "{self}\n  the model is the one at OPENAI_BASE_URL (with OPENAI_API_KEY), named by the route's model (--model) or REIN_MODEL; `rein harness explain --provider openai` shows which runtime serves the route"
            ),
            other => other.to_string(),
        }
    }
}

/// What serves isolated completions: selection, then dispatch to the runtime
/// chosen.
#[async_trait]
pub trait Completer: Send + Sync + std::fmt::Debug {
    async fn complete(&self, request: &CompletionRequest) -> Result<Completion, CompletionFailure>;
}

/// A JSON Schema, compiled once, that answers are checked against.
#[derive(Debug)]
pub struct AnswerSchema {
    validator: jsonschema::Validator,
}

impl AnswerSchema {
    pub fn new(schema: &Value) -> Result<AnswerSchema, CompletionFailure> {
        jsonschema::validator_for(schema)
            .map(|validator| AnswerSchema { validator })
            .map_err(|e| CompletionFailure::BadSchema(e.to_string()))
    }

    /// The answer's JSON, or everything wrong with it (each naming where).
    /// Models often fence JSON in a Markdown code block or say a word around
    /// it: the JSON is the fenced block if there is one, else the text from
    /// the first `{` or `[` to the last `}` or `]`.
    pub fn check(&self, text: &str) -> Result<Value, Vec<String>> {
        self.check_with(text, |_| {})
    }

    /// [`AnswerSchema::check`], with `prepare` applied to the JSON before it
    /// is checked (a decomposition's other names mapped to the schema's).
    pub fn check_with(
        &self,
        text: &str,
        prepare: impl FnOnce(&mut Value),
    ) -> Result<Value, Vec<String>> {
        let body = json_part(text);
        let mut value: Value = serde_json::from_str(body).map_err(|e| {
            vec![format!(
                "the answer is not JSON ({e}); answer with one JSON value and nothing else"
            )]
        })?;
        prepare(&mut value);
        let errors: Vec<String> = self
            .validator
            .iter_errors(&value)
            .take(20)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("at {at}: {e}")
                }
            })
            .collect();
        if errors.is_empty() {
            Ok(value)
        } else {
            Err(errors)
        }
    }
}

/// The part of a model's answer that should be JSON.
fn json_part(text: &str) -> &str {
    let text = text.trim();
    if let Some(start) = text.find("```") {
        let after = &text[start + 3..];
        // Skip the info string (`json`) to the end of its line.
        let body_start = after.find('\n').map_or(0, |n| n + 1);
        let body = &after[body_start..];
        if let Some(end) = body.find("```") {
            return body[..end].trim();
        }
    }
    let first = text.find(['{', '[']);
    let last = text.rfind(['}', ']']);
    match (first, last) {
        (Some(a), Some(b)) if a < b => &text[a..=b],
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> AnswerSchema {
        AnswerSchema::new(&json!({
            "type": "object",
            "properties": { "n": { "type": "integer" }, "s": { "type": "string" } },
            "required": ["n", "s"]
        }))
        .unwrap()
    }

    #[test]
    fn a_fenced_or_wrapped_answer_is_read_as_its_json() {
        let s = schema();
        assert_eq!(
            s.check("```json\n{\"n\": 1, \"s\": \"x\"}\n```").unwrap(),
            json!({"n": 1, "s": "x"})
        );
        assert_eq!(
            s.check("Here it is: {\"n\": 2, \"s\": \"y\"} — done.")
                .unwrap(),
            json!({"n": 2, "s": "y"})
        );
    }

    #[test]
    fn every_violation_is_named_with_where_it_is() {
        let errors = schema().check(r#"{"n": "one"}"#).unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors.iter().any(|e| e.starts_with("at /n:")), "{errors:?}");
        assert!(errors.iter().any(|e| e.contains("\"s\"")), "{errors:?}");
        let not_json = schema().check("no idea").unwrap_err();
        assert!(not_json[0].contains("not JSON"), "{not_json:?}");
    }

    #[test]
    fn a_schema_that_is_not_one_is_refused() {
        let err = AnswerSchema::new(&json!({"type": 12})).unwrap_err();
        assert!(matches!(err, CompletionFailure::BadSchema(_)), "{err}");
    }
}
