//! `convlog serve` as a process: it holds the store's lock (a second server
//! fails at start, the read-only commands work beside it), stops cleanly on
//! SIGTERM and SIGINT, and a SIGKILL during concurrent appends loses no
//! acknowledged append.

mod common;

use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::serving::{get, request, serve, write_config};
use common::{path_arg, run_convlog};
use serde_json::{json, Value};

fn post(url: &str, body: Value) -> std::io::Result<(u16, Value)> {
    request("POST", url, Some(body))
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn serve_holds_the_lock_reads_work_beside_it_and_sigterm_stops_it_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let config = write_config(dir.path());
    let mut server = serve(&store, &config);
    let (status, body) = post(
        &format!("{}/contexts", server.url),
        json!({"agent_id": "assistant", "context_id": "ctx_1"}),
    )
    .unwrap();
    assert_eq!(status, 201, "{body}");
    let (status, _) = post(
        &format!("{}/context/add-messages", server.url),
        json!({"context_id": "ctx_1", "messages": [{"sender": "human", "message": "kept"}]}),
    )
    .unwrap();
    assert_eq!(status, 200);
    let health = get(&format!("{}/health", server.url));
    assert_eq!(health["status"], "ok");

    // A second server on the same store fails at start with the lock error.
    let second = Command::new(env!("CARGO_BIN_EXE_convlog"))
        .args([
            "serve",
            path_arg(&store),
            "--listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("is locked by another writer"), "{stderr}");

    // Read-only commands work beside it.
    let dump = run_convlog(&["dump", path_arg(&store), "--conversation", "ctx_1"], b"");
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    assert!(String::from_utf8_lossy(&dump.stdout).contains("kept"));

    // SIGTERM: exit 0, lock released (a writer opens the store).
    signal(&server.child, "TERM");
    let status = server.child.wait().unwrap();
    assert!(status.success(), "{status}");
    let append = run_convlog(&["append", path_arg(&store)], b"");
    assert!(
        append.status.success(),
        "{}",
        String::from_utf8_lossy(&append.stderr)
    );

    // SIGINT too.
    let mut server = serve(&store, &config);
    signal(&server.child, "INT");
    assert!(server.child.wait().unwrap().success());
}

/// Clients appending at once; each stops at its first failed request.
const CLIENTS: usize = 8;
/// Appends per client at most (the loop is bounded whatever happens).
const APPENDS_PER_CLIENT: usize = 400;
/// Acknowledged appends, in all, before the kill.
const ACKED_BEFORE_KILL: usize = 80;

#[test]
fn sigkill_during_concurrent_appends_loses_no_acknowledged_append() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let config = write_config(dir.path());
    let mut server = serve(&store, &config);
    for index in 0..CLIENTS {
        let (status, _) = post(
            &format!("{}/contexts", server.url),
            json!({"agent_id": "assistant", "context_id": format!("ctx_{index}")}),
        )
        .unwrap();
        assert_eq!(status, 201);
    }
    let total = Arc::new(AtomicUsize::new(0));
    let acked: Arc<Mutex<Vec<Vec<String>>>> = Arc::new(Mutex::new(vec![Vec::new(); CLIENTS]));
    let workers: Vec<_> = (0..CLIENTS)
        .map(|index| {
            let url = format!("{}/context/add-messages", server.url);
            let total = Arc::clone(&total);
            let acked = Arc::clone(&acked);
            std::thread::spawn(move || {
                            for n in 0..APPENDS_PER_CLIENT {
                    let text = format!("c{index}-m{n}");
                    let body = json!({"context_id": format!("ctx_{index}"), "messages": [{"sender": "human", "message": text}]});
                    match post(&url, body) {
                        Ok((200, _)) => {
                            acked.lock().unwrap()[index].push(text);
                            total.fetch_add(1, Ordering::SeqCst);
                        }
                        _ => return,
                    }
                }
            })
        })
        .collect();
    while total.load(Ordering::SeqCst) < ACKED_BEFORE_KILL
        && !workers.iter().all(|worker| worker.is_finished())
    {
        std::thread::yield_now();
    }
    server.child.kill().unwrap(); // SIGKILL
    server.child.wait().unwrap();
    for worker in workers {
        worker.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.iter().map(Vec::len).sum::<usize>() >= ACKED_BEFORE_KILL);

    // Restarted: every acknowledged append is there, in order.
    let mut server = serve(&store, &config);
    for (index, texts) in acked.iter().enumerate() {
        let context = get(&format!("{}/contexts/ctx_{index}", server.url));
        let stored: Vec<&str> = context["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|message| message["message"].as_str().unwrap())
            .collect();
        assert!(stored.len() >= texts.len());
        assert_eq!(&stored[..texts.len()], texts.as_slice(), "ctx_{index}");
    }
    signal(&server.child, "TERM");
    assert!(server.child.wait().unwrap().success());
}
