//! Every curl example of docs/server.md, run in order against a server on
//! loopback (alice's token, a fake upstream): each must exit 0 with a 2xx
//! answer (`--fail-with-body`) and print JSON or Prometheus text.

mod support;

use std::process::Command;

use support::{text, TestServer, ALICE};

fn examples() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/server.md"))
        .unwrap();
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```bash") => current = Some(String::new()),
            (Some(block), "```") => {
                if block.contains("$CONVLOG_URL") {
                    blocks.push(block.clone());
                }
                current = None;
            }
            (Some(block), line) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

#[tokio::test(flavor = "multi_thread")]
async fn every_curl_example_of_the_server_doc_runs() {
    if Command::new("curl").arg("--version").output().is_err() {
        eprintln!("SKIPPED: curl is not installed");
        return;
    }
    // Encrypted, so the erase example has a key to destroy; tamper-evident
    // with alice among the auditors, for the checkpoint example (the key and
    // checkpoint file beside the store).
    let keys = tempfile::tempdir().unwrap();
    let key_path = keys.path().join("store.key");
    convlog::erasure::StoreKey::generate_file(&key_path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("audit.key");
    convlog::tamper::TamperKey::generate()
        .unwrap()
        .write(&key)
        .unwrap();
    let extra = format!(
        "[tamper]\nkey_file = {:?}\ncheckpoint_file = {:?}\nauditors = [\"alice\"]\n",
        key.to_str().unwrap(),
        dir.path().join("store.head").to_str().unwrap()
    );
    let server = TestServer::start_keyed(
        support::Upstream::start().await,
        dir,
        false,
        &extra,
        Some(key_path.to_str().unwrap().to_string()),
    )
    .await;
    server.upstream.push((0..8).map(|_| text("ok")));
    let blocks = examples();
    assert!(blocks.len() >= 10, "found {} examples", blocks.len());
    for block in blocks {
        // Each line that starts a curl command is one command; run the block
        // with curl failing on a non-2xx answer.
        let script = format!(
            "set -e\ncurl() {{ command curl --fail-with-body --show-error \"$@\"; echo; }}\n{block}"
        );
        let url = server.url.clone();
        let output = tokio::task::spawn_blocking(move || {
            Command::new("bash")
                .args(["-c", &script])
                .env("CONVLOG_URL", url)
                .env("TOKEN", ALICE)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "example failed:\n{block}\nstdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        for answer in stdout.lines().filter(|line| !line.trim().is_empty()) {
            if answer.starts_with("{\"") {
                serde_json::from_str::<serde_json::Value>(answer)
                    .unwrap_or_else(|error| panic!("{block}: not JSON ({error}): {answer}"));
            }
        }
    }
    // The examples left the context as they say.
    let (status, context) = server.get("/contexts/ctx_123", ALICE).await;
    assert_eq!(status, 200);
    assert_eq!(context["public"], true);
    assert_eq!(context["user_defined"]["title"], "Trip");
    server.stop().await;
}
