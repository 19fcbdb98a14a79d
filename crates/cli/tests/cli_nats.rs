//! The command and `convlog serve` on a store URL
//! (`nats://host:port/STORE`): a real one-node `nats-server` with
//! JetStream on a free loopback port (skipped without one, unless
//! `CONVLOG_REQUIRE_NATS=1`, as CI sets). Commands that read a store
//! directory's files refuse a URL, and an unreachable URL is a clear error.
#![cfg(feature = "nats")]

mod common;

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::serving::{request, serve_with_env, write_config, Serving};
use common::{stderr, stdout};
use serde_json::{json, Value};

/// How long the server may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

struct Nats {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One `nats-server -js` on loopback, or `None` (skip) without the binary.
fn nats_server() -> Option<Nats> {
    let binary = ["/usr/sbin/nats-server", "/usr/local/bin/nats-server"]
        .into_iter()
        .map(PathBuf::from)
        .chain(
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .map(|dir| dir.join("nats-server")),
        )
        .find(|path| path.is_file());
    let Some(binary) = binary else {
        assert!(
            std::env::var("CONVLOG_REQUIRE_NATS").as_deref() != Ok("1"),
            "CONVLOG_REQUIRE_NATS=1 but no nats-server is installed"
        );
        eprintln!("skipping: no nats-server installed");
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let log = dir.path().join("nats.log");
    let child = Command::new(binary)
        .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
        .arg(dir.path().join("js"))
        .arg("-l")
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nats-server");
    let nats = Nats {
        child,
        port,
        _dir: dir,
    };
    let deadline = Instant::now() + READY_TIMEOUT;
    while !std::fs::read_to_string(&log).is_ok_and(|text| text.contains("Server is ready")) {
        assert!(Instant::now() < deadline, "nats-server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(nats)
}

impl Nats {
    fn url(&self, store: &str) -> String {
        format!("nats://127.0.0.1:{}/{store}", self.port)
    }
}

/// Runs `convlog` with a one-replica default (a one-node server).
fn convlog(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_convlog"))
        .args(args)
        .env_remove("CONVLOG_LOG")
        .env_remove("CONVLOG_KEY_FILE")
        .env("CONVLOG_NATS_REPLICAS", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start convlog");
    let _ = child.stdin.take().unwrap().write_all(input);
    child.wait_with_output().unwrap()
}

fn ok(output: &Output) -> String {
    assert!(output.status.success(), "{}", stderr(output));
    stdout(output)
}

fn said(conversation: &str, text: &str) -> String {
    format!(
        r#"{{"type":"conversation_recorded","conversation_id":"{conversation}","entry":{{"evaluation_id":"e1","role":"user","content":"{text}"}}}}"#
    )
}

#[test]
fn append_snapshot_export_and_resume_work_on_a_store_url() {
    let Some(nats) = nats_server() else {
        return;
    };
    let url = nats.url("cli");
    let input = format!("{}\n{}\n", said("c1", "hello"), said("c1", "again"));
    assert_eq!(ok(&convlog(&["append", &url], input.as_bytes())), "1\n2\n");
    let snapshot = ok(&convlog(&["snapshot", &url], b""));
    assert!(
        snapshot.contains(&format!("{url}/snapshots/00000000000000000003.snap")),
        "{snapshot}"
    );
    ok(&convlog(
        &["append", &url],
        format!("{}\n", said("c1", "third")).as_bytes(),
    ));
    let lines = ok(&convlog(
        &["export", &url, "--conversation", "c1", "--format", "jsonl"],
        b"",
    ));
    let contents: Vec<String> = lines
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["content"].to_string())
        .collect();
    assert_eq!(contents, [r#""hello""#, r#""again""#, r#""third""#]);
    let resumed: Value = serde_json::from_str(&ok(&convlog(
        &["resume", &url, "--conversation", "c1"],
        b"",
    )))
    .unwrap();
    assert_eq!(resumed["next_sequence"], 3, "{resumed}");
    // A command that must not create a store does not: a mistyped name.
    let missing = convlog(
        &[
            "export",
            &nats.url("typo"),
            "--conversation",
            "c1",
            "--format",
            "jsonl",
        ],
        b"",
    );
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("no stream convlog-typo"),
        "{}",
        stderr(&missing)
    );
}

#[test]
fn commands_on_a_directorys_files_refuse_a_url_and_an_unreachable_url_is_clear() {
    let url = format!("nats://127.0.0.1:{}/cli", free_port());
    for args in [
        vec!["dump", &url],
        vec!["verify", &url],
        vec!["stats", &url],
        vec!["inspect", &url],
        vec!["tail", &url],
        vec!["backup", &url, "/nonexistent-backup"],
        vec!["erase", &url, "--conversation", "c1"],
        vec!["export", &url, "--conversation", "c1", "--format", "html"],
    ] {
        let output = convlog(&args, b"");
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let message = stderr(&output);
        assert!(
            message.contains("does not take a store URL") && message.contains(&url),
            "{args:?}: {message}"
        );
    }
    // Nothing listens there: the error names the URL and the connection.
    let output = convlog(
        &["export", &url, "--conversation", "c1", "--format", "jsonl"],
        b"",
    );
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.contains("connect to") && message.contains(&url),
        "{message}"
    );
    let bad = convlog(&["append", "nats://127.0.0.1:4222/bad.name"], b"");
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("store name"), "{}", stderr(&bad));
}

fn post(url: &str, body: Value) -> (u16, Value) {
    request("POST", url, Some(body)).unwrap()
}

#[test]
fn serve_runs_on_a_store_url() {
    let Some(nats) = nats_server() else {
        return;
    };
    let url = nats.url("served");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let Serving {
        child: mut server,
        url: base,
    } = serve_with_env(Path::new(&url), &config, &[("CONVLOG_NATS_REPLICAS", "1")]);
    let (status, body) = post(
        &format!("{base}/contexts"),
        json!({"agent_id": "assistant", "context_id": "ctx_1"}),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = post(
        &format!("{base}/context/add-messages"),
        json!({"context_id": "ctx_1", "messages": [{"sender": "human", "message": "kept"}]}),
    );
    assert_eq!(status, 200, "{body}");
    let kill = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    assert!(server.wait().unwrap().success());
    // What the server recorded is in the stream.
    let lines = ok(&convlog(
        &[
            "export",
            &url,
            "--conversation",
            "ctx_1",
            "--format",
            "jsonl",
        ],
        b"",
    ));
    assert!(lines.contains("kept"), "{lines}");

    // An unreachable URL fails the server at start, naming it.
    let nowhere = format!("nats://127.0.0.1:{}/served", free_port());
    let failed = Command::new(env!("CARGO_BIN_EXE_convlog"))
        .args(["serve", &nowhere, "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(1));
    let message = String::from_utf8_lossy(&failed.stderr);
    assert!(
        message.contains("connect to") && message.contains(&nowhere),
        "{message}"
    );
}
