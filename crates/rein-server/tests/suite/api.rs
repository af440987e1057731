//! The admin API in process (`tower::ServiceExt::oneshot`) over a real SQLite store:
//! every route's success, validation errors and 404s, and the auth matrix.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use rein_core::CommandExecutor;
use rein_server::auth::hash_token;
use rein_server::{AppState, Auth, Role, TokenEntry, router};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

struct Api {
    _dir: tempfile::TempDir,
    state: AppState,
}

const VIEWER: &str = "viewer-token";
const OPERATOR: &str = "operator-token";
const ADMIN: &str = "admin-token";

fn api() -> Api {
    api_with(CommandExecutor::unsandboxed())
}

fn api_with(executor: CommandExecutor) -> Api {
    build_api(rein_test_support::engine::engine().executor(Arc::new(executor)))
}

/// An API whose engine keeps workspaces (so its tasks can be forked).
fn api_keeping() -> Api {
    let dir = tempfile::tempdir().unwrap();
    let keeper = Arc::new(rein_store::SavedWorkspaces::open(&dir.path().join("saved")).unwrap());
    let builder = rein_test_support::engine::engine_in(dir.path())
        .executor(Arc::new(CommandExecutor::unsandboxed()))
        .config(move |c| c.saved = Some(keeper));
    let mut api = build_api(builder);
    api._dir = dir;
    api
}

fn build_api(builder: rein_test_support::engine::EngineBuilder) -> Api {
    let t = builder.build();
    let auth = Auth::new(vec![
        TokenEntry {
            name: "vera".into(),
            role: Role::Viewer,
            sha256: hash_token(VIEWER),
        },
        TokenEntry {
            name: "otto".into(),
            role: Role::Operator,
            sha256: hash_token(OPERATOR),
        },
        TokenEntry {
            name: "ada".into(),
            role: Role::Admin,
            sha256: hash_token(ADMIN),
        },
    ]);
    Api {
        // An engine made in a directory of the caller's has none of its own.
        _dir: t.dir.unwrap_or_else(|| tempfile::tempdir().unwrap()),
        state: AppState::new(t.engine, auth, CancellationToken::new()),
    }
}

struct Reply {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Value,
    text: String,
}

impl Api {
    async fn call(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(t) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = match body {
            Some(b) => req
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(b.to_string())),
            None => req.body(Body::empty()),
        }
        .unwrap();
        self.send(req).await
    }

    async fn send(&self, req: Request<Body>) -> Reply {
        let res = router(self.state.clone()).oneshot(req).await.unwrap();
        let status = res.status();
        let headers = res.headers().clone();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
            text,
        }
    }

    async fn submit(&self, plan: Value) -> Reply {
        self.call(
            Method::POST,
            "/admin/tasks",
            Some(OPERATOR),
            Some(json!({ "plan": plan })),
        )
        .await
    }

    /// A page of the UI, as the browser session `cookie` gets it.
    async fn browse(&self, cookie: &str, path: String) -> Reply {
        self.send(
            Request::get(path)
                .header(header::COOKIE, cookie)
                .body(Body::empty())
                .unwrap(),
        )
        .await
    }

    /// A browser session's cookie (`name=value`) for `token`.
    async fn signed_in(&self, token: &str) -> String {
        let login = Request::post("/auth/session")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(json!({ "token": token }).to_string()))
            .unwrap();
        self.send(login).await.headers[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned()
    }

    /// Waits until the task is in `status`.
    async fn reaches(&self, id: &str, status: &str) {
        for _ in 0..500 {
            let r = self
                .call(
                    Method::GET,
                    &format!("/admin/tasks/{id}"),
                    Some(VIEWER),
                    None,
                )
                .await;
            if r.body["task"]["status"] == status {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("task {id} never became {status}");
    }

    /// Waits until task `id` asks a person: its first approval request.
    async fn first_request(&self, id: &str) -> Value {
        for _ in 0..200 {
            let list = self
                .call(
                    Method::GET,
                    &format!("/admin/approvals?task_id={id}"),
                    Some(VIEWER),
                    None,
                )
                .await;
            if let Some(first) = list.body["items"].as_array().and_then(|a| a.first()) {
                return first.clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("task {id} never asked a person");
    }

    /// Waits until the task reaches a status that is not in progress.
    async fn settled(&self, id: &str) -> Value {
        for _ in 0..500 {
            let r = self
                .call(
                    Method::GET,
                    &format!("/admin/tasks/{id}"),
                    Some(VIEWER),
                    None,
                )
                .await;
            let status = r.body["task"]["status"].as_str().unwrap().to_owned();
            if status != "in_progress" && status != "pending" {
                return r.body["task"].clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("task {id} never settled");
    }
}

fn plan(steps: Value) -> Value {
    json!({ "original_task": "api test", "steps": steps })
}

fn command(id: &str, run: &str) -> Value {
    json!({ "id": id, "checkpoint": "task_exec", "action": { "kind": "command", "run": run } })
}

fn approval(id: &str) -> Value {
    json!({ "id": id, "checkpoint": "user_approval", "action": {
        "kind": "approval", "title": "Ship?", "options": ["ship", "hold"], "recommended": "ship",
        "on_expiry": "deny", "trigger": "multiple_options" } })
}

#[tokio::test]
async fn healthz_needs_no_auth_and_probes_every_component() {
    let sandbox = rein_sandbox::Sandbox::probe().await.unwrap();
    let sandboxed = api_with(CommandExecutor::sandboxed(sandbox));
    let r = sandboxed.call(Method::GET, "/healthz", None, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["status"], "healthy");
    for c in [
        "task_store",
        "sandbox_manager",
        "permission_manager",
        "audit_logger",
    ] {
        assert_eq!(
            r.body["components"][c]["status"], "healthy",
            "{c}: {}",
            r.text
        );
    }
    assert!(r.body["metrics"]["tasks"].is_object());
    assert!(
        r.body["components"]["sandbox_manager"]["detail"]
            .as_str()
            .unwrap()
            .contains("bubblewrap"),
        "{}",
        r.text
    );

    // Unsandboxed by choice: steps run, with less protection than they should.
    let r = api().call(Method::GET, "/healthz", None, None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["status"], "degraded");
    assert_eq!(
        r.body["components"]["sandbox_manager"]["status"],
        "degraded"
    );
    // No sandbox and none waived: steps cannot run, and health says what to do.
    let refusing = CommandExecutor::refusing(rein_sandbox::Unavailable {
        reason: "bubblewrap (`bwrap`) is not installed".into(),
        remedy: "install bubblewrap".into(),
    });
    let r = api_with(refusing)
        .call(Method::GET, "/healthz", None, None)
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    let detail = r.body["components"]["sandbox_manager"]["detail"]
        .as_str()
        .unwrap();
    assert!(detail.contains("install bubblewrap"), "{detail}");
}

/// The status `method uri` gets with `token`: the head only (event streams
/// do not end).
async fn status_of(api: &Api, method: &str, uri: &str, token: Option<&str>) -> StatusCode {
    let mut req = Request::builder()
        .method(method.to_uppercase().as_str())
        .uri(uri);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{}"))
        .unwrap();
    router(api.state.clone())
        .oneshot(req)
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn every_operation_of_the_route_table_admits_its_role_and_refuses_below_it() {
    let api = api();
    let mut checked = 0;
    for op in rein_protocol::endpoints::ALL {
        // Path parameters: any value (a bad id is the handler's 400, after auth).
        let uri = op
            .path
            .split('/')
            .map(|seg| if seg.starts_with('{') { "x" } else { seg })
            .collect::<Vec<_>>()
            .join("/");
        {
            let what = format!("{} {}", op.method.as_str(), op.path);
            let method = op.method.lower();
            let anonymous = status_of(&api, method, &uri, None).await;
            let (own, below): (&str, Option<&str>) = match op.role {
                None => {
                    assert_ne!(anonymous, StatusCode::UNAUTHORIZED, "{what} is open");
                    continue;
                }
                Some(Role::Viewer) => (VIEWER, None),
                Some(Role::Operator) => (OPERATOR, Some(VIEWER)),
                Some(Role::Admin) => (ADMIN, Some(OPERATOR)),
            };
            assert_eq!(anonymous, StatusCode::UNAUTHORIZED, "{what} anonymous");
            assert_eq!(
                status_of(&api, method, &uri, Some("wrong")).await,
                StatusCode::UNAUTHORIZED,
                "{what} with a wrong token"
            );
            if let Some(below) = below {
                assert_eq!(
                    status_of(&api, method, &uri, Some(below)).await,
                    StatusCode::FORBIDDEN,
                    "{what} below its role"
                );
            }
            let admitted = status_of(&api, method, &uri, Some(own)).await;
            assert!(
                admitted != StatusCode::UNAUTHORIZED && admitted != StatusCode::FORBIDDEN,
                "{what} with its own role got {admitted}"
            );
            checked += 1;
        }
    }
    assert!(checked > 40, "{checked} operations checked");
}

#[tokio::test]
async fn the_auth_matrix() {
    let api = api();
    let body = json!({ "plan": plan(json!([command("a", "true")])) });
    // Anonymous: 401, on reads and on mutations.
    assert_eq!(
        api.call(Method::GET, "/admin/tasks", None, None)
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        api.call(Method::POST, "/admin/tasks", None, Some(body.clone()))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        api.call(Method::GET, "/metrics", None, None).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        api.call(Method::GET, "/admin/tasks", Some("wrong"), None)
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    // A viewer reads but does not change.
    assert_eq!(
        api.call(Method::GET, "/admin/tasks", Some(VIEWER), None)
            .await
            .status,
        StatusCode::OK
    );
    let r = api
        .call(
            Method::POST,
            "/admin/tasks",
            Some(VIEWER),
            Some(body.clone()),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(r.body["error"]["code"], "forbidden");
    // An operator with a bearer token changes, no CSRF needed.
    assert_eq!(
        api.call(
            Method::POST,
            "/admin/tasks",
            Some(OPERATOR),
            Some(body.clone())
        )
        .await
        .status,
        StatusCode::CREATED
    );

    // A browser session: a cookie, and a CSRF token for changes.
    let login = Request::post("/auth/session")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(json!({ "token": OPERATOR }).to_string()))
        .unwrap();
    let r = api.send(login).await;
    assert_eq!(r.status, StatusCode::OK);
    let cookie = r.headers[header::SET_COOKIE].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap().to_owned();
    let csrf = r.body["csrf_token"].as_str().unwrap().to_owned();
    let with_cookie = |csrf: Option<&str>| {
        let mut req = Request::post("/admin/tasks")
            .header(header::COOKIE, &session)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(c) = csrf {
            req = req.header("x-csrf-token", c);
        }
        req.body(Body::from(body.to_string())).unwrap()
    };
    let r = api.send(with_cookie(None)).await;
    assert_eq!(
        r.status,
        StatusCode::FORBIDDEN,
        "a cookie change without CSRF is refused"
    );
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("X-CSRF-Token")
    );
    assert_eq!(
        api.send(with_cookie(Some("forged"))).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        api.send(with_cookie(Some(&csrf))).await.status,
        StatusCode::CREATED
    );
    let read = Request::get("/admin/tasks")
        .header(header::COOKIE, &session)
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        api.send(read).await.status,
        StatusCode::OK,
        "reads need no CSRF"
    );
    let bad_login = Request::post("/auth/session")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(json!({ "token": "nope" }).to_string()))
        .unwrap();
    assert_eq!(api.send(bad_login).await.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn bad_bodies_are_400_or_413_naming_the_problem() {
    let api = api();
    let raw = |body: &str, content_type: &str| {
        Request::post("/admin/tasks")
            .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from(body.to_owned()))
            .unwrap()
    };
    let r = api.send(raw("{not json", "application/json")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["error"]["code"], "bad_request");
    let r = api
        .send(raw(
            r#"{"plan": {"original_task": 5, "steps": []}}"#,
            "application/json",
        ))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("original_task"),
        "{}",
        r.text
    );
    let r = api
        .send(raw(
            r#"{"plan": {"original_task": "x", "steps": []}, "colour": "red"}"#,
            "application/json",
        ))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("colour"),
        "{}",
        r.text
    );
    let r = api.submit(plan(json!([]))).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no steps"),
        "{}",
        r.text
    );
    let r = api.submit(plan(json!([{ "id": "a", "checkpoint": "task_exec", "action": { "kind": "command", "run": "true" }, "depends_on": ["ghost"] }]))).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`ghost`"),
        "{}",
        r.text
    );
    let huge = format!(
        r#"{{"plan": {{"original_task": "{}", "steps": []}}}}"#,
        "x".repeat(2 * 1024 * 1024)
    );
    let r = api.send(raw(&huge, "application/json")).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(r.body["error"]["code"], "too_large");
    let r = api
        .send(raw(
            "description = 'x'\n[[steps]]\nid = 'a'\n",
            "application/toml",
        ))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("needs `run`"),
        "{}",
        r.text
    );
    let r = api
        .call(
            Method::GET,
            "/admin/tasks?status=sleeping",
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = api
        .call(Method::GET, "/admin/tasks?limit=9000", Some(VIEWER), None)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // Every bounded number is refused past the bounds the document gives,
    // naming them: never quietly clamped.
    for (path, bounds) in [
        ("/admin/approvals?limit=9007199254740992", "from 1 to 500"),
        ("/admin/approvals?limit=0", "from 1 to 500"),
        ("/admin/audit?limit=9007199254740992", "from 1 to 10000"),
        ("/admin/audit?limit=10001", "from 1 to 10000"),
        (
            "/admin/audit?after=9007199254740992",
            "from 0 to 9007199254740991",
        ),
        ("/admin/agent-sessions?limit=501", "from 1 to 500"),
    ] {
        let r = api.call(Method::GET, path, Some(VIEWER), None).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{path}");
        assert!(r.text.contains(bounds), "{path}: {}", r.text);
    }
    let r = api
        .call(Method::GET, "/admin/audit?limit=10000", Some(VIEWER), None)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = api
        .call(
            Method::GET,
            "/admin/tasks?created_from=yesterday",
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn tasks_run_and_are_read_over_the_api() {
    let api = api();
    let r = api
        .submit(plan(json!([command("a", "echo hi"), command("b", "true")])))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let id = r.body["task"]["id"].as_str().unwrap().to_owned();
    let task = api.settled(&id).await;
    assert_eq!(task["status"], "completed");
    let list = api
        .call(
            Method::GET,
            "/admin/tasks?status=completed&limit=10",
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(list.body["items"][0]["id"], id.as_str());
    let events = api
        .call(
            Method::GET,
            &format!("/admin/tasks/{id}/events?after=0"),
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(events.body["items"][0]["type"], "task_created");
    // A plan file's TOML works as well.
    let toml = Request::post("/admin/tasks")
        .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
        .header(header::CONTENT_TYPE, "application/toml")
        .body(Body::from(
            "description = 'from toml'\n[[steps]]\nid = 'x'\nrun = 'true'\n",
        ))
        .unwrap();
    let r = api.send(toml).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(r.body["task"]["description"], "from toml");
    // Snapshots and restore; delete.
    let snap = api
        .call(
            Method::POST,
            &format!("/admin/tasks/{id}/snapshots"),
            Some(OPERATOR),
            None,
        )
        .await;
    assert_eq!(snap.status, StatusCode::CREATED);
    let snap_id = snap.body["snapshot"]["id"].as_str().unwrap().to_owned();
    let restored = api
        .call(
            Method::POST,
            &format!("/admin/snapshots/{snap_id}/restore"),
            Some(OPERATOR),
            None,
        )
        .await;
    assert_eq!(restored.status, StatusCode::CREATED);
    assert_ne!(restored.body["task"]["id"], id.as_str());
    assert_eq!(
        api.call(
            Method::DELETE,
            &format!("/admin/tasks/{id}"),
            Some(OPERATOR),
            None
        )
        .await
        .status,
        StatusCode::NO_CONTENT
    );
    // 404s and bad ids.
    let gone = api
        .call(
            Method::GET,
            &format!("/admin/tasks/{id}"),
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(gone.body["error"]["code"], "not_found");
    assert_eq!(
        api.call(Method::GET, "/admin/tasks/not-an-id", Some(VIEWER), None)
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        api.call(Method::GET, "/admin/nowhere", Some(VIEWER), None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let resume = api
        .call(
            Method::POST,
            &format!(
                "/admin/tasks/{}/resume",
                restored.body["task"]["id"].as_str().unwrap()
            ),
            Some(OPERATOR),
            Some(json!({})),
        )
        .await;
    assert_eq!(
        resume.status,
        StatusCode::CONFLICT,
        "a completed task has nothing to resume: {}",
        resume.text
    );
}

#[tokio::test]
async fn a_callers_plan_reaches_host_directories_only_inside_the_servers_roots() {
    let mut api = api();
    let host = tempfile::tempdir().unwrap();
    let root = host.path().join("projects");
    let inside = root.join("site");
    std::fs::create_dir_all(&inside).unwrap();
    let reads = |dir: &str| {
        json!({ "id": "a", "checkpoint": "task_exec", "action": {
            "kind": "command", "run": "true", "allow_read": [dir] } })
    };
    // An agent step's MCP server reads through the same guard.
    let serves = |dir: &str| {
        json!({ "id": "a", "checkpoint": "task_exec", "action": {
            "kind": "agent", "prompt": "p",
            "mcp": [{ "name": "peek", "server": {
                "command": "cat", "args": ["/etc/shadow"], "allow_read": [dir] } }] } })
    };
    // No --workspace-root: a plan that names a directory is refused, never
    // run with the directory dropped.
    for body in [
        json!({ "plan": plan(json!([command("a", "true")])), "workspace": inside }),
        json!({ "plan": plan(json!([reads("/root")])) }),
        json!({ "plan": plan(json!([serves("/")])) }),
        json!({ "plan": plan(json!([serves(inside.to_str().unwrap())])) }),
    ] {
        let r = api
            .call(Method::POST, "/admin/tasks", Some(OPERATOR), Some(body))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
        assert!(r.text.contains("--workspace-root"), "{}", r.text);
    }
    // The TOML of a plan file names them the same way.
    let toml = format!(
        "description = 'x'\nworkspace = '{}'\n[[steps]]\nid = 'a'\nrun = 'true'\n",
        inside.display()
    );
    let req = Request::builder()
        .method(Method::POST)
        .uri("/admin/tasks")
        .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
        .header(header::CONTENT_TYPE, "application/toml")
        .body(Body::from(toml))
        .unwrap();
    let r = api.send(req).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(r.text.contains("--workspace-root"), "{}", r.text);
    let listed = api.state.engine.list(&Default::default()).await.unwrap();
    assert!(listed.items.is_empty(), "nothing was created");

    // With a root: inside it is taken, outside it (or through a symlink out
    // of it) is refused, naming the root.
    api.state = api.state.clone().with_workspace_roots(vec![root.clone()]);
    std::os::unix::fs::symlink("/root", root.join("link")).unwrap();
    for body in [
        json!({ "plan": plan(json!([reads("/root")])) }),
        json!({ "plan": plan(json!([serves("/root")])) }),
        json!({ "plan": plan(json!([reads(root.join("link").to_str().unwrap())])) }),
        json!({ "plan": plan(json!([command("a", "true")])), "workspace": host.path() }),
        json!({ "plan": plan(json!([command("a", "true")])), "workspace": "relative/dir" }),
    ] {
        let r = api
            .call(Method::POST, "/admin/tasks", Some(OPERATOR), Some(body))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
        assert!(
            r.text.contains("not inside the server's --workspace-root")
                || r.text.contains("must be absolute"),
            "{}",
            r.text
        );
    }
    let body = json!({ "plan": plan(json!([command("a", "touch made")])), "workspace": inside });
    let r = api
        .call(Method::POST, "/admin/tasks", Some(OPERATOR), Some(body))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let id = r.body["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        r.body["task"]["resources"]["workspace_path"],
        inside.canonicalize().unwrap().display().to_string()
    );
    api.reaches(&id, "completed").await;
    assert!(inside.join("made").exists());
}

/// Every page of the Control UI — signed in or not, a page, a fragment or
/// an asset — forbids being framed and inline script.
#[tokio::test]
async fn ui_pages_may_not_be_framed_and_run_no_inline_script() {
    let api = api();
    let cookie = api.signed_in(VIEWER).await;
    for (path, signed_in) in [
        ("/ui/login", false),
        ("/ui/tasks", false),
        ("/ui/tasks", true),
        ("/ui/approvals/list", true),
        ("/ui/assets/rein.js", false),
    ] {
        let mut req = Request::get(path);
        if signed_in {
            req = req.header(header::COOKIE, &cookie);
        }
        let r = api.send(req.body(Body::empty()).unwrap()).await;
        let token = signed_in.then_some(());
        let csp = r.headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(
            csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self';"),
            "{path}: {csp}"
        );
        assert!(
            !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
            "{csp}"
        );
        assert_eq!(r.headers[header::X_FRAME_OPTIONS], "DENY", "{path}");
        if token.is_some() && path == "/ui/tasks" {
            assert_eq!(r.status, StatusCode::OK, "{}", r.text);
            // The page itself holds no inline script or style for the policy to break.
            assert!(
                !r.text.contains("<script>") && !r.text.contains(" style="),
                "{}",
                r.text
            );
        }
    }
}

/// The Control UI's timeline of a task: every point of its history, one
/// kind at a time on request, each opening onto the state as of it.
/// A page asked with a query it cannot read says what is wrong where the
/// page would be (HTML, as every refusal the UI shows), not in axum's plain
/// text; and a person not signed in is still sent to sign in first.
#[tokio::test]
async fn a_page_asked_with_a_query_it_cannot_read_names_the_field_in_html() {
    let api = api();
    let cookie = api.signed_in(VIEWER).await;
    for (path, field) in [
        ("/ui/ledger?after=yesterday", "after"),
        ("/ui/ledger/entries?after=-1", "after"),
        ("/ui/usage?days=a+week", "days"),
        ("/ui/harnesses/explain?model=m", "provider"),
    ] {
        let page = api.browse(&cookie, path.to_owned()).await;
        assert_eq!(
            page.status,
            StatusCode::BAD_REQUEST,
            "{path}: {}",
            page.text
        );
        assert!(
            page.text.starts_with("<p class=\"error\" role=\"alert\">"),
            "{path}: {}",
            page.text
        );
        assert!(
            page.text.contains(field),
            "{path} names {field}: {}",
            page.text
        );
        assert!(
            page.headers[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html"),
            "{path}"
        );
    }
    let anonymous = api.browse("", "/ui/usage?days=a+week".to_owned()).await;
    assert_eq!(
        anonymous.status,
        StatusCode::SEE_OTHER,
        "{}",
        anonymous.text
    );
}

#[tokio::test]
async fn a_tasks_timeline_lists_its_points_and_opens_each_onto_the_state_there() {
    let api = api();
    let r = api
        .submit(plan(json!([
            command("first", "true"),
            { "id": "second", "checkpoint": "task_exec", "depends_on": ["first"],
              "action": { "kind": "command", "run": "true" } }
        ])))
        .await;
    let id = r.body["task"]["id"].as_str().unwrap().to_owned();
    api.reaches(&id, "completed").await;
    let cookie = api.signed_in(VIEWER).await;
    let get = |path: String| api.browse(&cookie, path);
    let history = api
        .call(
            Method::GET,
            &format!("/admin/tasks/{id}/history"),
            Some(VIEWER),
            None,
        )
        .await
        .body;
    let points = history["points"].as_array().unwrap();
    let page = get(format!("/ui/tasks/{id}/history")).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    assert_eq!(
        page.text.matches("<li data-seq=").count(),
        points.len(),
        "one row a point: {}",
        page.text
    );
    // A finished task's history no longer moves: it is not fetched again.
    assert!(page.text.contains("<div id=\"history\">"), "{}", page.text);
    assert!(!page.text.contains("/history/body"), "{}", page.text);
    let unknown = get("/ui/tasks/task_01ARZ3NDEKTSV4RRFFQ69G5FAV/history".to_owned()).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND, "{}", unknown.text);
    // The task's page links to it.
    let task = get(format!("/ui/tasks/{id}")).await;
    assert!(
        task.text
            .contains(&format!("href=\"/ui/tasks/{id}/history\"")),
        "{}",
        task.text
    );
    // One kind.
    let finished = get(format!("/ui/tasks/{id}/history?kind=step_finished")).await;
    assert_eq!(
        finished.text.matches("<li data-seq=").count(),
        2,
        "{}",
        finished.text
    );
    assert!(!finished.text.contains("data-kind=\"step_started\""));
    // What a live timeline fetches again: the same rows.
    let body = get(format!("/ui/tasks/{id}/history/body?kind=step_finished")).await;
    assert_eq!(
        body.text.matches("<li data-seq=").count(),
        2,
        "{}",
        body.text
    );
    let odd = get(format!("/ui/tasks/{id}/history?kind=lunch")).await;
    assert_eq!(odd.status, StatusCode::BAD_REQUEST);
    assert!(odd.text.contains("step_finished"), "{}", odd.text);
    // As of the second step's start: the first completed, the second not.
    let second = points
        .iter()
        .find(|p| p["kind"] == "step_started" && p["step_id"] == "second")
        .unwrap();
    let seq = second["seq"].as_u64().unwrap();
    let there = get(format!("/ui/tasks/{id}/history/{seq}")).await;
    assert_eq!(there.status, StatusCode::OK, "{}", there.text);
    assert!(
        there.text.contains("data-status=\"in_progress\""),
        "{}",
        there.text
    );
    assert!(
        there.text.contains("<dt>completed</dt><dd>first</dd>"),
        "{}",
        there.text
    );
    let end = get(format!("/ui/tasks/{id}/history/{}", history["last_seq"])).await;
    assert!(
        end.text.contains("data-status=\"completed\""),
        "{}",
        end.text
    );
    let past = get(format!(
        "/ui/tasks/{id}/history/{}",
        history["last_seq"].as_u64().unwrap() + 1
    ))
    .await;
    assert_eq!(past.status, StatusCode::BAD_REQUEST);
    assert!(past.text.contains("has no event"), "{}", past.text);
}

#[tokio::test]
async fn pause_and_abort_over_the_api() {
    let api = api();
    let r = api.submit(plan(json!([command("slow", "sleep 30")]))).await;
    let id = r.body["task"]["id"].as_str().unwrap().to_owned();
    for _ in 0..200 {
        let t = api
            .call(
                Method::GET,
                &format!("/admin/tasks/{id}"),
                Some(VIEWER),
                None,
            )
            .await;
        if t.body["task"]["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["step_id"] == "slow")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = api
        .call(
            Method::POST,
            &format!("/admin/tasks/{id}/abort"),
            Some(OPERATOR),
            Some(json!({ "reason": "enough" })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let task = api.settled(&id).await;
    assert_eq!(task["status"], "cancelled");
    assert!(
        task["error"].as_str().unwrap().contains("otto"),
        "who aborted is recorded: {task}"
    );
    let again = api
        .call(
            Method::POST,
            &format!("/admin/tasks/{id}/pause"),
            Some(OPERATOR),
            Some(json!({})),
        )
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT);
}

#[tokio::test]
async fn approvals_are_decided_over_the_api_first_answer_wins() {
    let api = api();
    let r = api.submit(plan(json!([approval("ask"), { "id": "after", "checkpoint": "task_exec", "action": { "kind": "noop" }, "depends_on": ["ask"] }]))).await;
    let id = r.body["task"]["id"].as_str().unwrap().to_owned();
    let request = api.first_request(&id).await;
    let apr = request["id"]
        .as_str()
        .expect("a request appeared")
        .to_owned();
    let shown = api
        .call(
            Method::GET,
            &format!("/admin/approvals/{apr}"),
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(shown.body["approval"]["status"], "pending");
    let bad = api
        .call(
            Method::POST,
            &format!("/admin/approvals/{apr}/decision"),
            Some(OPERATOR),
            Some(json!({ "decision": "maybe" })),
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let viewer = api
        .call(
            Method::POST,
            &format!("/admin/approvals/{apr}/decision"),
            Some(VIEWER),
            Some(json!({ "decision": "approve" })),
        )
        .await;
    assert_eq!(viewer.status, StatusCode::FORBIDDEN);
    // Handed to "carol", the request is hers: the operator token "otto" is
    // refused, naming her; an admin token may still decide.
    let decision = |body: Value, token: &'static str| {
        let api = &api;
        let uri = format!("/admin/approvals/{apr}/decision");
        async move { api.call(Method::POST, &uri, Some(token), Some(body)).await }
    };
    let handed = decision(
        json!({ "decision": "delegate", "delegate_to": "carol" }),
        OPERATOR,
    )
    .await;
    assert_eq!(handed.status, StatusCode::OK, "{}", handed.text);
    let refused = decision(json!({ "decision": "deny" }), OPERATOR).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text);
    assert_eq!(refused.body["error"]["code"], "forbidden");
    assert!(refused.text.contains("only carol"), "{}", refused.text);
    let admin = Api {
        _dir: tempfile::tempdir().unwrap(),
        state: AppState {
            auth: Arc::new(Auth::new(vec![TokenEntry {
                name: "root".into(),
                role: Role::Admin,
                sha256: hash_token("admin-token"),
            }])),
            ..api.state.clone()
        },
    };
    let ok = admin
        .call(
            Method::POST,
            &format!("/admin/approvals/{apr}/decision"),
            Some("admin-token"),
            Some(json!({ "decision": "approve", "selected_option": "hold", "reason": "QA first" })),
        )
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
    assert_eq!(ok.body["approval"]["response"]["decided_by"], "root");
    let late = api
        .call(
            Method::POST,
            &format!("/admin/approvals/{apr}/decision"),
            Some(OPERATOR),
            Some(json!({ "decision": "deny" })),
        )
        .await;
    assert_eq!(late.status, StatusCode::CONFLICT);
    assert!(
        late.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already approved by root"),
        "{}",
        late.text
    );
    assert_eq!(api.settled(&id).await["status"], "completed");
    let ledger = api
        .call(Method::GET, "/admin/ledger", Some(VIEWER), None)
        .await;
    assert_eq!(ledger.body["items"][0]["who"], "otto");
    assert_eq!(ledger.body["items"][0]["kind"], "delegated");
    assert_eq!(ledger.body["items"][1]["who"], "root");
    let verify = api
        .call(Method::GET, "/admin/ledger/verify", Some(VIEWER), None)
        .await;
    assert_eq!(verify.body["intact"], true);
    let unknown = api
        .call(
            Method::GET,
            "/admin/approvals/apr_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn metrics_as_json_and_as_prometheus_text() {
    let mut api = api();
    // m-1 is priced; m-2 is not.
    api.state = api.state.clone().with_models(rein_protocol::Models::from([(
        "openai/m-1".to_owned(),
        rein_protocol::ModelInfo {
            input_usd_per_mtok: Some(2.0),
            cached_input_usd_per_mtok: Some(0.5),
            output_usd_per_mtok: Some(8.0),
            context_window: None,
        },
    )]));
    let r = api.submit(plan(json!([command("a", "true")]))).await;
    let id = r.body["task"]["id"].as_str().unwrap().to_owned();
    api.settled(&id).await;
    // An agent turn metered in the task's journal, as the agent loop writes one.
    api.state
        .engine
        .store()
        .append_journal(
            &id.parse().unwrap(),
            "a",
            0,
            &[
                json!({ "message": { "role": "assistant", "content": "ok" }, "usage": {
                "provider": "openai", "model": "m-1", "input_tokens": 120,
                "cached_input_tokens": 20, "output_tokens": 7 } }),
                json!({ "message": { "role": "assistant", "content": "ok" }, "usage": {
                "provider": "openai", "model": "m-2", "input_tokens": 50,
                "output_tokens": 5, "estimated": true } }),
            ],
        )
        .await
        .unwrap();
    let json = api
        .call(Method::GET, "/admin/metrics", Some(VIEWER), None)
        .await;
    assert_eq!(json.body["tasks"]["completed"], 1);
    let text = api.call(Method::GET, "/metrics", Some(VIEWER), None).await;
    assert_eq!(text.status, StatusCode::OK);
    assert!(
        text.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    for line in [
        "# TYPE rein_tasks gauge",
        "rein_tasks{status=\"completed\"} 1",
        "rein_checkpoints_total{type=\"task_exec\"} 1",
        "rein_checkpoint_outcomes_total{outcome=\"passed\"}",
        "# TYPE rein_recovery_total counter",
        "rein_approval_requests{status=\"pending\"} 0",
        "# TYPE rein_model_tokens_total counter",
        "rein_model_calls_total{provider=\"openai\",model=\"m-1\"} 1",
        "rein_model_tokens_total{provider=\"openai\",model=\"m-1\",kind=\"input\"} 120",
        "rein_model_tokens_total{provider=\"openai\",model=\"m-1\",kind=\"cached_input\"} 20",
        "rein_model_tokens_total{provider=\"openai\",model=\"m-1\",kind=\"output\"} 7",
        "# TYPE rein_model_cost_usd_total counter",
        // (100 × 2 + 20 × 0.5 + 7 × 8) / 1e6
        "rein_model_cost_usd_total{provider=\"openai\",model=\"m-1\"} 0.000266",
    ] {
        assert!(
            text.text.contains(line),
            "missing {line:?} in\n{}",
            text.text
        );
    }
    // A model without a price has no cost: never a $0 sample.
    assert!(
        !text
            .text
            .contains("rein_model_cost_usd_total{provider=\"openai\",model=\"m-2\"}")
    );

    // The same usage through the API: in all, by model, and in the task's
    // own document.
    let all = api
        .call(Method::GET, "/admin/usage?by=model", Some(VIEWER), None)
        .await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text);
    assert_eq!(all.body["calls"], 2);
    assert_eq!(all.body["input_tokens"], 170);
    assert_eq!(all.body["estimated"], true);
    assert_eq!(all.body["cost_usd"], Value::Null);
    assert_eq!(all.body["unpriced"], json!(["openai/m-2"]));
    assert_eq!(all.body["rows"][0]["key"], "openai/m-1");
    assert!((all.body["rows"][0]["cost_usd"].as_f64().unwrap() - 0.000266).abs() < 1e-12);
    assert_eq!(all.body["rows"][1]["cost_usd"], Value::Null);
    let by_task = api
        .call(
            Method::GET,
            &format!("/admin/usage?task={id}&by=task"),
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(by_task.body["rows"][0]["key"], id.as_str());
    let none = api
        .call(
            Method::GET,
            "/admin/usage?until=2000-01-01T00:00:00Z",
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(none.body["calls"], 0);
    for bad in [
        "/admin/usage?by=week",
        "/admin/usage?task=nope",
        "/admin/usage?since=yesterday",
    ] {
        let r = api.call(Method::GET, bad, Some(VIEWER), None).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text);
    }
    // Twice: the second from the kept body, with the usage read again.
    for _ in 0..2 {
        let doc = api
            .call(
                Method::GET,
                &format!("/admin/tasks/{id}"),
                Some(VIEWER),
                None,
            )
            .await;
        assert_eq!(doc.body["task"]["id"], id.as_str());
        assert_eq!(doc.body["usage"]["calls"], 2, "{}", doc.text);
        assert_eq!(doc.body["usage"]["by"], "model");
    }
}

/// The SSE frames of a response body until `stop` says so (or the stream ends).
#[tokio::test]
async fn plans_snapshot_listings_and_resuming_over_the_api() {
    let api = api();
    let r = api
        .submit(plan(json!([command("slow", "sleep 0.3"), {
            "id": "next", "checkpoint": "task_exec", "depends_on": ["slow"],
            "action": { "kind": "command", "run": "true" } }])))
        .await;
    let id = r.body["task"]["id"].as_str().unwrap().to_owned();
    // The plan, to viewers; bad and unknown ids are 400 and 404.
    let p = api
        .call(
            Method::GET,
            &format!("/admin/tasks/{id}/plan"),
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.text);
    assert_eq!(p.body["plan"]["steps"][1]["id"], "next");
    assert_eq!(
        api.call(Method::GET, "/admin/tasks/nope/plan", Some(VIEWER), None)
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    let unknown = "task_01M8PT860232JEYV7CX4RGNKG4";
    assert_eq!(
        api.call(
            Method::GET,
            &format!("/admin/tasks/{unknown}/plan"),
            Some(VIEWER),
            None
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
    // While the server runs the task, resuming it again is a conflict, and a pause
    // is handed to its runner: this process.
    let again = api
        .call(
            Method::POST,
            &format!("/admin/tasks/{id}/resume"),
            Some(OPERATOR),
            Some(json!({})),
        )
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.text);
    assert!(again.text.contains("already running"), "{}", again.text);
    let paused = api
        .call(
            Method::POST,
            &format!("/admin/tasks/{id}/pause"),
            Some(OPERATOR),
            Some(json!({ "reason": "look first" })),
        )
        .await;
    assert_eq!(paused.body["outcome"], "requested", "{}", paused.text);
    assert_eq!(paused.body["runner"]["pid"], std::process::id());
    let task = api.settled(&id).await;
    assert_eq!(
        task["status"], "paused",
        "the pause reached the run: {task}"
    );

    // Snapshots: taken with the status they show, listed oldest first.
    let snap = api
        .call(
            Method::POST,
            &format!("/admin/tasks/{id}/snapshots"),
            Some(OPERATOR),
            None,
        )
        .await;
    assert_eq!(snap.body["snapshot"]["status"], "paused");
    let listed = api
        .call(
            Method::GET,
            &format!("/admin/tasks/{id}/snapshots"),
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(listed.status, StatusCode::OK);
    assert_eq!(listed.body["items"][0]["id"], snap.body["snapshot"]["id"]);
    assert_eq!(
        api.call(
            Method::GET,
            &format!("/admin/tasks/{unknown}/snapshots"),
            Some(VIEWER),
            None
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );

    // Resume everything: operators only; the paused task is taken up and completes.
    assert_eq!(
        api.call(Method::POST, "/admin/tasks/resume", Some(VIEWER), None)
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    let all = api
        .call(Method::POST, "/admin/tasks/resume", Some(OPERATOR), None)
        .await;
    assert_eq!(all.status, StatusCode::ACCEPTED, "{}", all.text);
    assert_eq!(all.body["task_ids"], json!([id]));
    api.reaches(&id, "completed").await;
    let none = api
        .call(Method::POST, "/admin/tasks/resume", Some(OPERATOR), None)
        .await;
    assert_eq!(none.body["task_ids"], json!([]), "nothing left to resume");
}

async fn frames(
    res: axum::response::Response,
    stop: impl Fn(&[(u64, String)]) -> bool,
) -> Vec<(u64, String)> {
    let mut body = res.into_body();
    let mut text = String::new();
    let mut seen = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(20), body.frame())
            .await
            .expect("a frame in time");
        let Some(frame) = next else { break };
        if let Ok(data) = frame.unwrap().into_data() {
            text.push_str(&String::from_utf8_lossy(&data));
        }
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let id = block
                .lines()
                .find_map(|l| l.strip_prefix("id: "))
                .and_then(|v| v.parse().ok());
            let kind = block
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .map(str::to_owned);
            if let (Some(id), Some(kind)) = (id, kind) {
                seen.push((id, kind));
            }
        }
        if stop(&seen) {
            break;
        }
    }
    seen
}

#[tokio::test]
async fn events_stream_live_over_sse_and_resume_from_last_event_id() {
    let api = api();
    let r = api
        .submit(plan(json!([
            command("a", "sleep 0.2"),
            command("b", "true")
        ])))
        .await;
    let id = r.body["task"]["id"].as_str().unwrap().to_owned();
    let stream = |last: Option<&str>| {
        let mut req = Request::get(format!("/admin/tasks/{id}/events/stream"))
            .header(header::AUTHORIZATION, format!("Bearer {VIEWER}"));
        if let Some(l) = last {
            req = req.header("last-event-id", l);
        }
        req.body(Body::empty()).unwrap()
    };
    // Opened while the task runs: every event, live, in order, until it completes.
    let res = router(api.state.clone())
        .oneshot(stream(None))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(
        res.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let live = frames(res, |_| false).await;
    let ids: Vec<u64> = live.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        ids,
        (1..=ids.len() as u64).collect::<Vec<_>>(),
        "no gaps, no repeats"
    );
    assert_eq!(live.first().unwrap().1, "task_created");
    assert_eq!(
        live.last().unwrap().1,
        "task_completed",
        "the stream ends when the task has"
    );
    // Resuming after event 3 gives 4 onwards.
    let res = router(api.state.clone())
        .oneshot(stream(Some("3")))
        .await
        .unwrap();
    let rest = frames(res, |_| false).await;
    assert_eq!(rest.first().unwrap().0, 4);
    assert_eq!(rest.len(), live.len() - 3);
    let res = router(api.state.clone())
        .oneshot(stream(Some("soon")))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);

    // Every task's events, by global position.
    let all = Request::get("/admin/events/stream")
        .header(header::AUTHORIZATION, format!("Bearer {VIEWER}"))
        .body(Body::empty())
        .unwrap();
    let res = router(api.state.clone()).oneshot(all).await.unwrap();
    let everything = frames(res, |seen| seen.len() >= live.len()).await;
    let positions: Vec<u64> = everything.iter().map(|(i, _)| *i).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    assert_eq!(everything.last().unwrap().1, "task_completed");
}

/// Malformed bodies at every POST route: never a 5xx, never a panic, always the
/// JSON error shape.
#[tokio::test]
async fn malformed_bodies_at_every_post_route_never_give_a_5xx() {
    use rand::{Rng, SeedableRng};
    let api = api();
    // Real ids, so routes get past their 404s to the bodies.
    let r = api.submit(plan(json!([approval("ask")]))).await;
    let task = r.body["task"]["id"].as_str().unwrap().to_owned();
    let apr = api.first_request(&task).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let snap = api
        .call(
            Method::POST,
            &format!("/admin/tasks/{task}/snapshots"),
            Some(OPERATOR),
            None,
        )
        .await;
    let snap = snap.body["snapshot"]["id"].as_str().unwrap().to_owned();
    let routes = [
        "/admin/tasks".to_owned(),
        format!("/admin/tasks/{task}/pause"),
        format!("/admin/tasks/{task}/abort"),
        format!("/admin/tasks/{task}/resume"),
        "/admin/tasks/resume".to_owned(),
        format!("/admin/tasks/{task}/snapshots"),
        format!("/admin/snapshots/{snap}/restore"),
        format!("/admin/approvals/{apr}/decision"),
        "/auth/session".to_owned(),
        "/admin/harness/shared-state".to_owned(),
        "/admin/harness/shared-state/shs_fuzz/participants".to_owned(),
        "/admin/harness/shared-state/shs_fuzz/actions".to_owned(),
        "/admin/harness/shared-state/shs_fuzz/detect-conflicts".to_owned(),
        "/admin/harness/contracts".to_owned(),
        "/admin/harness/contracts/hctr_fuzz/status".to_owned(),
        "/admin/harness/evidence".to_owned(),
        "/admin/harness/evidence/evb_fuzz/items".to_owned(),
        "/admin/harness/evidence/evb_fuzz/checks".to_owned(),
        "/admin/harness/evidence/evb_fuzz/reviews".to_owned(),
    ];
    let mut bodies: Vec<Vec<u8>> = [
        "",
        "{",
        "}",
        "null",
        "[]",
        "\"plan\"",
        "{\"plan\":",
        "{\"plan\": null}",
        "{\"plan\": {\"steps\": 7}}",
        "{\"decision\": 1}",
        "{\"decision\": \"approve\", \"selected_option\": [1]}",
        "{\"reason\": {}}",
        "{\"token\": 12}",
        "{\"rerun\": \"a\"}",
        "1e999999",
        "\u{0}\u{0}",
        "{\"a\": \"\\ud800\"}",
    ]
    .iter()
    .map(|b| b.as_bytes().to_vec())
    .collect();
    bodies.push("[".repeat(100_000).into_bytes());
    bodies.push(format!("{{\"plan\": {}}}", "{\"x\":".repeat(5_000)).into_bytes());
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..40 {
        let n = rng.random_range(1..300);
        bodies.push((0..n).map(|_| rng.random::<u8>()).collect());
    }
    let mut checked = 0;
    for route in &routes {
        for body in &bodies {
            for content_type in ["application/json", "application/toml", "text/html"] {
                let req = Request::post(route.as_str())
                    .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
                    .header(header::CONTENT_TYPE, content_type)
                    .body(Body::from(body.clone()))
                    .unwrap();
                let r = api.send(req).await;
                assert!(
                    r.status.as_u16() < 500,
                    "{route} {content_type} {:?} → {} {}",
                    String::from_utf8_lossy(body),
                    r.status,
                    r.text
                );
                if !r.status.is_success() {
                    assert!(
                        r.body["error"]["code"].is_string(),
                        "{route} → {} {}",
                        r.status,
                        r.text
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 1000, "{checked}");
}

#[tokio::test]
async fn the_shared_state_routes_with_their_errors_and_auth() {
    let api = api();
    let seed = json!({
        "id": "shs_release_docs", "sessionId": "session-release", "goal": "notes",
        "tags": ["release"],
        "participants": [{ "id": "docs", "role": "docs_writer" }],
        "actions": [{ "id": "draft", "participantId": "docs", "title": "Draft",
                     "writeSet": [{ "kind": "file", "path": "docs/RELEASES.md" }] }]
    });
    // Anonymous 401; a viewer reads but does not change.
    let base = "/admin/harness/shared-state";
    assert_eq!(
        api.call(Method::GET, base, None, None).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        api.call(Method::POST, base, Some(VIEWER), Some(seed.clone()))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    let created = api
        .call(Method::POST, base, Some(OPERATOR), Some(seed.clone()))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["state"]["id"], "shs_release_docs");
    // An existing id: 409, never overwritten.
    let again = api
        .call(Method::POST, base, Some(OPERATOR), Some(seed.clone()))
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    // Duplicate ids and unknown values: 400 naming them.
    let dup = json!({ "goal": "g", "actions": [{ "id": "x", "title": "a" }, { "id": "x", "title": "b" }] });
    let r = api
        .call(Method::POST, base, Some(OPERATOR), Some(dup))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text.contains("`x`"), "{}", r.text);
    let odd = json!({ "goal": "g", "participants": [{ "role": "chef" }] });
    let r = api
        .call(Method::POST, base, Some(OPERATOR), Some(odd))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.text.contains("chef") && r.text.contains("docs_writer"),
        "{}",
        r.text
    );

    // Reads.
    let one = api
        .call(
            Method::GET,
            &format!("{base}/shs_release_docs"),
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(one.body["state"]["goal"], "notes");
    assert_eq!(
        api.call(Method::GET, &format!("{base}/shs_nope"), Some(VIEWER), None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let listed = api
        .call(
            Method::GET,
            &format!("{base}?tag=release&limit=5"),
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(listed.body["items"][0]["id"], "shs_release_docs");
    assert_eq!(
        api.call(
            Method::GET,
            &format!("{base}?status=sleepy"),
            Some(VIEWER),
            None
        )
        .await
        .status,
        StatusCode::BAD_REQUEST
    );
    let session = api
        .call(
            Method::GET,
            "/admin/sessions/session-release/harness-state",
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(session.body["state"]["id"], "shs_release_docs");

    // Changes: a participant, an action that collides, detection.
    let r = api
        .call(
            Method::POST,
            &format!("{base}/shs_release_docs/participants"),
            Some(OPERATOR),
            Some(json!({ "id": "rev", "role": "reviewer" })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["state"]["participants"].as_array().unwrap().len(), 2);
    let r = api
        .call(
            Method::POST,
            &format!("{base}/shs_release_docs/actions"),
            Some(OPERATOR),
            Some(
                json!({ "id": "edit", "participantId": "rev", "title": "Edit",
                         "writeSet": [{ "kind": "directory", "path": "docs" }] }),
            ),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = api
        .call(
            Method::POST,
            &format!("{base}/shs_release_docs/detect-conflicts"),
            Some(OPERATOR),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["conflicts"][0]["type"], "write_write");
    assert_eq!(r.body["conflicts"][0]["actions"], json!(["draft", "edit"]));
    assert_eq!(r.body["state"]["conflicts"], r.body["conflicts"]);
    assert_eq!(
        api.call(
            Method::POST,
            &format!("{base}/shs_nope/detect-conflicts"),
            Some(OPERATOR),
            None
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.call(
            Method::POST,
            &format!("{base}/shs_release_docs/actions"),
            Some(VIEWER),
            Some(json!({ "title": "t" }))
        )
        .await
        .status,
        StatusCode::FORBIDDEN
    );
    // Every change left an audit record naming who made it; refusals left none.
    let audit = api
        .call(Method::GET, "/admin/audit", Some(VIEWER), None)
        .await;
    assert_eq!(audit.status, StatusCode::OK, "{}", audit.text);
    let actions: Vec<&str> = audit.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        vec![
            "shared_state.create",
            "shared_state.add_participant",
            "shared_state.add_action",
            "shared_state.detect_conflicts"
        ]
    );
    assert!(
        audit.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["who"] == "otto" && r["subject"] == "shs_release_docs")
    );
    let later = api
        .call(Method::GET, "/admin/audit?after=2", Some(VIEWER), None)
        .await;
    assert_eq!(later.body["items"][0]["seq"], 3);
}

#[tokio::test]
async fn audit_records_stream_live_and_resume_from_last_event_id() {
    let api = api();
    let create = |id: &str| json!({ "id": id, "goal": "g" });
    let base = "/admin/harness/shared-state";
    api.call(Method::POST, base, Some(OPERATOR), Some(create("shs_a")))
        .await;
    let stream = |last: Option<&str>| {
        let mut req = Request::get("/admin/audit/stream")
            .header(header::AUTHORIZATION, format!("Bearer {VIEWER}"));
        if let Some(l) = last {
            req = req.header("last-event-id", l);
        }
        req.body(Body::empty()).unwrap()
    };
    let res = router(api.state.clone())
        .oneshot(stream(None))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    // A change made while the stream is open arrives on it.
    let state = api.state.clone();
    let later = tokio::spawn(async move {
        state
            .engine
            .create_shared_state(
                serde_json::from_value(json!({ "id": "shs_b", "goal": "g" })).unwrap(),
                "otto",
            )
            .await
            .unwrap();
    });
    let live = frames(res, |seen| seen.len() >= 2).await;
    later.await.unwrap();
    assert_eq!(
        live,
        vec![
            (1, "shared_state.create".to_owned()),
            (2, "shared_state.create".to_owned())
        ]
    );
    let res = router(api.state.clone())
        .oneshot(stream(Some("1")))
        .await
        .unwrap();
    let rest = frames(res, |seen| !seen.is_empty()).await;
    assert_eq!(rest, vec![(2, "shared_state.create".to_owned())]);
}

#[tokio::test]
async fn the_contract_and_evidence_routes_with_their_errors_and_auth() {
    let api = api();
    let base = "/admin/harness/contracts";
    let contract = json!({
        "id": "hctr_docs", "goal": "update the release notes", "status": "proposed",
        "writeSet": [{ "kind": "file", "path": "docs/RELEASES.md" }],
        "requiredTools": ["editor"], "verificationPlan": ["a reviewer reads it"]
    });
    assert_eq!(
        api.call(Method::GET, base, None, None).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        api.call(Method::POST, base, Some(VIEWER), Some(contract.clone()))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    let created = api
        .call(Method::POST, base, Some(OPERATOR), Some(contract.clone()))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    // One file with a plain tool: medium, derived; the history names the caller.
    assert_eq!(created.body["contract"]["riskLevel"], "medium");
    assert_eq!(created.body["contract"]["riskDerived"], true);
    assert_eq!(created.body["contract"]["history"][0]["by"], "otto");
    let again = api
        .call(Method::POST, base, Some(OPERATOR), Some(contract))
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.text);
    // Starting further along the flow, or an unknown status: 400 naming it.
    let r = api
        .call(
            Method::POST,
            base,
            Some(OPERATOR),
            Some(json!({ "goal": "g", "status": "verified" })),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text.contains("`verified`"), "{}", r.text);
    let r = api
        .call(
            Method::POST,
            &format!("{base}/hctr_docs/status"),
            Some(OPERATOR),
            Some(json!({ "status": "done" })),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.text.contains("done") && r.text.contains("rolled_back"),
        "{}",
        r.text
    );
    // A move the flow does not allow: 409 naming the moves it does.
    let r = api
        .call(
            Method::POST,
            &format!("{base}/hctr_docs/status"),
            Some(OPERATOR),
            Some(json!({ "status": "verified" })),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert!(
        r.text.contains("approved, rejected, cancelled"),
        "{}",
        r.text
    );
    for to in ["approved", "executing"] {
        let r = api
            .call(
                Method::POST,
                &format!("{base}/hctr_docs/status"),
                Some(OPERATOR),
                Some(json!({ "status": to, "reason": "looks right" })),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(r.body["contract"]["status"], to);
    }
    assert_eq!(
        api.call(
            Method::GET,
            &format!("{base}/hctr_nope"),
            Some(VIEWER),
            None
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
    let list = api
        .call(
            Method::GET,
            &format!("{base}?status=executing"),
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(list.body["items"][0]["id"], "hctr_docs", "{}", list.text);
    let none = api
        .call(
            Method::GET,
            &format!("{base}?status=failed"),
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(none.body["items"], json!([]));

    // Evidence: linked from its contract; what rein did not see is not `rein`.
    let ev = "/admin/harness/evidence";
    let r = api
        .call(
            Method::POST,
            ev,
            Some(OPERATOR),
            Some(json!({ "harnessContractId": "hctr_nope" })),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text.contains("hctr_nope"), "{}", r.text);
    let r = api
        .call(
            Method::POST,
            ev,
            Some(OPERATOR),
            Some(json!({ "items": [{ "kind": "diff", "title": "d", "capture": "rein" }] })),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text.contains("only rein records"), "{}", r.text);
    let bundle = api
        .call(
            Method::POST,
            ev,
            Some(OPERATOR),
            Some(json!({
                "harnessContractId": "hctr_docs", "summary": "notes updated",
                "items": [
                    { "kind": "diff", "title": "docs/RELEASES.md" },
                    { "kind": "external_side_effect", "title": "agent pushed a branch", "capture": "reported" }
                ],
                "confidence": 0.8
            })),
        )
        .await;
    assert_eq!(bundle.status, StatusCode::CREATED, "{}", bundle.text);
    let id = bundle.body["evidence"]["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("evb_"), "{id}");
    let captures: Vec<&str> = bundle.body["evidence"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["capture"].as_str().unwrap())
        .collect();
    assert_eq!(captures, ["reported", "unsupported"]);
    let contract = api
        .call(
            Method::GET,
            &format!("{base}/hctr_docs"),
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(contract.body["contract"]["evidenceBundleIds"], json!([id]));
    let r = api
        .call(
            Method::POST,
            &format!("{ev}/{id}/checks"),
            Some(OPERATOR),
            Some(json!({ "name": "links resolve", "status": "passed" })),
        )
        .await;
    assert_eq!(
        r.body["evidence"]["checks"][0]["id"], "check_1",
        "{}",
        r.text
    );
    // A review is the caller's: the reviewer cannot be named by the body.
    let r = api
        .call(
            Method::POST,
            &format!("{ev}/{id}/reviews"),
            Some(OPERATOR),
            Some(json!({ "verdict": "approved", "reviewer": "someone else" })),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    let r = api
        .call(
            Method::POST,
            &format!("{ev}/{id}/reviews"),
            Some(OPERATOR),
            Some(json!({ "verdict": "approved", "comment": "reads well" })),
        )
        .await;
    assert_eq!(
        r.body["evidence"]["reviews"][0]["reviewer"], "otto",
        "{}",
        r.text
    );
    let r = api
        .call(
            Method::POST,
            &format!("{ev}/{id}/items"),
            Some(VIEWER),
            Some(json!({ "kind": "note", "title": "n" })),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = api
        .call(
            Method::POST,
            ev,
            Some(OPERATOR),
            Some(json!({ "confidence": 2 })),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text.contains("between 0 and 1"), "{}", r.text);
    let list = api
        .call(
            Method::GET,
            &format!("{ev}?contract_id=hctr_docs"),
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(list.body["items"][0]["id"], id.as_str());
    // The camelCase name these routes once took still works; another does not.
    let old = api
        .call(
            Method::GET,
            &format!("{ev}?contractId=hctr_docs"),
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(old.body["items"], list.body["items"]);
    let none = api
        .call(
            Method::GET,
            &format!("{ev}?contract_id=hctr_other"),
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(none.body["items"], json!([]), "{}", none.text);
    let r = api
        .call(
            Method::GET,
            &format!("{ev}?status=open"),
            Some(VIEWER),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // Every change left an audit record.
    let audit = api
        .call(Method::GET, "/admin/audit", Some(VIEWER), None)
        .await;
    let actions: Vec<&str> = audit.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    for expected in [
        "contract.create",
        "contract.approved",
        "contract.executing",
        "evidence.create",
        "contract.link_evidence",
        "evidence.add_check",
        "evidence.add_review",
    ] {
        assert!(actions.contains(&expected), "{expected} in {actions:?}");
    }
}

#[tokio::test]
async fn every_route_answers_a_wrong_method_or_media_type_with_the_json_error() {
    let api = api();
    let mut paths: Vec<&str> = rein_protocol::endpoints::ALL
        .iter()
        .map(|o| o.path)
        .collect();
    paths.sort_unstable();
    paths.dedup();
    for route in paths {
        let operations = || {
            rein_protocol::endpoints::ALL
                .iter()
                .filter(move |o| o.path == route)
        };
        let path = route
            .replace("{id}", "task_01ARZ3NDEKTSV4RRFFQ69G5FAV")
            .replace("{session}", "default");
        let taken: Vec<&str> = operations().map(|o| o.method.lower()).collect();
        // A method the route does not take: 405, JSON, and what it takes.
        let wrong = ["put", "patch", "delete", "get", "post"]
            .into_iter()
            .find(|m| !taken.contains(m))
            .unwrap();
        let req = Request::builder()
            .method(wrong.to_uppercase().as_str())
            .uri(&path)
            .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
            .body(Body::empty())
            .unwrap();
        let r = api.send(req).await;
        assert_eq!(
            r.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{wrong} {path}: {}",
            r.text
        );
        assert_eq!(
            r.body["error"]["code"], "method_not_allowed",
            "{wrong} {path}: {}",
            r.text
        );
        assert!(r.headers.contains_key(header::ALLOW), "{wrong} {path}");
        // A body of a media type nobody takes, where a body is read: 415, JSON.
        let reads_body = operations().any(|o| o.method.lower() == "post" && o.request.is_some());
        if reads_body {
            let req = Request::builder()
                .method(Method::POST)
                .uri(&path)
                .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
                .header(header::CONTENT_TYPE, "application/xml")
                .body(Body::from("<plan/>"))
                .unwrap();
            let r = api.send(req).await;
            assert_eq!(
                r.status,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "POST {path}: {}",
                r.text
            );
            assert_eq!(
                r.body["error"]["code"], "unsupported_media_type",
                "POST {path}: {}",
                r.text
            );
        }
    }
}

#[tokio::test]
async fn forking_from_the_timeline_runs_the_fork_and_links_the_two() {
    let api = api_keeping();
    let mut second = command("second", "echo two >> f");
    second["depends_on"] = json!(["first"]);
    second["idempotent"] = json!(true);
    let r = api
        .submit(plan(json!([command("first", "echo one > f"), second])))
        .await;
    let id = r.body["task"]["id"].as_str().unwrap().to_owned();
    api.reaches(&id, "completed").await;
    let history = api
        .call(
            Method::GET,
            &format!("/admin/tasks/{id}/history"),
            Some(VIEWER),
            None,
        )
        .await
        .body;
    let start = history["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["kind"] == "step_started" && p["step_id"] == "second")
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    let page = |token: &'static str| {
        let api = &api;
        let path = format!("/ui/tasks/{id}/history");
        async move { api.browse(&api.signed_in(token).await, path).await }
    };
    // An operator may fork from each point but the end; a viewer from none.
    let theirs = page(OPERATOR).await;
    let buttons = theirs.text.matches("Fork from here").count();
    assert_eq!(
        buttons,
        history["points"].as_array().unwrap().len() - 1,
        "{}",
        theirs.text
    );
    assert!(
        theirs.text.contains(&format!("{{&quot;at&quot;:{start}}}")),
        "{}",
        theirs.text
    );
    assert!(!page(VIEWER).await.text.contains("Fork from here"));

    let fork = |body: String| {
        api.send(
            Request::post(format!("/ui/tasks/{id}/fork"))
                .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(body))
                .unwrap(),
        )
    };
    let made = fork(format!("at={start}")).await;
    assert_eq!(made.status, StatusCode::OK, "{}", made.text);
    let to = made.headers["hx-redirect"].to_str().unwrap().to_owned();
    let fork_id = to.strip_prefix("/ui/tasks/").unwrap().to_owned();
    assert_ne!(fork_id, id);
    // It runs in the server: `second` again, on the files as they were
    // before it.
    api.reaches(&fork_id, "completed").await;
    let forked = api
        .call(
            Method::GET,
            &format!("/admin/tasks/{fork_id}"),
            Some(VIEWER),
            None,
        )
        .await
        .body;
    let ws = forked["task"]["resources"]["workspace_path"]
        .as_str()
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(std::path::Path::new(ws).join("f")).unwrap(),
        "one\ntwo\n"
    );
    // The two pages link each other.
    let cookie = api.signed_in(VIEWER).await;
    let get = |path: String| api.browse(&cookie, path);
    let fork_page = get(format!("/ui/tasks/{fork_id}/body")).await;
    assert!(
        fork_page
            .text
            .contains(&format!("Forked from <a href=\"/ui/tasks/{id}\">"))
            && fork_page.text.contains(&format!("event {start}")),
        "{}",
        fork_page.text
    );
    let source_page = get(format!("/ui/tasks/{id}/body")).await;
    assert!(
        source_page
            .text
            .contains(&format!("data-fork=\"{fork_id}\"")),
        "{}",
        source_page.text
    );
    // Not from the end, and not by a viewer.
    let end = fork(format!("at={}", history["last_seq"])).await;
    assert_eq!(end.status, StatusCode::CONFLICT, "{}", end.text);
    assert!(end.text.contains("had ended"), "{}", end.text);
    let by_viewer = api
        .send(
            Request::post(format!("/ui/tasks/{id}/fork"))
                .header(header::AUTHORIZATION, format!("Bearer {VIEWER}"))
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(format!("at={start}")))
                .unwrap(),
        )
        .await;
    assert_eq!(by_viewer.status, StatusCode::FORBIDDEN);
}

/// A task's page offers the controls that apply where the task stands:
/// Pause while its runner runs it, Resume once it is paused, and Abort
/// styled as the end it is.
#[tokio::test]
async fn a_tasks_page_offers_the_controls_that_apply_now() {
    let api = api();
    let r = api.submit(plan(json!([approval("gate")]))).await;
    let id = r.body["task"]["id"].as_str().unwrap().to_owned();
    api.reaches(&id, "in_progress").await;
    let cookie = api.signed_in(OPERATOR).await;
    let controls = |text: &str| -> String {
        let at = text.find("<div class=\"controls\">").expect("controls");
        let end = text[at..].find("</div>").unwrap();
        text[at..at + end].to_owned()
    };
    let page = api.browse(&cookie, format!("/ui/tasks/{id}")).await;
    let running = controls(&page.text);
    assert!(running.contains(">Pause</button>"), "{running}");
    assert!(!running.contains(">Resume</button>"), "{running}");
    assert!(
        running.contains("class=\"danger\"") && running.contains(">Abort</button>"),
        "{running}"
    );
    let paused = api
        .call(
            Method::POST,
            &format!("/admin/tasks/{id}/pause"),
            Some(OPERATOR),
            Some(json!({})),
        )
        .await;
    assert!(paused.status.is_success(), "{}", paused.text);
    api.reaches(&id, "paused").await;
    let page = api.browse(&cookie, format!("/ui/tasks/{id}")).await;
    let stopped = controls(&page.text);
    assert!(stopped.contains(">Resume</button>"), "{stopped}");
    assert!(!stopped.contains(">Pause</button>"), "{stopped}");
}

/// An approval card counts down to its deadline while the request waits,
/// and no longer once it is decided; Deny is styled apart from Approve.
#[tokio::test]
async fn an_approval_cards_deadline_stops_counting_once_it_is_decided() {
    let api = api();
    let mut ask = approval("ask");
    ask["action"]["timeout_ms"] = json!(600_000);
    let r = api.submit(plan(json!([ask]))).await;
    let id = r.body["task"]["id"].as_str().unwrap().to_owned();
    let apr = api.first_request(&id).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let cookie = api.signed_in(OPERATOR).await;
    let card = |text: &str| -> String {
        let at = text
            .find(&format!("id=\"a-{apr}\""))
            .unwrap_or_else(|| panic!("no card for {apr} in {text}"));
        let end = text[at..].find("</article>").unwrap();
        text[at..at + end].to_owned()
    };
    // The tasks list says the task waits for a person.
    let row = |text: &str| -> String {
        let at = text
            .find(&format!("data-task=\"{id}\""))
            .unwrap_or_else(|| panic!("no row for {id} in {text}"));
        let end = text[at..].find("</tr>").unwrap();
        text[at..at + end].to_owned()
    };
    let listed = row(&api.browse(&cookie, "/ui/tasks".to_owned()).await.text);
    assert!(listed.contains("waits for a person"), "{listed}");
    let waiting = card(&api.browse(&cookie, "/ui/approvals".to_owned()).await.text);
    assert!(waiting.contains("class=\"deadline\""), "{waiting}");
    // The card says what the task is, not only its id.
    assert!(
        waiting.contains(&format!(
            "<span class=\"task-about\">api test</span> ({id})"
        )),
        "{waiting}"
    );
    assert!(
        waiting.contains("class=\"danger\" name=\"decision\" value=\"deny\""),
        "{waiting}"
    );
    let decided = api
        .call(
            Method::POST,
            &format!("/admin/approvals/{apr}/decision"),
            Some(OPERATOR),
            Some(json!({ "decision": "approve", "selected_option": "ship" })),
        )
        .await;
    assert!(decided.status.is_success(), "{}", decided.text);
    let done = card(&api.browse(&cookie, "/ui/approvals".to_owned()).await.text);
    assert!(done.contains("approve by"), "{done}");
    assert!(!done.contains("class=\"deadline\""), "{done}");
    api.reaches(&id, "completed").await;
    let listed = row(&api.browse(&cookie, "/ui/tasks".to_owned()).await.text);
    assert!(!listed.contains("waits for a person"), "{listed}");
}

/// A running step's time counts up on its task's page (the page's script
/// reads its start), a finished one shows what it took; the health chart
/// has a time axis.
#[tokio::test]
async fn a_running_step_shows_its_time_so_far_and_the_health_chart_its_minutes() {
    let api = api();
    let r = api
        .submit(plan(json!([command("quick", "true"), {
            "id": "slow", "checkpoint": "task_exec", "depends_on": ["quick"],
            "action": { "kind": "command", "run": "sleep 30" } }])))
        .await;
    let id = r.body["task"]["id"].as_str().unwrap().to_owned();
    let cookie = api.signed_in(OPERATOR).await;
    let step = |text: &str, step: &str| -> String {
        let at = text
            .find(&format!("id=\"step-{step}\""))
            .unwrap_or_else(|| panic!("no row for {step} in {text}"));
        let end = text[at..].find("</tr>").unwrap();
        text[at..at + end].to_owned()
    };
    let mut page = String::new();
    for _ in 0..500 {
        page = api.browse(&cookie, format!("/ui/tasks/{id}")).await.text;
        if step(&page, "slow").contains("data-state=\"running\"") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let slow = step(&page, "slow");
    assert!(
        slow.contains("<time class=\"elapsed\" datetime=\""),
        "{slow}"
    );
    let quick = step(&page, "quick");
    assert!(!quick.contains("elapsed"), "{quick}");
    assert!(quick.contains(" ms<") || quick.contains("s<"), "{quick}");
    let health = api.browse(&cookie, "/ui/health/body".to_owned()).await.text;
    let minute = chrono::Utc::now().format("%H:%M").to_string();
    let labels = health.matches("class=\"tick time\"").count();
    assert!(
        labels >= 6,
        "a label every five minutes of the half hour: {health}"
    );
    assert!(
        health.contains(&format!(">{minute}</text>"))
            || health.contains(&format!(
                ">{}</text>",
                (chrono::Utc::now() - chrono::Duration::minutes(1)).format("%H:%M")
            )),
        "the last minute is labelled: {health}"
    );
    api.call(
        Method::POST,
        &format!("/admin/tasks/{id}/abort"),
        Some(OPERATOR),
        Some(json!({})),
    )
    .await;
}

/// A plan pasted into the tasks page with two misspelt keys is refused with
/// both, one per line, each with the key meant; nothing is created.
#[tokio::test]
async fn a_pasted_plans_misspelt_keys_are_all_named_in_the_page() {
    let api = api();
    let plan = "description = 'typos'\n[[steps]]\nid = 'a'\nrun = 'true'\n\
                [[steps]]\nid = 'b'\nrun = 'true'\ndepend_on = ['a']\ntimout = '1s'\n";
    // The form's encoding: every byte but letters and digits as %XX.
    let encoded: String = plan
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let body = format!("plan={encoded}");
    let refused = api
        .send(
            Request::post("/ui/tasks")
                .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(body))
                .unwrap(),
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text);
    for line in [
        "\n  - steps[1] (`b`): unknown key `depend_on`; did you mean `depends_on`?",
        "\n  - steps[1] (`b`): unknown key `timout`; did you mean `timeout`?",
    ] {
        assert!(refused.text.contains(line), "{line} in {}", refused.text);
    }
    assert!(refused.text.contains("class=\"error\""), "{}", refused.text);
    let listed = api
        .call(Method::GET, "/admin/tasks", Some(VIEWER), None)
        .await;
    assert_eq!(listed.body["items"], json!([]), "{}", listed.text);
}
