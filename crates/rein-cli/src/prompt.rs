//! Asking approvals inline: when `rein run` runs on a terminal, a pending approval
//! request of its task is asked right there — choices with the recommended one
//! first, the deadline and reminders as it nears — while other terminals can still
//! answer it; the first answer wins and the question here is dropped.

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget};
use rein_core::EngineError;
use rein_protocol::{
    ApprovalRequest, ApprovalResponse, Decision, HarnessEvent, TaskChange, TaskId,
};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::backend::Backend;
use crate::client::RemoteError;
use crate::output::say;

/// Whether this process can ask: stdin, stdout and stderr are all a terminal.
pub fn interactive() -> bool {
    std::io::stdin().is_terminal()
        && std::io::stdout().is_terminal()
        && std::io::stderr().is_terminal()
}

pub struct Prompter {
    stop: CancellationToken,
    handle: tokio::task::JoinHandle<()>,
}

impl Prompter {
    /// Starts asking the requests `task` raises, on this terminal, as `who`; `bar`
    /// is hidden while a question waits for an answer.
    pub fn start(
        engine: Backend,
        events: broadcast::Receiver<HarnessEvent>,
        task: TaskId,
        who: String,
        bar: Option<ProgressBar>,
    ) -> Prompter {
        let stop = CancellationToken::new();
        let lines = read_lines();
        let asker = Asker {
            engine,
            task,
            who,
            bar,
        };
        let handle = tokio::spawn(asker.run(events, lines, stop.clone()));
        Prompter { stop, handle }
    }

    pub async fn finish(self) {
        self.stop.cancel();
        let _ = self.handle.await;
    }
}

/// Lines typed on stdin, read by a thread of their own (a terminal read cannot be
/// cancelled; the thread ends with the process).
fn read_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    let _ = std::thread::Builder::new()
        .name("rein-stdin".into())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    rx
}

/// What a typed answer means for `request`, or why it does not fit.
pub fn parse_answer(
    request: &ApprovalRequest,
    input: &str,
) -> Result<(Decision, Option<String>), String> {
    let input = input.trim();
    let lower = input.to_lowercase();
    if let Ok(n) = input.parse::<usize>()
        && n >= 1
        && n <= request.options.len()
    {
        return Ok((Decision::Approve, Some(request.options[n - 1].clone())));
    }
    if let Some(option) = request
        .options
        .iter()
        .find(|o| o.eq_ignore_ascii_case(input))
    {
        return Ok((Decision::Approve, Some(option.clone())));
    }
    match lower.as_str() {
        "" if request.recommended_option.is_some() => {
            Ok((Decision::Approve, request.recommended_option.clone()))
        }
        "y" | "yes" | "a" | "approve" => {
            Ok((Decision::Approve, request.recommended_option.clone()))
        }
        "n" | "no" | "d" | "deny" => Ok((Decision::Deny, None)),
        "s" | "skip" => Ok((Decision::Skip, None)),
        _ => Err(format!("`{input}` is not an answer here")),
    }
}

/// The question as it is shown: title, choices (recommended first), keys, deadline.
pub fn question(request: &ApprovalRequest, now: rein_protocol::Timestamp) -> String {
    let mut text = format!("? {}", request.title);
    if !request.description.is_empty() && request.description != request.title {
        text.push_str(&format!("\n  {}", request.description));
    }
    let mut numbered: Vec<(usize, &String)> = request.options.iter().enumerate().collect();
    numbered.sort_by_key(|(_, o)| Some(*o) != request.recommended_option.as_ref());
    for (i, option) in numbered {
        let mark = if Some(option) == request.recommended_option.as_ref() {
            "  (recommended, Enter)"
        } else {
            ""
        };
        text.push_str(&format!("\n  [{}] {option}{mark}", i + 1));
    }
    if request.options.is_empty() {
        text.push_str("\n  [y] approve");
    }
    text.push_str("\n  [d] deny   [s] skip");
    if let Some(deadline) = request.deadline {
        text.push_str(&format!(
            "\n  {} left (then `{}`); another terminal may answer too: `rein approvals approve {}`",
            remaining(now, deadline),
            request.on_expiry.as_str(),
            request.id
        ));
    }
    text.push_str("\n> ");
    text
}

fn remaining(now: rein_protocol::Timestamp, deadline: rein_protocol::Timestamp) -> String {
    let left = (deadline - now).to_std().unwrap_or_default();
    humantime::format_duration(Duration::from_secs(left.as_secs())).to_string()
}

/// When to remind of the deadline: each minute, then each ten seconds in the last one.
fn next_reminder(left: Duration) -> Duration {
    if left > Duration::from_secs(60) {
        Duration::from_secs(60)
            .min(left - Duration::from_secs(60))
            .max(Duration::from_secs(1))
    } else {
        Duration::from_secs(10)
            .min(left)
            .max(Duration::from_secs(1))
    }
}

struct Asker {
    engine: Backend,
    task: TaskId,
    who: String,
    bar: Option<ProgressBar>,
}

impl Asker {
    /// Hides or shows the progress bar around a question.
    fn bar_visible(&self, visible: bool) {
        if let Some(bar) = &self.bar {
            bar.set_draw_target(if visible {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            });
        }
    }

    async fn run(
        self,
        mut events: broadcast::Receiver<HarnessEvent>,
        mut lines: mpsc::UnboundedReceiver<String>,
        stop: CancellationToken,
    ) {
        let (engine, task, who) = (&self.engine, &self.task, &self.who);
        let mut queue: VecDeque<ApprovalRequest> = VecDeque::new();
        let mut asking: Option<ApprovalRequest> = None;
        loop {
            if asking.is_none()
                && let Some(next) = queue.pop_front()
            {
                self.bar_visible(false);
                say!("\n{}", question(&next, engine.now()));
                asking = Some(next);
            }
            let reminder = asking
                .as_ref()
                .and_then(|r| r.deadline)
                .map(|d| next_reminder((d - engine.now()).to_std().unwrap_or_default()));
            tokio::select! {
                () = stop.cancelled() => {
                // The run is over; say what became of a question still on screen.
                while let Ok(event) = events.try_recv() {
                    if let TaskChange::HumanApprovalReceived { request_id, status, response } = event.change
                        && asking.as_ref().is_some_and(|r| r.id == request_id)
                    {
                        let by = response.map_or_else(|| "the deadline".to_owned(), |r| r.decided_by);
                        say!("  {request_id} was answered elsewhere: {status} by {by}");
                    }
                }
                self.bar_visible(true);
                return;
            }
                event = events.recv() => match event {
                    Ok(event) if event.task_id.as_ref() == Some(task) => match event.change {
                        TaskChange::HumanApprovalRequested { request } => queue.push_back(*request),
                        TaskChange::HumanApprovalReceived { request_id, status, response } => {
                            queue.retain(|r| r.id != request_id);
                            if asking.as_ref().is_some_and(|r| r.id == request_id)
                                && status != rein_protocol::ApprovalStatus::Pending
                            {
                                let by = response.map_or_else(|| "the deadline".to_owned(), |r| r.decided_by);
                                say!("  {request_id} was answered: {status} by {by}");
                                asking = None;
                                self.bar_visible(true);
                            }
                        }
                        _ => {}
                    },
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                Some(line) = lines.recv(), if asking.is_some() => {
                    let Some(request) = asking.clone() else { continue };
                    match parse_answer(&request, &line) {
                        Err(why) => say!("  {why}; type a number, an option, y, d or s\n> "),
                        Ok((decision, selected_option)) => {
                            let response = ApprovalResponse {
                                request_id: request.id.clone(),
                                decision,
                                selected_option,
                                reason: Some("answered at the terminal".into()),
                                decided_by: who.clone(),
                                delegate_to: None,
                                decided_at: chrono::Utc::now(),
                            };
                            match engine.decide(response).await {
                                Ok(settled) => say!("  {}: {}", settled.id, settled.status),
                                Err(e) if too_late(&e) => say!("  too late: {e}"),
                                Err(e) => {
                                    say!("  {e}\n> ");
                                    continue;
                                }
                            }
                            asking = None;
                            self.bar_visible(true);
                        }
                    }
                }
                () = tokio::time::sleep(reminder.unwrap_or_default()), if reminder.is_some() => {
                    if let Some(deadline) = asking.as_ref().and_then(|r| r.deadline) {
                        say!("  … {} left to answer\n> ", remaining(engine.now(), deadline));
                    }
                }
            }
        }
    }
}

/// Whether a decision failed because someone else answered first.
fn too_late(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<EngineError>(),
        Some(EngineError::AlreadyDecided { .. })
    ) || matches!(
        e.downcast_ref::<RemoteError>(),
        Some(RemoteError::Api { status: 409, .. })
    )
}

#[cfg(test)]
mod tests {
    use rein_protocol::{
        ApprovalContext, ApprovalId, ApprovalStatus, ApprovalType, CheckpointId, Priority, Trigger,
    };

    use super::*;

    fn request(options: &[&str], recommended: Option<&str>) -> ApprovalRequest {
        ApprovalRequest {
            id: ApprovalId::new(),
            task_id: TaskId::new(),
            checkpoint_id: CheckpointId::new(),
            step_id: Some("ship".into()),
            trigger: Trigger::MultipleOptions,
            kind: ApprovalType::Decision,
            priority: Priority::Medium,
            title: "Publish?".into(),
            description: String::new(),
            options: options.iter().map(|o| (*o).to_owned()).collect(),
            recommended_option: recommended.map(str::to_owned),
            context: ApprovalContext::default(),
            timeout_s: Some(1800),
            deadline: Some(chrono::Utc::now() + chrono::TimeDelta::minutes(30)),
            on_expiry: Decision::Deny,
            assigned_to: None,
            created_at: chrono::Utc::now(),
            status: ApprovalStatus::Pending,
            response: None,
            question: None,
        }
    }

    #[test]
    fn answers_by_number_name_key_or_enter() {
        let r = request(&["publish", "hold"], Some("hold"));
        assert_eq!(
            parse_answer(&r, "1"),
            Ok((Decision::Approve, Some("publish".into())))
        );
        assert_eq!(
            parse_answer(&r, " HOLD "),
            Ok((Decision::Approve, Some("hold".into())))
        );
        assert_eq!(
            parse_answer(&r, ""),
            Ok((Decision::Approve, Some("hold".into()))),
            "Enter takes the recommended"
        );
        assert_eq!(parse_answer(&r, "d"), Ok((Decision::Deny, None)));
        assert_eq!(parse_answer(&r, "skip"), Ok((Decision::Skip, None)));
        assert!(parse_answer(&r, "3").is_err());
        assert!(parse_answer(&r, "maybe").unwrap_err().contains("`maybe`"));
        let plain = request(&[], None);
        assert_eq!(parse_answer(&plain, "y"), Ok((Decision::Approve, None)));
        assert!(
            parse_answer(&plain, "").is_err(),
            "no recommended answer: Enter does not decide"
        );
    }

    #[test]
    fn the_question_puts_the_recommended_choice_first_and_shows_the_deadline() {
        let r = request(&["publish", "hold"], Some("hold"));
        let q = question(&r, chrono::Utc::now());
        let hold = q.find("[2] hold  (recommended, Enter)").unwrap();
        let publish = q.find("[1] publish").unwrap();
        assert!(hold < publish, "{q}");
        assert!(
            q.contains("left (then `deny`)")
                && q.contains(&format!("rein approvals approve {}", r.id)),
            "{q}"
        );
    }

    #[test]
    fn reminders_come_each_minute_then_each_ten_seconds() {
        assert_eq!(
            next_reminder(Duration::from_secs(30 * 60)),
            Duration::from_secs(60)
        );
        assert_eq!(
            next_reminder(Duration::from_secs(90)),
            Duration::from_secs(30)
        );
        assert_eq!(
            next_reminder(Duration::from_secs(45)),
            Duration::from_secs(10)
        );
        assert_eq!(
            next_reminder(Duration::from_secs(3)),
            Duration::from_secs(3)
        );
    }
}
