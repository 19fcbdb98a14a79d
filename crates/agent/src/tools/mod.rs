//! Tools the model may call: host tools written in Rust ([`Tool`]) and
//! tools served by MCP servers, gathered in a [`Toolset`].
//!
//! - A host tool implements [`Tool`], or is made from an async closure
//!   with [`FunctionTool`] (see [`function`]).
//! - An MCP server is started as a child process with [`McpServer::spawn`]
//!   (see [`mcp`]); each of its tools is a [`Tool`] ([`McpTool`]), added
//!   with [`Toolset::with_mcp`] (or [`Toolset::with_mcp_prefixed`] when two
//!   servers offer the same names).
//! - [`Toolset::call`] runs one call by name: an unknown name, a call that
//!   outlives the toolset's timeout and a tool that panics all become a
//!   [`ToolError`] (recorded and shown to the model), never a hung or
//!   crashed runner. [`Toolset::call_all`] runs the parallel calls of one
//!   assistant message concurrently, results in request order.
//!
//! A failed call is a [`ToolError`]: its text is what the model sees, so it
//! says what went wrong in words the model can act on (bad arguments, the
//! tool's own error, a timeout, a server that is gone).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::client::BoxFuture;

pub mod function;
pub mod mcp;

pub use function::FunctionTool;
pub use mcp::{McpError, McpServer, McpServerOptions, McpTool};

/// The longest tool name every provider accepts (OpenAI, Anthropic and
/// Gemini all stop at 64).
pub const TOOL_NAME_BYTES_MAX: usize = 64;

/// Whether every provider accepts `name` as a tool name: 1 to
/// [`TOOL_NAME_BYTES_MAX`] ASCII letters, digits, `_` and `-`, the first a
/// letter or `_` (Gemini's rule; OpenAI and Anthropic allow a subset of
/// what is left).
pub fn is_portable_tool_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    let first_fits = bytes
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_');
    first_fits
        && name.len() <= TOOL_NAME_BYTES_MAX
        && bytes.all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}

/// `name` made a tool name every provider accepts
/// ([`is_portable_tool_name`]); a portable name is returned as it is.
/// Other characters become `_`, a name not starting with a letter or `_`
/// gets a `_` in front, and a name that is still too long is cut and ends
/// with `_` and 8 hex digits of a hash of the whole original name, so two
/// long names that share their start stay apart. MCP servers name tools
/// freely (`files.read`, `github/create_issue`); their tools are offered
/// to the model under this name and called on the server by their own.
pub fn portable_tool_name(name: &str) -> String {
    if is_portable_tool_name(name) {
        return name.to_string();
    }
    let mut portable: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !portable
        .bytes()
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
    {
        portable.insert(0, '_');
    }
    if portable.len() > TOOL_NAME_BYTES_MAX {
        // FNV-1a: stable across runs and builds, unlike the std hasher.
        let hash = name.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
            (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
        });
        portable.truncate(TOOL_NAME_BYTES_MAX - 9);
        portable.push_str(&format!("_{hash:08x}"));
    }
    portable
}

/// What the model is told about a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments (an object schema).
    pub parameters: Value,
}

/// Where a call happens, for tools that care (idempotency keys, logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolContext {
    /// The conversation.
    pub conversation_id: String,
    /// The evaluation.
    pub evaluation_id: String,
    /// The provider's call id: stable across a resume, so a tool with side
    /// effects can use it as an idempotency key.
    pub call_id: String,
    /// The call is being run again after a resume (it started before the
    /// host died, and never finished).
    pub resumed: bool,
}

/// A failed tool call: the text recorded as its error and shown to the
/// model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError(pub String);

impl fmt::Display for ToolError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl std::error::Error for ToolError {}

/// A tool the host runs.
pub trait Tool: Send + Sync {
    /// Its name, description and parameter schema.
    fn spec(&self) -> ToolSpec;

    /// Runs it with the model's `arguments` (the JSON text as the model
    /// sent it, which may not be valid JSON); the result text is recorded
    /// and shown to the model.
    fn call<'a>(
        &'a self,
        arguments: &'a str,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>>;
}

/// The tools offered to the model, by name, with a per-call timeout.
#[derive(Clone)]
pub struct Toolset {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    timeout: Duration,
}

/// The per-call timeout of a new [`Toolset`].
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(120);

impl Default for Toolset {
    fn default() -> Toolset {
        Toolset {
            tools: BTreeMap::new(),
            timeout: DEFAULT_TOOL_TIMEOUT,
        }
    }
}

impl fmt::Debug for Toolset {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Toolset")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Toolset {
    /// No tools, the default timeout.
    pub fn new() -> Toolset {
        Toolset::default()
    }

    /// Adds `tool` (a later tool with the same name replaces it).
    pub fn with(mut self, tool: impl Tool + 'static) -> Toolset {
        self.insert(Arc::new(tool));
        self
    }

    /// Adds a shared tool.
    pub fn insert(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.spec().name, tool);
    }

    /// Sets the per-call timeout (a call that takes longer fails with a
    /// timeout error).
    pub fn timeout(mut self, timeout: Duration) -> Toolset {
        self.timeout = timeout;
        self
    }

    /// The per-call timeout.
    pub fn call_timeout(&self) -> Duration {
        self.timeout
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// What the model is told about each tool, by name.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|tool| tool.spec()).collect()
    }

    /// How many tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// No tools.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Adds every tool of `server` under its own name (a later tool with
    /// the same name replaces an earlier one; see
    /// [`Toolset::with_mcp_prefixed`]). The tools share the server: its
    /// process lives while the [`McpServer`] or any of its tools does.
    pub fn with_mcp(mut self, server: &McpServer) -> Toolset {
        self.insert_mcp(server);
        self
    }

    /// Adds every tool of `server`, each named `prefix` + its name (the
    /// server is still called with the tool's own name).
    pub fn with_mcp_prefixed(mut self, server: &McpServer, prefix: &str) -> Toolset {
        self.insert_mcp_prefixed(server, prefix);
        self
    }

    /// Adds every tool of `server` under its own name.
    pub fn insert_mcp(&mut self, server: &McpServer) {
        self.insert_mcp_prefixed(server, "");
    }

    /// Adds every tool of `server`, each named `prefix` + its name.
    pub fn insert_mcp_prefixed(&mut self, server: &McpServer, prefix: &str) {
        for tool in server.tools_prefixed(prefix) {
            self.insert(Arc::new(tool));
        }
    }

    /// Runs the tool called `name` with the model's `arguments`.
    ///
    /// Fails with a [`ToolError`] when no tool has that name (naming the
    /// tools offered), when the call takes longer than the per-call timeout
    /// (the call is then cancelled: an MCP server is told so), when the tool
    /// panics, and when the tool itself fails. The tool runs in a task of
    /// its own on the current tokio runtime (which must exist); dropping
    /// the returned future cancels it.
    pub fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a str,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let Some(tool) = self.tools.get(name) else {
                return Err(self.unknown_tool(name));
            };
            let tool = Arc::clone(tool);
            let arguments = arguments.to_owned();
            let context = context.clone();
            let mut task = AbortOnDrop(tokio::spawn(async move {
                tool.call(&arguments, &context).await
            }));
            match tokio::time::timeout(self.timeout, &mut task.0).await {
                Ok(Ok(result)) => result,
                Ok(Err(join_error)) if join_error.is_panic() => Err(ToolError(format!(
                    "tool `{name}` panicked: {}",
                    panic_message(join_error.into_panic())
                ))),
                Ok(Err(_cancelled)) => Err(ToolError(format!(
                    "tool `{name}` was cancelled (the runtime is shutting down)"
                ))),
                Err(_elapsed) => Err(self.timed_out(name)),
            }
        })
    }

    /// Runs the tool called `name` like [`Toolset::call`], but in the
    /// caller's task rather than a task of its own: for a call that runs
    /// alone, where a task would only add a hand-off between threads. The
    /// per-call timeout, the panic isolation (a panic is caught and becomes
    /// the same [`ToolError`]) and cancellation on drop are the same. What
    /// differs: a tool that blocks its thread instead of awaiting holds the
    /// caller's thread too, so its timeout can fire only when it yields
    /// (a result it returns without yielding is kept, however late).
    pub(crate) fn call_inline<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a str,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        use futures_util::FutureExt;
        Box::pin(async move {
            let Some(tool) = self.tools.get(name) else {
                return Err(self.unknown_tool(name));
            };
            let call = std::panic::AssertUnwindSafe(tool.call(arguments, context)).catch_unwind();
            match tokio::time::timeout(self.timeout, call).await {
                Ok(Ok(result)) => result,
                Ok(Err(panic)) => Err(ToolError(format!(
                    "tool `{name}` panicked: {}",
                    panic_message(panic)
                ))),
                Err(_elapsed) => Err(self.timed_out(name)),
            }
        })
    }

    fn timed_out(&self, name: &str) -> ToolError {
        ToolError(format!(
            "tool `{name}` timed out after {} s",
            self.timeout.as_secs_f64()
        ))
    }

    /// Runs several calls at once (the parallel tool calls of one
    /// assistant message): each `(name, arguments, context)` as by
    /// [`Toolset::call`], all concurrently, the results in the order of
    /// `calls`.
    pub fn call_all<'a, N, A>(
        &'a self,
        calls: &'a [(N, A, ToolContext)],
    ) -> BoxFuture<'a, Vec<Result<String, ToolError>>>
    where
        N: AsRef<str> + Sync,
        A: AsRef<str> + Sync,
    {
        Box::pin(futures_util::future::join_all(calls.iter().map(
            |(name, arguments, context)| self.call(name.as_ref(), arguments.as_ref(), context),
        )))
    }

    fn unknown_tool(&self, name: &str) -> ToolError {
        if self.tools.is_empty() {
            return ToolError(format!("unknown tool `{name}`: no tools are offered"));
        }
        let offered: Vec<String> = self.tools.keys().map(|name| format!("`{name}`")).collect();
        ToolError(format!(
            "unknown tool `{name}`; the tools offered are {}",
            offered.join(", ")
        ))
    }
}

/// How much of the model's arguments an error message quotes.
pub const ARGUMENTS_EXCERPT_CHARS: usize = 200;

/// The model's `arguments` for tool `tool` as a JSON object, or a
/// [`ToolError`] saying why they are not one (invalid JSON, quoting the
/// start of the text and where it breaks; or another JSON type). Empty or
/// blank arguments count as `{}` (some models send nothing for a tool
/// without parameters).
pub fn parse_arguments(tool: &str, arguments: &str) -> Result<Map<String, Value>, ToolError> {
    if arguments.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(other) => Err(ToolError(format!(
            "the arguments of tool `{tool}` must be a JSON object, not {}: {}",
            json_type(&other),
            excerpt(arguments)
        ))),
        Err(error) => Err(ToolError(format!(
            "the arguments of tool `{tool}` are not valid JSON ({error}): {}",
            excerpt(arguments)
        ))),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn excerpt(text: &str) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(ARGUMENTS_EXCERPT_CHARS).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(message) => (*message).to_owned(),
            Err(_) => "(a panic payload that is not text)".to_owned(),
        },
    }
}

/// Aborts its task when dropped (the caller of [`Toolset::call`] went away).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod name_tests {
    use super::{is_portable_tool_name, portable_tool_name, TOOL_NAME_BYTES_MAX};

    #[test]
    fn portable_names_stay_and_others_become_portable() {
        for name in ["lookup", "get_weather", "_x", "a-b_c9"] {
            assert!(is_portable_tool_name(name), "{name}");
            assert_eq!(portable_tool_name(name), name);
        }
        for (name, portable) in [
            ("files.read/v2", "files_read_v2"),
            ("github:create issue", "github_create_issue"),
            ("9lives", "_9lives"),
            ("-dash", "_-dash"),
            ("", "_"),
            ("météo", "m_t_o"),
        ] {
            assert!(!is_portable_tool_name(name), "{name}");
            assert_eq!(portable_tool_name(name), portable, "{name}");
            assert!(is_portable_tool_name(&portable_tool_name(name)));
        }
    }

    #[test]
    fn long_names_are_cut_and_kept_apart_by_a_hash() {
        let one = format!("{}.one", "x".repeat(70));
        let two = format!("{}.two", "x".repeat(70));
        let (portable_one, portable_two) = (portable_tool_name(&one), portable_tool_name(&two));
        assert_eq!(portable_one.len(), TOOL_NAME_BYTES_MAX);
        assert!(is_portable_tool_name(&portable_one));
        assert_ne!(portable_one, portable_two);
        // Stable: the same name always maps to the same tool name.
        assert_eq!(portable_tool_name(&one), portable_one);
        assert!(!is_portable_tool_name(&"y".repeat(TOOL_NAME_BYTES_MAX + 1)));
    }
}
