//! `rein-confine`: the trampoline as a small program of its own (`rein
//! __confine` is the same, in the large `rein`). Started without a fork of
//! rein, it asks to die with rein, confines itself (or, `--unconfined`, does
//! not), then becomes `sh -c SCRIPT` in the workspace. `rein` uses it when it
//! sits beside it and answers `--build` as `rein` expects.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(rein_sandbox::landlock::trampoline(&args));
}
