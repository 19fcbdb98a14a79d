//! Helpers shared by the library's integration tests. The `convlog`
//! command's tests, and their helper that runs it, are in `crates/cli/tests`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use convlog::log::{LogOptions, LogReader, Record};

/// Segment files of a store, in LSN order.
pub fn segment_paths(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "seg"))
        .collect();
    paths.sort();
    paths
}

/// Every record of the store, read by a directory reader; panics on error.
pub fn read_all(dir: &Path) -> Vec<Record> {
    LogReader::open(dir)
        .unwrap()
        .iter()
        .collect::<convlog::Result<Vec<_>>>()
        .unwrap()
}

/// Options with tiny segments, so tests cross segment boundaries.
pub fn small_segments() -> LogOptions {
    LogOptions::new().segment_bytes_max(4096)
}

/// A deterministic pseudo-random generator (xorshift64*), for tests that
/// must reproduce from a printed seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `range`.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }
}

/// Starts this test binary again, running only the test `name`, with
/// `CONVLOG_TEST_ROLE` set to `role` and extra environment variables.
/// The child's stdout is piped.
pub fn spawn_role(test_name: &str, role: &str, env: &[(&str, String)]) -> Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env("CONVLOG_TEST_ROLE", role)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (key, value) in env {
        command.env(key, value);
    }
    command.spawn().unwrap()
}

/// The role this process plays when it was started by `spawn_role`.
///
/// In a child, this also ends the line libtest started (`test NAME ... `)
/// so that everything the role prints starts a line of its own.
pub fn role() -> Option<String> {
    let role = std::env::var("CONVLOG_TEST_ROLE").ok();
    if role.is_some() {
        println!();
    }
    role
}

/// Reads an environment variable as a number, with a default.
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}
