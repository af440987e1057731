//! `rein-bench steps`: durable no-op steps per second through the engine and the
//! SQLite store, against the bare commit ceiling measured in the same run.

use super::*;

/// Bare sequential commits, WAL + synchronous=FULL: of one small row each
/// (the ceiling), or of rows shaped like a step's commit.
pub(super) struct Ceiling {
    conn: rusqlite::Connection,
    next: i64,
    /// Rows each commit inserts, and the text each row carries.
    rows: usize,
    body: String,
}

/// What a step's commit writes, as bare rows: how many rows, of how many
/// bytes of text each.
#[derive(Debug, Clone, Copy)]
pub(super) struct StepShape {
    rows: usize,
    bytes: usize,
}

impl StepShape {
    /// A no-op step's commit as rein writes it today: the step before it
    /// passed, this one created and entered; about 370 bytes of text each.
    const TYPICAL: StepShape = StepShape {
        rows: 3,
        bytes: 370,
    };

    /// The shape of the commits a store has made so far: its events per
    /// commit, each of the average size (body and summary) of its events.
    fn of(store: &Path, commits: u64) -> anyhow::Result<StepShape> {
        let conn = rusqlite::Connection::open_with_flags(
            store,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )?;
        let (events, bytes): (i64, f64) = conn.query_row(
            "SELECT count(*), coalesce(avg(length(body) + coalesce(length(summary), 0)), 0) FROM events",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let rows = (events as f64 / commits.max(1) as f64).round() as usize;
        Ok(StepShape {
            rows: rows.max(1),
            bytes: bytes.round() as usize,
        })
    }
}

impl Ceiling {
    /// Opens the file and brings it to a steady state first: until SQLite's
    /// automatic checkpoint (at 1,000 WAL pages) has run once, every commit
    /// grows the WAL file, and growing a file costs its fsync more than
    /// overwriting it does. Measuring those commits would lower the ceiling.
    ///
    /// With a `shape`, each commit inserts its rows into a table laid out as
    /// the event log is (an integer key, a unique per-task index): the
    /// physical cost of a step's commit with no engine around it.
    fn open(dir: &Path, shape: Option<StepShape>) -> anyhow::Result<Ceiling> {
        let name = if shape.is_some() {
            "shape.db"
        } else {
            "ceiling.db"
        };
        let conn = rusqlite::Connection::open(dir.join(name))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        let (rows, body) = match shape {
            Some(s) => {
                conn.execute_batch(
                    "CREATE TABLE t (g INTEGER PRIMARY KEY, k INTEGER, s INTEGER, b TEXT, UNIQUE (k, s))",
                )?;
                (s.rows, "x".repeat(s.bytes))
            }
            None => {
                conn.execute_batch("CREATE TABLE t (x INTEGER)")?;
                (1, String::new())
            }
        };
        let mut ceiling = Ceiling {
            conn,
            next: 0,
            rows,
            body,
        };
        ceiling.time(1_100)?;
        Ok(ceiling)
    }

    /// How long `commits` of them take.
    fn time(&mut self, commits: usize) -> anyhow::Result<Duration> {
        let shaped = !self.body.is_empty();
        let started = Instant::now();
        for _ in 0..commits {
            self.conn.execute_batch("BEGIN")?;
            // Prepared once and kept, as the store keeps its statements: what
            // is timed is the commit, not parsing SQL.
            for _ in 0..self.rows {
                if shaped {
                    self.conn
                        .prepare_cached("INSERT INTO t (k, s, b) VALUES (1, ?1, ?2)")?
                        .execute(rusqlite::params![self.next, self.body])?;
                } else {
                    self.conn
                        .prepare_cached("INSERT INTO t VALUES (?1)")?
                        .execute([self.next])?;
                }
                self.next += 1;
            }
            self.conn.execute_batch("COMMIT")?;
        }
        Ok(started.elapsed())
    }
}

/// Commits per second over the two halves of a ceiling measured around a run.
pub(super) fn per_s(commits: usize, took: Duration) -> f64 {
    commits as f64 / took.as_secs_f64().max(f64::MIN_POSITIVE)
}

/// Steps of the untimed task that warms a fresh store up: about 1,300 WAL
/// pages, past SQLite's automatic checkpoint (1,000 pages), after which the
/// log is overwritten in place rather than grown.
pub(super) const WARM_UP_STEPS: usize = 300;

pub(super) async fn steps(
    tasks: usize,
    steps: usize,
    ceiling_commits: usize,
    cold: bool,
    dir: &Path,
) -> anyhow::Result<serde_json::Value> {
    // Every commit request timed on its way through.
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let timed = Arc::clone(&latencies);
    let options = rein_store::WriterOptions {
        on_commit: Some(Arc::new(move |took| {
            if let Ok(mut l) = timed.lock() {
                l.push(took);
            }
        })),
        ..rein_store::WriterOptions::default()
    };
    let store = Arc::new(SqliteStore::open_with(&dir.join("rein.db"), options)?);
    let engine = command_engine(store.clone(), dir);
    // Until the write-ahead log has reached its working size, each commit
    // extends the file, and an fsync that extends a file also commits the
    // filesystem's metadata: on this kind of disk about twice the cost. That
    // is a one-off of a fresh store (about 1,000 WAL pages), so the run and the
    // ceiling are both timed past it, unless --cold asks for the fresh store.
    let warm_up = if cold { 0 } else { WARM_UP_STEPS };
    if warm_up > 0 {
        run_all(&engine, chains(&engine, 1, warm_up).await?).await?;
    }
    // What a step's commit writes, from the warm-up's (a cold store has none
    // to go by).
    let shape = if warm_up > 0 {
        StepShape::of(&dir.join("rein.db"), store.stats().commits)?
    } else {
        StepShape::TYPICAL
    };
    let ids = chains(&engine, tasks, steps).await?;
    // The ceiling is measured in two halves, just before the run and just
    // after it: the disk's speed drifts over seconds, and bracketing the run
    // averages the drift out instead of comparing against one side of it.
    let (first_half, second_half) = (ceiling_commits / 2, ceiling_commits - ceiling_commits / 2);
    let mut bare = (ceiling_commits > 0)
        .then(|| Ceiling::open(dir, None))
        .transpose()?;
    let mut shaped = (ceiling_commits > 0)
        .then(|| Ceiling::open(dir, Some(shape)))
        .transpose()?;
    let ceiling_before = bare.as_mut().map(|c| c.time(first_half)).transpose()?;
    let shape_before = shaped.as_mut().map(|c| c.time(first_half)).transpose()?;
    let before = store.stats();
    latencies
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clear();
    let started = Instant::now();
    run_all(&engine, ids).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let after = store.stats();
    let mut latencies = latencies
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    latencies.sort();
    let total = tasks * steps;
    let steps_per_s = total as f64 / elapsed;
    let shape_after = shaped.as_mut().map(|c| c.time(second_half)).transpose()?;
    let ceiling_after = bare.as_mut().map(|c| c.time(second_half)).transpose()?;
    let shape_per_s = match (shape_before, shape_after) {
        (Some(before), Some(after)) => Some(per_s(ceiling_commits, before + after)),
        _ => None,
    };
    let (ceiling, halves) = match (ceiling_before, ceiling_after) {
        (Some(before), Some(after)) => (
            Some(per_s(ceiling_commits, before + after)),
            Some([
                per_s(first_half, before).round(),
                per_s(second_half, after).round(),
            ]),
        ),
        _ => (None, None),
    };
    Ok(serde_json::json!({
        "bench": "steps",
        "tasks": tasks,
        "steps_per_task": steps,
        "warm_up_steps": warm_up,
        "total_steps": total,
        "elapsed_s": (elapsed * 1000.0).round() / 1000.0,
        "steps_per_s": steps_per_s.round(),
        "commit_p50_ms": (percentile(&latencies, 0.50) * 1000.0).round() / 1000.0,
        "commit_p99_ms": (percentile(&latencies, 0.99) * 1000.0).round() / 1000.0,
        "commit_mean_ms": (mean_ms(&latencies) * 1000.0).round() / 1000.0,
        "commit_requests": latencies.len(),
        "sqlite_transactions": after.commits - before.commits,
        "transaction_mean_ms": ((after.busy_ns - before.busy_ns) as f64 / (after.commits - before.commits).max(1) as f64 / 1e3).round() / 1e3,
        "sqlite_ceiling_commits_per_s": ceiling.map(f64::round),
        "sqlite_ceiling_before_after": halves,
        "steps_per_s_over_ceiling": ceiling.map(|c| (steps_per_s / c * 1000.0).round() / 1000.0),
        "step_shape": {"rows": shape.rows, "bytes": shape.bytes},
        "sqlite_shape_commits_per_s": shape_per_s.map(f64::round),
        "shape_over_ceiling": shape_per_s.zip(ceiling).map(|(s, c)| (s / c * 1000.0).round() / 1000.0),
        "steps_per_s_over_shape": shape_per_s.map(|s| (steps_per_s / s * 1000.0).round() / 1000.0),
    }))
}

/// The figures of several runs as one: each number the median of the runs'
/// (the mean of the middle two for an even count), anything else only where
/// every run agrees, and every run's own figures under `runs`.
pub(super) fn medians(each: Vec<serde_json::Value>) -> serde_json::Value {
    let mut line = serde_json::Map::new();
    if let Some(serde_json::Value::Object(first)) = each.first() {
        for (key, value) in first {
            let mut numbers: Vec<f64> = each.iter().filter_map(|r| r[key].as_f64()).collect();
            if each.iter().all(|r| r[key] == *value) {
                line.insert(key.clone(), value.clone());
            } else if numbers.len() == each.len() {
                numbers.sort_by(f64::total_cmp);
                let mid = numbers.len() / 2;
                let m = if numbers.len() % 2 == 0 {
                    (numbers[mid - 1] + numbers[mid]) / 2.0
                } else {
                    numbers[mid]
                };
                line.insert(
                    key.clone(),
                    serde_json::json!((m * 1000.0).round() / 1000.0),
                );
            }
        }
    }
    line.insert("runs".into(), serde_json::Value::Array(each));
    serde_json::Value::Object(line)
}

/// A chain of `n` no-op steps, each depending on the one before.
/// `tasks` new tasks, each a [`chain`] of `steps`.
pub(super) async fn chains(
    engine: &Engine,
    tasks: usize,
    steps: usize,
) -> anyhow::Result<Vec<rein_protocol::TaskId>> {
    let mut ids = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        let created = engine.create(CreateTask::of(chain(steps))).await?;
        ids.push(created.id().clone());
    }
    Ok(ids)
}

/// Runs every task of `ids` at once; an error unless all complete.
pub(super) async fn run_all(
    engine: &Arc<Engine>,
    ids: Vec<rein_protocol::TaskId>,
) -> anyhow::Result<()> {
    let mut runs = tokio::task::JoinSet::new();
    for id in ids {
        let engine = Arc::clone(engine);
        runs.spawn(async move { engine.run(&id, RunOptions::default()).await });
    }
    while let Some(done) = runs.join_next().await {
        let state = done??;
        anyhow::ensure!(
            state.status() == TaskStatus::Completed,
            "a task ended {}",
            state.status()
        );
    }
    Ok(())
}

pub(super) fn chain(n: usize) -> TaskDecomposition {
    let steps = (0..n)
        .map(|i| TaskStep {
            depends_on: if i == 0 {
                vec![]
            } else {
                vec![format!("s{}", i - 1)]
            },
            idempotent: true,
            ..TaskStep::new(format!("s{i}"), StepAction::Noop)
        })
        .collect();
    TaskDecomposition::new("bench", steps)
}
