//! `rein-server`: the admin HTTP API over the engine.
//!
//! Layout: [`router`] builds the axum router (the routes are in [`routes`]);
//! [`auth`] checks operator tokens, sessions and CSRF; [`error`] is the one mapping
//! from engine errors to HTTP statuses; [`health`] probes the components;
//! [`prometheus`] renders the metrics as Prometheus text; [`events`] streams events
//! over SSE, woken by [`hub`], the one watcher of the store for every stream;
//! [`openapi`] is the route table the router and the OpenAPI document are both
//! built from; [`listen`] is the accept loop (head and idle deadlines, a cap on
//! connections and on each client address's, a bounded shutdown); [`throttle`]
//! slows an address down after too many failed sign-ins; [`serve`] runs it.
//! The routes of shared states, contracts and evidence, and agent sessions are
//! [`shared_state`], [`records`] and [`sessions`]; [`ui`] is the Control UI under
//! `/ui`, whose activity chart [`activity`] counts from the event broadcast.

pub mod activity;
pub mod auth;
pub mod error;
pub mod events;
pub mod governance;
pub mod health;
pub mod hub;
pub mod listen;
pub mod openapi;
pub mod prometheus;
pub mod records;
pub mod routes;
pub mod sessions;
pub mod shared_state;
pub mod throttle;
pub mod ui;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use rein_core::{Engine, RunOptions};
use rein_protocol::TaskId;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use auth::{Auth, Role, TokenEntry};

/// The largest request body accepted (413 above it).
pub const BODY_LIMIT: usize = 1024 * 1024;

/// The port `rein serve` listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 7433;

#[derive(Debug, Clone)]
pub struct AppState {
    pub engine: Arc<Engine>,
    pub auth: Arc<Auth>,
    /// Fired on shutdown: task runs started by the server stop, resumable.
    pub shutdown: CancellationToken,
    /// Serialized `{task}` bodies by task, with the log position they show.
    pub bodies: Arc<BodyCache>,
    /// The directories a submitted plan's `workspace` and `allow_read` may lie
    /// in (`--workspace-root`); none: a plan that names either is refused.
    pub workspace_roots: Arc<Vec<std::path::PathBuf>>,
    /// What wakes the live streams: one watcher of the store for all of them.
    pub hub: Arc<hub::Hub>,
    /// The harnesses this server's runs select from, and its runtime policy.
    pub harnesses: Arc<rein_core::harness::Harnesses>,
    /// What the server's tasks did lately, per minute (the UI's chart).
    pub activity: Arc<activity::Activity>,
    /// Woken when a run this server started ends (room for another).
    pub run_ended: Arc<tokio::sync::Notify>,
    /// Failed sign-ins by client address.
    pub throttle: Arc<throttle::Throttle>,
    /// Models' prices (`[models."PROVIDER/MODEL"]`), for what usage cost.
    pub models: Arc<rein_protocol::Models>,
    /// Health's alerts, kept between probes (a resolved one for an hour).
    pub alerts: Arc<health::AlertLog>,
}

/// How often a node sharing its store looks for free tasks besides when it
/// is told: what bounds a take-over after a node dies to its lease plus this.
pub const SHARE_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// Responses for `GET /admin/tasks/{id}`, kept while the task's log has not moved.
#[derive(Debug, Default)]
pub struct BodyCache(std::sync::Mutex<std::collections::HashMap<TaskId, (u64, axum::body::Bytes)>>);

/// How many task bodies the server keeps.
const BODY_CACHE: usize = 1024;

impl BodyCache {
    pub fn get(&self, id: &TaskId, last_seq: u64) -> Option<axum::body::Bytes> {
        let cache = self.0.lock().ok()?;
        cache
            .get(id)
            .filter(|(seq, _)| *seq == last_seq)
            .map(|(_, body)| body.clone())
    }

    pub fn put(&self, id: TaskId, last_seq: u64, body: axum::body::Bytes) {
        if let Ok(mut cache) = self.0.lock() {
            if cache.len() >= BODY_CACHE && !cache.contains_key(&id) {
                cache.clear();
            }
            cache.insert(id, (last_seq, body));
        }
    }
}

impl AppState {
    pub fn new(engine: Arc<Engine>, auth: Auth, shutdown: CancellationToken) -> AppState {
        AppState {
            hub: Arc::new(hub::Hub::new(Arc::clone(&engine), shutdown.clone())),
            engine,
            auth: Arc::new(auth),
            shutdown,
            bodies: Arc::new(BodyCache::default()),
            workspace_roots: Arc::default(),
            harnesses: Arc::new(rein_core::harness::Harnesses {
                registry: Arc::default(),
                policy: rein_core::harness::RuntimePolicy::default(),
                facts: Default::default(),
                fallback_models: Vec::new(),
            }),
            activity: Arc::default(),
            run_ended: Arc::default(),
            throttle: Arc::default(),
            models: Arc::default(),
            alerts: Arc::default(),
        }
    }

    /// The same, costing usage at `models`' prices.
    pub fn with_models(mut self, models: rein_protocol::Models) -> AppState {
        self.models = Arc::new(models);
        self
    }

    /// The same, reporting `harnesses` as the ones its runs select from.
    pub fn with_harnesses(mut self, harnesses: Arc<rein_core::harness::Harnesses>) -> AppState {
        self.harnesses = harnesses;
        self
    }

    /// The same, letting each client address make `failures` failed
    /// sign-ins a minute before it is made to wait.
    pub fn with_sign_in_failures(mut self, failures: u32) -> AppState {
        self.throttle = Arc::new(throttle::Throttle::new(failures));
        self
    }

    /// The same, accepting plans whose directories lie inside `roots`.
    pub fn with_workspace_roots(mut self, roots: Vec<std::path::PathBuf>) -> AppState {
        self.workspace_roots = Arc::new(roots);
        self
    }
}

impl AppState {
    /// Creates a task of `plan` and starts it here. A caller reaches the
    /// host's file system only inside the server's --workspace-root
    /// directories; without any, a task gets a fresh workspace and a plan that
    /// names a directory is refused (never silently dropped).
    pub async fn submit(
        &self,
        plan: rein_protocol::TaskDecomposition,
        session_id: Option<String>,
        workspace: Option<std::path::PathBuf>,
    ) -> Result<rein_protocol::TaskState, rein_core::EngineError> {
        let request = rein_core::CreateTask {
            plan,
            session_id,
            workspace,
            confined_to: Some(self.workspace_roots.to_vec()),
        };
        // Where nodes share the store, a node without room leaves a new task
        // to one with room; else it runs the task, which no other node takes
        // up first.
        if self.engine.store().leases().is_some() && self.room() == 0 {
            return self.engine.create(request).await;
        }
        let created = self.engine.create_here(request).await?;
        let _ = self.start(created.id().clone(), RunOptions::default());
        Ok(created)
    }

    /// How many more tasks this node may take up now.
    fn room(&self) -> usize {
        self.engine
            .config()
            .max_tasks
            .saturating_sub(self.engine.running())
    }

    /// Takes over, at once, the leases of processes of this machine that
    /// are gone (this node before a restart, a node killed beside it): they
    /// would otherwise wait out their leases. A holder on another machine
    /// cannot be checked from here, and a live one is left alone.
    async fn take_up_the_dead(&self) {
        let Some(leases) = self.engine.store().leases() else {
            return;
        };
        let me = leases.node().clone();
        let live = match leases.live().await {
            Ok(live) => live,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the task leases");
                return;
            }
        };
        for lease in live {
            if self.room() == 0 {
                return;
            }
            let dead = lease.runner.host == me.host
                && lease.runner != me
                && !rein_core::process::runner_alive(&lease.runner);
            if !dead {
                continue;
            }
            match leases.claim_from(&lease).await {
                Ok(Some(taken)) => {
                    let _ = self.start(taken.task_id, RunOptions::default());
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(task = %lease.task_id, error = %e, "cannot take the lease over")
                }
            }
        }
    }

    /// Where nodes share the store: takes up free tasks — new ones, and
    /// those of nodes that stopped renewing their leases — while this node has
    /// room, until shutdown. Looks when the store says a task was created,
    /// when one of this node's runs ends, and every [`SHARE_POLL`]; does
    /// nothing on a store one machine owns.
    pub fn share_work(&self) {
        if self.engine.store().leases().is_none() {
            return;
        }
        let state = self.clone();
        tokio::spawn(async move {
            let store = Arc::clone(state.engine.store());
            let Some(leases) = store.leases() else {
                return;
            };
            state.take_up_the_dead().await;
            loop {
                let room = state.room();
                if room > 0 {
                    match leases.claim_free(room).await {
                        Ok(claimed) => {
                            for lease in claimed {
                                let _ = state.start(lease.task_id, RunOptions::default());
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "cannot claim free tasks"),
                    }
                }
                tokio::select! {
                    () = state.shutdown.cancelled() => return,
                    () = state.engine.changed_elsewhere(rein_core::store::Change::Tasks) => {}
                    () = state.run_ended.notified() => {}
                    () = tokio::time::sleep(SHARE_POLL) => {}
                }
            }
        });
    }

    /// Records `response` as decided by someone of `role`: an admin may decide
    /// a request delegated to someone else.
    pub async fn decide(
        &self,
        role: auth::Role,
        response: rein_protocol::ApprovalResponse,
    ) -> Result<rein_protocol::ApprovalRequest, rein_core::EngineError> {
        if role >= auth::Role::Admin {
            self.engine.decide_overriding(response).await
        } else {
            self.engine.decide(response).await
        }
    }

    /// Runs a task in the background (the server owns its runners); `false` if
    /// this server already runs it. The task is claimed before this returns, so
    /// a pause or abort sent right after reaches the run.
    pub fn start(&self, id: TaskId, mut options: RunOptions) -> bool {
        let Ok(claim) = self.engine.claim(&id) else {
            return false;
        };
        let engine = Arc::clone(&self.engine);
        options.cancel = self.shutdown.child_token();
        let shutdown = self.shutdown.clone();
        let ended = Arc::clone(&self.run_ended);
        tokio::spawn(async move {
            let _ended = NotifyOnDrop(ended);
            let mut claim = claim;
            loop {
                let Err(e) = engine.run_claimed(claim, options.clone()).await else {
                    return;
                };
                tracing::warn!(task = %id, error = %e, "task run ended with an error");
                // A store that failed a write (a full disk, say) leaves the task
                // in progress with this server as its runner: nobody else may
                // take it up, so this server does, once the store works again.
                if !matches!(
                    e,
                    rein_core::EngineError::Store(rein_core::StoreError::Backend(_))
                ) {
                    return;
                }
                if !wait_for_store(&engine, &shutdown).await {
                    return;
                }
                match engine.claim(&id) {
                    Ok(again) => claim = again,
                    Err(_) => return,
                }
                // This run's own attempts came after the sweep, which cannot
                // answer for them: the take-up looks for itself.
                options.sweep = None;
                tracing::info!(task = %id, "the store works again: taking the task up");
            }
        });
        true
    }
}

/// Wakes a waiter when dropped: a run's end, however it ends.
struct NotifyOnDrop(Arc<tokio::sync::Notify>);

impl Drop for NotifyOnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// How often a server whose store failed tries it again.
const STORE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Waits until a write to the store goes through again (true), or the server
/// shuts down (false).
async fn wait_for_store(engine: &Engine, shutdown: &CancellationToken) -> bool {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return false,
            () = tokio::time::sleep(STORE_RETRY) => {}
        }
        if engine.store().probe().await.is_ok() {
            return true;
        }
    }
}

pub fn router(state: AppState) -> Router {
    openapi::table()
        .into_iter()
        .fold(Router::new(), |router, route| {
            // Each operation's role, from its definition, enforced before its
            // handler (operations on one path merge into one method router).
            let role = route.operation.role;
            let handler = route.handler.layer(axum::middleware::from_fn_with_state(
                (state.clone(), role),
                enforce_role,
            ));
            router.route(route.operation.path, handler)
        })
        .merge(ui::router())
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            throttle::throttle,
        ))
        .layer(axum::middleware::from_fn(request_span))
        .with_state(state)
}

/// Lets a request through to its handler only if its caller has the role
/// the operation's definition gives it (`None`: open); the caller goes along
/// for the handler ([`routes::Caller`]).
async fn enforce_role(
    axum::extract::State((state, role)): axum::extract::State<(AppState, Option<Role>)>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let in_process = request.extensions_mut().remove::<auth::InProcess>();
    let caller = match (in_process, role) {
        (Some(auth::InProcess(p)), _) => Ok(p),
        (None, None) => return next.run(request).await,
        (None, Some(_)) => state.auth.principal(request.method(), request.headers()),
    };
    let caller = match caller.and_then(|p| match role {
        Some(role) => auth::require(&p, role).map(|()| p),
        None => Ok(p),
    }) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// One `tracing` span per request, in the HTTP semantic conventions: named
/// `METHOD ROUTE` (the route's template, `/admin/tasks/{id}`), of kind
/// server, with `http.request.method`, `url.path`, `http.route` and
/// `http.response.status_code`. A W3C `traceparent` header makes it a child
/// of the caller's span, in the caller's trace. A task run a request starts
/// gets its own span with the task's trace id (see the engine).
async fn request_span(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let name = match &route {
        Some(route) => format!("{method} {route}"),
        None => method.clone(),
    };
    let span = tracing::info_span!(
        "request",
        otel.name = %name,
        otel.kind = "server",
        http.request.method = %method,
        url.path = %request.uri().path(),
        http.route = route.as_deref(),
        http.response.status_code = tracing::field::Empty,
    );
    if let Some(header) = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
    {
        rein_core::engine::follow_traceparent(&span, header);
    }
    let response = next.run(request).instrument(span.clone()).await;
    span.record(
        "http.response.status_code",
        i64::from(response.status().as_u16()),
    );
    response
}

/// What a connection past the server's cap gets: `/healthz` answered for
/// real, anything else a 503 saying why.
fn overflow_router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", axum::routing::get(routes::healthz))
        .fallback(|| async {
            error::ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "too_many_connections",
                "the server is serving all the connections it can; try again shortly",
            )
        })
        .with_state(state)
}

/// Serves until `shutdown` fires, then lets running tasks stop resumable, with
/// the default [`listen::Limits`].
pub async fn serve(listener: tokio::net::TcpListener, state: AppState) -> std::io::Result<()> {
    serve_with(listener, state, listen::Limits::default()).await
}

/// Serves until `shutdown` fires: event streams end, requests in flight get
/// `limits.shutdown_grace` to finish, running tasks stop resumable.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    state: AppState,
    limits: listen::Limits,
) -> std::io::Result<()> {
    let shutdown = state.shutdown.clone();
    state.activity.follow(&state.engine, shutdown.clone());
    let overflow = overflow_router(state.clone());
    listen::serve(listener, router(state), overflow, shutdown, limits).await
}
