//! `convlog serve` killed with SIGKILL while `/chat` runs wait in a tool
//! call and other clients append events: after a restart every
//! acknowledged append and every recorded step is there, and
//! `/chat/invoke` carries each interrupted run on to its end, running only
//! the unfinished call again.
//!
//! The upstream model is a scripted fake on loopback (a thread answering
//! OpenAI Chat Completions); the tool is the agent crate's MCP test server
//! (`wait_file`, which blocks until the test creates a file). Nothing waits
//! on time: the test waits for states it can see over HTTP.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::serving::{get, request, serve, token_hash};
use serde_json::{json, Value};

/// Contexts whose `/chat` waits in the tool when the server is killed.
const CHATS: usize = 2;
/// Clients appending events at once (each to a context of its own).
const APPENDERS: usize = 4;
/// Appends per client at most (bounded whatever happens).
const APPENDS_PER_CLIENT: usize = 400;
/// Acknowledged appends, in all, before the kill.
const ACKED_BEFORE_KILL: usize = 40;
/// The longest wait for a state the test expects (a bound against hanging,
/// not a timing assumption).
const STATE_WAIT_MAX: Duration = Duration::from_secs(120);

fn mcp_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !ok {
        eprintln!("SKIPPED: python3 cannot import mcp (pip install 'mcp==2.3.0')");
    }
    ok
}

/// The fake upstream: a stateless script, so a resumed run after a restart
/// gets the answers an uninterrupted one would. A request whose last
/// message is the user's gets a `wait_file` call (its id from the number
/// of messages, unique in the conversation); one whose last message is a
/// tool result gets the final answer quoting it.
fn fake_upstream(release: PathBuf) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let release = release.clone();
            std::thread::spawn(move || {
                let _ = answer(stream, &release);
            });
        }
    });
    url
}

fn answer(mut stream: std::net::TcpStream, release: &Path) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let message = if last["role"] == "tool" {
        json!({"role": "assistant", "content": format!("done: {}", last["content"].as_str().unwrap_or(""))})
    } else {
        let arguments = json!({"path": release.display().to_string()}).to_string();
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": format!("call_{}", messages.len()),
            "type": "function",
            "function": {"name": "wait_file", "arguments": arguments},
        }]})
    };
    let finish = if message.get("tool_calls").is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    let reply = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000, "model": "fake",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    })
    .to_string();
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        reply.len()
    )?;
    stream.flush()
}

fn write_config(dir: &Path, upstream: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/mcp/server.py");
    let hash = token_hash();
    let path = dir.join("server.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[[agents]]
id = "assistant"
provider = "openai-compatible"
model = "fake"
base_url = "{upstream}"

[[agents.mcp]]
command = "python3"
args = [{:?}]

[[users]]
id = "alice"
token_sha256 = "{hash}"
"#,
            script.display().to_string()
        ),
    )
    .unwrap();
    path
}

fn post(url: &str, body: Value) -> (u16, Value) {
    request("POST", url, Some(body)).unwrap()
}

/// Waits (bounded) until `check` holds.
fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < STATE_WAIT_MAX, "never saw: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether context `id` has a call whose `running` status is recorded
/// (404 until its first message is).
fn tool_running(url: &str, id: &str) -> bool {
    let (status, resume) = request("GET", &format!("{url}/contexts/{id}/resume"), None).unwrap();
    status == 200
        && resume["unfinished_calls"]
            .as_array()
            .is_some_and(|calls| calls.iter().any(|call| call["call"]["status"] == "running"))
}

#[test]
fn sigkill_during_tool_calls_and_appends_loses_nothing_and_invoke_resumes_the_runs() {
    if !mcp_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let release = dir.path().join("release");
    let upstream = fake_upstream(release.clone());
    let config = write_config(dir.path(), &upstream);
    let mut server = serve(&store, &config);
    let ids: Vec<String> = (0..CHATS)
        .map(|index| format!("chat_{index}"))
        .chain((0..APPENDERS).map(|index| format!("log_{index}")))
        .collect();
    for id in &ids {
        let (status, body) = post(
            &format!("{}/contexts", server.url),
            json!({"agent_id": "assistant", "context_id": id}),
        );
        assert_eq!(status, 201, "{body}");
    }

    // The chats: each ends up waiting in wait_file (its answer never comes:
    // the server is killed).
    let chats: Vec<_> = (0..CHATS)
        .map(|index| {
            let url = format!("{}/chat", server.url);
            std::thread::spawn(move || {
                request(
                    "POST",
                    &url,
                    Some(json!({"context_id": format!("chat_{index}"), "message": format!("task {index}")})),
                )
            })
        })
        .collect();
    // The appenders: each stops at its first failed request.
    let total = Arc::new(AtomicUsize::new(0));
    let acked: Arc<Mutex<Vec<Vec<String>>>> = Arc::new(Mutex::new(vec![Vec::new(); APPENDERS]));
    let appenders: Vec<_> = (0..APPENDERS)
        .map(|index| {
            let url = format!("{}/contexts/log_{index}/events", server.url);
            let total = Arc::clone(&total);
            let acked = Arc::clone(&acked);
            std::thread::spawn(move || {
                for n in 0..APPENDS_PER_CLIENT {
                    let text = format!("a{index}-{n}");
                    let body = json!({"events": [{"type": "conversation_recorded",
                        "conversation_id": format!("log_{index}"),
                        "entry": {"evaluation_id": "log", "role": "user", "content": text}}]});
                    match request("POST", &url, Some(body)) {
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
    for index in 0..CHATS {
        wait_until(&format!("chat_{index} in its tool call"), || {
            tool_running(&server.url, &format!("chat_{index}"))
        });
    }
    wait_until("appends acknowledged", || {
        total.load(Ordering::SeqCst) >= ACKED_BEFORE_KILL
            || appenders.iter().all(|appender| appender.is_finished())
    });
    let recorded: Vec<Value> = (0..CHATS)
        .map(|index| get(&format!("{}/contexts/chat_{index}", server.url))["messages"].clone())
        .collect();
    server.child.kill().unwrap(); // SIGKILL
    server.child.wait().unwrap();
    for chat in chats {
        assert!(
            !matches!(chat.join().unwrap(), Ok((200, _))),
            "a chat waiting in its tool cannot have been answered"
        );
    }
    for appender in appenders {
        appender.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.iter().map(Vec::len).sum::<usize>() >= ACKED_BEFORE_KILL);

    // Restarted: every acknowledged append and every recorded step is there.
    let mut server = serve(&store, &config);
    for (index, texts) in acked.iter().enumerate() {
        let context = get(&format!("{}/contexts/log_{index}", server.url));
        let stored: Vec<&str> = context["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|message| message["message"].as_str().unwrap())
            .collect();
        assert!(stored.len() >= texts.len());
        assert_eq!(&stored[..texts.len()], texts.as_slice(), "log_{index}");
    }
    for (index, before) in recorded.iter().enumerate() {
        let messages = get(&format!("{}/contexts/chat_{index}", server.url))["messages"].clone();
        assert_eq!(&messages, before, "chat_{index}");
        assert_eq!(
            messages[0],
            json!({"sender": "human", "message": format!("task {index}")})
        );
        assert_eq!(messages[1]["type"], "tool_call", "{messages}");
        assert_eq!(messages.as_array().unwrap().len(), 2, "{messages}");
    }

    // invoke carries each run on: the interrupted call runs again (marked
    // resumed), then the model answers.
    std::fs::write(&release, "released").unwrap();
    for (index, before) in recorded.iter().enumerate() {
        let (status, body) = post(
            &format!("{}/chat/invoke", server.url),
            json!({"context_id": format!("chat_{index}")}),
        );
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["response"], "done: released");
        let resumed: Vec<bool> = body["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|event| event["resumed"].as_bool().unwrap_or(false))
            .collect();
        assert_eq!(resumed, [true, false], "{body}");
        let messages = get(&format!("{}/contexts/chat_{index}", server.url))["messages"].clone();
        let mut expected = before.as_array().unwrap().clone();
        let call_id = before[1]["tool_call_id"].clone();
        expected.push(
            json!({"type": "tool_response", "tool_call_id": call_id, "tool_output": "released"}),
        );
        expected.push(json!({"sender": "ai", "message": "done: released"}));
        assert_eq!(messages, Value::Array(expected), "chat_{index}");
    }
    let status = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(server.child.wait().unwrap().success());
}
