//! `convlog keygen` and `convlog verify --key/--public/--head` (docs/tamper.md).

mod common;

use std::path::Path;

use common::{path_arg, run_convlog, stderr, stdout};
use convlog::log::{Log, LogOptions};
use convlog::tamper::{TamperKey, TamperOptions};

/// A tamper-evident store written through the library with the key file
/// `convlog keygen` made, its checkpoint published to `head`.
fn write_store(store: &Path, key: &Path, head: &Path, events: usize) {
    let tamper = TamperOptions::new(TamperKey::load(key).unwrap()).checkpoint_path(head);
    let log = Log::open(store, LogOptions::new().tamper(tamper)).unwrap();
    for index in 0..events {
        let event = format!(
            r#"{{"type":"ConversationRecorded","conversation_id":"c{index}","entries":[]}}"#
        );
        log.append(&[event.into_bytes()]).unwrap();
    }
    log.checkpoint().unwrap();
}

#[test]
fn keygen_then_verify_with_the_key_the_public_key_and_a_checkpoint() {
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("audit.key");
    let output = run_convlog(&["keygen", path_arg(&key)], b"");
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("audit.key.pub"),
        "{}",
        stdout(&output)
    );
    let public = keys.path().join("audit.key.pub");
    let head = keys.path().join("store.head");
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    write_store(&store, &key, &head, 3);

    let args = [
        "verify",
        "--log-only",
        path_arg(&store),
        "--key",
        path_arg(&key),
        "--head",
        path_arg(&head),
    ];
    let output = run_convlog(&args, b"");
    assert!(output.status.success(), "{}", stderr(&output));
    let printed = stdout(&output);
    assert!(
        printed.contains("3 frame(s) authenticated by the key"),
        "{printed}"
    );
    assert!(printed.contains("LSN 3: signature ok"), "{printed}");

    let args = [
        "verify",
        "--log-only",
        path_arg(&store),
        "--public",
        path_arg(&public),
        "--head",
        path_arg(&head),
    ];
    let output = run_convlog(&args, b"");
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("public key only"),
        "{}",
        stdout(&output)
    );

    // An older copy put back: the segment cut back to its first frame.
    let segment = std::fs::read_dir(&store)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|extension| extension == "seg"))
        .unwrap();
    let bytes = std::fs::read(&segment).unwrap();
    let first = convlog::log::recovery::scan_segment(&bytes[..], true).unwrap();
    let mut offset = convlog::log::format::SEGMENT_HEADER_BYTES;
    let convlog::log::format::FrameDecode::Complete(frame) =
        convlog::log::format::decode_frame(&bytes[offset..])
    else {
        panic!("no first frame")
    };
    offset += frame.size_bytes();
    assert!(first.valid_bytes as usize > offset);
    std::fs::write(&segment, &bytes[..offset]).unwrap();
    let args = [
        "verify",
        "--log-only",
        path_arg(&store),
        "--key",
        path_arg(&key),
        "--head",
        path_arg(&head),
    ];
    let output = run_convlog(&args, b"");
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.contains("truncated log at LSN 2") && message.contains("events 2..=3 are missing"),
        "{message}"
    );
}

#[cfg(unix)]
#[test]
fn verify_refuses_a_key_file_others_can_read() {
    use std::os::unix::fs::PermissionsExt;
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("audit.key");
    assert!(run_convlog(&["keygen", path_arg(&key)], b"")
        .status
        .success());
    let head = keys.path().join("store.head");
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    write_store(&store, &key, &head, 1);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let args = [
        "verify",
        "--log-only",
        path_arg(&store),
        "--key",
        path_arg(&key),
    ];
    let output = run_convlog(&args, b"");
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("mode 0644"), "{}", stderr(&output));
    // keygen never overwrites a key.
    let output = run_convlog(&["keygen", path_arg(&key)], b"");
    assert_eq!(output.status.code(), Some(1));
}

#[test]
fn keygen_rotate_keeps_the_old_keys() {
    let keys = tempfile::tempdir().unwrap();
    let old = keys.path().join("a.key");
    let new = keys.path().join("b.key");
    assert!(run_convlog(&["keygen", path_arg(&old)], b"")
        .status
        .success());
    let output = run_convlog(&["keygen", path_arg(&new), "--rotate", path_arg(&old)], b"");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(TamperKey::load(&new).unwrap().epochs(), vec![0, 1]);
}

/// Runs `convlog` with `env` set (and the tamper variables otherwise unset).
fn run_with_env(args: &[&str], stdin: &[u8], env: &[(&str, &Path)]) -> std::process::Output {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut command = Command::new(env!("CARGO_BIN_EXE_convlog"));
    command
        .args(args)
        .env_remove("CONVLOG_LOG")
        .env_remove("CONVLOG_TAMPER_KEY_FILE")
        .env_remove("CONVLOG_TAMPER_CHECKPOINT");
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start convlog");
    let mut input = child.stdin.take().expect("stdin is piped");
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().expect("wait for convlog")
}

fn lines(from: usize, count: usize) -> Vec<u8> {
    (from..from + count)
        .map(|index| {
            format!(
                "{{\"type\":\"conversation_recorded\",\"conversation_id\":\"c{index}\",\"entry\":{{\"evaluation_id\":\"e\",\"role\":\"user\",\"content\":\"hi\"}}}}\n"
            )
        })
        .collect::<String>()
        .into_bytes()
}

#[test]
fn append_and_snapshot_write_a_tamper_evident_store_with_the_key_and_sign_checkpoints() {
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("audit.key");
    assert!(run_convlog(&["keygen", path_arg(&key)], b"")
        .status
        .success());
    let public = keys.path().join("audit.key.pub");
    let head = keys.path().join("store.head");
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");

    // --tamper-key creates the store tamper-evident; --checkpoint signs at the end.
    let args = [
        "append",
        path_arg(&store),
        "--tamper-key",
        path_arg(&key),
        "--checkpoint",
        path_arg(&head),
    ];
    let output = run_with_env(&args, &lines(0, 3), &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("checkpoint of LSN 3 signed"),
        "{}",
        stderr(&output)
    );
    assert_eq!(convlog::tamper::Checkpoint::load(&head).unwrap().lsn, 3);

    // Without the key the store refuses to be written, and says how.
    let output = run_with_env(&["append", path_arg(&store)], &lines(3, 1), &[]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("is tamper-evident"),
        "{}",
        stderr(&output)
    );
    // A checkpoint file without a key is refused.
    let args = ["append", path_arg(&store), "--checkpoint", path_arg(&head)];
    let output = run_with_env(&args, &lines(3, 1), &[]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("without a tamper key"),
        "{}",
        stderr(&output)
    );

    // The environment variables do the same, for every writing command.
    let env = [
        ("CONVLOG_TAMPER_KEY_FILE", key.as_path()),
        ("CONVLOG_TAMPER_CHECKPOINT", head.as_path()),
    ];
    let output = run_with_env(&["append", path_arg(&store)], &lines(3, 2), &env);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(convlog::tamper::Checkpoint::load(&head).unwrap().lsn, 5);
    let output = run_with_env(&["snapshot", path_arg(&store)], b"", &env);
    assert!(output.status.success(), "{}", stderr(&output));

    // The whole store, its snapshot included, verifies with the key; the
    // log up to the checkpoint with the public key alone.
    let args = [
        "verify",
        path_arg(&store),
        "--key",
        path_arg(&key),
        "--head",
        path_arg(&head),
    ];
    let output = run_with_env(&args, b"", &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("5 frame(s) authenticated by the key"),
        "{}",
        stdout(&output)
    );
    assert!(
        stdout(&output).contains("1 snapshot(s)"),
        "{}",
        stdout(&output)
    );
    let args = [
        "verify",
        path_arg(&store),
        "--public",
        path_arg(&public),
        "--head",
        path_arg(&head),
    ];
    let output = run_with_env(&args, b"", &[]);
    assert!(output.status.success(), "{}", stderr(&output));
}

/// `convlog erase` writes an erasure event, so on a store both encrypted and
/// tamper-evident it needs the tamper key like any writer: without it the
/// error names the flag and the variable that give it; with `--tamper-key`
/// and `--checkpoint` the erasure is appended, signed, and verifies.
#[test]
fn erase_on_a_tamper_evident_encrypted_store_takes_the_tamper_key_and_signs_the_erasure() {
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("audit.key");
    let store_key = keys.path().join("store.key");
    assert!(run_convlog(&["keygen", path_arg(&key)], b"")
        .status
        .success());
    assert!(
        run_convlog(&["keygen", "--encryption", path_arg(&store_key)], b"")
            .status
            .success()
    );
    let head = keys.path().join("store.head");
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let encrypted = [("CONVLOG_KEY_FILE", store_key.as_path())];
    let args = [
        "append",
        path_arg(&store),
        "--tamper-key",
        path_arg(&key),
        "--checkpoint",
        path_arg(&head),
    ];
    let output = run_with_env(&args, &lines(0, 2), &encrypted);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(convlog::tamper::Checkpoint::load(&head).unwrap().lsn, 4);

    // Without the tamper key: refused, nothing written, and told how.
    let erase = ["erase", path_arg(&store), "--conversation", "c0"];
    let output = run_with_env(&erase, b"", &encrypted);
    assert_eq!(output.status.code(), Some(1));
    let said = stderr(&output);
    assert!(said.contains("is tamper-evident"), "{said}");
    assert!(
        said.contains("--tamper-key") && said.contains("CONVLOG_TAMPER_KEY_FILE"),
        "the error names the tamper key's flag and variable: {said}"
    );
    let output = run_with_env(
        &[
            "export",
            path_arg(&store),
            "--conversation",
            "c0",
            "--format",
            "jsonl",
        ],
        b"",
        &encrypted,
    );
    assert!(
        output.status.success(),
        "c0 is still readable: {}",
        stderr(&output)
    );

    // With it: erased, and the erasure is covered by a new checkpoint.
    let mut args = erase.to_vec();
    args.extend([
        "--tamper-key",
        path_arg(&key),
        "--checkpoint",
        path_arg(&head),
    ]);
    let output = run_with_env(&args, b"", &encrypted);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("\"erased\": \"c0\""),
        "{}",
        stdout(&output)
    );
    assert_eq!(convlog::tamper::Checkpoint::load(&head).unwrap().lsn, 5);
    let args = [
        "verify",
        path_arg(&store),
        "--key",
        path_arg(&key),
        "--head",
        path_arg(&head),
    ];
    let output = run_with_env(&args, b"", &encrypted);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("LSN 5: signature ok"),
        "{}",
        stdout(&output)
    );
}
