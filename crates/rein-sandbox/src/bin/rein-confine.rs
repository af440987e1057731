//! `rein-confine`: the Landlock trampoline as a program of its own (the `rein`
//! binary has the same as `rein __confine`). Confines itself, then becomes
//! `sh -c SCRIPT` in the workspace.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(rein_sandbox::landlock::trampoline(&args));
}
