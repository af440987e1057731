//! `rein serve` for real: a server process on a free loopback port, spoken to over
//! TCP, stopped with SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::rein;

/// One HTTP/1.1 request; the status and the body.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<(&str, &str)>,
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some((content_type, b)) = body {
        req.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        ));
    } else {
        req.push_str("\r\n");
    }
    stream.write_all(req.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Starts `rein serve` on a free port; returns it and the address it printed.
fn start(data: &std::path::Path, token: &str) -> (Child, String) {
    let mut child = rein(data)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("REIN_TOKEN", token)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .rsplit("http://")
        .next()
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    (child, addr)
}

#[test]
fn the_server_runs_a_plan_and_serves_health_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, addr) = start(&dir.path().join("data"), "s3cret");
    let (status, body) = http(&addr, "GET", "/healthz", None, None);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"task_store\""), "{body}");
    assert_eq!(http(&addr, "GET", "/admin/tasks", None, None).0, 401);
    assert_eq!(
        http(&addr, "GET", "/admin/tasks", Some("wrong"), None).0,
        401
    );

    let plan = "description = 'over http'\n[[steps]]\nid = 'a'\nrun = 'echo hi'\n";
    let (status, body) = http(
        &addr,
        "POST",
        "/admin/tasks",
        Some("s3cret"),
        Some(("application/toml", plan)),
    );
    assert_eq!(status, 201, "{body}");
    let created: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = created["task"]["id"].as_str().unwrap().to_owned();
    let start = Instant::now();
    loop {
        let (_, body) = http(
            &addr,
            "GET",
            &format!("/admin/tasks/{id}"),
            Some("s3cret"),
            None,
        );
        let task: serde_json::Value = serde_json::from_str(&body).unwrap();
        if task["task"]["status"] == "completed" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the task did not complete: {body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, metrics) = http(&addr, "GET", "/metrics", Some("s3cret"), None);
    assert_eq!(status, 200);
    assert!(
        metrics.contains("rein_tasks{status=\"completed\"} 1"),
        "{metrics}"
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(server.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = server.wait().unwrap();
    assert_eq!(status.code(), Some(0), "a clean shutdown on SIGTERM");
    // The work is in the store for the CLI too.
    let out = rein(&dir.path().join("data"))
        .args(["tasks", "show", &id, "--json"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"status\": \"completed\""));
}

#[test]
fn without_a_token_the_server_only_listens_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let out = rein(&dir.path().join("data"))
        .args(["serve", "--listen", "0.0.0.0:0"])
        .env_remove("REIN_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("refusing to listen on 0.0.0.0") && said.contains("REIN_TOKEN"),
        "{said}"
    );
}
