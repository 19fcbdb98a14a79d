//! `convlog serve` as a child process for the command's server tests: start
//! it on a free loopback port, and talk HTTP/1.1 to it with a plain socket
//! (one connection per request, so a killed server shows as an I/O error,
//! not as a client's retry).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::path_arg;

/// The bearer token every request carries; the tests' configs map its
/// hash to the user `alice`.
pub const TOKEN: &str = "alice-token";

/// The hex SHA-256 of [`TOKEN`], as a server config's `token_sha256`.
pub fn token_hash() -> String {
    convlog_server::config::hash_token(TOKEN)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Writes `DIR/server.toml`: one agent whose model no test calls (an
/// unreachable upstream) and the user `alice` with [`TOKEN`]; its path.
pub fn write_config(dir: &Path) -> PathBuf {
    let path = dir.join("server.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[[agents]]
id = "assistant"
provider = "openai-compatible"
model = "none"
base_url = "http://127.0.0.1:9/v1"

[[users]]
id = "alice"
token_sha256 = "{}"
"#,
            token_hash()
        ),
    )
    .unwrap();
    path
}

/// A running `convlog serve` and its base URL.
pub struct Serving {
    pub child: Child,
    pub url: String,
}

/// Starts `convlog serve STORE --config CONFIG` on a free loopback port and
/// waits for its `listening on` line.
pub fn serve(store: &Path, config: &Path) -> Serving {
    serve_with_env(store, config, &[])
}

/// [`serve`] with the variables `env` set for the server.
pub fn serve_with_env(store: &Path, config: &Path, env: &[(&str, &str)]) -> Serving {
    let mut child = Command::new(env!("CARGO_BIN_EXE_convlog"))
        .args([
            "serve",
            path_arg(store),
            "--listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(config)
        .env_remove("CONVLOG_LOG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start convlog serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    let address = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("expected `listening on ADDR`, got {line:?}"))
        .to_string();
    // Keep draining its standard error so that it never blocks on it.
    std::thread::spawn(move || for _ in lines.lines() {});
    Serving {
        child,
        url: format!("http://{address}"),
    }
}

/// One HTTP/1.1 request over a new connection (`Connection: close`), with
/// [`TOKEN`]; the status and the JSON body.
pub fn request(method: &str, url: &str, body: Option<Value>) -> std::io::Result<(u16, Value)> {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut stream = std::net::TcpStream::connect(host)?;
    let body = body.map(|body| body.to_string()).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line in {answer:?}")))?;
    let json = answer
        .split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str(body).ok())
        .ok_or_else(|| std::io::Error::other(format!("no JSON body in {answer:?}")))?;
    Ok((status, json))
}

/// `GET url`, asserting 200; the JSON body.
pub fn get(url: &str) -> Value {
    let (status, body) = request("GET", url, None).unwrap();
    assert_eq!(status, 200, "{body}");
    body
}
