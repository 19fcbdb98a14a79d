//! The runner as message control's generator: the same model + tools loop,
//! recording nothing (message control saves what it returns when asked).

use std::sync::Arc;

use convlog::control::Generator;
use convlog::model::{ConversationEntry, Role, ToolStatus};
use futures_util::future::join_all;
use tokio::runtime::{Handle, RuntimeFlavor};

use super::{view, RunError, Runner};
use crate::client::ModelRequest;
use crate::tools::ToolError;

/// A [`Generator`] over a [`Runner`]: given message control's view, calls
/// the model and runs the tools it asks for (concurrently per response)
/// until a final answer, the step limit, or a call to a tool the runner
/// does not have, and returns every entry it produced in order (assistant
/// entries with their calls completed or failed, results in call order).
/// Nothing is recorded: `MessageControl` saves the entries when
/// `save_ai_messages` is set (an unanswered call then fails its
/// validation, `CallsWithoutResponses`, and nothing is saved).
///
/// `Generator` is synchronous: `generate` blocks the calling thread on
/// the runtime given to [`RunnerGenerator::new`]. Call message control from
/// a thread outside the runtime, from [`tokio::task::spawn_blocking`], or
/// from a multi-thread runtime's worker (it then uses
/// [`tokio::task::block_in_place`]); the thread that drives a
/// current-thread runtime cannot block on it: the generation fails with an
/// error saying so (tokio's refusal, a panic, is caught before the work
/// starts, so its message is also printed by the panic hook).
pub struct RunnerGenerator {
    runner: Arc<Runner>,
    context_id: String,
    handle: Handle,
}

impl std::fmt::Debug for RunnerGenerator {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RunnerGenerator")
            .field("runner", &self.runner)
            .field("context_id", &self.context_id)
            .finish()
    }
}

impl RunnerGenerator {
    /// A generator for context `context_id` (passed to tools as their
    /// conversation), running on `handle`.
    pub fn new(runner: Arc<Runner>, context_id: impl Into<String>, handle: Handle) -> Self {
        RunnerGenerator {
            runner,
            context_id: context_id.into(),
            handle,
        }
    }
}

impl Generator for RunnerGenerator {
    fn generate(&mut self, view: &[ConversationEntry]) -> Result<Vec<ConversationEntry>, String> {
        let work = generate(&self.runner, &self.context_id, view);
        let on_multi_thread = Handle::try_current()
            .is_ok_and(|current| current.runtime_flavor() == RuntimeFlavor::MultiThread);
        if on_multi_thread {
            return tokio::task::block_in_place(|| self.handle.block_on(work))
                .map_err(|error| error.to_string());
        }
        // Outside a runtime, or on a current-thread runtime: a blocking-pool
        // thread may block; the runtime's own thread may not (tokio refuses,
        // by a panic before the work starts, turned into an error here).
        let handle = &self.handle;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handle.block_on(work))) {
            Ok(result) => result.map_err(|error| error.to_string()),
            Err(_) => Err(BLOCKED_RUNTIME.to_string()),
        }
    }
}

/// Why a generation failed on a current-thread runtime's own thread.
const BLOCKED_RUNTIME: &str = "the runner's generator cannot block the thread that drives a \
     current-thread runtime: call message control from spawn_blocking or another thread";

/// The unrecorded loop.
async fn generate(
    runner: &Runner,
    context_id: &str,
    view: &[ConversationEntry],
) -> Result<Vec<ConversationEntry>, RunError> {
    let evaluation_id = view
        .last()
        .map(|entry| entry.evaluation_id.clone())
        .unwrap_or_default();
    let specs = runner.tools.specs();
    let render = runner.options.render();
    let mut generated: Vec<ConversationEntry> = Vec::new();
    for turn in 1..=runner.options.max_steps {
        let mut shown = view.to_vec();
        shown.extend(generated.iter().cloned());
        let shown = view::answered_only(shown);
        let request = ModelRequest {
            entries: &shown,
            tools: &specs,
            render: &render,
        };
        let reply = runner
            .client
            .complete(request, None)
            .await
            .map_err(|error| RunError::Model {
                conversation_id: context_id.to_string(),
                evaluation_id: evaluation_id.clone(),
                error,
            })?;
        let mut assistant = reply.entry;
        assistant.role = Role::Assistant;
        assistant.evaluation_id = evaluation_id.clone();
        assistant.turn = turn;
        let calls = assistant.tool_calls.clone();
        if calls.is_empty() {
            generated.push(assistant);
            break;
        }
        let known = calls
            .iter()
            .filter(|call| runner.tools.get(&call.name).is_some());
        let results = join_all(known.map(|call| {
            let context = Runner::tool_context(context_id, &evaluation_id, &call.call_id, false);
            async move {
                let output = runner
                    .tools
                    .call(&call.name, &call.arguments, &context)
                    .await;
                (call, output)
            }
        }))
        .await;
        let all_known = results.len() == calls.len();
        for call in &mut assistant.tool_calls {
            if let Some((_, output)) = results
                .iter()
                .find(|(done, _)| done.call_id == call.call_id)
            {
                call.status = if output.is_ok() {
                    ToolStatus::Completed
                } else {
                    ToolStatus::Failed
                };
            }
        }
        let sequence = assistant.sequence;
        generated.push(assistant);
        for (call, output) in results {
            let entry = match output {
                Ok(text) => ConversationEntry::tool_result(
                    evaluation_id.as_str(),
                    sequence,
                    &call.call_id,
                    &call.name,
                    text,
                ),
                Err(ToolError(text)) => ConversationEntry::tool_error(
                    evaluation_id.as_str(),
                    sequence,
                    &call.call_id,
                    &call.name,
                    text,
                ),
            };
            generated.push(entry.with_turn(turn));
        }
        if !all_known {
            break;
        }
    }
    Ok(generated)
}
