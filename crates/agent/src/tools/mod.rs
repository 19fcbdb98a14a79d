//! Tools the model may call: host tools written in Rust ([`Tool`]) and
//! tools served by MCP servers, gathered in a [`Toolset`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::client::BoxFuture;

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
}
