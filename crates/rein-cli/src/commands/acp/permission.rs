//! People's questions as ACP permission requests: a run's approval requests
//! asked of the editor, its answers made decisions.

use super::*;

/// An approval request as the tool call a permission request is about.
pub(super) fn question_call(request: &ApprovalRequest) -> ToolCall {
    let mut about = request.description.clone();
    if let Some(question) = &request.question {
        about = format!("{question}\n{about}");
    }
    let mut call = ToolCall::new(request.id.to_string(), request.title.clone())
        .kind(ToolKind::Think)
        .status(ToolCallStatus::Pending);
    if !about.trim().is_empty() {
        call = call.content(vec![ToolCallContent::from(about)]);
    }
    call
}

/// The choices of a request: approve (with each option, the recommended one
/// first), deny, skip.
pub(super) fn permission_options(request: &ApprovalRequest) -> Vec<PermissionOption> {
    let mut options = Vec::new();
    let mut named: Vec<&String> = request.options.iter().collect();
    named.sort_by_key(|o| Some(*o) != request.recommended_option.as_ref());
    for option in named {
        let name = if Some(option) == request.recommended_option.as_ref() {
            format!("{option} (recommended)")
        } else {
            option.clone()
        };
        options.push(PermissionOption::new(
            format!("approve:{option}"),
            name,
            PermissionOptionKind::AllowOnce,
        ));
    }
    if request.options.is_empty() {
        options.push(PermissionOption::new(
            "approve",
            "Approve",
            PermissionOptionKind::AllowOnce,
        ));
    }
    options.push(PermissionOption::new(
        "deny",
        "Deny (the step fails)",
        PermissionOptionKind::RejectOnce,
    ));
    options.push(PermissionOption::new(
        "skip",
        "Skip (the plan goes on without the step)",
        PermissionOptionKind::RejectOnce,
    ));
    options
}

/// What a chosen option means.
pub(super) fn decision_of(option: &str) -> Option<(Decision, Option<String>)> {
    match option {
        "approve" => Some((Decision::Approve, None)),
        "deny" => Some((Decision::Deny, None)),
        "skip" => Some((Decision::Skip, None)),
        other => other
            .strip_prefix("approve:")
            .map(|o| (Decision::Approve, Some(o.to_owned()))),
    }
}

/// Asks a session's client the task's approval requests, each once while
/// the client has it.
#[derive(Clone)]
pub(super) struct Asker {
    pub(super) engine: Arc<Engine>,
    pub(super) cx: ConnectionTo<Client>,
    pub(super) session: String,
    /// The session's run, ended `cancelled` when the client cancels a
    /// permission request.
    pub(super) run_of: Arc<Session>,
    pub(super) actor: String,
    /// The ids of the requests the client is being asked (the session's).
    pub(super) asked: Arc<Mutex<HashSet<String>>>,
}

impl Asker {
    pub(super) fn new(
        agent: &AcpAgent,
        cx: &ConnectionTo<Client>,
        session: &Arc<Session>,
    ) -> Asker {
        Asker {
            engine: Arc::clone(&agent.engine),
            cx: cx.clone(),
            session: session.id.clone(),
            run_of: Arc::clone(session),
            actor: agent.actor(),
            asked: Arc::clone(&session.asked),
        }
    }

    /// The client is no longer asked `request` (answered, cancelled, or
    /// gone): a later turn may ask it again while it is pending.
    pub(super) fn done_asking(&self, request: &ApprovalRequest) {
        if let Ok(mut asked) = self.asked.lock() {
            asked.remove(request.id.as_str());
        }
    }

    /// Asks the task's requests still pending (after a restart, they are not
    /// raised again).
    pub(super) async fn ask_pending(&self, task: &TaskId) {
        let pending = self
            .engine
            .approvals(&ApprovalFilter {
                status: Some(ApprovalStatus::Pending),
                task_id: Some(task.clone()),
                limit: Some(500),
            })
            .await
            .unwrap_or_default();
        for request in pending.iter().rev() {
            send(
                &self.cx,
                &self.session,
                SessionUpdate::ToolCall(question_call(request)),
            );
            self.ask(request);
        }
    }

    /// Sends `request` as a permission request, unless it was sent already,
    /// and decides it by the answer.
    pub(super) fn ask(&self, request: &ApprovalRequest) {
        let fresh = self
            .asked
            .lock()
            .is_ok_and(|mut asked| asked.insert(request.id.to_string()));
        if !fresh || request.status != ApprovalStatus::Pending {
            return;
        }
        let asker = self.clone();
        let request = request.clone();
        let spawned = self.cx.spawn(async move {
            asker.ask_and_decide(request).await;
            Ok(())
        });
        if let Err(e) = spawned {
            tracing::debug!(error = %e, "cannot ask the client");
        }
    }

    pub(super) async fn ask_and_decide(&self, request: ApprovalRequest) {
        let call = question_call(&request);
        let fields = ToolCallUpdateFields::new()
            .title(call.title.clone())
            .kind(call.kind)
            .status(ToolCallStatus::Pending)
            .content(call.content.clone());
        let asked = self
            .cx
            .send_request(RequestPermissionRequest::new(
                self.session.clone(),
                ToolCallUpdate::new(request.id.to_string(), fields),
                permission_options(&request),
            ))
            .block_task()
            .await;
        self.done_asking(&request);
        let answer = match asked {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, "the client did not answer a permission request");
                return;
            }
        };
        let RequestPermissionOutcome::Selected(selected) = answer.outcome else {
            // `cancelled`: by the protocol, the client is cancelling the
            // turn. It ends `cancelled` (the task pauses), and the request
            // stays pending for another answerer, or for `/resume`.
            if let Some(run) = self.run_of.running() {
                run.pause.cancel();
            }
            return;
        };
        let Some((decision, selected_option)) = decision_of(&selected.option_id.0) else {
            say(
                &self.cx,
                &self.session,
                &format!(
                    "`{}` is not an answer to {}; it stays pending",
                    selected.option_id.0, request.id
                ),
            );
            return;
        };
        let response = ApprovalResponse {
            request_id: request.id.clone(),
            decision,
            selected_option,
            reason: Some("answered in the editor, over ACP".into()),
            decided_by: self.actor.clone(),
            delegate_to: None,
            decided_at: chrono::Utc::now(),
        };
        match self.engine.decide(response).await {
            // The decision's own event says so.
            Ok(_) => {}
            Err(EngineError::AlreadyDecided { current }) => {
                let by = current
                    .response
                    .as_ref()
                    .map_or_else(|| "the deadline".to_owned(), |r| r.decided_by.clone());
                say(
                    &self.cx,
                    &self.session,
                    &format!(
                        "Your answer to {} came after it was decided ({} by {by}): it was not taken.",
                        request.id, current.status
                    ),
                );
            }
            Err(e) => say(
                &self.cx,
                &self.session,
                &format!("Your answer to {} was not taken: {e}", request.id),
            ),
        }
    }
}
