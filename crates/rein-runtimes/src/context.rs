//! What fits a model's context window, and compaction: when the next request
//! of an agent's conversation would pass a share of its model's window (or
//! the server says it did), the older part of the conversation is summarised
//! by an isolated completion (no tools) and the conversation goes on from the
//! summary and its recent turns.
//!
//! A model's window is, in this order: `context_window` of its
//! `[models."PROVIDER/MODEL"]` in `rein.toml`; what its server says
//! (llama.cpp's `/props` `n_ctx`; a model listing's `context_length` or
//! `max_model_len`); a small table of well-known models; or what an overflow
//! error named (`maximum context length is N tokens`, llama.cpp's `n_ctx`).
//! Otherwise it is unknown, and only an overflow error compacts.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

use crate::openai::{ChatError, Message, ToolSpec};
use crate::provider::ModelClient;

/// The share of the window (in percent) a request may fill before the
/// conversation is compacted, unless the step says (`compact_at_percent`).
pub const COMPACT_AT_PERCENT: u8 = 80;

/// The share of the window the recent turns kept verbatim may take.
const KEEP_PERCENT: u64 = 30;

/// The share of the window a summary request's transcript may take.
const SUMMARY_INPUT_PERCENT: u64 = 60;

/// How long a server is given to say its window.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Well-known models' windows, by the start of their names (the longest
/// start that matches wins).
const KNOWN: &[(&str, u64)] = &[
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("claude-", 200_000),
];

/// A well-known model's window.
pub fn known_window(model: &str) -> Option<u64> {
    KNOWN
        .iter()
        .filter(|(start, _)| model.starts_with(start))
        .max_by_key(|(start, _)| start.len())
        .map(|(_, n)| *n)
}

/// The windows of models, as configured, asked of their servers, or
/// learned from an overflow error; each server is asked once.
#[derive(Debug, Default)]
pub struct Windows {
    found: Mutex<HashMap<String, Option<u64>>>,
}

impl Windows {
    /// `client`'s model's window, `configured` first.
    pub async fn of(&self, client: &ModelClient, configured: Option<u64>) -> Option<u64> {
        if configured.is_some() {
            return configured;
        }
        let name = format!("{}/{}", client.provider(), client.model());
        if let Some(found) = self.found.lock().ok().and_then(|f| f.get(&name).copied()) {
            return found;
        }
        let found = probe(client).await.or_else(|| known_window(client.model()));
        if let Ok(mut f) = self.found.lock() {
            f.insert(name, found);
        }
        found
    }

    /// What an overflow error said of `client`'s model's window.
    pub fn learn(&self, client: &ModelClient, window: u64) {
        if let Ok(mut f) = self.found.lock() {
            f.insert(
                format!("{}/{}", client.provider(), client.model()),
                Some(window),
            );
        }
    }
}

/// What the server of an OpenAI-compatible client says its model's window
/// is: llama.cpp's `/props` (`n_ctx`, the context a request may fill), else
/// the model's entry in `/models` (`context_length`: OpenRouter, LM Studio;
/// `max_model_len`: vLLM).
async fn probe(client: &ModelClient) -> Option<u64> {
    let (base, key) = client.endpoint()?;
    let http = reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .build()
        .ok()?;
    let get = |url: String| {
        let mut request = http.get(url);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        async move {
            let response = request.send().await.ok()?;
            if !response.status().is_success() {
                return None;
            }
            response.json::<Value>().await.ok()
        }
    };
    let base = base.trim_end_matches('/');
    let root = base.strip_suffix("/v1").unwrap_or(base);
    if let Some(props) = get(format!("{root}/props")).await {
        let n = props["default_generation_settings"]["n_ctx"]
            .as_u64()
            .or_else(|| props["n_ctx"].as_u64());
        if n.is_some_and(|n| n > 0) {
            return n;
        }
    }
    let listing = get(format!("{base}/models")).await?;
    let model = client.model();
    listing["data"]
        .as_array()?
        .iter()
        .find(|m| m["id"].as_str() == Some(model))
        .and_then(|m| {
            ["context_length", "max_model_len", "context_window"]
                .iter()
                .find_map(|k| m[*k].as_u64())
        })
        .filter(|n| *n > 0)
}

impl ChatError {
    /// Whether the server refused the request as longer than its model's
    /// context: OpenAI's and llama-cpp-python's `context_length_exceeded`,
    /// llama.cpp's `exceed_context_size_error`, Anthropic's `prompt is too
    /// long` (and its 413 `request_too_large`), a Responses
    /// `context_length_exceeded`.
    pub fn context_overflow(&self) -> bool {
        let ChatError::Http {
            status,
            message,
            code,
            ..
        } = self
        else {
            return false;
        };
        let code = code.as_deref().unwrap_or_default();
        let message = message.to_ascii_lowercase();
        matches!(*status, 400 | 413)
            && (matches!(
                code,
                "context_length_exceeded" | "exceed_context_size_error" | "request_too_large"
            ) || message.contains("prompt is too long")
                || message.contains("maximum context length")
                || message.contains("exceeds the available context size")
                || message.contains("exceeds the context window"))
    }

    /// The window an overflow error names: "maximum context length is N
    /// tokens" (OpenAI, llama-cpp-python), "N maximum" (Anthropic's "prompt
    /// is too long: 210000 tokens > 200000 maximum"), llama.cpp's
    /// "… context size (N tokens)".
    pub fn overflow_window(&self) -> Option<u64> {
        let ChatError::Http { message, .. } = self else {
            return None;
        };
        let lower = message.to_ascii_lowercase();
        let number_after = |marker: &str| -> Option<u64> {
            let at = lower.find(marker)? + marker.len();
            let digits: String = lower[at..]
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        };
        number_after("maximum context length is")
            .or_else(|| {
                let at = lower.find(" maximum")?;
                let before = lower[..at].trim_end();
                let digits: String = before
                    .chars()
                    .rev()
                    .take_while(char::is_ascii_digit)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                digits.parse().ok()
            })
            .or_else(|| number_after("context size ("))
            .filter(|n| *n > 0)
    }
}

/// Tokens of `bytes` bytes of text, by rein's estimate (four bytes a token).
pub fn tokens_of(bytes: usize) -> u64 {
    u64::try_from(bytes.div_ceil(4)).unwrap_or(u64::MAX)
}

/// The bytes one message takes in a request.
fn message_bytes(message: &Message) -> usize {
    match message {
        Message::System { content } | Message::User { content } => content.len() + 16,
        Message::Tool {
            tool_call_id,
            content,
        } => tool_call_id.len() + content.len() + 32,
        Message::Assistant {
            content,
            tool_calls,
        } => {
            content.as_deref().map_or(0, str::len)
                + tool_calls
                    .iter()
                    .map(|c| c.id.len() + c.function.name.len() + c.function.arguments.len() + 48)
                    .sum::<usize>()
                + 16
        }
    }
}

/// The bytes the tools' declarations take in a request.
pub fn specs_bytes(specs: &[ToolSpec]) -> usize {
    specs
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len() + 32)
        .sum()
}

/// Tokens of `messages` by rein's estimate.
pub fn estimate(messages: &[Message]) -> u64 {
    tokens_of(messages.iter().map(message_bytes).sum())
}

/// An agent's conversation after compaction: the older part (up to `at`)
/// stands as `summary`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compacted {
    /// The position, in the conversation since its last reset, of the first
    /// message kept verbatim.
    pub at: usize,
    pub summary: String,
}

impl Compacted {
    /// A journal entry's `compacted` object, over a conversation of
    /// `messages` messages so far (a position past them is taken as its end).
    pub fn from_entry(c: &serde_json::Value, messages: usize) -> Compacted {
        Compacted {
            at: c["at"]
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(0)
                .min(messages),
            summary: c["summary"].as_str().unwrap_or_default().to_owned(),
        }
    }
}

/// What is sent to the model of `messages` (the whole conversation since
/// its last reset): all of it, or — once compacted — its system message,
/// the summary (with `task`, the request of the step that runs, when the
/// summary covers it), and the messages from `compacted.at` on. The summary
/// is a user message; where the kept part begins with one, the two are one.
pub fn view<'a>(
    messages: &'a [Message],
    compacted: Option<&Compacted>,
    task: Option<&str>,
) -> std::borrow::Cow<'a, [Message]> {
    let Some(compacted) = compacted.filter(|c| c.at <= messages.len()) else {
        return std::borrow::Cow::Borrowed(messages);
    };
    let mut out = Vec::with_capacity(messages.len() - compacted.at + 2);
    if let Some(system @ Message::System { .. }) = messages.first() {
        out.push(system.clone());
    }
    let mut summary = format!(
        "[rein compacted the earlier part of this conversation to fit the model's context window; this is its summary]\n\n{}",
        compacted.summary.trim()
    );
    if let Some(task) = task {
        summary =
            format!("{summary}\n\n[the request you are working on, as it was first given]\n{task}");
    }
    let rest = &messages[compacted.at..];
    match rest.first() {
        Some(Message::User { content }) => {
            out.push(Message::User {
                content: format!("{summary}\n\n[the conversation goes on]\n{content}"),
            });
            out.extend_from_slice(&rest[1..]);
        }
        _ => {
            out.push(Message::User { content: summary });
            out.extend_from_slice(rest);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Where to compact `messages` (since its last reset, already compacted up
/// to `from`): the first message kept verbatim, such that what is kept takes
/// at most [`KEEP_PERCENT`] of `window` where it can; never a tool answer
/// (a call and its answer stay together), always after `from`. `None`: there
/// is nothing older to compact.
pub fn cut_point(messages: &[Message], from: usize, window: u64) -> Option<usize> {
    let keep = window * KEEP_PERCENT / 100;
    let start = from.max(usize::from(matches!(
        messages.first(),
        Some(Message::System { .. })
    )));
    let mut candidates = (start + 1..messages.len())
        .filter(|i| !matches!(messages[*i], Message::Tool { .. }))
        .peekable();
    candidates.peek()?;
    let mut best = None;
    for i in candidates {
        best = Some(i);
        if estimate(&messages[i..]) <= keep {
            break;
        }
    }
    best
}

/// The transcript of `part` a summary is asked of, at most `limit` bytes:
/// each message whole while they fit; past that, long ones are cut in their
/// middle, evenly, until the whole fits.
pub fn transcript(part: &[Message], limit: usize) -> String {
    let lines: Vec<(String, String)> = part
        .iter()
        .map(|m| match m {
            Message::System { content } => ("SYSTEM".to_owned(), content.clone()),
            Message::User { content } => ("USER".to_owned(), content.clone()),
            Message::Tool {
                tool_call_id,
                content,
            } => (format!("TOOL RESULT ({tool_call_id})"), content.clone()),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut text = content.clone().unwrap_or_default();
                for call in tool_calls {
                    text.push_str(&format!(
                        "\n[calls {} ({}) with {}]",
                        call.function.name, call.id, call.function.arguments
                    ));
                }
                ("ASSISTANT".to_owned(), text)
            }
        })
        .collect();
    let overhead: usize = lines.iter().map(|(who, _)| who.len() + 4).sum();
    let room = limit.saturating_sub(overhead);
    // The most bytes any one message keeps: the largest that fits.
    let total = |cap: usize| lines.iter().map(|(_, t)| t.len().min(cap)).sum::<usize>();
    let (mut low, mut high) = (
        0usize,
        lines.iter().map(|(_, t)| t.len()).max().unwrap_or(0),
    );
    while low < high {
        let mid = (low + high).div_ceil(2);
        if total(mid) <= room {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    let cap = low;
    let mut out = String::new();
    for (who, text) in lines {
        out.push_str(&who);
        out.push_str(": ");
        out.push_str(&middle_cut(&text, cap));
        out.push_str("\n\n");
    }
    out
}

/// `text` with its middle left out when it is longer than `cap` bytes.
fn middle_cut(text: &str, cap: usize) -> String {
    if text.len() <= cap {
        return text.to_owned();
    }
    // The note of what was left out takes its own room.
    let cap = cap.saturating_sub(40);
    let mut head = cap / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - (cap - head);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{} […{} bytes left out…] {}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

/// The isolated request (no tools) that summarises `part`, after an
/// earlier summary when there is one, for a model with `window` tokens.
pub fn summary_request(part: &[Message], earlier: Option<&str>, window: u64) -> Vec<Message> {
    let limit = usize::try_from(window * SUMMARY_INPUT_PERCENT / 100 * 4).unwrap_or(usize::MAX);
    let earlier_text = earlier
        .map(|s| format!("An earlier summary of what came before:\n{s}\n\n"))
        .unwrap_or_default();
    let limit = limit.saturating_sub(earlier_text.len());
    vec![
        Message::System {
            content: "You compact the conversation of an agent that works with tools, so that it can go on with its work. You call no tools.".into(),
        },
        Message::User {
            content: format!(
                "{earlier_text}The conversation to summarise:\n\n{}\nWrite a summary the agent will continue from, in place of the conversation: the request it works on, what it has done and found (file names, facts, numbers and results it will need, verbatim where they matter), what it decided, and what is left to do. Be complete but brief; do not address the user.",
                transcript(part, limit)
            ),
        },
    ]
}

/// Asks `client` for the summary of `part`: its text and what the request
/// used as the server reported it (or `None`).
pub async fn summarise(
    client: &ModelClient,
    part: &[Message],
    earlier: Option<&str>,
    window: u64,
) -> Result<(String, crate::openai::ChatResponse), ChatError> {
    let request = summary_request(part, earlier, window);
    let response = client.complete_with(&request, &[], None, |_| {}).await?;
    let text = response.content.trim().to_owned();
    if text.is_empty() {
        return Err(ChatError::Protocol(
            "the model answered the summary request with nothing".into(),
        ));
    }
    Ok((text, response))
}

/// One compaction done: the conversation's new summary, what its request
/// used, and the sizes before and after (by rein's estimate, tools aside).
#[derive(Debug, Clone)]
pub struct Done {
    pub compacted: Compacted,
    pub usage: rein_protocol::Usage,
    pub served_model: Option<String>,
    /// The messages the summary took the place of.
    pub messages: usize,
    pub tokens_after: u64,
}

/// Compacts `messages` (already compacted as `earlier`, if so) for a
/// window of `window` tokens: `None` when nothing older is left to
/// summarise. `task` is the request restated after the summary.
pub async fn compact_once(
    client: &ModelClient,
    messages: &[Message],
    earlier: Option<&Compacted>,
    window: u64,
    task: Option<(usize, &str)>,
) -> Result<Option<Done>, ChatError> {
    let from = earlier.map_or(0, |c| c.at);
    let Some(at) = cut_point(messages, from, window) else {
        return Ok(None);
    };
    let start = from.max(usize::from(matches!(
        messages.first(),
        Some(Message::System { .. })
    )));
    let before = earlier.map(|c| c.summary.as_str());
    let (summary, response) = summarise(client, &messages[start..at], before, window).await?;
    let usage = response.usage.unwrap_or_else(|| {
        let request = summary_request(&messages[start..at], before, window);
        rein_protocol::Usage {
            input_tokens: estimate(&request),
            output_tokens: tokens_of(response.content.len()),
            estimated: true,
            ..rein_protocol::Usage::default()
        }
    });
    let compacted = Compacted { at, summary };
    let restated = task.filter(|(mine, _)| *mine < at).map(|(_, t)| t);
    let tokens_after = estimate(&view(messages, Some(&compacted), restated));
    Ok(Some(Done {
        compacted,
        usage,
        served_model: response.served_model,
        messages: at - start,
        tokens_after,
    }))
}

/// The conversation a session's journal holds since its last reset: its
/// messages, and its latest compaction.
pub fn conversation(
    entries: &[serde_json::Value],
) -> Result<(Vec<Message>, Option<Compacted>), String> {
    let since = entries
        .iter()
        .rposition(|e| e.get("reset").is_some())
        .map_or(0, |i| i + 1);
    let mut messages = Vec::new();
    let mut compacted = None;
    for entry in &entries[since..] {
        if let Some(m) = entry.get("message") {
            messages.push(
                serde_json::from_value(m.clone())
                    .map_err(|e| format!("the session's journal is unreadable: {e}"))?,
            );
        } else if let Some(c) = entry.get("compacted") {
            compacted = Some(Compacted::from_entry(c, messages.len()));
        }
    }
    Ok((messages, compacted))
}

/// What `rein sessions compact` did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ByHand {
    pub session: String,
    /// `PROVIDER/MODEL` that wrote the summary.
    pub model: String,
    /// Whether there was anything older to summarise.
    pub compacted: bool,
    pub messages: usize,
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub context_window: Option<u64>,
    pub usage: Option<rein_protocol::Usage>,
}

/// Compacts session `id` now, on its own model route (its window as for a
/// turn: configured, said by its server, or well known; unknown, what is
/// kept is 30 % of what it holds), journaled as the agent loop journals one
/// (`reason: "by_hand"`, with who), so its next turn goes on from it.
pub async fn compact_session(
    sessions: &rein_core::sessions::Sessions,
    id: &str,
    providers: &crate::provider::Providers,
    models: &rein_protocol::Models,
    by: &str,
) -> Result<ByHand, String> {
    let (session, journal, entries) = sessions.to_compact(id).await.map_err(|e| e.to_string())?;
    if session
        .runtime
        .as_deref()
        .is_some_and(|r| r != rein_protocol::BUILTIN_RUNTIME)
    {
        return Err(format!(
            "session {} is served by harness `{}`, which keeps its own conversation: only the built-in runtime's can be compacted here",
            session.id,
            session.runtime.as_deref().unwrap_or_default()
        ));
    }
    let route = session
        .route
        .clone()
        .unwrap_or_else(|| format!("openai/{}", providers.default_model("openai")));
    let (provider, model) = route.split_once('/').ok_or_else(|| {
        format!(
            "session {} has no model route to summarise with",
            session.id
        )
    })?;
    let client = providers.client(provider, model)?;
    let (messages, earlier) = conversation(&entries)?;
    let before = estimate(&view(&messages, earlier.as_ref(), None));
    let configured = models.get(&route).and_then(|m| m.context_window);
    let window = Windows::default().of(&client, configured).await;
    let mut report = ByHand {
        session: session.id.to_string(),
        model: route.clone(),
        compacted: false,
        messages: 0,
        tokens_before: before,
        tokens_after: before,
        context_window: window,
        usage: None,
    };
    let done = compact_once(
        &client,
        &messages,
        earlier.as_ref(),
        window.unwrap_or(before),
        None,
    )
    .await
    .map_err(|e| format!("the summary request failed: {e}"))?;
    let Some(done) = done else {
        return Ok(report);
    };
    let used = rein_protocol::TurnUsage {
        provider: provider.to_owned(),
        model: model.to_owned(),
        served_model: done.served_model.clone(),
        step: session.steps.last().cloned(),
        session: Some(session.id.to_string()),
        usage: done.usage,
    };
    journal
        .append(&[serde_json::json!({
            "compacted": {
                "at": done.compacted.at,
                "summary": done.compacted.summary,
                "tokens_before": before,
                "tokens_after": done.tokens_after,
                "reason": "by_hand",
                "by": by,
            },
            "usage": used,
        })])
        .await
        .map_err(|e| e.to_string())?;
    report.compacted = true;
    report.messages = done.messages;
    report.tokens_after = done.tokens_after;
    report.usage = Some(done.usage);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::{FunctionCall, ToolCall};

    fn call(id: &str) -> Message {
        Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall {
                id: id.into(),
                kind: "function".into(),
                function: FunctionCall {
                    name: "read_file".into(),
                    arguments: "{\"path\":\"a.txt\"}".into(),
                },
            }],
        }
    }

    fn answer(id: &str, bytes: usize) -> Message {
        Message::Tool {
            tool_call_id: id.into(),
            content: "x".repeat(bytes),
        }
    }

    #[test]
    fn a_call_is_never_kept_without_its_answer_nor_an_answer_without_its_call() {
        let mut messages = vec![
            Message::System {
                content: "sys".into(),
            },
            Message::User {
                content: "read it four times".into(),
            },
        ];
        for i in 0..4 {
            messages.push(call(&format!("c{i}")));
            messages.push(answer(&format!("c{i}"), 4000));
        }
        // 2,500 tokens: 30 % is 750 tokens, less than one answer: the newest
        // call and its answer are kept, together.
        let at = cut_point(&messages, 0, 2500).unwrap();
        assert!(matches!(messages[at], Message::Assistant { .. }));
        assert_eq!(at, messages.len() - 2);
        // A larger window keeps more, from a call on.
        let at = cut_point(&messages, 0, 10_000).unwrap();
        assert!(matches!(messages[at], Message::Assistant { .. }));
        assert_eq!(at, messages.len() - 4);
        // Compacted up to the newest call already: nothing older is left.
        assert_eq!(cut_point(&messages, messages.len() - 1, 2500), None);
    }

    #[test]
    fn the_view_is_the_system_message_the_summary_and_what_was_kept() {
        let messages = vec![
            Message::System {
                content: "sys".into(),
            },
            Message::User {
                content: "task".into(),
            },
            call("c0"),
            answer("c0", 10),
            call("c1"),
            answer("c1", 10),
        ];
        let compacted = Compacted {
            at: 4,
            summary: "read a.txt once".into(),
        };
        let view = view(&messages, Some(&compacted), Some("task"));
        assert_eq!(view.len(), 4);
        assert!(matches!(&view[0], Message::System { .. }));
        let Message::User { content } = &view[1] else {
            panic!("{view:?}")
        };
        assert!(content.contains("read a.txt once") && content.ends_with("task"));
        assert_eq!(view[2..], messages[4..]);
    }

    #[test]
    fn a_transcript_too_long_is_cut_in_the_middle_of_its_longest_messages() {
        let part = vec![answer("c0", 50_000), answer("c1", 100)];
        let text = transcript(&part, 10_000);
        assert!(text.len() <= 10_000, "{}", text.len());
        assert!(text.contains("bytes left out"));
        // The short answer is whole.
        assert!(text.contains(&"x".repeat(100)));
    }

    #[test]
    fn overflow_errors_are_known_by_code_or_words_and_say_the_window() {
        let http = |status, message: &str, code: Option<&str>| ChatError::Http {
            status,
            message: message.into(),
            retry_after: None,
            code: code.map(str::to_owned),
        };
        let llama_python = http(
            400,
            "This model's maximum context length is 2500 tokens. However, you requested 2781 tokens (2781 in the messages, 0 in the completion). Please reduce the length of the messages or completion.",
            Some("context_length_exceeded"),
        );
        assert!(llama_python.context_overflow());
        assert_eq!(llama_python.overflow_window(), Some(2500));
        let anthropic = http(
            400,
            "prompt is too long: 210000 tokens > 200000 maximum",
            Some("invalid_request_error"),
        );
        assert!(anthropic.context_overflow());
        assert_eq!(anthropic.overflow_window(), Some(200_000));
        let llama_cpp = http(
            400,
            "request (4476 tokens) exceeds the available context size (4096 tokens)",
            Some("exceed_context_size_error"),
        );
        assert!(llama_cpp.context_overflow());
        assert_eq!(llama_cpp.overflow_window(), Some(4096));
        let older = http(
            400,
            "the request exceeds the available context size, try increasing it",
            Some("exceed_context_size_error"),
        );
        assert!(older.context_overflow());
        assert_eq!(older.overflow_window(), None);
        assert!(!http(400, "bad tool schema", Some("invalid_request_error")).context_overflow());
        assert!(!http(429, "maximum context length", None).context_overflow());
        assert_eq!(known_window("gpt-4o-mini"), Some(128_000));
        assert_eq!(known_window("gpt-4.1-mini"), Some(1_047_576));
        assert_eq!(known_window("my-local-model"), None);
    }
}
