//! Printing that never panics: if whoever reads rein's output goes away (`rein run
//! plan.toml | head`), output is dropped and the work goes on. `println!` would
//! panic on the broken pipe and take a running task down with it.

/// A line on stdout.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// Text on stdout, as is.
macro_rules! say_raw {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// A line on stderr.
macro_rules! shout {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

pub(crate) use {say, say_raw, shout};
