//! The Control UI in a real browser: Debian's Chromium, headless, driven over
//! WebDriver by chromedriver (both installed by `.ci/run`), against a real
//! `rein serve` with an operator's and a viewer's token. Each page it visits
//! is saved as a screenshot under `target/ui-screens/` for a person to look at.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::model;

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

const OPERATOR: &str = "ui-operator-token";
const VIEWER: &str = "ui-viewer-token";

fn sha256(token: &str) -> String {
    rein_server::auth::hash_token(token)
}

/// A chromedriver process on a free port, in a process group of its own with
/// the Chromium it starts: the whole group is killed when dropped, so a test
/// that fails before closing the browser leaves no Chromium behind.
struct Driver(Child, String);

impl Drop for Driver {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

fn chromedriver() -> Driver {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver is not installed: apt-get install chromium chromium-driver (.ci/run does)");
    let addr = format!("127.0.0.1:{port}");
    common::eventually("chromedriver listening", || {
        std::net::TcpStream::connect(&addr).ok()
    });
    Driver(child, format!("http://{addr}"))
}

async fn browser(driver: &Driver, profile: &Path) -> Client {
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(rein_server::ui::headless_chromium(profile))
        .connect(&driver.1)
        .await
        .expect("chromium did not start under chromedriver");
    // A page that does not load in ten seconds fails the test: a browser
    // whose connections to the server are all taken (by pages it keeps in
    // its back/forward cache, with their event streams open) waits forever.
    client
        .update_timeouts(fantoccini::wd::TimeoutConfiguration::new(
            Some(Duration::from_secs(10)),
            Some(Duration::from_secs(10)),
            Some(Duration::ZERO),
        ))
        .await
        .unwrap();
    client
}

/// Pages whose pictures stay out of the book: they show this machine's
/// paths (the health page names the store's file and the sandbox's program).
const NOT_IN_BOOK: &[&str] = &["health"];

/// Saves what the browser shows as `target/ui-screens/NAME.png`, and with
/// `REIN_UPDATE_SCREENSHOTS=1` as the book's `docs/src/images/ui/NAME.png`.
async fn screenshot(client: &Client, name: &str) {
    save(name, client.screenshot().await.unwrap());
}

/// Saves one element of the page as `screenshot` saves the page.
async fn element_screenshot(client: &Client, selector: &str, name: &str) {
    let element = client
        .find(fantoccini::Locator::Css(selector))
        .await
        .unwrap();
    save(name, element.screenshot().await.unwrap());
}

fn save(name: &str, png: Vec<u8>) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut dirs = vec![root.join("target/ui-screens")];
    if std::env::var_os("REIN_UPDATE_SCREENSHOTS").is_some() && !NOT_IN_BOOK.contains(&name) {
        dirs.push(root.join("docs/src/images/ui"));
    }
    for dir in dirs {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
    }
}

/// Waits (up to 15 s) until `script` returns true in the page.
async fn until(client: &Client, what: &str, script: &str) {
    let started = Instant::now();
    loop {
        let ok = client
            .execute(&format!("return Boolean({script});"), vec![])
            .await
            .ok()
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        if ok {
            return;
        }
        if started.elapsed() > Duration::from_secs(15) {
            let source = client.source().await.unwrap_or_default();
            panic!("timed out waiting for {what}; the page:\n{source}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn sign_in(client: &Client, base: &str, token: &str) {
    client.goto(&format!("{base}/")).await.unwrap();
    let field = client
        .wait()
        .for_element(Locator::Id("token"))
        .await
        .unwrap();
    field.send_keys(token).await.unwrap();
    client
        .find(Locator::Css("button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        client,
        "the tasks page",
        "document.querySelector('h1')?.textContent === 'Tasks'",
    )
    .await;
}

fn approval_plan(name: &str) -> Value {
    json!({ "plan": { "original_task": name, "steps": [
        { "id": "build", "checkpoint": "task_exec", "action": { "kind": "command", "run": "echo built" } },
        { "id": "ship", "depends_on": ["build"], "checkpoint": "user_approval", "action": {
            "kind": "approval", "title": format!("Ship {name}?"), "options": ["ship", "hold"],
            "recommended": "ship", "on_expiry": "deny", "trigger": "multiple_options" } },
        { "id": "publish", "depends_on": ["ship"], "checkpoint": "task_exec", "action": { "kind": "command", "run": "echo published" } },
    ] } })
}

/// Submits a plan over the API; its task id.
fn submit(addr: &str, name: &str) -> String {
    let (status, body) = common::http(
        addr,
        "POST",
        "/admin/tasks",
        Some(OPERATOR),
        Some(("application/json", &approval_plan(name).to_string())),
    );
    assert_eq!(status, 201, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    body["task"]["id"].as_str().unwrap().to_owned()
}

/// The id of the task's pending approval, once the task asks.
fn pending_approval(addr: &str, task: &str) -> String {
    common::eventually("the approval request", || {
        let (_, body) = common::http(
            addr,
            "GET",
            &format!("/admin/approvals?status=pending&task_id={task}"),
            Some(OPERATOR),
            None,
        );
        let body: Value = serde_json::from_str(&body).ok()?;
        body["items"][0]["id"].as_str().map(str::to_owned)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_approves_in_the_inbox_and_watches_the_task_finish() {
    let (dir, data) = common::scratch();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        format!(
            "[[tokens]]\nname = \"otto\"\nrole = \"operator\"\nsha256 = \"{}\"\n\n[[tokens]]\nname = \"vera\"\nrole = \"viewer\"\nsha256 = \"{}\"\n",
            sha256(OPERATOR),
            sha256(VIEWER)
        ),
    )
    .unwrap();
    let (_server, addr) = common::serve_with(
        common::rein(&data),
        None,
        &["--tokens".as_ref(), tokens.as_os_str()],
    );
    let base = format!("http://{addr}");
    // `rein` as the operator, from a data directory of its own.
    let operator = common::client(dir.path().join("client"), &addr, OPERATOR);
    let driver = chromedriver();
    let client = browser(&driver, &dir.path().join("profile")).await;

    // Signed out, every page leads to the sign-in form.
    client.goto(&format!("{base}/ui/approvals")).await.unwrap();
    client
        .wait()
        .for_element(Locator::Id("token"))
        .await
        .unwrap();
    screenshot(&client, "sign-in").await;
    sign_in(&client, &base, OPERATOR).await;

    // A plan pasted into the tasks page runs; the browser goes to its page.
    client.goto(&format!("{base}/ui/tasks")).await.unwrap();
    client
        .execute(
            "document.querySelector('details.submit').open = true;\
             document.getElementById('plan-text').value = arguments[0];",
            vec![json!(
                "description = \"pasted\"\n\n[[steps]]\nid = \"hello\"\nrun = \"echo hello from the page\"\n"
            )],
        )
        .await
        .unwrap();
    click(&client, "details.submit button[type=submit]").await;
    until(
        &client,
        "the pasted plan's task completed",
        "location.pathname.startsWith('/ui/tasks/task_') && document.querySelector('tr[data-step=hello][data-state=completed]')",
    )
    .await;
    assert!(
        text(&client, "tr[data-step=hello] pre")
            .await
            .contains("hello from the page")
    );

    // The inbox: approve with the recommended option; the card turns.
    let first = submit(&addr, "alpha");
    let first_approval = pending_approval(&addr, &first);
    client.goto(&format!("{base}/ui/tasks")).await.unwrap();
    until(
        &client,
        "the task listed",
        &format!("document.querySelector('tr[data-task=\"{first}\"]')"),
    )
    .await;
    screenshot(&client, "tasks").await;
    client.goto(&format!("{base}/ui/approvals")).await.unwrap();
    let card = format!("#a-{first_approval}");
    until(
        &client,
        "the pending request",
        &format!("document.querySelector('{card}[data-status=pending]')"),
    )
    .await;
    let recommended = client
        .execute(
            &format!("return document.querySelector('{card} select[name=option]').value;"),
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        recommended,
        json!("ship"),
        "the recommended option comes first"
    );
    screenshot(&client, "approvals").await;
    click(&client, &format!("{card} button[value=approve]")).await;
    until(
        &client,
        "the card approved",
        &format!("document.querySelector('{card}[data-status=approved]')"),
    )
    .await;
    let decided = text(&client, &format!("{card} .decided")).await;
    assert!(decided.contains("otto"), "{decided}");

    // The task page: it turns without a reload.
    client
        .goto(&format!("{base}/ui/tasks/{first}"))
        .await
        .unwrap();
    until(&client, "the first task completed", "document.querySelector('tr[data-step=publish][data-state=completed]') && document.querySelector('.meta .badge')?.textContent === 'completed'").await;
    screenshot(&client, "task").await;

    // A decision made with the CLI while the page is open shows up on it.
    let second = submit(&addr, "beta");
    let second_approval = pending_approval(&addr, &second);
    client
        .goto(&format!("{base}/ui/tasks/{second}"))
        .await
        .unwrap();
    until(
        &client,
        "the step waiting",
        "document.querySelector('tr[data-step=ship]')?.dataset.state === 'awaiting_approval'",
    )
    .await;
    client
        .execute("window.reinMarker = 'kept';", vec![])
        .await
        .unwrap();
    common::run_ok(&mut operator(&["approvals", "approve", &second_approval]));
    until(
        &client,
        "the second task completed",
        "document.querySelector('tr[data-step=publish][data-state=completed]')",
    )
    .await;
    let marker = client
        .execute("return window.reinMarker;", vec![])
        .await
        .unwrap();
    assert_eq!(marker, json!("kept"), "the page was not reloaded");

    // A click right after a live refresh swapped the list in (before htmx
    // would have settled it, had it a settle delay) still decides.
    let raced = submit(&addr, "epsilon");
    let raced_approval = pending_approval(&addr, &raced);
    client.goto(&format!("{base}/ui/approvals")).await.unwrap();
    let card = format!("#a-{raced_approval}");
    until(
        &client,
        "the raced request",
        &format!("document.querySelector('{card}[data-status=pending]')"),
    )
    .await;
    client
        .execute(
            "const card = arguments[0]; const part = document.getElementById('approvals');\
             part.addEventListener('htmx:afterSwap', () => queueMicrotask(() =>\
               document.querySelector(card + ' button[value=approve]').click()), { once: true });\
             htmx.trigger(part, 'rein:changed');",
            vec![json!(card)],
        )
        .await
        .unwrap();
    until(
        &client,
        "the click after the refresh decided",
        &format!("document.querySelector('{card}[data-status=approved]')"),
    )
    .await;

    // A late click is told who decided first.
    let third = submit(&addr, "gamma");
    let third_approval = pending_approval(&addr, &third);
    client.goto(&format!("{base}/ui/approvals")).await.unwrap();
    let card = format!("#a-{third_approval}");
    until(
        &client,
        "the third request",
        &format!("document.querySelector('{card}[data-status=pending]')"),
    )
    .await;
    // Decided elsewhere between the page's render and the click (the live
    // refresh is held back so the click meets the old card).
    client
        .execute(
            "const el = document.getElementById('approvals'); const copy = el.cloneNode(true);\
             copy.removeAttribute('hx-trigger'); copy.removeAttribute('hx-get');\
             el.replaceWith(copy); htmx.process(copy);",
            vec![],
        )
        .await
        .unwrap();
    let operator_cookie = client
        .get_named_cookie("rein_session")
        .await
        .unwrap()
        .value()
        .to_owned();

    // Without the page's CSRF token, the operator's own cookie changes nothing.
    let (status, body) = raw_post(
        &addr,
        &format!("/ui/approvals/{third_approval}/decide"),
        &operator_cookie,
        "decision=approve",
    );
    assert_eq!(status, 403, "{body}");
    let (status, body) = raw_post(
        &addr,
        &format!("/admin/approvals/{third_approval}/decision"),
        &operator_cookie,
        r#"{"decision":"approve"}"#,
    );
    assert_eq!(status, 403, "{body}");

    common::run_ok(&mut operator(&["approvals", "deny", &third_approval]));
    click(&client, &format!("{card} button[value=approve]")).await;
    until(
        &client,
        "the late click answered",
        &format!("document.querySelector('{card} .note')"),
    )
    .await;
    let note = text(&client, &format!("{card} .note")).await;
    assert!(note.contains("otto decided it first (deny)"), "{note}");

    // A viewer sees the requests, and no control that would change one.
    let fourth = submit(&addr, "delta");
    pending_approval(&addr, &fourth);
    click(&client, "button.link").await;
    until(&client, "signed out", "document.getElementById('token')").await;
    sign_in(&client, &base, VIEWER).await;
    client.goto(&format!("{base}/ui/approvals")).await.unwrap();
    until(
        &client,
        "the viewer's inbox",
        "document.querySelector('article.approval[data-status=pending]')",
    )
    .await;
    assert_eq!(controls(&client).await, 0, "a viewer sees controls");
    screenshot(&client, "approvals-viewer").await;
    client
        .goto(&format!("{base}/ui/tasks/{fourth}"))
        .await
        .unwrap();
    until(
        &client,
        "the viewer's task page",
        "document.querySelector('#task')",
    )
    .await;
    assert_eq!(controls(&client).await, 0, "a viewer sees task controls");
    client.close().await.unwrap();
}

/// A server with one operator token whose agent steps ask the fake model at
/// `model`, and a browser signed in to it.
async fn operator_session(
    dir: &Path,
    model: &str,
) -> (common::Server, String, String, Driver, Client) {
    let tokens = dir.join("tokens.toml");
    std::fs::write(
        &tokens,
        format!(
            "[[tokens]]\nname = \"otto\"\nrole = \"operator\"\nsha256 = \"{}\"\n",
            sha256(OPERATOR)
        ),
    )
    .unwrap();
    let mut with_model = common::rein(&dir.join("data"));
    with_model
        .env("OPENAI_BASE_URL", model)
        .env("OPENAI_API_KEY", "sk-test")
        .env("REIN_MODEL", "gpt-test");
    let (server, addr) =
        common::serve_with(with_model, None, &["--tokens".as_ref(), tokens.as_os_str()]);
    let base = format!("http://{addr}");
    let driver = chromedriver();
    let client = browser(&driver, &dir.join("profile")).await;
    sign_in(&client, &base, OPERATOR).await;
    (server, addr, base, driver, client)
}

fn post_json(addr: &str, path: &str, body: &str) -> Value {
    let (status, text) = common::http(
        addr,
        "POST",
        path,
        Some(OPERATOR),
        Some(("application/json", body)),
    );
    assert!(status == 200 || status == 201, "{path}: {status} {text}");
    serde_json::from_str(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_graph_records_snapshots_shared_states_ledger_health_and_harnesses() {
    let dir = tempfile::tempdir().unwrap();
    let (model, _) = model::fake::fake_model().await;
    let (_server, addr, base, _driver, client) = operator_session(dir.path(), &model).await;
    // `rein` as the operator, from a data directory of its own.
    let operator = common::client(dir.path().join("client"), &addr, OPERATOR);

    // A task waiting on a person: its plan drawn as a graph, live.
    let task = submit(&addr, "graph");
    let approval = pending_approval(&addr, &task);
    post_json(
        &addr,
        "/admin/harness/contracts",
        &json!({ "id": "hctr_graph", "goal": "Ship graph", "taskId": task,
                 "writeSet": [{ "kind": "file", "path": "dist/graph" }],
                 "successCriteria": ["it ships"] })
        .to_string(),
    );
    client
        .goto(&format!("{base}/ui/tasks/{task}"))
        .await
        .unwrap();
    until(
        &client,
        "the graph, with the approval step waiting",
        "document.querySelector('figure.graph g[data-step=ship]')?.dataset.state === 'awaiting_approval'\
         && document.querySelector('figure.graph g[data-step=build]')?.dataset.state === 'completed'",
    )
    .await;
    assert_eq!(
        client
            .execute(
                "return document.querySelectorAll('figure.graph path.edge').length;",
                vec![]
            )
            .await
            .unwrap(),
        json!(2),
        "one arrow per dependency"
    );
    let contract = text(&client, "article.contract[data-contract=hctr_graph]").await;
    assert!(
        contract.contains("Ship graph") && contract.contains("dist/graph"),
        "{contract}"
    );
    // A snapshot taken from the page is listed on it, and restores as a new task.
    click(&client, "button[hx-vals*=snapshot]").await;
    until(
        &client,
        "the snapshot listed",
        "document.querySelector('li[data-snapshot]')",
    )
    .await;
    screenshot(&client, "task-graph").await;

    // Decided with the CLI: the graph turns green without a reload.
    common::run_ok(&mut operator(&["approvals", "approve", &approval]));
    until(
        &client,
        "every box in the graph completed",
        "[...document.querySelectorAll('figure.graph g.node')].every(g => g.dataset.state === 'completed')",
    )
    .await;
    client
        .execute("window.confirm = () => true;", vec![])
        .await
        .unwrap();
    click(&client, "li[data-snapshot] button").await;
    until(
        &client,
        "the restored task's page",
        &format!(
            "location.pathname.startsWith('/ui/tasks/task_') && !location.pathname.endsWith('{task}') && document.querySelector('#task h1')"
        ),
    )
    .await;

    // An agent step: its turns and tool calls on its task's page.
    let agent = post_json(
        &addr,
        "/admin/tasks",
        &json!({ "plan": { "original_task": "look around", "steps": [
            { "id": "look", "checkpoint": "task_exec",
              "action": { "kind": "agent", "prompt": "list three times", "tools": ["list_dir"] } },
        ] } })
        .to_string(),
    );
    let agent = agent["task"]["id"].as_str().unwrap().to_owned();
    client
        .goto(&format!("{base}/ui/tasks/{agent}"))
        .await
        .unwrap();
    until(
        &client,
        "the agent's turns",
        "document.querySelector('tr[data-step=look][data-state=completed]')\
         && document.querySelectorAll('section.agent[data-agent-step=look] li[data-role=tool]').length === 3",
    )
    .await;
    let turns = text(&client, "section.agent[data-agent-step=look] ol.turns").await;
    assert!(
        turns.contains("list_dir(") && turns.contains("listed three times"),
        "{turns}"
    );
    let updates = text(&client, "section.agent[data-agent-step=look] ol.updates").await;
    assert!(
        updates.contains("served by rein") && updates.contains("tool list_dir"),
        "{updates}"
    );
    // A call's later reports are named by its tool, not its id.
    assert!(
        updates.contains("tool list_dir .: completed") && !updates.contains("call_l"),
        "{updates}"
    );
    screenshot(&client, "task-agent").await;

    // Shared state: a colliding action, detection run from the page.
    let seed = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../rein-protocol/tests/data/seed-000-shared-state.json"),
    )
    .unwrap();
    post_json(&addr, "/admin/harness/shared-state", &seed);
    post_json(
        &addr,
        "/admin/harness/shared-state/shs_release_docs/actions",
        r#"{ "id": "edit", "participantId": "manager", "title": "Edit the docs",
             "writeSet": [{ "kind": "directory", "path": "docs" }] }"#,
    );
    client.goto(&format!("{base}/ui/states")).await.unwrap();
    until(
        &client,
        "the shared state listed",
        "document.querySelector('tr[data-state-id=shs_release_docs]')",
    )
    .await;
    click(&client, "tr[data-state-id=shs_release_docs] a").await;
    until(
        &client,
        "the state's page",
        "document.querySelector('tr[data-action=edit]')",
    )
    .await;
    let writes = text(&client, "tr[data-action=edit]").await;
    assert!(writes.contains("docs"), "{writes}");
    click(&client, "button[hx-post$=detect]").await;
    until(
        &client,
        "the conflict found",
        "document.querySelector('article.conflict[data-severity]') && document.querySelector('.note')",
    )
    .await;
    let conflict = text(&client, "article.conflict").await;
    assert!(
        conflict.contains("write/write") && conflict.contains("edit"),
        "{conflict}"
    );
    screenshot(&client, "shared-state").await;

    // The ledger holds the CLI's decision, and its chain verifies.
    client.goto(&format!("{base}/ui/ledger")).await.unwrap();
    until(
        &client,
        "the decision in the ledger",
        "document.querySelector('table.ledger tr[data-seq]')",
    )
    .await;
    let entry = text(&client, "table.ledger tr[data-seq]").await;
    assert!(
        entry.contains("approved") && entry.contains("otto"),
        "{entry}"
    );
    click(&client, "form[hx-get='/ui/ledger/verify'] button").await;
    until(
        &client,
        "the verification",
        "document.querySelector('.verdict[data-intact=true]')",
    )
    .await;
    screenshot(&client, "ledger").await;

    // Health: the components, and the chart counts what ran.
    client.goto(&format!("{base}/ui/health")).await.unwrap();
    until(
        &client,
        "the health page",
        "document.querySelector('tr[data-component=task_store]') && Number(document.querySelector('figure.chart')?.dataset.passed) > 0",
    )
    .await;
    let decisions = client
        .execute(
            "return Number(document.querySelector('figure.chart').dataset.decisions);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(decisions, json!(1), "the CLI's one decision is charted");
    screenshot(&client, "health").await;
    element_screenshot(&client, "figure.chart", "health-chart").await;

    // Harnesses: the built-in runtime, and what serves a route.
    client.goto(&format!("{base}/ui/harnesses")).await.unwrap();
    until(
        &client,
        "the built-in runtime",
        "document.querySelector('tr[data-harness=rein]')",
    )
    .await;
    client
        .execute(
            "document.querySelector('form.explain input[name=provider]').value = 'openai';",
            vec![],
        )
        .await
        .unwrap();
    click(&client, "form.explain button").await;
    until(
        &client,
        "the route explained",
        "document.querySelector('#explain-result [data-selected=rein]')",
    )
    .await;
    screenshot(&client, "harnesses").await;

    // Model usage: an agent task's turns, per step and by model on its page,
    // and on the usage page a chart per day and model of the same tokens the
    // API reports.
    let agent = post_json(
        &addr,
        "/admin/tasks",
        &json!({ "plan": { "original_task": "notes", "steps": [{ "id": "agent", "checkpoint": "task_exec",
            "action": { "kind": "agent", "prompt": "list three times", "tools": ["list_dir"] } }] } })
        .to_string(),
    );
    let agent = agent["task"]["id"].as_str().unwrap().to_owned();
    client
        .goto(&format!("{base}/ui/tasks/{agent}"))
        .await
        .unwrap();
    until(
        &client,
        "the agent step's usage",
        "document.querySelector('tr[data-step=agent] td.usage')?.textContent.includes(' in / ') && document.querySelector('table.usage tr[data-usage-row=\"openai/gpt-test\"]')",
    )
    .await;
    let (_, report) = common::http(&addr, "GET", "/admin/usage", Some(OPERATOR), None);
    let report: Value = serde_json::from_str(&report).unwrap();
    let total =
        report["input_tokens"].as_u64().unwrap() + report["output_tokens"].as_u64().unwrap();
    assert!(total > 0, "{report}");
    client.goto(&format!("{base}/ui/usage")).await.unwrap();
    until(
        &client,
        "the usage chart",
        "document.querySelector('figure.usage-chart')",
    )
    .await;
    let charted = client
        .execute(
            "return [Number(document.querySelector('figure.usage-chart').dataset.tokens), document.querySelectorAll('figure.usage-chart rect[data-model=\"openai/gpt-test\"]').length];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        charted,
        json!([total, 1]),
        "one bar today, of all the tokens"
    );
    screenshot(&client, "usage").await;

    // The tasks page filters by creation time (UTC), and names a bad one.
    for (query, what, script) in [
        (
            "created_from=2000-01-01T00:00",
            "tasks created since 2000",
            "document.querySelectorAll('tr[data-task]').length >= 2",
        ),
        (
            "created_from=2099-01-01T00:00",
            "no tasks created since 2099",
            "document.querySelector('#tasks p.empty') && !document.querySelector('tr[data-task]')",
        ),
        (
            "created_to=yesterday",
            "the bad time named",
            "document.querySelector('#tasks .error')?.textContent.includes('`yesterday` is not a time')",
        ),
    ] {
        client
            .goto(&format!("{base}/ui/tasks?{query}"))
            .await
            .unwrap();
        until(&client, what, script).await;
    }

    // A goal submitted from the tasks page becomes a task of that goal.
    client.goto(&format!("{base}/ui/tasks")).await.unwrap();
    client
        .execute(
            "document.querySelectorAll('details.submit').forEach(d => d.open = true);\
             document.getElementById('goal-text').value = 'Write the release notes';",
            vec![],
        )
        .await
        .unwrap();
    click(
        &client,
        "form[hx-post='/ui/tasks/goal'] button[type=submit]",
    )
    .await;
    until(
        &client,
        "the goal's task page",
        "location.pathname.startsWith('/ui/tasks/task_') && document.querySelector('#task h1')?.textContent === 'Write the release notes'",
    )
    .await;
    client.close().await.unwrap();
}

/// Clicks what `selector` finds, in one step in the page (a live refresh
/// may replace an element between a lookup and a click). An element htmx
/// acts for (its own `hx-get` or `hx-post`) is clicked once htmx has made it
/// live: a live refresh swaps new elements in, and a click before htmx has
/// processed one does nothing, as a person's would (they click again);
/// waiting (up to 15 s) keeps the test from losing its click in that moment
/// under load. Nothing at `selector` fails at once.
async fn click(client: &Client, selector: &str) {
    let started = Instant::now();
    loop {
        let clicked = client
            .execute(
                "const el = document.querySelector(arguments[0]);\
                 if (!el) { return 'missing'; }\
                 const acts = el.hasAttribute('hx-get') || el.hasAttribute('hx-post');\
                 if (acts && !el['htmx-internal-data']?.initHash) { return 'unbound'; }\
                 el.click(); return 'clicked';",
                vec![json!(selector)],
            )
            .await
            .unwrap();
        if clicked == json!("clicked") {
            return;
        }
        assert_ne!(clicked, json!("missing"), "nothing to click at {selector}");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "htmx never made {selector} live"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The text of what `selector` finds, read in one step in the page.
async fn text(client: &Client, selector: &str) -> String {
    client
        .execute(
            "return document.querySelector(arguments[0])?.textContent ?? '';",
            vec![json!(selector)],
        )
        .await
        .unwrap()
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// How many controls that would change something the page shows.
async fn controls(client: &Client) -> u64 {
    client
        .execute(
            "return document.querySelectorAll('main button, main form.decide, main textarea').length;",
            vec![],
        )
        .await
        .unwrap()
        .as_u64()
        .unwrap()
}

/// A POST with a session cookie and no CSRF token, as a forged form would send.
fn raw_post(addr: &str, path: &str, cookie: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let content_type = if body.starts_with('{') {
        "application/json"
    } else {
        "application/x-www-form-urlencoded"
    };
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nCookie: rein_session={cookie}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, response)
}
