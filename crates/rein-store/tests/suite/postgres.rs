//! What the PostgreSQL backend adds to the conformance suite: its schema
//! versions, what it refuses to open, how it commits, its leases (a node cut
//! off from the server among them), and TLS. Against a real
//! server: a throwaway cluster this test process starts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_core::TaskStore;
use rein_core::store::{ControlKind, ControlRequest};
use rein_store::PostgresStore;
use rein_store::postgres::schema;
use rein_test_support::postgres as scratch;

async fn database() -> String {
    scratch::shared().unwrap().database().await.unwrap()
}

/// A plain client on `url`, for what the store would never do itself.
async fn client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

fn error(result: Result<PostgresStore, rein_core::StoreError>) -> String {
    result.expect_err("the store should be refused").to_string()
}

#[tokio::test]
async fn a_new_database_is_migrated_once_and_an_old_one_brought_up_to_date() {
    let url = database().await;
    let old = PostgresStore::connect_to(&url, 0).await.unwrap();
    assert_eq!((old.migrated().from, old.migrated().to), (0, 0));
    drop(old);
    let store = PostgresStore::connect(&url).await.unwrap();
    assert_eq!(
        (store.migrated().from, store.migrated().to),
        (0, schema::CURRENT_VERSION)
    );
    let again = PostgresStore::connect(&url).await.unwrap();
    assert_eq!(again.migrated().applied(), 0);
}

#[tokio::test]
async fn nodes_opening_a_new_database_at_once_migrate_it_once() {
    let url = database().await;
    let opened = futures_util::future::join_all((0..4).map(|_| PostgresStore::connect(&url))).await;
    let applied: Vec<i64> = opened
        .into_iter()
        .map(|s| s.unwrap().migrated().applied())
        .collect();
    assert_eq!(applied.iter().filter(|&&n| n > 0).count(), 1, "{applied:?}");
}

#[tokio::test]
async fn a_database_a_newer_rein_migrated_is_refused_naming_both_versions() {
    let url = database().await;
    drop(PostgresStore::connect(&url).await.unwrap());
    let newer = schema::CURRENT_VERSION + 1;
    client(&url)
        .await
        .execute("UPDATE rein_schema SET version = $1", &[&newer])
        .await
        .unwrap();
    let message = error(PostgresStore::connect(&url).await);
    assert!(
        message.contains(&format!("schema version {newer}"))
            && message.contains(&format!("supports ({})", schema::CURRENT_VERSION))
            && message.contains("upgrade rein"),
        "{message}"
    );
}

#[tokio::test]
async fn a_database_of_something_else_is_refused_and_left_alone() {
    let url = database().await;
    let other = client(&url).await;
    other
        .batch_execute("CREATE TABLE invoices (id int); INSERT INTO invoices VALUES (7)")
        .await
        .unwrap();
    let message = error(PostgresStore::connect(&url).await);
    assert!(
        message.contains("not a rein store") && message.contains("invoices"),
        "{message}"
    );
    let tables: i64 = other
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 1, "nothing was added to someone else's database");
}

#[tokio::test]
async fn an_unreachable_server_and_a_bad_url_say_what_to_do() {
    let port = std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let message =
        error(PostgresStore::connect(&format!("postgres://rein:secret@127.0.0.1:{port}/db")).await);
    assert!(
        message.contains(&format!("postgres://rein@127.0.0.1:{port}/db"))
            && message.contains("REIN_STORE")
            && !message.contains("secret"),
        "{message}"
    );
    let message = error(PostgresStore::connect("postgres://rein@127.0.0.1:notaport/db").await);
    assert!(
        message.contains("invalid PostgreSQL URL") && message.contains("postgres://USER@HOST"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_queued_behind_a_commit_share_the_next_one() {
    let store = PostgresStore::connect(&database().await).await.unwrap();
    let task = rein_protocol::TaskId::new();
    let writes = (0..200).map(|i| {
        let store = store.clone();
        let task = task.clone();
        async move {
            store
                .request_control(&ControlRequest {
                    task_id: task,
                    kind: ControlKind::Pause,
                    by: format!("w{i}"),
                    reason: String::new(),
                    requested_at: chrono::Utc::now(),
                })
                .await
        }
    });
    for result in futures_util::future::join_all(writes).await {
        result.unwrap();
    }
    let stats = store.stats();
    assert_eq!(stats.writes, 200);
    assert!(
        stats.commits < 100,
        "200 queued writes took {} commits",
        stats.commits
    );
    let taken = store.take_controls(&task).await.unwrap();
    assert_eq!(taken.len(), 200);
    assert!(store.take_controls(&task).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_fails_in_a_shared_commit_fails_alone() {
    use rein_core::JournalStore;
    let store = PostgresStore::connect(&database().await).await.unwrap();
    let task = rein_protocol::TaskId::new();
    // Forty writers at once: half race for position 0 of one step, half write
    // steps of their own.
    let writes = (0..40).map(|i| {
        let store = store.clone();
        let task = task.clone();
        async move {
            let step = if i % 2 == 0 {
                "shared".to_owned()
            } else {
                format!("own{i}")
            };
            let entry = serde_json::json!({ "by": i });
            (i, store.append_journal(&task, &step, 0, &[entry]).await)
        }
    });
    let results = futures_util::future::join_all(writes).await;
    let won: Vec<i32> = results
        .iter()
        .filter(|(i, r)| i % 2 == 0 && r.is_ok())
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(won.len(), 1, "exactly one writer takes the position");
    for (i, result) in &results {
        match result {
            Ok(()) => {}
            Err(rein_core::StoreError::JournalMoved { seq: 0, .. }) if i % 2 == 0 => {}
            Err(e) => panic!("writer {i}: {e}"),
        }
    }
    for i in (1..40).step_by(2) {
        let own = store.load_journal(&task, &format!("own{i}")).await.unwrap();
        assert_eq!(own, [serde_json::json!({ "by": i })]);
    }
    let shared = store.load_journal(&task, "shared").await.unwrap();
    assert_eq!(shared, [serde_json::json!({ "by": won[0] })]);
    assert!(store.stats().commits < 40, "{:?}", store.stats());
}

/// A node of its own on `url`: the store as another process would open it.
async fn node(url: &str, pid: u32) -> PostgresStore {
    let options = rein_store::postgres::PostgresOptions {
        lease: std::time::Duration::from_secs(30),
        node: Some(rein_protocol::RunnerInfo {
            host: "test".into(),
            pid,
            process_start: Some(1),
        }),
        ..Default::default()
    };
    PostgresStore::connect_with(url, options).await.unwrap()
}

/// Tasks made by an engine over `store`, left pending.
async fn pending_tasks(store: &PostgresStore, n: usize) -> Vec<rein_protocol::TaskId> {
    let dir = tempfile::tempdir().unwrap();
    let engine = rein_core::Engine::new(
        std::sync::Arc::new(store.clone()),
        std::sync::Arc::new(rein_core::CommandExecutor::unsandboxed()),
        rein_core::EngineConfig::new(dir.path().join("workspaces")),
    );
    let mut ids = Vec::new();
    for _ in 0..n {
        let plan = rein_protocol::TaskDecomposition::new(
            "leased",
            vec![rein_protocol::TaskStep::new(
                "s",
                rein_protocol::StepAction::Noop,
            )],
        );
        let created = engine
            .create(rein_core::CreateTask::of(plan))
            .await
            .unwrap();
        ids.push(created.id().clone());
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_leased_to_one_node_and_a_node_that_lost_its_lease_cannot_write() {
    use rein_core::LeaseStore;
    let url = database().await;
    let (a, b) = (node(&url, 1).await, node(&url, 2).await);
    let task = pending_tasks(&a, 1).await.remove(0);
    let held = a.claim(&task).await.unwrap().unwrap();
    assert_eq!(held.runner.pid, 1);
    let refused = b.claim(&task).await.unwrap().unwrap_err();
    assert_eq!((refused.runner.pid, refused.token), (1, held.token));
    assert_eq!(
        a.claim(&task).await.unwrap().unwrap().token,
        held.token,
        "a holder keeps its token"
    );

    // A write by the holder goes through; one by the other node is refused.
    let summary = a.load_summary(&task).await.unwrap().unwrap();
    let write = |from: u64| rein_core::store::TaskWrite {
        task_id: task.clone(),
        expected_seq: from,
        events: Vec::new(),
        summary: summary.clone(),
        approvals: Vec::new(),
        ledger: Vec::new(),
        plan: None,
    };
    a.save(write(summary.last_seq)).await.unwrap();
    let e = b.save(write(summary.last_seq)).await.unwrap_err();
    assert!(matches!(e, rein_core::StoreError::LeaseLost { .. }), "{e}");

    // A's lease runs out (A was paused): B takes the task over, with the next
    // token, and A's writes are refused from then on.
    client(&url)
        .await
        .execute(
            "UPDATE leases SET expires_at = now() - interval '1 second'",
            &[],
        )
        .await
        .unwrap();
    let taken = b.claim(&task).await.unwrap().unwrap();
    assert_eq!((taken.runner.pid, taken.token), (2, held.token + 1));
    let e = a.save(write(summary.last_seq)).await.unwrap_err();
    assert!(
        matches!(&e, rein_core::StoreError::LeaseLost { holder, .. } if holder.contains("pid 2")),
        "{e}"
    );
    b.save(write(summary.last_seq)).await.unwrap();
    assert_eq!(a.live().await.unwrap(), vec![taken.clone()]);
    // Giving it up frees it for anyone.
    b.release(&task).await.unwrap();
    assert!(a.live().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_tasks_are_shared_out_once_and_renewed_leases_stay_live() {
    use rein_core::LeaseStore;
    let url = database().await;
    let short = rein_store::postgres::PostgresOptions {
        lease: std::time::Duration::from_millis(300),
        node: Some(rein_protocol::RunnerInfo {
            host: "test".into(),
            pid: 3,
            process_start: Some(1),
        }),
        ..Default::default()
    };
    let (a, b) = (
        PostgresStore::connect_with(&url, short).await.unwrap(),
        node(&url, 4).await,
    );
    let tasks = pending_tasks(&a, 5).await;
    let (first, second) = tokio::join!(a.claim_free(3), b.claim_free(10));
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(first.len() + second.len(), 5, "{first:?} {second:?}");
    let mut all: Vec<_> = first
        .iter()
        .chain(&second)
        .map(|l| l.task_id.clone())
        .collect();
    all.sort();
    let mut expected = tasks.clone();
    expected.sort();
    assert_eq!(all, expected, "each task went to exactly one node");
    assert!(a.claim_free(10).await.unwrap().is_empty());
    // A's leases last 300 ms and are renewed every 100 ms: after a second
    // they are still A's.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(b.claim_free(10).await.unwrap().is_empty());
    let live = b.live().await.unwrap();
    assert_eq!(
        live.iter().filter(|l| l.runner.pid == 3).count(),
        first.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_on_one_node_wakes_a_waiter_on_another_at_once() {
    use rein_core::LeaseStore;
    let url = database().await;
    let (a, b) = (node(&url, 5).await, node(&url, 6).await);
    // Let B's listener connect.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let waiting = tokio::spawn(async move {
        let started = std::time::Instant::now();
        b.changed(rein_core::store::Change::Controls).await;
        started.elapsed()
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    a.request_control(&ControlRequest {
        task_id: rein_protocol::TaskId::new(),
        kind: ControlKind::Abort,
        by: "a".into(),
        reason: String::new(),
        requested_at: chrono::Utc::now(),
    })
    .await
    .unwrap();
    let waited = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
        .await
        .expect("the notification arrives")
        .unwrap();
    assert!(waited < std::time::Duration::from_secs(1), "{waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_sent_before_a_node_took_the_task_up_reaches_its_run() {
    use rein_core::store::ControlRequest;
    let store = node(&database().await, 7).await;
    let task = pending_tasks(&store, 1).await.remove(0);
    // Sent to the task before any node ran it (between another node's lease
    // and its run, say): on a shared store it is the run's.
    store
        .request_control(&ControlRequest {
            task_id: task.clone(),
            kind: ControlKind::Abort,
            by: "ana".into(),
            reason: "wrong plan".into(),
            requested_at: chrono::Utc::now() - chrono::Duration::seconds(5),
        })
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = rein_core::Engine::new(
        std::sync::Arc::new(store.clone()),
        std::sync::Arc::new(rein_core::CommandExecutor::unsandboxed()),
        rein_core::EngineConfig::new(dir.path().join("workspaces")),
    );
    let ran = engine
        .run(&task, rein_core::RunOptions::default())
        .await
        .unwrap();
    assert_eq!(ran.status(), rein_protocol::TaskStatus::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_is_negotiated_and_checked_as_sslmode_says() {
    use rein_core::LeaseStore;
    let dir = tempfile::tempdir().unwrap();
    let certs = scratch::Certificates::make(dir.path()).unwrap();
    let cluster = scratch::Scratch::start_tls(&certs).unwrap();
    let db = cluster.database_named().await.unwrap();
    let port = cluster.port();
    // The cluster lets TCP clients in only over TLS: a store that opens is
    // one whose connections are encrypted.
    let url = |host: &str, query: &str| format!("postgres://rein@{host}:{port}/{db}?{query}");
    let (ca, other) = (
        certs.authority.display().to_string(),
        certs.other_authority.display().to_string(),
    );
    for (host, query) in [
        ("localhost", String::new()),
        ("localhost", "sslmode=prefer".into()),
        ("localhost", "sslmode=require".into()),
        ("127.0.0.1", "sslmode=require".into()),
        ("localhost", format!("sslmode=verify-full&sslrootcert={ca}")),
        ("localhost", format!("sslmode=verify-ca&sslrootcert={ca}")),
        ("127.0.0.1", format!("sslmode=verify-ca&sslrootcert={ca}")),
        ("localhost", format!("sslmode=require&sslrootcert={ca}")),
    ] {
        let opened = PostgresStore::connect(&url(host, &query)).await;
        assert!(opened.is_ok(), "{host} {query}: {:?}", opened.err());
    }
    for (host, query, says) in [
        ("localhost", "sslmode=disable".to_owned(), "no encryption"),
        (
            "localhost",
            format!("sslmode=verify-full&sslrootcert={other}"),
            "UnknownIssuer",
        ),
        (
            "localhost",
            format!("sslmode=verify-ca&sslrootcert={other}"),
            "UnknownIssuer",
        ),
        // libpq's rule: `require` with a root certificate checks the chain.
        (
            "localhost",
            format!("sslmode=require&sslrootcert={other}"),
            "UnknownIssuer",
        ),
        // The certificate names localhost, not the address.
        (
            "127.0.0.1",
            format!("sslmode=verify-full&sslrootcert={ca}"),
            "not valid for name \"127.0.0.1\"",
        ),
    ] {
        let message = error(PostgresStore::connect(&url(host, &query)).await);
        assert!(
            message.contains(says) && message.contains("cannot connect to PostgreSQL"),
            "{host} {query}: {message}"
        );
    }
    // A database that wants a client certificate takes the one its
    // authority signed for the user, and no client without one.
    cluster.create_database(scratch::CERTIFIED).await.unwrap();
    let certified = format!(
        "postgres://rein@localhost:{port}/{}?sslmode=verify-full&sslrootcert={ca}",
        scratch::CERTIFIED
    );
    let message = error(PostgresStore::connect(&certified).await);
    assert!(
        message.contains("requires a valid client certificate") && message.contains("sslkey"),
        "{message}"
    );
    let with_cert = format!(
        "{certified}&sslcert={}&sslkey={}",
        certs.client.display(),
        certs.client_key.display()
    );
    let opened = PostgresStore::connect(&with_cert).await;
    assert!(opened.is_ok(), "{:?}", opened.err());
    // The checked store works: a write, a read, and the notifications'
    // connection (TLS too) wakes a waiter.
    let checked = url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let node = |pid| {
        let checked = checked.clone();
        async move {
            let options = rein_store::postgres::PostgresOptions {
                node: Some(rein_protocol::RunnerInfo {
                    host: "test".into(),
                    pid,
                    process_start: Some(1),
                }),
                ..Default::default()
            };
            PostgresStore::connect_with(&checked, options)
                .await
                .unwrap()
        }
    };
    let (a, b) = (node(7).await, node(8).await);
    let ids = pending_tasks(&a, 1).await;
    assert!(b.load_summary(&ids[0]).await.unwrap().is_some());
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let waiting = tokio::spawn(async move { b.changed(rein_core::store::Change::Controls).await });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    a.request_control(&ControlRequest {
        task_id: ids[0].clone(),
        kind: ControlKind::Pause,
        by: "a".into(),
        reason: String::new(),
        requested_at: chrono::Utc::now(),
    })
    .await
    .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
        .await
        .expect("the notification arrives over TLS")
        .unwrap();
}

#[tokio::test]
async fn a_server_without_tls_is_refused_when_tls_is_required() {
    let url = database().await;
    assert!(
        PostgresStore::connect(&format!("{url}?sslmode=prefer"))
            .await
            .is_ok()
    );
    let message = error(PostgresStore::connect(&format!("{url}?sslmode=require")).await);
    assert!(message.contains("sslmode=require"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_from_the_store_lets_its_lease_go_before_another_can_take_it() {
    use rein_core::LeaseStore;
    let url = database().await;
    let port: u16 = url
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let relay = scratch::Relay::to(port).await.unwrap();
    let lease = std::time::Duration::from_secs(1);
    let through = |url: &str, pid: u32| {
        let options = rein_store::postgres::PostgresOptions {
            lease,
            node: Some(rein_protocol::RunnerInfo {
                host: "test".into(),
                pid,
                process_start: Some(1),
            }),
            ..Default::default()
        };
        let url = url.to_owned();
        async move { PostgresStore::connect_with(&url, options).await.unwrap() }
    };
    let a = through(
        &url.replace(&format!(":{port}/"), &format!(":{}/", relay.port())),
        21,
    )
    .await;
    let b = through(&url, 22).await;
    let task = pending_tasks(&b, 1).await.pop().unwrap();
    assert!(a.claim(&task).await.unwrap().is_ok());
    // Renewed, the lease stays counted on well past its length.
    let held = tokio::time::timeout(lease * 3, a.lost(&task)).await;
    assert!(held.is_err(), "a node that renews keeps its lease");
    assert!(b.claim(&task).await.unwrap().is_err());
    relay.cut();
    let cut = std::time::Instant::now();
    // When the lease runs out on the server (no renewal can reach it now).
    let expiry = b.holder(&task).await.unwrap().unwrap().expires_at;
    tokio::time::timeout(lease * 2, a.lost(&task))
        .await
        .expect("the cut-off node stops counting on its lease");
    let (gave_up, at) = (cut.elapsed(), chrono::Utc::now());
    // It gave up before the lease could run out, so before another node
    // could take the task.
    assert!(
        at < expiry,
        "gave up at {at}, the lease ran out at {expiry}"
    );
    let taken = loop {
        if b.claim(&task).await.unwrap().is_ok() {
            break cut.elapsed();
        }
        assert!(cut.elapsed() < lease * 3, "b never took the task");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(chrono::Utc::now() >= expiry);
    eprintln!("cut off: gave the lease up after {gave_up:?}; another node took it after {taken:?}");
}
