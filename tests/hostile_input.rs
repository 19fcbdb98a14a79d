//! Hostile and careless input, the library's half: what the error texts say.
//! The `convlog` command's cases (numbers at their limits, over-long lines,
//! odd timestamps, byte order marks, unknown fields) are in
//! `crates/cli/tests/hostile_input.rs`.

#[test]
fn the_locked_error_names_the_commands_that_run_beside_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let error = convlog::Error::Locked {
        path: dir.path().to_path_buf(),
    }
    .to_string();
    assert!(!error.contains("need no lock"), "{error}");
    for command in [
        "dump", "inspect", "tail", "verify", "resume", "export", "stats", "backup",
    ] {
        assert!(error.contains(command), "{error}");
    }
}
