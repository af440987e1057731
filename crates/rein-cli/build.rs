//! Names the build in `rein --version`: the commit it was built from (when
//! built in a git checkout) and the build date (`SOURCE_DATE_EPOCH` when
//! set, for reproducible builds).

use std::process::Command;
use std::time::{Duration, SystemTime};

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"])
        .map_or_else(|| "unknown commit".to_owned(), |c| format!("commit {c}"));
    let when = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map_or_else(SystemTime::now, |s| {
            SystemTime::UNIX_EPOCH + Duration::from_secs(s)
        });
    let date = humantime::format_rfc3339_seconds(when).to_string();
    let date = date.get(..10).unwrap_or(&date);
    println!(
        "cargo:rustc-env=REIN_LONG_VERSION={} ({commit}, built {date})",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default()
    );
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // A new commit (or a checkout of another) names a new build.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let head = git(&["symbolic-ref", "-q", "HEAD"]);
        for file in ["HEAD", "packed-refs"]
            .into_iter()
            .map(str::to_owned)
            .chain(head)
        {
            let path = std::path::Path::new(&dir).join(file);
            // A file that is not there would make every build run this again.
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}
