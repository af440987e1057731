//! The admin API of a running `rein serve`, as the CLI's second backend: every
//! `rein tasks`, `rein approvals`, `rein ledger` and `rein metrics` command, and
//! `rein run`, talk to it when `--url`/`REIN_URL` is given, with `--token`/
//! `REIN_TOKEN` as the bearer token.

use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures_util::{Stream, StreamExt as _};
use rein_protocol::{HarnessEvent, TaskId};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde_json::Value;

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

/// A frame of a task's event stream.
#[derive(Debug)]
pub enum Frame {
    Event(Box<HarnessEvent>),
    /// The task is left in progress by a runner that is gone.
    Stalled,
}

#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    token: Option<String>,
}

impl Client {
    pub fn new(url: &str, token: Option<String>) -> Result<Client, crate::exit::UsageError> {
        let bad = |why: &str| {
            crate::exit::UsageError(format!(
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
            http,
            base,
            token: token.filter(|t| !t.is_empty()),
        })
    }

    fn url(&self, path: &str) -> Result<Url, RemoteError> {
        self.base
            .join(path.trim_start_matches('/'))
            .map_err(|e| RemoteError::Protocol {
                url: self.base.to_string(),
                detail: format!("cannot build a request URL for {path}: {e}"),
            })
    }

    fn request(&self, method: Method, url: Url) -> reqwest::RequestBuilder {
        let req = self.http.request(method, url);
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    fn unreachable(&self, e: &reqwest::Error) -> RemoteError {
        RemoteError::Unreachable {
            url: self.base.to_string(),
            detail: error_chain(e),
        }
    }

    /// Turns a non-2xx answer into the server's error, with the way out for auth.
    async fn check(&self, response: reqwest::Response) -> Result<reqwest::Response, RemoteError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let url = response.url().to_string();
        let text = response.text().await.unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let Some(error) = body.get("error") else {
            return Err(RemoteError::Protocol {
                url,
                detail: format!("HTTP {status} with no rein error in the body"),
            });
        };
        let code = error["code"].as_str().unwrap_or("error").to_owned();
        let mut message = error["message"].as_str().unwrap_or("").to_owned();
        if status == StatusCode::UNAUTHORIZED {
            message = if self.token.is_some() {
                format!(
                    "the server at {} does not accept this token; check --token or REIN_TOKEN",
                    self.base
                )
            } else {
                format!(
                    "the server at {} needs a token: pass --token TOKEN or set REIN_TOKEN",
                    self.base
                )
            };
        }
        Err(RemoteError::Api {
            status: status.as_u16(),
            code,
            message,
        })
    }

    /// Sends a request and decodes its JSON answer.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Value>,
    ) -> Result<T, RemoteError> {
        let url = self.url(path)?;
        let mut req = self
            .request(method, url.clone())
            .timeout(REQUEST_TIMEOUT)
            .query(query);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let response = req.send().await.map_err(|e| self.unreachable(&e))?;
        let response = self.check(response).await?;
        if response.status() == StatusCode::NO_CONTENT {
            return serde_json::from_value(Value::Null).map_err(|e| RemoteError::Protocol {
                url: url.to_string(),
                detail: e.to_string(),
            });
        }
        let bytes = response.bytes().await.map_err(|e| self.unreachable(&e))?;
        serde_json::from_slice(&bytes).map_err(|e| RemoteError::Protocol {
            url: url.to_string(),
            detail: format!("unexpected JSON ({e})"),
        })
    }

    /// `/healthz`, whose body is the report whether the server is healthy (200)
    /// or not (503).
    pub async fn health(&self) -> Result<rein_protocol::api::Health, RemoteError> {
        let url = self.url("healthz")?;
        let response = self
            .request(Method::GET, url.clone())
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let response = if response.status() == StatusCode::SERVICE_UNAVAILABLE {
            response
        } else {
            self.check(response).await?
        };
        let bytes = response.bytes().await.map_err(|e| self.unreachable(&e))?;
        serde_json::from_slice(&bytes).map_err(|e| RemoteError::Protocol {
            url: url.to_string(),
            detail: format!("unexpected JSON ({e})"),
        })
    }

    pub async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T, RemoteError> {
        self.call(Method::GET, path, query, None).await
    }

    /// A task's state.
    pub async fn task(&self, id: &TaskId) -> Result<rein_protocol::TaskState, RemoteError> {
        self.get::<TaskEnvelope>(&format!("admin/tasks/{id}"), &[])
            .await
            .map(|t| t.task)
    }

    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: impl serde::Serialize,
    ) -> Result<T, RemoteError> {
        let body = serde_json::to_value(body).map_err(|e| RemoteError::Protocol {
            url: path.to_owned(),
            detail: format!("the request body does not encode as JSON: {e}"),
        })?;
        self.call(Method::POST, path, &[], Some(body)).await
    }

    /// A task's events over Server-Sent Events, after `after`. The stream ends
    /// when the task has finished and every event was sent.
    pub async fn task_events(
        &self,
        id: &TaskId,
        after: u64,
    ) -> Result<impl Stream<Item = Result<Frame, RemoteError>> + use<>, RemoteError> {
        let url = self.url(&format!("admin/tasks/{id}/events/stream"))?;
        let response = self
            .request(Method::GET, url.clone())
            .query(&[("after", after.to_string())])
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let response = self.check(response).await?;
        let base = self.base.to_string();
        let frames = response
            .bytes_stream()
            .eventsource()
            .filter_map(move |item| {
                let url = url.to_string();
                let base = base.clone();
                async move {
                    match item {
                        Err(e) => Some(Err(RemoteError::Unreachable {
                            url: base,
                            detail: format!("the event stream broke off ({e})"),
                        })),
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
                                    url,
                                    detail: format!("an event that is not a rein event ({e})"),
                                }),
                        ),
                    }
                }
            });
        Ok(frames)
    }
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
