//! Tools served by an MCP server: [`McpServer`] starts one as a child
//! process speaking MCP over its standard input and output (the `stdio`
//! transport, by the `rmcp` crate), lists its tools, and exposes each as a
//! [`Tool`] ([`McpTool`]).
//!
//! ```no_run
//! # async fn example() -> Result<(), convlog_agent::tools::McpError> {
//! use convlog_agent::tools::{McpServer, McpServerOptions, Toolset};
//!
//! let files = McpServer::spawn_with(
//!     "npx",
//!     ["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"],
//!     McpServerOptions::new().env("NODE_ENV", "production"),
//! )
//! .await?;
//! let toolset = Toolset::new().with_mcp_prefixed(&files, "files_");
//! # Ok(())
//! # }
//! ```
//!
//! What a call does:
//! - the model's arguments must be a JSON object (empty counts as `{}`);
//!   anything else fails the call with an error saying so, and the server
//!   is not asked;
//! - a result with `isError: true` is a [`ToolError`] carrying its text;
//! - the text blocks of a result are joined with newlines; other content is
//!   described, e.g. `[image/png, 1234 bytes]` (a result with no content
//!   but structured content gives that JSON);
//! - a protocol error from the server is a [`ToolError`] with its message;
//! - a server that exits or crashes, before or during a call, makes the
//!   call fail with "MCP server `…` is gone", its exit status and the last
//!   lines it wrote to standard error; it does not hang;
//! - a call cancelled by the [`Toolset`](super::Toolset) timeout sends the
//!   server `notifications/cancelled`.
//!
//! The child runs in a process group of its own. It is killed (SIGKILL,
//! with every process left in its group) when the [`McpServer`] and every
//! [`McpTool`] taken from it are dropped, or at once by
//! [`McpServer::shutdown`]; a server that exits by itself takes what is
//! left of its group with it. If the tokio runtime goes away first, the
//! child itself is killed as its handle is dropped. Its standard error is read
//! continuously (the lines are logged with `tracing` at debug level) and the
//! last [`STDERR_TAIL_BYTES`] are kept for error messages.
//!
//! Only the stdio transport is built in (the streamable HTTP transport
//! needs more `rmcp` features and dependencies).

use std::ffi::OsStr;
use std::fmt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, RequestMetaObject, ResourceContents,
};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::ServiceExt;
use serde_json::{Map, Value};
use tokio::io::AsyncReadExt;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::{oneshot, watch};

use super::{parse_arguments, Tool, ToolContext, ToolError, ToolSpec};
use crate::client::BoxFuture;

/// How long [`McpServer::spawn`] waits for the server to answer the MCP
/// handshake and list its tools, unless
/// [`McpServerOptions::startup_timeout`] says otherwise.
pub const DEFAULT_MCP_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How much of the server's standard error is kept for error messages (the
/// last bytes written).
pub const STDERR_TAIL_BYTES: usize = 4096;

/// After the connection to a server closes, how long a failing call waits
/// for the process's exit status and the end of its standard error to put
/// them in the error (the call fails either way).
pub const EXIT_STATUS_WAIT: Duration = Duration::from_secs(2);

/// How an MCP server is started, beyond its command and arguments.
#[derive(Debug, Clone)]
pub struct McpServerOptions {
    env: Vec<(String, String)>,
    current_dir: Option<PathBuf>,
    startup_timeout: Duration,
}

impl Default for McpServerOptions {
    fn default() -> McpServerOptions {
        McpServerOptions {
            env: Vec::new(),
            current_dir: None,
            startup_timeout: DEFAULT_MCP_STARTUP_TIMEOUT,
        }
    }
}

impl McpServerOptions {
    /// The process inherits this process's environment and working
    /// directory; the startup timeout is [`DEFAULT_MCP_STARTUP_TIMEOUT`].
    pub fn new() -> McpServerOptions {
        McpServerOptions::default()
    }

    /// Sets an environment variable of the server process (on top of the
    /// inherited environment).
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> McpServerOptions {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Sets the server process's working directory.
    pub fn current_dir(mut self, directory: impl Into<PathBuf>) -> McpServerOptions {
        self.current_dir = Some(directory.into());
        self
    }

    /// Sets how long the server has to complete the handshake and list its
    /// tools.
    pub fn startup_timeout(mut self, timeout: Duration) -> McpServerOptions {
        self.startup_timeout = timeout;
        self
    }
}

/// Starting an MCP server or asking it something failed.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The process could not be started.
    #[error("cannot start MCP server `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The process started but did not become a working MCP server (it
    /// exited, answered something else, or did not answer in time).
    #[error("MCP server `{command}` did not start: {message}")]
    Startup {
        /// The command line.
        command: String,
        /// What happened, with the server's last standard error if any.
        message: String,
    },
    /// A request to a running server failed.
    #[error("MCP server `{command}`: {message}")]
    Request {
        /// The command line.
        command: String,
        /// What happened.
        message: String,
    },
}

/// A running MCP server (a child process) and the tools it offers.
///
/// Cloning shares the same process.
#[derive(Clone)]
pub struct McpServer {
    shared: Arc<Shared>,
    tools: Arc<Mutex<Vec<RemoteTool>>>,
}

impl fmt::Debug for McpServer {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("McpServer")
            .field("command", &self.shared.command)
            .field("pid", &self.shared.pid)
            .finish_non_exhaustive()
    }
}

/// One tool as the server describes it.
#[derive(Debug, Clone)]
struct RemoteTool {
    name: String,
    description: String,
    parameters: Value,
}

/// What the server's handle, clones and tools share.
struct Shared {
    /// The command line, for messages.
    command: String,
    pid: Option<u32>,
    service: RunningService<RoleClient, ()>,
    process: ProcessWatch,
    /// Dropping or sending on it makes the watcher kill the child.
    kill: Mutex<Option<oneshot::Sender<()>>>,
}

/// What is known about the child process.
#[derive(Clone)]
struct ProcessWatch {
    /// Set once the process has ended: how.
    exit: watch::Receiver<Option<String>>,
    /// The last bytes of its standard error.
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Set once its standard error has reached its end.
    stderr_closed: watch::Receiver<bool>,
}

impl ProcessWatch {
    /// How the process ended, waiting at most `wait` for it to end.
    async fn exit_status(&self, wait: Duration) -> Option<String> {
        let mut exit = self.exit.clone();
        let ended = tokio::time::timeout(wait, exit.wait_for(Option::is_some)).await;
        match ended {
            Ok(Ok(status)) => status.clone(),
            _ => None,
        }
    }

    /// Resolves once the process has ended.
    async fn ended(&self) {
        let mut exit = self.exit.clone();
        // An error means the watcher is gone, which it is only once the
        // process has been reaped or killed.
        let _ = exit.wait_for(Option::is_some).await;
    }

    /// The last lines of standard error, for a message ("" when none),
    /// waiting at most `wait` for the process to have closed it (so that
    /// its last words before exiting are in).
    async fn stderr_tail(&self, wait: Duration) -> String {
        let mut closed = self.stderr_closed.clone();
        let _ = tokio::time::timeout(wait, closed.wait_for(|closed| *closed)).await;
        let tail = self
            .stderr
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let text = String::from_utf8_lossy(&tail);
        let text = text.trim();
        if text.is_empty() {
            String::new()
        } else {
            format!("; its last standard error: {text}")
        }
    }
}

impl McpServer {
    /// Starts `command` with `args`, completes the MCP handshake over its
    /// standard input and output, and lists its tools.
    pub async fn spawn<I, S>(command: &str, args: I) -> Result<McpServer, McpError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        McpServer::spawn_with(command, args, McpServerOptions::new()).await
    }

    /// [`McpServer::spawn`] with an environment, a working directory or a
    /// startup timeout.
    pub async fn spawn_with<I, S>(
        command: &str,
        args: I,
        options: McpServerOptions,
    ) -> Result<McpServer, McpError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<S> = args.into_iter().collect();
        let mut label = command.to_owned();
        for arg in &args {
            label.push(' ');
            label.push_str(&arg.as_ref().to_string_lossy());
        }
        let (stdin, stdout, pid, process, kill) = start_process(command, &args, &options, &label)?;

        // A failure: what happened, and whether the connection closed.
        let startup = async {
            let service = ()
                .serve((stdout, stdin))
                .await
                .map_err(|error| (format!("the handshake failed ({error})"), true))?;
            let tools = list_tools(&service)
                .await
                .map_err(|error| (format!("listing its tools failed ({error})"), true))?;
            Ok::<_, (String, bool)>((service, tools))
        };
        let started = tokio::select! {
            biased;
            started = tokio::time::timeout(options.startup_timeout, startup) => match started {
                Ok(started) => started,
                Err(_) => Err((
                    format!(
                        "it did not answer the handshake and list its tools within {} s",
                        options.startup_timeout.as_secs_f64()
                    ),
                    false,
                )),
            },
            () = process.ended() => Err(("it ended during the handshake".to_owned(), true)),
        };
        let (service, tools) = match started {
            Ok(started) => started,
            Err((message, closed)) => {
                // A server that closed the connection has likely exited:
                // its exit status and last words say why. Dropping `kill`
                // kills it if not.
                let status = if closed {
                    process.exit_status(EXIT_STATUS_WAIT).await
                } else {
                    None
                };
                drop(kill);
                let status = match status {
                    Some(status) => Some(status),
                    None => process.exit_status(EXIT_STATUS_WAIT).await,
                };
                let status = status
                    .map(|status| format!("; {status}"))
                    .unwrap_or_default();
                return Err(McpError::Startup {
                    command: label,
                    message: format!(
                        "{message}{status}{}",
                        process.stderr_tail(EXIT_STATUS_WAIT).await
                    ),
                });
            }
        };
        Ok(McpServer {
            shared: Arc::new(Shared {
                command: label,
                pid,
                service,
                process,
                kill: Mutex::new(Some(kill)),
            }),
            tools: Arc::new(Mutex::new(tools)),
        })
    }

    /// The command line it was started with.
    pub fn command(&self) -> &str {
        &self.shared.command
    }

    /// The child's process id, as started (`None` if the OS did not say).
    pub fn pid(&self) -> Option<u32> {
        self.shared.pid
    }

    /// Asks the server for its tools again (they may change while it
    /// runs), remembers them for [`McpServer::tools`], and returns their
    /// specs.
    pub async fn list_tools(&self) -> Result<Vec<ToolSpec>, McpError> {
        let listed = tokio::select! {
            biased;
            listed = list_tools(&self.shared.service) => listed,
            () = self.shared.process.ended() => Err(ServiceError::TransportClosed),
        };
        let tools = match listed {
            Ok(tools) => tools,
            Err(error) => {
                let message = match error {
                    ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                        self.shared.gone().await.0
                    }
                    other => format!("listing its tools failed: {other}"),
                };
                return Err(McpError::Request {
                    command: self.shared.command.clone(),
                    message,
                });
            }
        };
        let specs = tools.iter().map(|tool| tool.spec("")).collect();
        *self
            .tools
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = tools;
        Ok(specs)
    }

    /// Its tools as last listed, each a [`Tool`] under its own name, made
    /// one every provider accepts ([`super::portable_tool_name`]; the
    /// server is still called with its own).
    pub fn tools(&self) -> Vec<McpTool> {
        self.tools_prefixed("")
    }

    /// Its tools as last listed, each named `prefix` + its name (made
    /// portable, as for [`McpServer::tools`]).
    pub fn tools_prefixed(&self, prefix: &str) -> Vec<McpTool> {
        let tools = self
            .tools
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        tools
            .iter()
            .map(|tool| McpTool {
                shared: Arc::clone(&self.shared),
                spec: tool.spec(prefix),
                remote_name: tool.name.clone(),
            })
            .collect()
    }

    /// Kills the server now and waits for it to end, whatever still holds
    /// its tools (their calls then fail saying the server is gone).
    pub async fn shutdown(&self) {
        let kill = self
            .shared
            .kill
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        drop(kill);
        self.shared.process.ended().await;
    }
}

/// Kills every process left in the process group the server led.
#[cfg(unix)]
fn kill_process_group(leader: Option<u32>) {
    use nix::sys::signal::{killpg, Signal};
    use nix::unistd::Pid;
    if let Some(group) = leader.and_then(|leader| i32::try_from(leader).ok()) {
        // ESRCH (nothing left in the group) is the usual answer.
        let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
    }
}

#[cfg(not(unix))]
fn kill_process_group(_leader: Option<u32>) {}

/// A started child: its standard input and output, its pid, what is known
/// of it, and the sender whose drop kills it.
type Started = (
    ChildStdin,
    ChildStdout,
    Option<u32>,
    ProcessWatch,
    oneshot::Sender<()>,
);

/// Starts the child and the tasks that watch it.
fn start_process<S: AsRef<OsStr>>(
    command: &str,
    args: &[S],
    options: &McpServerOptions,
    label: &str,
) -> Result<Started, McpError> {
    let mut process = Command::new(command);
    process
        .args(args)
        .envs(options.env.iter().map(|(name, value)| (name, value)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Its own process group, so that whatever it starts is killed with
    // it (a server started by `npx` or a shell is often a grandchild).
    #[cfg(unix)]
    process.process_group(0);
    if let Some(directory) = &options.current_dir {
        process.current_dir(directory);
    }
    let mut child = process.spawn().map_err(|source| McpError::Spawn {
        command: label.to_owned(),
        source,
    })?;
    let pid = child.id();
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        unreachable!("all three standard streams are piped");
    };

    let stderr_tail = Arc::new(Mutex::new(Vec::new()));
    let (stderr_closed_sender, stderr_closed) = watch::channel(false);
    let reader = read_stderr(stderr, Arc::clone(&stderr_tail), label.to_owned());
    tokio::spawn(async move {
        reader.await;
        let _ = stderr_closed_sender.send(true);
    });
    let (exit_sender, exit) = watch::channel(None);
    let (kill, killed) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let status = tokio::select! {
            biased;
            status = child.wait() => match status {
                Ok(status) => format!("it exited ({status})"),
                Err(error) => format!("waiting for it failed ({error})"),
            },
            _ = killed => {
                kill_process_group(pid);
                let _ = child.kill().await;
                "it was shut down".to_owned()
            }
        };
        // What it started goes with it.
        kill_process_group(pid);
        let _ = exit_sender.send(Some(status));
    });
    let process = ProcessWatch {
        exit,
        stderr: stderr_tail,
        stderr_closed,
    };

    Ok((stdin, stdout, pid, process, kill))
}

impl RemoteTool {
    fn spec(&self, prefix: &str) -> ToolSpec {
        ToolSpec {
            name: super::portable_tool_name(&format!("{prefix}{}", self.name)),
            description: self.description.clone(),
            parameters: self.parameters.clone(),
        }
    }
}

async fn list_tools(
    service: &RunningService<RoleClient, ()>,
) -> Result<Vec<RemoteTool>, ServiceError> {
    let tools = service.list_all_tools().await?;
    Ok(tools
        .into_iter()
        .map(|tool| RemoteTool {
            name: tool.name.into_owned(),
            description: tool
                .description
                .map(|description| description.into_owned())
                .or(tool.title)
                .unwrap_or_default(),
            parameters: Value::Object((*tool.input_schema).clone()),
        })
        .collect())
}

/// Reads the server's standard error to its end: logs each line and keeps
/// the last [`STDERR_TAIL_BYTES`].
async fn read_stderr(mut stderr: ChildStderr, tail: Arc<Mutex<Vec<u8>>>, command: String) {
    let mut buffer = vec![0_u8; 4096];
    loop {
        let read = match stderr.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        let chunk = &buffer[..read];
        for line in String::from_utf8_lossy(chunk).lines() {
            tracing::debug!(server = %command, "MCP server stderr: {line}");
        }
        let mut tail = tail.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        tail.extend_from_slice(chunk);
        let excess = tail.len().saturating_sub(STDERR_TAIL_BYTES);
        tail.drain(..excess);
    }
}

impl Shared {
    /// The message for a call to a server that is gone.
    async fn gone(&self) -> ToolError {
        let status = self
            .process
            .exit_status(EXIT_STATUS_WAIT)
            .await
            .unwrap_or_else(|| "its connection closed".to_owned());
        ToolError(format!(
            "MCP server `{}` is gone: {status}{}",
            self.command,
            self.process.stderr_tail(EXIT_STATUS_WAIT).await
        ))
    }

    async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        context: &ToolContext,
    ) -> Result<String, ToolError> {
        let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        params.meta = Some(call_meta(context));
        let called = tokio::select! {
            biased;
            called = self.service.call_tool(params) => called,
            () = self.process.ended() => return Err(self.gone().await),
        };
        match called {
            Ok(result) => render_result(tool, result),
            Err(ServiceError::TransportClosed | ServiceError::TransportSend(_)) => {
                Err(self.gone().await)
            }
            Err(ServiceError::McpError(error)) => Err(ToolError(format!(
                "MCP server `{}` refused the call to `{tool}`: {}",
                self.command, error.message
            ))),
            Err(other) => Err(ToolError(format!(
                "calling `{tool}` on MCP server `{}` failed: {other}",
                self.command
            ))),
        }
    }
}

/// Where the call happens, sent in the request's `_meta` under
/// [`META_PREFIX`] keys: `conversation_id`, `evaluation_id`, `call_id` (the
/// same across a resume: an idempotency key for a server with side
/// effects) and `resumed`.
fn call_meta(context: &ToolContext) -> RequestMetaObject {
    let mut meta = Map::new();
    for (key, value) in [
        (
            "conversation_id",
            Value::from(context.conversation_id.as_str()),
        ),
        ("evaluation_id", Value::from(context.evaluation_id.as_str())),
        ("call_id", Value::from(context.call_id.as_str())),
        ("resumed", Value::from(context.resumed)),
    ] {
        meta.insert(format!("{META_PREFIX}{key}"), value);
    }
    RequestMetaObject::from(meta)
}

/// The prefix of the `_meta` keys a `tools/call` request carries
/// ([`ToolContext`]'s fields): `convlog/call_id` and so on.
pub const META_PREFIX: &str = "convlog/";

/// The text of a `tools/call` result, or its error.
fn render_result(tool: &str, result: CallToolResult) -> Result<String, ToolError> {
    let mut text = result
        .content
        .iter()
        .map(describe_content)
        .collect::<Vec<_>>()
        .join("\n");
    if result.content.is_empty() {
        if let Some(structured) = &result.structured_content {
            text = structured.to_string();
        }
    }
    if result.is_error == Some(true) {
        if text.is_empty() {
            text = format!("tool `{tool}` failed without a message");
        }
        return Err(ToolError(text));
    }
    Ok(text)
}

/// A content block as text: text as it is, anything else described.
fn describe_content(content: &ContentBlock) -> String {
    match content {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => {
            format!("[{}, {} bytes]", image.mime_type, base64_len(&image.data))
        }
        ContentBlock::Audio(audio) => {
            format!("[{}, {} bytes]", audio.mime_type, base64_len(&audio.data))
        }
        ContentBlock::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents { text, .. } => text.clone(),
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => format!(
                "[resource {uri}, {}, {} bytes]",
                mime_type.as_deref().unwrap_or("unknown type"),
                base64_len(blob)
            ),
            #[allow(unreachable_patterns)]
            _ => "[a resource of a kind this client does not know]".to_owned(),
        },
        ContentBlock::ResourceLink(link) => format!("[resource link {} ({})]", link.uri, link.name),
        #[allow(unreachable_patterns)]
        _ => "[content of a kind this client does not know]".to_owned(),
    }
}

/// How many bytes base64 `data` decodes to.
fn base64_len(data: &str) -> usize {
    let digits = data
        .bytes()
        .filter(|byte| !byte.is_ascii_whitespace() && *byte != b'=')
        .count();
    digits * 3 / 4
}

/// One tool of an [`McpServer`], as a [`Tool`].
#[derive(Clone)]
pub struct McpTool {
    shared: Arc<Shared>,
    spec: ToolSpec,
    remote_name: String,
}

impl fmt::Debug for McpTool {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("McpTool")
            .field("spec", &self.spec)
            .field("server", &self.shared.command)
            .finish_non_exhaustive()
    }
}

impl McpTool {
    /// The tool's name on its server (without a prefix).
    pub fn remote_name(&self) -> &str {
        &self.remote_name
    }
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call<'a>(
        &'a self,
        arguments: &'a str,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let arguments = parse_arguments(&self.spec.name, arguments)?;
            self.shared
                .call(&self.remote_name, arguments, context)
                .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(result: Value) -> Result<String, ToolError> {
        render_result("t", serde_json::from_value(result).unwrap())
    }

    #[test]
    fn text_is_joined_and_other_content_described() {
        let result = rendered(serde_json::json!({"content": [
            {"type": "text", "text": "first"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inline"}},
            {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAAAAA==", "mimeType": "application/octet-stream"}},
            {"type": "resource_link", "uri": "file:///c", "name": "c"},
            {"type": "text", "text": "last"}
        ]}));
        assert_eq!(
            result.unwrap(),
            "first\n[image/png, 8 bytes]\n[audio/wav, 3 bytes]\ninline\n\
             [resource file:///b.bin, application/octet-stream, 4 bytes]\n\
             [resource link file:///c (c)]\nlast"
        );
    }

    #[test]
    fn is_error_is_a_tool_error_and_structured_content_stands_in_for_none() {
        let error = rendered(serde_json::json!({
            "content": [{"type": "text", "text": "no such file"}], "isError": true
        }));
        assert_eq!(error, Err(ToolError("no such file".to_owned())));
        let error = rendered(serde_json::json!({"content": [], "isError": true}));
        assert_eq!(
            error,
            Err(ToolError("tool `t` failed without a message".to_owned()))
        );
        let structured = rendered(serde_json::json!({"structuredContent": {"n": 1}}));
        assert_eq!(structured, Ok(r#"{"n":1}"#.to_owned()));
        assert_eq!(
            rendered(serde_json::json!({"content": []})),
            Ok(String::new())
        );
    }
}
