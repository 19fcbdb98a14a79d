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

/// The body of `GET /contexts/{id}/events/stream?{query}` as alice, read to
/// its end (a `limit` ends it), with its status.
async fn stream_text(server: &TestServer, id: &str, query: &str) -> (u16, String) {
    let response = server
        .http
        .get(format!(
            "{}/contexts/{id}/events/stream?{query}",
            server.url
        ))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// `POST /contexts/{id}/erase` on a running server: only the owner erases,
/// the erasure is recorded with who and why, and from then on every read
/// of the context (get, resume, export, the event stream) and every write
/// answers 410, while the list and the other contexts carry on; the
/// content is sealed at rest and stays unreadable after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_erased_over_http_is_gone_for_every_read_and_recorded() {
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
    for id in ["ctx_gone", "ctx_kept"] {
        server.create(id).await;
        let (status, body) = server
            .post(
                "/context/add-messages",
                ALICE,
                json!({"context_id": id, "messages": [{"sender": "human", "message": SECRET}]}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    // The event stream of an encrypted context shows its events opened
    // (the context's two, the message), and never the store's own key
    // bookkeeping: the `convlog.key_made` event first in the context's
    // first batch (it holds the wrapped half of the context's key).
    let (status, text) = stream_text(&server, "ctx_gone", "from=0&limit=3").await;
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains(SECRET),
        "the stream shows the message: {text}"
    );
    assert!(!text.contains("convlog.sealed"), "{text}");
    assert!(!text.contains("convlog.key_made"), "{text}");

    // Who may not erase: bob (even a public context is its owner's), no
    // token, a context that does not exist; a reason over the limit.
    let (status, body) = server
        .call(
            reqwest::Method::PATCH,
            "/contexts/ctx_gone",
            Some(ALICE),
            Some(json!({"public": true})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = server
        .post("/contexts/ctx_gone/erase", support::BOB, json!({}))
        .await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = server
        .call(
            reqwest::Method::POST,
            "/contexts/ctx_gone/erase",
            None,
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = server
        .post("/contexts/ctx_never/erase", ALICE, json!({}))
        .await;
    assert_eq!(status, 404, "{body}");
    let long = "x".repeat(convlog_server::ERASE_REASON_CHARS_MAX + 1);
    let (status, body) = server
        .post("/contexts/ctx_gone/erase", ALICE, json!({"reason": long}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(server.messages("ctx_gone").await[0]["message"], SECRET);

    let (status, body) = server
        .post(
            "/contexts/ctx_gone/erase",
            ALICE,
            json!({"reason": "ticket 4711"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["context_id"], "ctx_gone");
    assert_eq!(body["erased_by"], "user alice over HTTP: ticket 4711");
    let erased_lsn = body["lsn"].as_u64().unwrap();

    for path in [
        "/contexts/ctx_gone",
        "/contexts/ctx_gone/resume",
        "/contexts/ctx_gone/export?format=openai",
    ] {
        for token in [ALICE, support::BOB] {
            let (status, body) = server.get(path, token).await;
            assert_eq!(status, 410, "{path}: {body}");
            assert!(body["error"].as_str().unwrap().contains("erased"), "{body}");
        }
    }
    let (status, text) = stream_text(&server, "ctx_gone", "from=0&limit=3").await;
    assert_eq!(status, 410, "{text}");
    for (path, body) in [
        (
            "/context/add-messages",
            json!({"context_id": "ctx_gone", "messages": [{"sender": "human", "message": "again"}]}),
        ),
        (
            "/chat",
            json!({"context_id": "ctx_gone", "message": "again"}),
        ),
        ("/contexts/ctx_gone/erase", json!({})),
    ] {
        let (status, body) = server.post(path, ALICE, body).await;
        assert_eq!(status, 410, "{path}: {body}");
    }
    // The list leaves it out; the other context reads as before.
    let (status, body) = server.get("/contexts", ALICE).await;
    assert_eq!(status, 200, "{body}");
    let listed: Vec<&str> = body["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|context| context["context_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["ctx_kept"]);
    assert_eq!(server.messages("ctx_kept").await[0]["message"], SECRET);

    let dir = server.stop().await;
    let store = dir.path().join("store");
    {
        let reader = Store::open_read_only(
            &store,
            StoreOptions::default().encryption(Some(key.clone())),
        )
        .unwrap();
        assert_eq!(reader.erased_conversations(), ["ctx_gone"]);
        let recorded: Vec<convlog::erasure::Erasure> = reader
            .log()
            .iter_from(1)
            .filter_map(|record| {
                let record = record.unwrap();
                let event = record.event().unwrap();
                convlog::erasure::Erasure::from_event(&event)
                    .map(|erasure| (record.lsn, erasure.unwrap()))
            })
            .map(|(lsn, erasure)| {
                assert_eq!(lsn, erased_lsn);
                erasure
            })
            .collect();
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].conversation_id, "ctx_gone");
        assert_eq!(recorded[0].by, "user alice over HTTP: ticket 4711");
    }
    let server = TestServer::start_keyed(Upstream::start().await, dir, false, "", key_file).await;
    let (status, body) = server.get("/contexts/ctx_gone", ALICE).await;
    assert_eq!(status, 410, "{body}");
    let (status, body) = server.get("/contexts", ALICE).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["contexts"].as_array().unwrap().len(), 1, "{body}");
    server.stop().await;
}

/// On a store in the clear there is no key to destroy: 409, and the
/// context is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasing_on_a_store_in_the_clear_is_refused_with_409() {
    let server = TestServer::start(false).await;
    server.create("ctx_plain").await;
    let (status, body) = server
        .post("/contexts/ctx_plain/erase", ALICE, json!({}))
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("not encrypted"),
        "{body}"
    );
    let (status, body) = server.get("/contexts/ctx_plain", ALICE).await;
    assert_eq!(status, 200, "{body}");
    server.stop().await;
}
