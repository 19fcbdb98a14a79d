//! Helpers shared by the `convlog` command's tests: running the binary
//! (`CARGO_BIN_EXE_convlog` is set only for this crate's own tests) and
//! the library tests' store helpers (`tests/common` at the repository root),
//! re-exported.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Stdio};

// The store helpers (segment_paths, read_all, small_segments, Rng, the
// child-process roles) are the library tests' own, not copies of them.
#[path = "../../../../tests/common/mod.rs"]
mod library;
#[allow(unused_imports)]
pub use library::*;

pub mod serving;

/// Runs the `convlog` binary with `args` and `stdin` as its standard input.
pub fn run_convlog(args: &[&str], stdin: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_convlog"))
        .args(args)
        .env_remove("CONVLOG_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start convlog");
    let mut input = child.stdin.take().expect("stdin is piped");
    // A command that fails before reading its input (a missing store) may
    // exit first: a broken pipe here is not the test's concern.
    if let Err(error) = input.write_all(stdin) {
        assert_eq!(
            error.kind(),
            std::io::ErrorKind::BrokenPipe,
            "write stdin: {error}"
        );
    }
    drop(input);
    child.wait_with_output().expect("wait for convlog")
}

/// A command's standard output as text.
pub fn stdout(output: &std::process::Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

/// A command's standard error as text.
pub fn stderr(output: &std::process::Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("stderr is UTF-8")
}

/// A temporary path as a command-line argument.
pub fn path_arg(dir: &Path) -> &str {
    dir.to_str().expect("temporary paths are UTF-8")
}
