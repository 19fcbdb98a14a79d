//! The server on an encrypted store (docs/erasure.md): it opens with the
//! store key `CONVLOG_KEY_FILE` names, serves contexts as on a store in the
//! clear, writes no message content in the clear, and answers an erased
//! context with 410 Gone.

mod support;

use convlog::erasure::StoreKey;
use convlog::{Store, StoreOptions};
use serde_json::json;
use support::{config_text, TestServer, Upstream, ALICE};

const SECRET: &str = "the launch code is 4417-9921";

/// Every file under `dir`, read whole.
fn files_under(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_store_is_served_sealed_and_an_erased_context_is_gone() {
    let keys = tempfile::tempdir().unwrap();
    let key_path = keys.path().join("store.key");
    let key = StoreKey::generate_file(&key_path).unwrap();
    let key_file = Some(key_path.to_str().unwrap().to_string());

    let server = TestServer::start_keyed(
        Upstream::start().await,
        tempfile::tempdir().unwrap(),
        false,
        "",
        key_file.clone(),
    )
    .await;
    server.create("ctx_secret").await;
    let (status, body) = server
        .post(
            "/context/add-messages",
            ALICE,
            json!({"context_id": "ctx_secret",
                   "messages": [{"sender": "human", "message": SECRET}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        server
            .messages("ctx_secret")
            .await
            .to_string()
            .contains(SECRET),
        "the server reads its sealed context back"
    );
    let dir = server.stop().await;
    let store = dir.path().join("store");
    for (path, bytes) in files_under(&store) {
        assert!(
            !bytes
                .windows(SECRET.len())
                .any(|window| window == SECRET.as_bytes()),
            "{} holds the message in the clear",
            path.display()
        );
    }

    // Without the key the server does not start, and says why.
    let config =
        convlog_server::Config::parse(&config_text("http://127.0.0.1:9/v1", false)).unwrap();
    let refused = convlog_server::Server::open(&store, &config, |name| {
        (name == "BOB_TOKEN").then(|| "bob".to_string())
    })
    .await
    .err()
    .expect("an encrypted store does not open without its key");
    assert!(refused.contains("key"), "{refused}");

    // Erased (by the store's own writer, the server stopped), the context
    // is gone for good: 410 with the reason, never 500, 404 or garbage.
    {
        let writer = Store::open(&store, StoreOptions::default().encryption(Some(key))).unwrap();
        writer.erase("ctx_secret", "a test").unwrap();
    }
    let server = TestServer::start_keyed(Upstream::start().await, dir, false, "", key_file).await;
    let (status, body) = server.get("/contexts/ctx_secret", ALICE).await;
    assert_eq!(status, 410, "{body}");
    assert!(body["error"].as_str().unwrap().contains("erased"), "{body}");
    let (status, body) = server
        .post(
            "/context/add-messages",
            ALICE,
            json!({"context_id": "ctx_secret",
                   "messages": [{"sender": "human", "message": "again"}]}),
        )
        .await;
    assert_eq!(status, 410, "{body}");
    server.stop().await;
}
