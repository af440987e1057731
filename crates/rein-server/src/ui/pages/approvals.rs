//! The approvals page: pending requests as cards, decided from the page.

use super::*;

pub async fn approvals(State(state): State<AppState>, user: User) -> Response {
    let list = live(
        "approvals",
        "/ui/approvals/list",
        approvals_fragment(&state, &user).await,
    );
    page(
        &user,
        "Approvals",
        html! {
            h1 { "Approvals" }
            (list)
        },
    )
    .into_response()
}

pub async fn approvals_list(State(state): State<AppState>, user: User) -> Response {
    approvals_fragment(&state, &user).await.into_response()
}

/// Pending requests first (most urgent first), then the latest decided.
pub(super) async fn approvals_fragment(state: &AppState, user: &User) -> Markup {
    let pending = state
        .engine
        .approvals(&ApprovalFilter {
            status: Some(ApprovalStatus::Pending),
            task_id: None,
            limit: Some(200),
        })
        .await;
    let recent = state
        .engine
        .approvals(&ApprovalFilter {
            status: None,
            task_id: None,
            limit: Some(50),
        })
        .await;
    let (mut pending, recent) = match (pending, recent) {
        (Ok(p), Ok(r)) => (p, r),
        (Err(e), _) | (_, Err(e)) => {
            return html! { p.error role="alert" { (e.to_string()) } };
        }
    };
    pending.sort_by_key(|a| std::cmp::Reverse(a.priority));
    let decided: Vec<&ApprovalRequest> = recent
        .iter()
        .filter(|a| a.status != ApprovalStatus::Pending)
        .collect();
    // What each request's task is, read once per task.
    let mut tasks: std::collections::HashMap<&str, String> = std::collections::HashMap::new();
    for a in pending.iter().chain(decided.iter().copied()) {
        if !tasks.contains_key(a.task_id.as_str()) {
            let about = task_about(state, a).await;
            tasks.insert(a.task_id.as_str(), about);
        }
    }
    let about = |a: &ApprovalRequest| tasks.get(a.task_id.as_str()).cloned().unwrap_or_default();
    html! {
        h2 { "Waiting (" (pending.len()) ")" }
        @if pending.is_empty() { p.empty { "Nothing waits for a person." } }
        @for a in &pending { (approval_card(a, &about(a), user, None)) }
        h2 { "Decided" }
        @for a in &decided { (approval_card(a, &about(a), user, None)) }
    }
}

/// The description of a request's task (empty if it cannot be read: the
/// card still names the task by its id).
async fn task_about(state: &AppState, a: &ApprovalRequest) -> String {
    state
        .engine
        .summary(&a.task_id)
        .await
        .map(|s| s.description)
        .unwrap_or_default()
}

/// One request: what it asks, and (to an operator, while it waits) the
/// decisions, the recommended option first.
pub(super) fn approval_card(
    a: &ApprovalRequest,
    task: &str,
    user: &User,
    note: Option<&str>,
) -> Markup {
    let mut options = a.options.clone();
    if let Some(r) = &a.recommended_option
        && let Some(i) = options.iter().position(|o| o == r)
    {
        let r = options.remove(i);
        options.insert(0, r);
    }
    let pending = a.status == ApprovalStatus::Pending;
    html! {
        article.approval id={"a-" (a.id)} data-approval=(a.id) data-status=(a.status.as_str()) {
            header {
                span class={"badge p-" (a.priority.as_str())} { (a.priority.as_str()) }
                " " strong { (a.title) }
                " " span class={"badge a-" (a.status.as_str())} { (a.status.as_str()) }
            }
            @if !a.description.is_empty() { p { (a.description) } }
            @if let Some(q) = &a.question { p.question { (q) } }
            @if let Some(c) = &a.context.command { p.context { "Command " code { (c) } } }
            @if let Some(f) = &a.context.file_path { p.context { "File " code { (f) } } }
            @if let Some(r) = &a.context.risk_assessment { p.context { "Risk: " (r) } }
            p.meta {
                "Task " a href={"/ui/tasks/" (a.task_id)} {
                    @if task.is_empty() { (a.task_id) } @else { span.task-about { (task) } " (" (a.task_id) ")" }
                }
                @if let Some(step) = &a.step_id { " · step " (step) }
                " · trigger " (a.trigger.as_str())
                // A decided request's deadline no longer counts down.
                @if let (true, Some(deadline)) = (pending, &a.deadline) {
                    " · deadline " time.deadline datetime=(deadline.to_rfc3339()) { (deadline.format("%H:%M:%S UTC")) }
                    " (then " (a.on_expiry.as_str()) ")"
                }
            }
            @if let Some(r) = &a.response {
                p.decided {
                    (r.decision.as_str()) " by " strong { (r.decided_by) } " at " (time(&r.decided_at))
                    @if let Some(o) = &r.selected_option { " · " (o) }
                    @if let Some(reason) = &r.reason { " — " (reason) }
                }
            }
            @if let Some(note) = note { p.note role="status" { (note) } }
            @if pending && user.can_change() {
                form.decide hx-post={"/ui/approvals/" (a.id) "/decide"} hx-target={"#a-" (a.id)} hx-swap="outerHTML" {
                    @if !options.is_empty() {
                        label { "Option "
                            select name="option" {
                                @for o in &options {
                                    option value=(o) { (o) @if a.recommended_option.as_deref() == Some(o.as_str()) { " (recommended)" } }
                                }
                            }
                        }
                    }
                    label { "Reason " input type="text" name="reason"; }
                    label { "Delegate to " input type="text" name="delegate_to"; }
                    div.buttons {
                        button name="decision" value="approve" { "Approve" }
                        button.danger name="decision" value="deny" { "Deny" }
                        button.secondary name="decision" value="skip" { "Skip" }
                        button.secondary name="decision" value="delegate" { "Delegate" }
                    }
                }
            }
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct DecideForm {
    pub(super) decision: String,
    #[serde(default)]
    pub(super) option: Option<String>,
    #[serde(default)]
    pub(super) reason: Option<String>,
    #[serde(default)]
    pub(super) delegate_to: Option<String>,
}

/// A decision from the inbox; one made first elsewhere wins, and the card
/// says who made it.
pub async fn decide(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<DecideForm>,
) -> Response {
    let who = match changer(&state, &headers, Role::Operator) {
        Ok(who) => who,
        Err(refused) => return refused.into_response(),
    };
    let user = User {
        name: who.name.clone(),
        role: who.role,
        csrf: None,
    };
    let id = match parse_id::<rein_protocol::ApprovalId>(&id) {
        Ok(id) => id,
        Err(refused) => return refused.into_response(),
    };
    let decision = match form.decision.as_str() {
        "approve" => Decision::Approve,
        "deny" => Decision::Deny,
        "skip" => Decision::Skip,
        "delegate" => Decision::Delegate,
        other => return refusal(StatusCode::BAD_REQUEST, &format!("no decision `{other}`")),
    };
    let some = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let response = ApprovalResponse {
        request_id: id.clone(),
        decision,
        selected_option: if decision == Decision::Approve {
            some(form.option)
        } else {
            None
        },
        reason: some(form.reason),
        decided_by: who.name.clone(),
        delegate_to: some(form.delegate_to),
        decided_at: chrono::Utc::now(),
    };
    match state.decide(who.role, response).await {
        Ok(a) => approval_card(&a, &task_about(&state, &a).await, &user, None).into_response(),
        Err(EngineError::AlreadyDecided { current }) => {
            let first = current
                .response
                .as_ref()
                .map(|r| {
                    format!(
                        "{} decided it first ({}).",
                        r.decided_by,
                        r.decision.as_str()
                    )
                })
                .unwrap_or_else(|| "It was decided first elsewhere.".to_owned());
            let about = task_about(&state, &current).await;
            approval_card(&current, &about, &user, Some(&first)).into_response()
        }
        // Refused (an option it does not offer, someone else's to decide):
        // the card stays, saying why.
        Err(e) => match state.engine.approval(&id).await {
            Ok(current) => {
                let message = crate::error::ApiError::from(e).message;
                let about = task_about(&state, &current).await;
                approval_card(&current, &about, &user, Some(&message)).into_response()
            }
            Err(_) => engine_refusal(e),
        },
    }
}
