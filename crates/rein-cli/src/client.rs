//! The admin API as the CLI calls it: each operation by its type
//! ([`rein_protocol::endpoints`]), over HTTP to a running `rein serve`
//! (`--url`/`REIN_URL`, with `--token`/`REIN_TOKEN` as the bearer token), or,
//! embedded, to the same router served in this process over the store here.
//! A command makes one call either way and reads one answer, so what it
//! prints cannot differ between the two.

use std::pin::Pin;
use std::time::Duration;

use axum::body::Bytes;
use eventsource_stream::Eventsource as _;
use futures_util::{Stream, StreamExt as _, TryStreamExt as _};
use rein_protocol::endpoints::{self, Endpoint, Method};
use rein_protocol::{HarnessEvent, TaskId};
use rein_server::auth::{InProcess, Principal};
use reqwest::{StatusCode, Url};
use serde_json::Value;
use tower::ServiceExt as _;

/// How long connecting may take before the server counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request (not a stream) may take in all.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// What went wrong talking to the server.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("cannot reach rein at {url}: {detail}; is `rein serve` running there?")]
    Unreachable { url: String, detail: String },
    /// The server's own `{error: {code, message}}`.
    #[error("{message}")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    #[error("{url} did not answer as rein's API does: {detail}")]
    Protocol { url: String, detail: String },
}

impl RemoteError {
    /// Whether the user can fix it by changing what they typed (exit 2).
    pub fn is_usage(&self) -> bool {
        matches!(self, RemoteError::Api { status, .. } if matches!(status, 400 | 413 | 415 | 422))
    }
}

pub use rein_protocol::api::TaskEnvelope;

/// A `--url` (or `REIN_URL`) that cannot be used: the user's to fix (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadUrl(String);

/// A frame of a task's event stream.
#[derive(Debug)]
pub enum Frame {
    Event(Box<HarnessEvent>),
    /// The task is left in progress by a runner that is gone.
    Stalled,
}

/// Where the API is.
#[derive(Clone)]
enum Transport {
    /// A running `rein serve`.
    Http {
        http: reqwest::Client,
        base: Url,
        token: Option<String>,
    },
    /// The router served in this process, called as `caller`.
    InProcess {
        router: axum::Router,
        caller: Principal,
    },
}

#[derive(Clone)]
pub struct Client {
    transport: Transport,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.place())
    }
}

/// An answer's body as it arrives.
type Chunks = Pin<Box<dyn Stream<Item = Result<Bytes, String>> + Send>>;

/// An answer: its status and its body, unread.
struct Answer {
    status: StatusCode,
    body: Chunks,
}

impl Answer {
    async fn bytes(self) -> Result<Vec<u8>, String> {
        self.body
            .try_fold(Vec::new(), |mut all, chunk| async move {
                all.extend_from_slice(&chunk);
                Ok(all)
            })
            .await
    }
}

impl Client {
    /// The API of the server at `url`.
    pub fn new(url: &str, token: Option<String>) -> Result<Client, BadUrl> {
        let bad = |why: &str| {
            BadUrl(format!(
                "--url `{url}` {why}; give the server's address, e.g. http://127.0.0.1:7433"
            ))
        };
        let mut base = Url::parse(url.trim()).map_err(|e| bad(&format!("is not a URL ({e})")))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(bad("is neither http:// nor https://"));
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("rein/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| bad(&format!("cannot be used ({e})")))?;
        Ok(Client {
            transport: Transport::Http {
                http,
                base,
                token: token.filter(|t| !t.is_empty()),
            },
        })
    }

    /// The API of `router`, served in this process, called as `caller`.
    pub fn in_process(router: axum::Router, caller: Principal) -> Client {
        Client {
            transport: Transport::InProcess { router, caller },
        }
    }

    /// The same API, called as `name` where the caller is this process (a
    /// server names the caller by its token).
    pub fn acting_as(&self, name: &str) -> Client {
        let mut client = self.clone();
        if let Transport::InProcess { caller, .. } = &mut client.transport {
            caller.name = name.to_owned();
        }
        client
    }

    /// Where the API is, for messages.
    fn place(&self) -> String {
        match &self.transport {
            Transport::Http { base, .. } => base.to_string(),
            Transport::InProcess { .. } => "the store here".to_owned(),
        }
    }

    /// An answer that broke off while it was read: the server is unreachable
    /// over HTTP; in this process, the router's body failed.
    fn broke(&self, detail: String) -> RemoteError {
        match &self.transport {
            Transport::Http { base, .. } => RemoteError::Unreachable {
                url: base.to_string(),
                detail,
            },
            Transport::InProcess { .. } => RemoteError::Protocol {
                url: self.place(),
                detail,
            },
        }
    }

    /// Sends one request; `stream`: its answer is read as it comes, with no
    /// deadline.
    async fn send(
        &self,
        method: Method,
        target: &str,
        body: Option<Vec<u8>>,
        stream: bool,
    ) -> Result<Answer, RemoteError> {
        let method = match method {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Delete => reqwest::Method::DELETE,
        };
        match &self.transport {
            Transport::Http { http, base, token } => {
                let url = base.join(target.trim_start_matches('/')).map_err(|e| {
                    RemoteError::Protocol {
                        url: base.to_string(),
                        detail: format!("cannot build a request URL for {target}: {e}"),
                    }
                })?;
                let mut request = http.request(method, url);
                if let Some(t) = token {
                    request = request.bearer_auth(t);
                }
                request = if stream {
                    request.header(reqwest::header::ACCEPT, "text/event-stream")
                } else {
                    request.timeout(REQUEST_TIMEOUT)
                };
                if let Some(body) = body {
                    request = request
                        .header(reqwest::header::CONTENT_TYPE, "application/json")
                        .body(body);
                }
                let response = request.send().await.map_err(|e| RemoteError::Unreachable {
                    url: base.to_string(),
                    detail: error_chain(&e),
                })?;
                Ok(Answer {
                    status: response.status(),
                    body: Box::pin(response.bytes_stream().map_err(|e| error_chain(&e))),
                })
            }
            Transport::InProcess { router, caller } => {
                let mut request = axum::http::Request::builder().method(method).uri(target);
                if body.is_some() {
                    request = request.header(axum::http::header::CONTENT_TYPE, "application/json");
                }
                let mut request = request
                    .body(axum::body::Body::from(body.unwrap_or_default()))
                    .map_err(|e| RemoteError::Protocol {
                        url: target.to_owned(),
                        detail: format!("cannot build the request: {e}"),
                    })?;
                request.extensions_mut().insert(InProcess(caller.clone()));
                let response = match router.clone().oneshot(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                let status = StatusCode::from_u16(response.status().as_u16())
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                Ok(Answer {
                    status,
                    body: Box::pin(
                        response
                            .into_body()
                            .into_data_stream()
                            .map_err(|e| e.to_string()),
                    ),
                })
            }
        }
    }

    /// Turns a non-2xx answer into the server's error, with the way out for auth.
    async fn check(&self, answer: Answer, target: &str) -> Result<Answer, RemoteError> {
        let status = answer.status;
        if status.is_success() {
            return Ok(answer);
        }
        let text = answer.bytes().await.unwrap_or_default();
        let body: Value = serde_json::from_slice(&text).unwrap_or(Value::Null);
        let Some(error) = body.get("error") else {
            return Err(RemoteError::Protocol {
                url: target.to_owned(),
                detail: format!("HTTP {status} with no rein error in the body"),
            });
        };
        let code = error["code"].as_str().unwrap_or("error").to_owned();
        let mut message = error["message"].as_str().unwrap_or("").to_owned();
        if status == StatusCode::UNAUTHORIZED
            && let Transport::Http { base, token, .. } = &self.transport
        {
            message = if token.is_some() {
                format!(
                    "the server at {base} does not accept this token; check --token or REIN_TOKEN"
                )
            } else {
                format!("the server at {base} needs a token: pass --token TOKEN or set REIN_TOKEN")
            };
        }
        Err(RemoteError::Api {
            status: status.as_u16(),
            code,
            message,
        })
    }

    /// Operation `E` on `param`, with `query` and `request`: its answer.
    pub async fn call<E: Endpoint>(
        &self,
        param: &E::Param,
        query: &E::Query,
        request: &E::Request,
    ) -> Result<E::Response, RemoteError> {
        self.exchange::<E>(param, query, request, &[]).await
    }

    /// [`Client::call`], also reading an answer of one of the `also` statuses
    /// as its success body.
    async fn exchange<E: Endpoint>(
        &self,
        param: &E::Param,
        query: &E::Query,
        request: &E::Request,
        also: &[StatusCode],
    ) -> Result<E::Response, RemoteError> {
        let target = target::<E>(param, query)?;
        let body = match serde_json::to_value(request) {
            Ok(Value::Null) => None,
            Ok(value) => Some(value.to_string().into_bytes()),
            Err(e) => {
                return Err(RemoteError::Protocol {
                    url: target,
                    detail: format!("the request body does not encode as JSON: {e}"),
                });
            }
        };
        let answer = self.send(E::OPERATION.method, &target, body, false).await?;
        let answer = if also.contains(&answer.status) {
            answer
        } else {
            self.check(answer, &target).await?
        };
        let bytes = answer.bytes().await.map_err(|detail| self.broke(detail))?;
        let decoded = if bytes.is_empty() {
            serde_json::from_value(Value::Null)
        } else {
            serde_json::from_slice(&bytes)
        };
        decoded.map_err(|e| RemoteError::Protocol {
            url: target,
            detail: format!("unexpected JSON ({e})"),
        })
    }

    /// `/healthz`, whose body is the report whether the node is healthy (200)
    /// or not (503).
    pub async fn health(&self) -> Result<rein_protocol::api::Health, RemoteError> {
        self.exchange::<endpoints::Healthz>(&(), &(), &(), &[StatusCode::SERVICE_UNAVAILABLE])
            .await
    }

    /// A task's state.
    pub async fn task(&self, id: &TaskId) -> Result<rein_protocol::TaskState, RemoteError> {
        self.call::<endpoints::ShowTask>(id, &(), &())
            .await
            .map(|t| t.task)
    }

    /// A task's events over Server-Sent Events, after `after`. The stream ends
    /// when the task has finished and every event was sent.
    pub async fn task_events(
        &self,
        id: &TaskId,
        after: u64,
    ) -> Result<impl Stream<Item = Result<Frame, RemoteError>> + use<>, RemoteError> {
        type Stream = endpoints::TaskEventStream;
        let query = rein_protocol::api::StreamQuery { after: Some(after) };
        let target = target::<Stream>(id, &query)?;
        let answer = self
            .send(Stream::OPERATION.method, &target, None, true)
            .await?;
        let answer = self.check(answer, &target).await?;
        let this = self.clone();
        let frames = answer.body.eventsource().filter_map(move |item| {
            let target = target.clone();
            let this = this.clone();
            async move {
                match item {
                    Err(e) => Some(Err(this.broke(format!("the event stream broke off ({e})")))),
                    Ok(event) if event.event == rein_server::events::STALLED => {
                        Some(Ok(Frame::Stalled))
                    }
                    Ok(event) if event.event == "error" => Some(Err(RemoteError::Api {
                        status: 500,
                        code: "stream".into(),
                        message: event.data,
                    })),
                    Ok(event) => Some(
                        serde_json::from_str::<HarnessEvent>(&event.data)
                            .map(|e| Frame::Event(Box::new(e)))
                            .map_err(|e| RemoteError::Protocol {
                                url: target,
                                detail: format!("an event that is not a rein event ({e})"),
                            }),
                    ),
                }
            }
        });
        Ok(frames)
    }
}

/// Operation `E`'s path with `param` in it, and `query` after it.
fn target<E: Endpoint>(param: &E::Param, query: &E::Query) -> Result<String, RemoteError> {
    let path = E::path(param);
    let query = serde_urlencoded::to_string(query).map_err(|e| RemoteError::Protocol {
        url: path.clone(),
        detail: format!("the query does not encode: {e}"),
    })?;
    Ok(if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    })
}

/// How a watched task's stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The task finished (completed, failed or cancelled).
    Finished,
    /// The task is paused.
    Paused,
    /// The task is left in progress by a runner that is gone.
    Stalled,
    /// The watcher stopped watching (asked to, or by its callback).
    Stopped,
}

/// How long a watched task's event stream may be quiet before its state is checked.
const WATCH_IDLE: Duration = Duration::from_millis(300);

impl Client {
    /// Hands each event of a task after `after` to `on_event` as the server
    /// streams it, until the task finishes, pauses, stalls, `stop` fires, or
    /// `on_event` returns `true`. Returns how it ended, with the task's state then.
    pub async fn watch(
        &self,
        id: &TaskId,
        after: u64,
        stop: &tokio_util::sync::CancellationToken,
        mut on_event: impl FnMut(&HarnessEvent) -> anyhow::Result<bool>,
    ) -> anyhow::Result<(Ended, rein_protocol::TaskState)> {
        let state = || self.task(id);
        let mut seen = after;
        let mut frames = std::pin::pin!(self.task_events(id, after).await?);
        loop {
            let next = tokio::select! {
                next = tokio::time::timeout(WATCH_IDLE, frames.next()) => next,
                () = stop.cancelled() => return Ok((Ended::Stopped, state().await?)),
            };
            match next {
                Ok(Some(frame)) => match frame? {
                    Frame::Event(e) => {
                        seen = e.seq;
                        if on_event(&e)? {
                            return Ok((Ended::Stopped, state().await?));
                        }
                    }
                    Frame::Stalled => {
                        let state = state().await?;
                        if state.status() == rein_protocol::TaskStatus::InProgress
                            && seen >= state.head.last_seq
                        {
                            return Ok((Ended::Stalled, state));
                        }
                    }
                },
                // The stream ended: the task finished and every event was sent.
                Ok(None) => return Ok((Ended::Finished, state().await?)),
                // Quiet: a paused task sends nothing until it is resumed.
                Err(_) => {
                    let state = state().await?;
                    if state.status() == rein_protocol::TaskStatus::Paused
                        && seen >= state.head.last_seq
                    {
                        return Ok((Ended::Paused, state));
                    }
                }
            }
        }
    }
}

/// An error's causes as one line, without reqwest's own wrapper when it has one
/// ("error sending request for url …" says nothing the caller does not know).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !parts.iter().any(|p| p.contains(&part)) {
            parts.push(part);
        }
        source = s.source();
    }
    if parts.is_empty() {
        e.to_string()
    } else {
        parts.join(": ")
    }
}
