//! How a running step asks a person a question and reports as it goes: the
//! messages a step sends its run ([`StepMessage`]) and the handle it sends
//! them with ([`Asker`]).

/// A question a running step puts to a person: it becomes an approval request
/// of the step's checkpoint, answered like any other (CLI, API, Control UI).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The question's identity, the same each time the step asks it: a step
    /// run again after rein stopped that asks it again gets the request
    /// already raised (still pending, or answered meanwhile), not a new one.
    pub key: String,
    pub trigger: rein_protocol::Trigger,
    pub title: String,
    pub description: String,
    pub options: Vec<String>,
    pub recommended: Option<String>,
    pub context: rein_protocol::ApprovalContext,
    /// How long a person has; then `on_expiry` applies.
    pub timeout_ms: Option<u64>,
    pub on_expiry: rein_protocol::Decision,
}

/// Why a question got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    /// The run that would raise the request is gone (rein is stopping).
    #[error("nobody can be asked: {0}")]
    Unavailable(String),
}

/// What a running step sends its run.
#[derive(Debug)]
pub enum StepMessage {
    Ask(Box<Ask>),
    /// Something the step's runtime reported, recorded as an `agent_update`.
    Report {
        step: usize,
        update: serde_json::Value,
    },
    /// The step's command started its process group, recorded as a
    /// `process_started` so that a resumed run can stop what a crash left.
    Started {
        step: usize,
        process: rein_protocol::StepProcess,
    },
}

/// A question on its way to the run, with where its answer goes.
#[derive(Debug)]
pub struct Ask {
    /// The asking step's index in the plan.
    pub step: usize,
    pub question: Question,
    /// The settled request (approved, denied, skipped or expired; never pending).
    pub reply: tokio::sync::oneshot::Sender<Result<rein_protocol::ApprovalRequest, AskError>>,
}

/// A running step's line to its run: asking a person, reporting progress.
#[derive(Debug, Clone)]
pub struct Asker {
    step: usize,
    tx: tokio::sync::mpsc::UnboundedSender<StepMessage>,
}

impl Asker {
    /// Messages of step `step` go to `tx` (the run's receiver; a test's own).
    pub fn new(step: usize, tx: tokio::sync::mpsc::UnboundedSender<StepMessage>) -> Asker {
        Asker { step, tx }
    }

    /// Records what the step's runtime reported in the task's log (once the
    /// run commits next); lost only if the run has ended.
    pub fn report(&self, update: serde_json::Value) {
        let _ = self.tx.send(StepMessage::Report {
            step: self.step,
            update,
        });
    }

    /// Records the process group the step's command runs in (once the run
    /// commits next); lost only if the run has ended.
    pub fn started(&self, process: rein_protocol::StepProcess) {
        let _ = self.tx.send(StepMessage::Started {
            step: self.step,
            process,
        });
    }

    /// Raises the question and waits for its decision (a delegation keeps it
    /// waiting). Cancel by dropping the future: the request stays until the
    /// step ends, and is then withdrawn.
    pub async fn ask(
        &self,
        question: Question,
    ) -> Result<rein_protocol::ApprovalRequest, AskError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.tx
            .send(StepMessage::Ask(Box::new(Ask {
                step: self.step,
                question,
                reply,
            })))
            .map_err(|_| AskError::Unavailable("the task's run has ended".into()))?;
        answer.await.unwrap_or_else(|_| {
            Err(AskError::Unavailable(
                "the task's run stopped before the question was answered".into(),
            ))
        })
    }
}
