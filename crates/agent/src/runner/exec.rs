//! Running one tool call: on its own task (a panic fails the call, not the
//! runner), within the toolset's per-call timeout.
//!
//! Private and small on purpose: the tools' own `Toolset::call` will
//! replace it.

use std::sync::Arc;
use std::time::Duration;

use crate::tools::{Tool, ToolContext, ToolError};

/// Runs `tool` with `arguments`; a timeout or a panic is a failed call
/// whose text says which.
pub(super) async fn call_tool(
    tool: Arc<dyn Tool>,
    arguments: String,
    context: ToolContext,
    timeout: Duration,
) -> Result<String, ToolError> {
    let name = tool.spec().name;
    let mut task = tokio::spawn(async move { tool.call(&arguments, &context).await });
    match tokio::time::timeout(timeout, &mut task).await {
        Ok(Ok(output)) => output,
        Ok(Err(join)) => Err(ToolError(format!(
            "tool {name} panicked: {}",
            panic_text(join)
        ))),
        Err(_) => {
            task.abort();
            Err(ToolError(format!(
                "tool {name} did not finish within {} ms",
                timeout.as_millis()
            )))
        }
    }
}

fn panic_text(join: tokio::task::JoinError) -> String {
    if !join.is_panic() {
        return join.to_string();
    }
    let payload = join.into_panic();
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "(no message)".to_string()
    }
}
