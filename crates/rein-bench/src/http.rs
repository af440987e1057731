//! `rein-bench http`: the admin API under concurrent connections.

use super::*;

/// Reads one HTTP/1.1 response from a keep-alive connection; its status.
pub(super) async fn read_response(
    reader: &mut tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>,
) -> anyhow::Result<u16> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    let mut line = String::new();
    reader.read_line(&mut line).await?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("no status line"))?
        .parse()?;
    let mut length = 0usize;
    loop {
        line.clear();
        reader.read_line(&mut line).await?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse()?;
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).await?;
    Ok(status)
}

pub(super) async fn http(
    connections: usize,
    seconds: u64,
    dir: &Path,
) -> anyhow::Result<serde_json::Value> {
    use tokio::io::AsyncWriteExt;
    let store = Arc::new(SqliteStore::open(&dir.join("rein.db"))?);
    let engine = command_engine(store, dir);
    let state = engine.create(CreateTask::of(chain(20))).await?;
    engine.run(state.id(), RunOptions::default()).await?;
    let token = "bench-token-0123456";
    let auth = rein_server::Auth::new(vec![rein_server::TokenEntry {
        name: "bench".into(),
        role: rein_server::Role::Viewer,
        sha256: rein_server::auth::hash_token(token),
    }]);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let app = rein_server::AppState::new(engine, auth, shutdown.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(rein_server::serve(listener, app));
    let request = format!(
        "GET /admin/tasks/{} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n",
        state.id()
    );
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let request = request.clone();
        clients.spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let (read, mut write) = stream.into_split();
            let mut reader = tokio::io::BufReader::new(read);
            let mut latencies = Vec::new();
            let mut errors = 0u64;
            while Instant::now() < until {
                let sent = Instant::now();
                write.write_all(request.as_bytes()).await?;
                let status = read_response(&mut reader).await?;
                latencies.push(sent.elapsed());
                if status != 200 {
                    errors += 1;
                }
            }
            anyhow::Ok((latencies, errors))
        });
    }
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut errors = 0;
    while let Some(done) = clients.join_next().await {
        let (l, e) = done??;
        latencies.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    shutdown.cancel();
    let _ = server.await;
    latencies.sort();
    Ok(serde_json::json!({
        "bench": "http",
        "route": "GET /admin/tasks/{id} (a 20-step task)",
        "connections": connections,
        "requests": latencies.len(),
        "non_200": errors,
        "requests_per_s": (latencies.len() as f64 / elapsed).round(),
        "p50_ms": (percentile(&latencies, 0.50) * 1000.0).round() / 1000.0,
        "p99_ms": (percentile(&latencies, 0.99) * 1000.0).round() / 1000.0,
    }))
}
