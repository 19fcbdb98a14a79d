//! `convlog demo` (the README's first command) runs to the end and leaves a
//! store that verifies.

use std::process::Command;

#[test]
fn the_demo_kills_a_host_mid_batch_and_carries_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let output = Command::new(env!("CARGO_BIN_EXE_convlog"))
        .args(["demo", "--dir"])
        .arg(&store)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in [
        "Killed the host with SIGKILL while call_oslo was running",
        "call_paris finished (completed)",
        "call_oslo never finished (running): will run again",
        "none run twice",
        "The openai request rebuilt from the store",
        "The anthropic request rebuilt from the store",
        "\"type\": \"tool_result\"",
        "every checksum is good",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    let verify = Command::new(env!("CARGO_BIN_EXE_convlog"))
        .arg("verify")
        .arg(&store)
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );

    // A second run into the same directory refuses and says where it is.
    let again = Command::new(env!("CARGO_BIN_EXE_convlog"))
        .args(["demo", "--dir"])
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
}
