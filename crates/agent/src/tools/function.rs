//! Host tools written as closures: [`FunctionTool`].
//!
//! ```
//! use convlog_agent::tools::{FunctionTool, ToolContext, ToolError, Toolset};
//! use serde_json::json;
//!
//! #[derive(serde::Deserialize)]
//! struct Add {
//!     a: i64,
//!     b: i64,
//! }
//!
//! let toolset = Toolset::new()
//!     // The raw form: the arguments as the model sent them.
//!     .with(FunctionTool::new(
//!         "echo",
//!         "Returns its arguments unchanged",
//!         json!({"type": "object", "properties": {}}),
//!         |arguments: String, _context: ToolContext| async move { Ok(arguments) },
//!     ))
//!     // The typed form: the arguments parsed into `Add` first (bad
//!     // arguments fail the call with an error saying why).
//!     .with(FunctionTool::typed(
//!         "add",
//!         "Adds two integers",
//!         json!({
//!             "type": "object",
//!             "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
//!             "required": ["a", "b"]
//!         }),
//!         |add: Add, _context: ToolContext| async move {
//!             let sum = add.a.checked_add(add.b).ok_or_else(|| ToolError("overflow".into()))?;
//!             Ok(sum.to_string())
//!         },
//!     ));
//! assert_eq!(toolset.len(), 2);
//! ```
//!
//! The closure gets owned arguments and context (a `String` and a
//! [`ToolContext`]) and returns a `Send + 'static` future, so it can be
//! `async move { ... }` and the tool can run on any thread of the runtime.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{parse_arguments, Tool, ToolContext, ToolError, ToolSpec};
use crate::client::BoxFuture;

type Function =
    dyn Fn(String, ToolContext) -> BoxFuture<'static, Result<String, ToolError>> + Send + Sync;

/// A [`Tool`] made of a name, a description, a parameter schema and an
/// async closure.
#[derive(Clone)]
pub struct FunctionTool {
    spec: ToolSpec,
    function: Arc<Function>,
}

impl fmt::Debug for FunctionTool {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("FunctionTool")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl FunctionTool {
    /// A tool that calls `function` with the model's arguments as it sent
    /// them (JSON text that may not be valid) and the call's context.
    /// `parameters` is the JSON Schema of the arguments (an object schema).
    pub fn new<F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
        function: F,
    ) -> FunctionTool
    where
        F: Fn(String, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, ToolError>> + Send + 'static,
    {
        FunctionTool {
            spec: ToolSpec {
                name: name.into(),
                description: description.into(),
                parameters,
            },
            function: Arc::new(move |arguments, context| Box::pin(function(arguments, context))),
        }
    }

    /// A tool whose arguments are parsed into `T` before `function` sees
    /// them: arguments that are not a JSON object, or that do not fit `T`,
    /// fail the call with an error saying so (shown to the model, which
    /// can correct itself) and `function` is not called. Empty arguments
    /// count as `{}`.
    pub fn typed<T, F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
        function: F,
    ) -> FunctionTool
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(T, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, ToolError>> + Send + 'static,
    {
        let name = name.into();
        let tool_name = name.clone();
        FunctionTool::new(name, description, parameters, move |arguments, context| {
            let parsed = parse_arguments(&tool_name, &arguments).and_then(|object| {
                serde_json::from_value::<T>(Value::Object(object)).map_err(|error| {
                    ToolError(format!(
                        "the arguments of tool `{tool_name}` do not fit its parameters: {error}"
                    ))
                })
            });
            let call = parsed.map(|typed| function(typed, context));
            async move { call?.await }
        })
    }
}

impl Tool for FunctionTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call<'a>(
        &'a self,
        arguments: &'a str,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        (self.function)(arguments.to_owned(), context.clone())
    }
}
