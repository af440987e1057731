//! The npm packages the tests drive, installed: the ACP test agent
//! (`crates/rein-runtimes/tests/acp`) and the MCP reference servers
//! (`crates/rein-runtimes/tests/mcp`). `npm ci` runs once per directory, on
//! first use, if `.ci/run` has not run it.
#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The directory of the test agent, its SDK installed.
pub fn acp_agent_dir() -> PathBuf {
    installed("acp", "@agentclientprotocol/sdk")
}

/// The directory of the MCP reference servers, installed.
pub fn mcp_servers_dir() -> PathBuf {
    installed("mcp", "@modelcontextprotocol/server-filesystem")
}

/// `crates/rein-runtimes/tests/NAME`, with `npm ci` run there unless
/// `package` is installed already.
fn installed(name: &str, package: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../rein-runtimes/tests")
        .join(name)
        .canonicalize()
        .expect("the npm package's directory");
    let sdk = dir.join("node_modules").join(package).join("package.json");
    if sdk.is_file() {
        return dir;
    }
    // One installer at a time across test processes: a directory as the lock
    // (one left by a killed installer is taken over after two minutes).
    let lock = dir.join(".install-lock");
    loop {
        match std::fs::create_dir(&lock) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let stale = std::fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > Duration::from_secs(120));
                if stale {
                    let _ = std::fs::remove_dir(&lock);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("cannot lock {}: {e}", lock.display()),
        }
    }
    let installed = sdk.is_file()
        || std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
    let _ = std::fs::remove_dir(&lock);
    assert!(
        installed && sdk.is_file(),
        "{package} could not be installed: run `npm ci --prefix crates/rein-runtimes/tests/{name}` (needs Node.js and npm; .ci/run does it)"
    );
    dir
}
