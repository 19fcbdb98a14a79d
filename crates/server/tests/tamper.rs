//! The server on a tamper-evident store (docs/tamper.md): `[tamper]` gives
//! it the key, `POST /checkpoint` makes and returns a signed checkpoint for
//! the configured auditors only (401 without a token, 403 for others), and
//! the server publishes a last checkpoint when it stops.

mod support;

use convlog::tamper::{self, Checkpoint, TamperKey};
use reqwest::Method;
use serde_json::json;
use support::{TestServer, Upstream, ALICE, BOB};

/// A key file, the checkpoint file and the `[tamper]` lines naming them,
/// in `dir` (beside the store directory, not inside it).
fn tamper_config(dir: &std::path::Path) -> (TamperKey, std::path::PathBuf, String) {
    let key_path = dir.join("audit.key");
    let key = TamperKey::generate().unwrap();
    key.write(&key_path).unwrap();
    let head = dir.join("store.head");
    let extra = format!(
        "[tamper]\nkey_file = {:?}\ncheckpoint_file = {:?}\nauditors = [\"alice\"]\n",
        key_path.to_str().unwrap(),
        head.to_str().unwrap()
    );
    (TamperKey::load(&key_path).unwrap(), head, extra)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auditor_gets_a_signed_checkpoint_others_get_401_and_403() {
    let dir = tempfile::tempdir().unwrap();
    let (key, head, extra) = tamper_config(dir.path());
    let server = TestServer::start_with(Upstream::start().await, dir, false, &extra).await;
    server.create("ctx_audit").await;
    let (status, body) = server
        .post(
            "/context/add-messages",
            ALICE,
            json!({"context_id": "ctx_audit",
                   "messages": [{"sender": "human", "message": "hello"}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    let (status, body) = server.call(Method::POST, "/checkpoint", None, None).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = server
        .call(Method::POST, "/checkpoint", Some(BOB), None)
        .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("auditors"),
        "{body}"
    );

    let (status, body) = server
        .call(Method::POST, "/checkpoint", Some(ALICE), None)
        .await;
    assert_eq!(status, 200, "{body}");
    let (_, health) = server.get("/health", ALICE).await;
    assert_eq!(body["lsn"], health["last_lsn"]);
    // The text is the checkpoint file the server also published.
    let published = Checkpoint::load(&head).unwrap();
    assert_eq!(body["text"].as_str().unwrap(), published.to_text());
    assert_eq!(body["lsn"].as_u64().unwrap(), published.lsn);
    assert_eq!(key.public().check(&published), Ok(()));

    // Stopping publishes a last checkpoint; the store verifies against it
    // with the public key alone.
    server.create("ctx_more").await;
    let dir = server.stop().await;
    let last = Checkpoint::load(&head).unwrap();
    assert!(last.lsn > published.lsn, "{} > {}", last.lsn, published.lsn);
    let store = dir.path().join("store");
    tamper::verify(&store, None, Some(&key.public()), Some(&last)).unwrap();
    tamper::verify(&store, Some(&key), None, Some(&last)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tamper_configured_no_one_may_make_a_checkpoint() {
    let server = TestServer::start(false).await;
    let (status, body) = server
        .call(Method::POST, "/checkpoint", Some(ALICE), None)
        .await;
    assert_eq!(status, 403, "{body}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tamper_evident_store_is_refused_without_its_key_and_a_bad_key_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, extra) = tamper_config(dir.path());
    let server = TestServer::start_with(Upstream::start().await, dir, false, &extra).await;
    let dir = server.stop().await;
    let config =
        convlog_server::Config::parse(&support::config_text("http://127.0.0.1:9/v1", false))
            .unwrap();
    let env = |name: &str| (name == "BOB_TOKEN").then(|| "bob".to_string());
    let refused = convlog_server::Server::open(&dir.path().join("store"), &config, env)
        .await
        .err()
        .expect("a tamper-evident store needs its key");
    assert!(refused.contains("tamper-evident"), "{refused}");

    // A key file others may read is refused, with the file named.
    let loose = dir.path().join("loose.key");
    TamperKey::generate().unwrap().write(&loose).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    let text = format!(
        "[tamper]\nkey_file = {:?}\n{}",
        loose.to_str().unwrap(),
        support::config_text("http://127.0.0.1:9/v1", false)
    );
    let config = convlog_server::Config::parse(&text).unwrap();
    let refused = convlog_server::Server::open(&dir.path().join("store"), &config, env)
        .await
        .err()
        .expect("a loose key file is refused");
    assert!(refused.contains("[tamper] key_file"), "{refused}");
    assert!(refused.contains("chmod 600"), "{refused}");
}
