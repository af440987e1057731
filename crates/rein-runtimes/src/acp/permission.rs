//! An ACP agent's permission requests decided: by the plan's rules where they
//! say, else put to a person as the step's question.

use super::*;

/// Puts a permission request to a person and turns the decision into the ACP
/// outcome, with the request's title when the person skipped it. Without
/// anyone to ask, the request is refused.
pub(super) async fn decide(
    asker: Option<&Asker>,
    policy: &rein_sandbox::Policy,
    request: &RequestPermissionRequest,
    turn: &Shared,
    agent: &str,
) -> (RequestPermissionOutcome, Option<String>) {
    let wire = serde_json::to_value(request).unwrap_or(Value::Null);
    let call = &wire["toolCall"];
    let options: Vec<(String, String)> = wire["options"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| {
            Some((
                o["optionId"].as_str()?.to_owned(),
                o["kind"].as_str()?.to_owned(),
            ))
        })
        .collect();
    let question = question_of(call, &options, agent);
    let ruled = rules_on(call, policy);
    let (status, selected, who) = match (&ruled, asker) {
        (Some((Verdict::Deny, rule)), _) => (
            ApprovalStatus::Denied,
            None,
            format!("the permission rules ({rule})"),
        ),
        (Some((Verdict::Allow, rule)), _) => (
            ApprovalStatus::Approved,
            None,
            format!("the permission rules ({rule})"),
        ),
        (_, Some(asker)) => match asker.ask(question.clone()).await {
            Ok(settled) => {
                let response = settled.response.clone();
                let effective = match settled.status {
                    ApprovalStatus::Expired => settled.on_expiry.status(),
                    s => s,
                };
                (
                    effective,
                    response.as_ref().and_then(|r| r.selected_option.clone()),
                    response.map_or_else(|| "system:deadline".to_owned(), |r| r.decided_by),
                )
            }
            Err(e) => (ApprovalStatus::Denied, None, format!("nobody ({e})")),
        },
        (_, None) => (
            ApprovalStatus::Denied,
            None,
            "nobody (no person can be asked here)".to_owned(),
        ),
    };
    let pick = |kinds: &[&str]| {
        kinds
            .iter()
            .find_map(|k| options.iter().find(|(_, kind)| kind == k))
            .map(|(id, _)| id.clone())
    };
    let chosen = match status {
        ApprovalStatus::Approved => selected
            .as_deref()
            .and_then(|kind| pick(&[kind]))
            .or_else(|| pick(&["allow_once", "allow_always"])),
        ApprovalStatus::Denied | ApprovalStatus::Expired => pick(&["reject_once", "reject_always"]),
        ApprovalStatus::Skipped | ApprovalStatus::Pending => None,
    };
    with(turn, |t| {
        t.permissions.push(json!({
            "tool_call": call.get("toolCallId"),
            "title": question.title,
            "decision": status,
            "decided_by": who,
            "option": chosen,
        }));
    });
    let skipped = (status == ApprovalStatus::Skipped).then(|| {
        call["title"]
            .as_str()
            .map_or_else(|| question.title.clone(), str::to_owned)
    });
    let outcome = match chosen {
        Some(id) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id)),
        None => RequestPermissionOutcome::Cancelled,
    };
    (outcome, skipped)
}

/// What the permission rules say of a tool call an agent asks about: the
/// strictest verdict over what it does (the command it executes, the files
/// it reads or changes, the host it fetches from) and the rule that gave
/// it. `None` leaves it to a person: nothing in it the rules can judge, a
/// rule that asks, or an allow that is only the rules' default (an agent
/// that asks wants consent, and no rule gave it).
pub(super) fn rules_on(call: &Value, policy: &rein_sandbox::Policy) -> Option<(Verdict, String)> {
    let raw = &call["rawInput"];
    let mut decisions = Vec::new();
    match call["kind"].as_str().unwrap_or("other") {
        "execute" => {
            let command = match &raw["command"] {
                Value::String(s) => Some(s.clone()),
                Value::Array(words) => {
                    let words: Vec<&str> = words.iter().filter_map(Value::as_str).collect();
                    (!words.is_empty()).then(|| shell_words::join(words))
                }
                _ => None,
            };
            decisions.extend(command.map(|c| policy.check_script(&c)));
        }
        "read" => decisions.extend(
            locations(call)
                .into_iter()
                .map(|p| policy.check_path(Path::new(p), rein_sandbox::Access::Read)),
        ),
        "edit" | "delete" | "move" => decisions.extend(
            locations(call)
                .into_iter()
                .map(|p| policy.check_path(Path::new(p), rein_sandbox::Access::Write)),
        ),
        "fetch" => {
            let host = raw["url"]
                .as_str()
                .and_then(|u| reqwest::Url::parse(u).ok())
                .and_then(|u| u.host_str().map(str::to_owned));
            decisions.push(policy.check_network(host.as_deref()));
        }
        _ => {}
    }
    let by_default = decisions.iter().any(|d| policy.is_default(d));
    let worst = rein_core::permissions::strictest(decisions)?;
    match worst.verdict {
        Verdict::Deny => Some((Verdict::Deny, worst.rule)),
        Verdict::Ask => None,
        Verdict::Allow if by_default => None,
        Verdict::Allow => Some((Verdict::Allow, worst.rule)),
    }
}

/// The question a permission request puts to a person. Its key names the tool
/// call by what it does, not by its id, so that the same request from a
/// restarted agent is the same question.
pub(super) fn question_of(call: &Value, options: &[(String, String)], agent: &str) -> Question {
    let title = call["title"].as_str().unwrap_or("use a tool").to_owned();
    let kind = call["kind"].as_str().unwrap_or("other");
    let trigger = match kind {
        "delete" | "move" => Trigger::DestructiveAction,
        "edit" => Trigger::SignificantChange,
        "execute" => Trigger::SuspiciousCommand,
        "fetch" => Trigger::ExternalNetworkCall,
        _ => Trigger::PermissionDenied,
    };
    let locations = locations(call);
    let raw = call.get("rawInput").filter(|v| !v.is_null());
    let mut kinds: Vec<String> = Vec::new();
    for (_, k) in options {
        if !kinds.contains(k) {
            kinds.push(k.clone());
        }
    }
    let key = json!({ "title": title, "kind": kind, "locations": locations, "rawInput": raw });
    Question {
        key: format!("acp:{agent}:{key}"),
        trigger,
        title: format!("Agent `{agent}` asks permission to: {title}"),
        description: format!(
            "The ACP agent `{agent}` asks before its `{kind}` tool call{}{}. \
             Approve with an option ({}) to answer it; deny rejects it once; skip cancels the agent's turn.",
            if locations.is_empty() {
                String::new()
            } else {
                format!(" on {}", locations.join(", "))
            },
            raw.map(|r| format!(" with input {r}")).unwrap_or_default(),
            kinds.join(", ")
        ),
        // Approving without an option answers `allow_once` (the documented
        // rule): it is the recommended option when the agent offers it.
        recommended: ["allow_once", "allow_always"]
            .into_iter()
            .find(|k| kinds.iter().any(|o| o == k))
            .map(str::to_owned),
        options: kinds,
        context: ApprovalContext {
            command: raw
                .and_then(|r| r.get("command"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            file_path: locations.first().map(|p| (*p).to_owned()),
            changes: locations.iter().map(|p| (*p).to_owned()).collect(),
            risk_assessment: Some(format!("{kind} tool call of an external agent")),
        },
        timeout_ms: None,
        on_expiry: Decision::Deny,
    }
}

/// The paths a tool call (as the agent sent it) names.
pub(super) fn locations(call: &Value) -> Vec<&str> {
    call["locations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["path"].as_str())
        .collect()
}
