//! Goals (CP2, "plan and decompose"): a task given as a sentence becomes a
//! plan through an isolated completion whose answer must be a
//! [`DecompositionAnswer`] — checked against its JSON Schema and the plan
//! rules, sent back with what was wrong a bounded number of times — and the
//! answer becomes an ordinary plan by way of the plan-file format, so a draft
//! a person edits and a goal run here make the same steps.
//!
//! What the prompt carries: the goal, the answer's JSON Schema and rules, and
//! the workspace's file listing (at most [`LISTING_LIMIT`] paths, three levels
//! deep, without `.git`, `target` and `node_modules`). File contents are not
//! sent: the steps' agents read what they need.

use std::path::Path;
use std::time::Duration;

use rein_protocol::{
    CheckpointType, DecompositionAnswer, Goal, RiskLevel, StepType, TaskDecomposition,
};
use serde::Serialize;
use serde_json::{Value, json};

use crate::harness::completion::{
    AnswerSchema, Completer, Completion, CompletionFailure, CompletionRequest, Route,
};

/// How many answers a model may give for one goal unless the goal says.
pub const DEFAULT_ATTEMPTS: u32 = 3;
/// The most tokens one decomposition answer may have unless the goal says.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// How long one decomposition request may take.
pub const DECOMPOSE_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// The most workspace paths the prompt lists.
pub const LISTING_LIMIT: usize = 200;
/// The most bytes of a refused answer sent back with its errors.
const ANSWER_ECHO: usize = 8 * 1024;

/// The JSON Schema a decomposition answer must match.
pub fn answer_schema() -> Value {
    serde_json::to_value(schemars::schema_for!(DecompositionAnswer)).unwrap_or(Value::Null)
}

/// The route a goal's completion and agent steps use.
pub fn route(goal: &Goal) -> Route {
    Route {
        provider: goal.provider.clone(),
        model: goal.model.clone(),
        runtime: goal.runtime.clone(),
    }
}

/// The system text of a decomposition request, carrying `schema`.
fn system_prompt(schema: &Value) -> String {
    format!(
        "You plan work for rein, an agent harness. You turn a goal into a plan of steps that \
agents (and, for approvals, people) carry out in a workspace.\n\
Answer with one JSON object that matches this JSON Schema, and nothing else:\n{}\n\
Rules:\n\
- ids use letters, digits, '-', '_' and '.', and are unique; `confirm` is reserved.\n\
- dependsOn lists the ids of steps that must finish first; blockingSteps (optional) the ids of \
steps that must wait for this one; no cycles.\n\
- type: read (look at files), write (create or change files), execute (run commands), \
review (check the work done so far), approve (a person decides before what depends on it goes on).\n\
- checkpoint: leave it out, or task_exec for read, write and execute, task_review for review, \
user_approval for approve.\n\
- riskLevel: low, medium or high; a person is asked before a high-risk step runs.\n\
- Each description says what to do so that an agent with file tools can do it without asking.",
        serde_json::to_string(schema).unwrap_or_default()
    )
}

/// The prompt of a decomposition request: the goal and the workspace's listing.
pub fn prompt(goal: &str, listing: &Listing) -> String {
    let mut text = format!("Goal: {goal}\n\n");
    if listing.paths.is_empty() {
        text.push_str("The workspace is empty.\n");
    } else {
        let shown = if listing.truncated {
            format!(", the first {} shown", listing.paths.len())
        } else {
            String::new()
        };
        text.push_str(&format!("The workspace's files{shown}:\n"));
        for p in &listing.paths {
            text.push_str(p);
            text.push('\n');
        }
    }
    text
}

/// A refused answer's next prompt: the first prompt, the answer, and what was
/// wrong with it. Every request stays prompt-only.
pub fn retry_prompt(first: &str, answer: &str, errors: &[String]) -> String {
    let mut echo = answer.trim();
    if echo.len() > ANSWER_ECHO {
        let mut end = ANSWER_ECHO;
        while !echo.is_char_boundary(end) {
            end -= 1;
        }
        echo = &echo[..end];
    }
    let mut text = if echo.is_empty() {
        format!("{first}\nYour previous answer was refused.\n\nWhat was wrong with it:\n")
    } else {
        format!(
            "{first}\nYour previous answer was refused.\nIt was:\n{echo}\n\nWhat was wrong with it:\n"
        )
    };
    for e in errors {
        text.push_str(&format!("- {e}\n"));
    }
    text.push_str("Answer again with the corrected JSON object only.\n");
    text
}

/// The workspace's paths as the prompt lists them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub paths: Vec<String>,
    /// More paths were there than listed.
    pub truncated: bool,
}

/// Lists `dir` (directories with a trailing `/`), sorted, breadth first.
pub fn list_workspace(dir: &Path) -> Listing {
    const SKIP: [&str; 3] = [".git", "target", "node_modules"];
    let mut listing = Listing::default();
    let mut level = vec![(dir.to_path_buf(), String::new())];
    for _depth in 0..3 {
        let mut next = Vec::new();
        for (path, prefix) in level {
            let Ok(entries) = std::fs::read_dir(&path) else {
                continue;
            };
            let mut names: Vec<(String, bool)> = entries
                .flatten()
                .map(|e| {
                    let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                    (e.file_name().to_string_lossy().into_owned(), is_dir)
                })
                .filter(|(n, _)| !SKIP.contains(&n.as_str()))
                .collect();
            names.sort();
            for (name, is_dir) in names {
                if listing.paths.len() >= LISTING_LIMIT {
                    listing.truncated = true;
                    return listing;
                }
                let shown = format!("{prefix}{name}{}", if is_dir { "/" } else { "" });
                if is_dir {
                    next.push((path.join(&name), shown.clone()));
                }
                listing.paths.push(shown);
            }
        }
        level = next;
    }
    listing
}

/// A plan file as a draft writes it: the keys `rein run plan.toml` reads.
#[derive(Debug, Serialize)]
struct DraftFile {
    description: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    confirm: bool,
    risk_level: RiskLevel,
    #[serde(skip_serializing_if = "Option::is_none")]
    estimated_duration: Option<String>,
    steps: Vec<DraftStep>,
}

#[derive(Debug, Serialize)]
struct DraftStep {
    id: String,
    kind: &'static str,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    step_type: Option<StepType>,
    description: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    depends_on: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<&'static str>>,
    risk_level: RiskLevel,
    #[serde(skip_serializing_if = "Option::is_none")]
    risk_description: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    required_permissions: Vec<String>,
}

/// The tools an agent step of this type is given.
pub fn tools_for(step_type: StepType) -> &'static [&'static str] {
    match step_type {
        StepType::Read => &["read_file", "list_dir"],
        StepType::Write => &["read_file", "list_dir", "write_file"],
        StepType::Execute => &["read_file", "list_dir", "write_file", "run_command"],
        StepType::Review => &["read_file", "list_dir", "run_command"],
        StepType::Approve => &[],
    }
}

/// The checkpoint a step of this type records.
fn checkpoint_of(step_type: StepType) -> CheckpointType {
    match step_type {
        StepType::Read | StepType::Write | StepType::Execute => CheckpointType::TaskExec,
        StepType::Review => CheckpointType::TaskReview,
        StepType::Approve => CheckpointType::UserApproval,
    }
}

/// What an agent step of a goal is asked: its description, with the goal and
/// the steps before it as context.
fn step_prompt(goal: &str, id: &str, description: &str, after: &[String]) -> String {
    let mut text = format!("{description}\n\nThis is step `{id}` of a plan for the goal: {goal}\n");
    if !after.is_empty() {
        text.push_str(&format!(
            "It comes after steps {}, which are done.\n",
            after.join(", ")
        ));
    }
    text.push_str(
        "Work in the workspace with your tools. When you are done, say in a sentence or two what you did.",
    );
    text
}

/// The decomposition as plan-file text (what `rein plan draft` prints), or
/// what is wrong with it that the schema could not say.
pub fn draft(
    answer: &DecompositionAnswer,
    goal_text: &str,
    goal: &Goal,
) -> Result<String, Vec<String>> {
    let mut errors = Vec::new();
    let mut steps = Vec::new();
    // The seed's `blockingSteps`: each step it names depends on this one.
    for s in &answer.steps {
        for b in &s.blocking_steps {
            if !answer.steps.iter().any(|t| &t.id == b) {
                errors.push(format!(
                    "step `{}`: blockingSteps names `{b}`, which is not a step of the plan",
                    s.id
                ));
            }
        }
    }
    for s in &answer.steps {
        let mut depends_on = s.depends_on.clone();
        for t in &answer.steps {
            if t.blocking_steps.contains(&s.id) && !depends_on.contains(&t.id) {
                depends_on.push(t.id.clone());
            }
        }
        if let Some(cp) = s.checkpoint
            && cp != checkpoint_of(s.step_type)
        {
            errors.push(format!(
                "step `{}`: a {} step records {}, not {}",
                s.id,
                json!(s.step_type).as_str().unwrap_or_default(),
                checkpoint_of(s.step_type).as_str(),
                cp.as_str()
            ));
        }
        let by_agent = s.step_type != StepType::Approve;
        steps.push(DraftStep {
            id: s.id.clone(),
            kind: match s.step_type {
                StepType::Approve => "approve",
                StepType::Review => "review",
                _ => "agent",
            },
            step_type: matches!(s.step_type, StepType::Read | StepType::Write)
                .then_some(s.step_type),
            description: s.description.clone(),
            title: (!by_agent).then(|| s.description.clone()),
            prompt: by_agent.then(|| step_prompt(goal_text, &s.id, &s.description, &depends_on)),
            depends_on,
            provider: goal.provider.clone().filter(|_| by_agent),
            model: goal.model.clone().filter(|_| by_agent),
            runtime: goal.runtime.clone().filter(|_| by_agent),
            tools: by_agent.then(|| tools_for(s.step_type).to_vec()),
            risk_level: s.risk_level,
            risk_description: s.risk_description.clone(),
            required_permissions: s.required_permissions.clone(),
        });
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let file = DraftFile {
        description: goal_text.to_owned(),
        confirm: goal.confirm,
        risk_level: answer.risk_level,
        estimated_duration: answer.estimated_duration_s.map(|s| format!("{s}s")),
        steps,
    };
    let text = toml::to_string(&file).map_err(|e| vec![format!("cannot write the plan: {e}")])?;
    Ok(format!(
        "# A plan drafted by a model from the goal below; edit it, then `rein run` it.\n{text}"
    ))
}

/// The plan a decomposition makes: its draft read back as a plan file (so the
/// plan rules apply), the goal kept on it.
pub fn plan_from(
    answer: &DecompositionAnswer,
    goal_text: &str,
    goal: &Goal,
) -> Result<(TaskDecomposition, String), Vec<String>> {
    let text = draft(answer, goal_text, goal)?;
    let spec =
        crate::plan::parse_plan(&text, Path::new(".")).map_err(
            |(message, issues)| match issues {
                Some(issues) => issues.0.iter().map(ToString::to_string).collect(),
                None => vec![message],
            },
        )?;
    let mut plan = spec.plan;
    for step in &mut plan.steps {
        if let rein_protocol::StepAction::Agent { mcp, images, .. } = &mut step.action {
            for server in &goal.mcp {
                if !mcp.iter().any(|m| m.name == server.name) {
                    mcp.push(server.clone());
                }
            }
            images.extend(goal.images.iter().cloned());
        }
    }
    plan.goal = Some(goal.clone());
    Ok((plan, text))
}

/// rein's snake_case names in a decomposition answer mapped to the seed's
/// camelCase ones the schema asks for (`original_task` → `originalTask`, a
/// step's `depends_on` → `dependsOn`, …), where the seed's is not given too:
/// a model that answers in either form is understood.
pub fn seed_names(answer: &mut Value) {
    fn rename(object: &mut serde_json::Map<String, Value>, names: &[(&str, &str)]) {
        for (rein, seed) in names {
            if !object.contains_key(*seed)
                && let Some(v) = object.remove(*rein)
            {
                object.insert((*seed).to_owned(), v);
            }
        }
    }
    let Some(top) = answer.as_object_mut() else {
        return;
    };
    rename(
        top,
        &[
            ("original_task", "originalTask"),
            ("estimated_duration_s", "estimatedDuration"),
            ("estimated_duration", "estimatedDuration"),
            ("risk_level", "riskLevel"),
        ],
    );
    if let Some(steps) = top.get_mut("steps").and_then(Value::as_array_mut) {
        for step in steps.iter_mut().filter_map(Value::as_object_mut) {
            rename(
                step,
                &[
                    ("depends_on", "dependsOn"),
                    ("blocking_steps", "blockingSteps"),
                    ("required_permissions", "requiredPermissions"),
                    ("risk_level", "riskLevel"),
                    ("risk_description", "riskDescription"),
                ],
            );
        }
    }
}

/// An answer that was refused, and why.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Refused {
    pub attempt: u32,
    pub answer: String,
    pub errors: Vec<String>,
}

/// A goal made into a plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decomposed {
    pub answer: DecompositionAnswer,
    #[serde(skip)]
    pub plan: TaskDecomposition,
    /// The plan as a plan file.
    pub draft: String,
    /// The completion that gave the accepted answer.
    pub completion: Completion,
    /// Which attempt it was (1 for the first).
    pub attempt: u32,
}

/// Why a goal did not become a plan.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecomposeError {
    /// The completion gave no answer (selection, the model API, a timeout).
    #[error("the goal could not be decomposed: {0}")]
    Completion(CompletionFailure),
    /// Every answer was refused; the last one's errors.
    #[error(
        "the model's decomposition was refused {attempts} time(s); the last answer: {}",
        .last.join("; ")
    )]
    Refused { attempts: u32, last: Vec<String> },
}

/// One answer checked: the plan it makes, or what was wrong with it. `check`
/// is the plan rules beyond the file's (the permission rules, in a task).
pub fn accept(
    text: &str,
    schema: &AnswerSchema,
    goal_text: &str,
    goal: &Goal,
    check: &dyn Fn(TaskDecomposition) -> Result<TaskDecomposition, Vec<String>>,
) -> Result<(DecompositionAnswer, TaskDecomposition, String), Vec<String>> {
    let value = schema.check_with(text, seed_names)?;
    let answer: DecompositionAnswer =
        serde_json::from_value(value).map_err(|e| vec![format!("the answer: {e}")])?;
    let (plan, draft) = plan_from(&answer, goal_text, goal)?;
    let plan = check(plan)?;
    Ok((answer, plan, draft))
}

/// One goal on its way to a plan: the next request to send, and what an
/// answer to it does. Attempts are counted from `first` (a resumed task goes
/// on from its recorded ones).
#[derive(Debug)]
pub struct Decomposition {
    goal_text: String,
    goal: Goal,
    schema: AnswerSchema,
    /// The schema itself, asked for as structured output.
    json_schema: Value,
    /// The system text, the same for every request.
    system: String,
    first: String,
    next: String,
    attempt: u32,
    budget: u32,
}

/// What an answer did.
#[derive(Debug)]
pub enum Answered {
    Accepted(Box<Decomposed>),
    /// Refused; `again` says whether another attempt is left.
    Refused {
        refused: Refused,
        again: bool,
    },
}

impl Decomposition {
    pub fn new(
        goal_text: &str,
        goal: &Goal,
        listing: &Listing,
    ) -> Result<Decomposition, DecomposeError> {
        let json_schema = answer_schema();
        let schema = AnswerSchema::new(&json_schema).map_err(DecomposeError::Completion)?;
        let first = prompt(goal_text, listing);
        Ok(Decomposition {
            goal_text: goal_text.to_owned(),
            goal: goal.clone(),
            schema,
            system: system_prompt(&json_schema),
            json_schema,
            next: first.clone(),
            first,
            attempt: 1,
            budget: goal.attempts.unwrap_or(DEFAULT_ATTEMPTS).max(1),
        })
    }

    /// Goes on after `refused` answers already given (the last one is sent
    /// back with its errors).
    pub fn after(mut self, refused: &[Refused]) -> Decomposition {
        if let Some(last) = refused.last() {
            self.next = retry_prompt(&self.first, &last.answer, &last.errors);
        }
        self.attempt = refused.len() as u32 + 1;
        self
    }

    /// The attempt the next request is.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Whether an attempt is left.
    pub fn has_attempts(&self) -> bool {
        self.attempt <= self.budget
    }

    pub fn budget(&self) -> u32 {
        self.budget
    }

    /// The next request: prompt-only, with the answer's schema in its system
    /// text and asked for as structured output, bounded by the goal's
    /// `max_tokens`.
    pub fn request(&self) -> CompletionRequest {
        CompletionRequest {
            prompt: self.next.clone(),
            system: Some(self.system.clone()),
            route: route(&self.goal),
            timeout: DECOMPOSE_TIMEOUT,
            shape: crate::harness::isolated::AnswerShape {
                max_tokens: Some(self.goal.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
                json_schema: Some(self.json_schema.clone()),
            },
            policy: Default::default(),
        }
    }

    /// Takes the answer to [`Decomposition::request`]; `check` is the plan
    /// rules beyond the file's.
    pub fn answer(
        &mut self,
        completion: Completion,
        check: &dyn Fn(TaskDecomposition) -> Result<TaskDecomposition, Vec<String>>,
    ) -> Answered {
        let attempt = self.attempt;
        self.attempt += 1;
        let checked = accept(
            &completion.text,
            &self.schema,
            &self.goal_text,
            &self.goal,
            check,
        )
        .map_err(|errors| {
            // An answer cut at the token limit is not JSON for that reason:
            // say so, rather than what the cut left.
            if completion.stop_reason == "length" {
                vec![format!(
                    "the answer was cut off at the token limit ({} tokens, the goal's `max_tokens`) before it was complete; answer with a shorter plan: fewer steps, shorter descriptions",
                    self.goal.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)
                )]
            } else {
                errors
            }
        });
        match checked {
            Ok((answer, plan, draft)) => Answered::Accepted(Box::new(Decomposed {
                answer,
                plan,
                draft,
                completion,
                attempt,
            })),
            Err(errors) => {
                self.next = retry_prompt(&self.first, &completion.text, &errors);
                Answered::Refused {
                    refused: Refused {
                        attempt,
                        answer: completion.text,
                        errors,
                    },
                    again: self.has_attempts(),
                }
            }
        }
    }

    /// Takes an answer that could not be used (see [`unusable`]): refused,
    /// an attempt counted, `why` sent back with the next request.
    pub fn unusable(&mut self, why: String) -> Answered {
        let attempt = self.attempt;
        self.attempt += 1;
        let errors = vec![why];
        self.next = retry_prompt(&self.first, "", &errors);
        Answered::Refused {
            refused: Refused {
                attempt,
                answer: String::new(),
                errors,
            },
            again: self.has_attempts(),
        }
    }
}

/// Why a completion's answer cannot be used as one (empty, a tool call, an
/// odd stop reason): such an answer is refused like one that is not JSON,
/// and asked again while attempts are left. `None`: the completion failed
/// for another reason.
pub fn unusable(failure: &CompletionFailure) -> Option<String> {
    use crate::harness::isolated::CompletionError;
    match failure {
        CompletionFailure::Completion(CompletionError::Empty) => {
            Some("the answer was empty; answer with the JSON object".into())
        }
        CompletionFailure::Completion(CompletionError::ToolCall) => {
            Some("the answer called a tool; answer with the JSON object only".into())
        }
        CompletionFailure::Completion(CompletionError::StopReason(reason)) => Some(format!(
            "the answer ended with the stop reason `{reason}`; answer with the JSON object"
        )),
        _ => None,
    }
}

/// Asks `completer` to decompose a goal, sending refused answers back with
/// their errors until one is accepted or the goal's attempts ran out;
/// `refused` hears of each refusal as it happens.
pub async fn decompose(
    completer: &dyn Completer,
    goal_text: &str,
    goal: &Goal,
    listing: &Listing,
    check: &dyn Fn(TaskDecomposition) -> Result<TaskDecomposition, Vec<String>>,
    mut refused: impl FnMut(&Refused),
) -> Result<Decomposed, DecomposeError> {
    let mut d = Decomposition::new(goal_text, goal, listing)?;
    loop {
        let answered = match completer.complete(&d.request()).await {
            Ok(completion) => d.answer(completion, check),
            Err(failure) => match unusable(&failure) {
                Some(why) => d.unusable(why),
                None => return Err(DecomposeError::Completion(failure)),
            },
        };
        match answered {
            Answered::Accepted(done) => return Ok(*done),
            Answered::Refused { refused: r, again } => {
                refused(&r);
                if !again {
                    return Err(DecomposeError::Refused {
                        attempts: d.budget(),
                        last: r.errors,
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rein_protocol::{DecomposedStep, StepAction};

    fn step(id: &str, step_type: StepType, deps: &[&str]) -> DecomposedStep {
        DecomposedStep {
            id: id.into(),
            description: format!("do {id}"),
            step_type,
            depends_on: deps.iter().map(|d| (*d).to_owned()).collect(),
            blocking_steps: Vec::new(),
            checkpoint: None,
            required_permissions: Vec::new(),
            risk_level: RiskLevel::Low,
            risk_description: None,
        }
    }

    fn answer(steps: Vec<DecomposedStep>) -> DecompositionAnswer {
        DecompositionAnswer {
            original_task: "g".into(),
            steps,
            estimated_duration_s: Some(90),
            risk_level: RiskLevel::Low,
        }
    }

    #[test]
    fn each_type_becomes_the_step_it_says_with_the_tools_to_match() {
        let goal = Goal {
            model: Some("m".into()),
            ..Goal::default()
        };
        let a = answer(vec![
            step("look", StepType::Read, &[]),
            step("edit", StepType::Write, &["look"]),
            step("build", StepType::Execute, &["edit"]),
            step("ok", StepType::Approve, &["build"]),
            step("check", StepType::Review, &["ok"]),
        ]);
        let (plan, _) = plan_from(&a, "the goal", &goal).unwrap();
        let by_id = |id: &str| plan.step(id).unwrap();
        let tools = |id: &str| match &by_id(id).action {
            StepAction::Agent { tools, model, .. } => {
                assert_eq!(model.as_deref(), Some("m"));
                tools.clone()
            }
            other => panic!("{id}: {other:?}"),
        };
        assert_eq!(tools("look"), ["read_file", "list_dir"]);
        assert_eq!(tools("edit"), ["read_file", "list_dir", "write_file"]);
        assert_eq!(tools("build").len(), 4);
        assert_eq!(by_id("edit").step_type, StepType::Write);
        assert!(matches!(by_id("ok").action, StepAction::Approval { .. }));
        assert_eq!(by_id("check").checkpoint, CheckpointType::TaskReview);
        assert!(
            by_id("check").idempotent,
            "an agent step resumes from its journal"
        );
        // The goal and what came before are the agent's context.
        let StepAction::Agent { prompt, .. } = &by_id("edit").action else {
            unreachable!()
        };
        assert!(prompt.starts_with("do edit"), "{prompt}");
        assert!(
            prompt.contains("the goal") && prompt.contains("look"),
            "{prompt}"
        );
        assert_eq!(plan.estimated_duration_s, Some(90));
        assert!(plan.goal.is_some());
    }

    #[test]
    fn the_goals_mcp_servers_are_given_to_every_agent_step() {
        let server = rein_protocol::McpUse {
            name: "fs".into(),
            server: Some(rein_protocol::McpServer {
                command: Some("node".into()),
                ..rein_protocol::McpServer::default()
            }),
        };
        let goal = Goal {
            mcp: vec![server.clone()],
            ..Goal::default()
        };
        let a = answer(vec![
            step("look", StepType::Read, &[]),
            step("edit", StepType::Write, &["look"]),
            step("ok", StepType::Approve, &["edit"]),
        ]);
        let (plan, _) = plan_from(&a, "the goal", &goal).unwrap();
        for id in ["look", "edit"] {
            let StepAction::Agent { mcp, .. } = &plan.step(id).unwrap().action else {
                panic!("{id} is an agent step");
            };
            assert_eq!(mcp, std::slice::from_ref(&server), "{id}");
        }
        assert!(matches!(
            plan.step("ok").unwrap().action,
            StepAction::Approval { .. }
        ));
    }

    #[test]
    fn what_the_schema_cannot_see_is_named() {
        let goal = Goal::default();
        let mut wrong = step("a", StepType::Read, &[]);
        wrong.checkpoint = Some(CheckpointType::TaskPlan);
        let errors = plan_from(&answer(vec![wrong]), "g", &goal).unwrap_err();
        assert!(
            errors[0].contains("records task_exec, not task_plan"),
            "{errors:?}"
        );
        let cycle = answer(vec![
            step("a", StepType::Read, &["b"]),
            step("b", StepType::Read, &["a"]),
        ]);
        let errors = plan_from(&cycle, "g", &goal).unwrap_err();
        assert!(errors.iter().any(|e| e.contains("cycle")), "{errors:?}");
        let confirming = Goal {
            confirm: true,
            ..Goal::default()
        };
        let reserved = answer(vec![step("confirm", StepType::Read, &[])]);
        let errors = plan_from(&reserved, "g", &confirming).unwrap_err();
        assert!(errors[0].contains("reserved"), "{errors:?}");
    }

    #[test]
    fn a_refused_answer_goes_back_with_its_errors_and_attempts_are_counted() {
        let listing = Listing {
            paths: vec!["README.md".into(), "src/".into()],
            truncated: true,
        };
        let goal = Goal {
            attempts: Some(2),
            ..Goal::default()
        };
        let d = Decomposition::new("g", &goal, &listing).unwrap();
        let first = d.request();
        assert!(
            first.prompt.contains("README.md\nsrc/\n"),
            "{}",
            first.prompt
        );
        assert!(first.prompt.contains("the first 2 shown"));
        assert!(first.system.unwrap().contains("\"DecompositionAnswer\""));
        let refused = Refused {
            attempt: 1,
            answer: "{}".into(),
            errors: vec!["missing steps".into()],
        };
        let d = d.after(std::slice::from_ref(&refused));
        assert_eq!(d.attempt(), 2);
        assert!(d.has_attempts());
        let again = d.request().prompt;
        assert!(again.contains("- missing steps"), "{again}");
        let d = d.after(&[refused.clone(), refused]);
        assert!(!d.has_attempts());
    }

    /// The seed's `TaskDecomposition` (seed 002 §6.1), verbatim in its
    /// camelCase, and the same answer in rein's snake_case names: both are
    /// accepted, and `blockingSteps` orders the steps it names.
    #[test]
    fn a_decomposition_in_the_seeds_names_or_reins_is_accepted() {
        let goal = Goal::default();
        let schema = AnswerSchema::new(&answer_schema()).unwrap();
        let keep = |p: TaskDecomposition| Ok(p);
        let seed = r#"{
            "originalTask": "update the notes",
            "estimatedDuration": 120,
            "riskLevel": "medium",
            "steps": [
                {"id": "look", "description": "read the notes", "type": "read",
                 "dependsOn": [], "blockingSteps": ["edit"], "checkpoint": "task_exec",
                 "requiredPermissions": ["file_read"], "riskLevel": "low"},
                {"id": "edit", "description": "rewrite them", "type": "write",
                 "dependsOn": [], "blockingSteps": [], "checkpoint": "task_exec",
                 "requiredPermissions": ["file_write"], "riskLevel": "medium",
                 "riskDescription": "changes a file"}
            ]
        }"#;
        let (answer, plan, _) = accept(seed, &schema, "g", &goal, &keep).unwrap();
        assert_eq!(answer.estimated_duration_s, Some(120));
        let edit = plan.step("edit").unwrap();
        assert_eq!(edit.depends_on, ["look"], "blockingSteps made a dependency");
        assert_eq!(edit.required_permissions, ["file_write"]);
        assert_eq!(edit.risk_description.as_deref(), Some("changes a file"));
        let rein = seed
            .replace("originalTask", "original_task")
            .replace("estimatedDuration", "estimated_duration_s")
            .replace("riskLevel", "risk_level")
            .replace("dependsOn", "depends_on")
            .replace("blockingSteps", "blocking_steps")
            .replace("requiredPermissions", "required_permissions")
            .replace("riskDescription", "risk_description");
        let (_, again, _) = accept(&rein, &schema, "g", &goal, &keep).unwrap();
        assert_eq!(again.step("edit").unwrap().depends_on, ["look"]);
        let unknown = seed.replace(
            r#""blockingSteps": ["edit"]"#,
            r#""blockingSteps": ["ship"]"#,
        );
        let errors = accept(&unknown, &schema, "g", &goal, &keep).unwrap_err();
        assert!(errors.iter().any(|e| e.contains("`ship`")), "{errors:?}");
        let extra = seed.replace(r#""originalTask""#, r#""mood": "calm", "originalTask""#);
        let errors = accept(&extra, &schema, "g", &goal, &keep).unwrap_err();
        assert!(errors.iter().any(|e| e.contains("mood")), "{errors:?}");
    }
}
