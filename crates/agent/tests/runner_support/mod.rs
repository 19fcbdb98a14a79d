//! Test doubles for the runner: a scripted model client (its reply is a
//! function of the entries it is shown), host tools that count their
//! executions, and helpers to compare conversations.
#![allow(dead_code)] // each test binary uses a part

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use convlog::model::{ConversationEntry, Role, ToolCall, ToolStatus};
use convlog::Provider;
use convlog_agent::client::{
    BoxFuture, DeltaSink, ModelClient, ModelError, ModelErrorKind, ModelReply, ModelRequest,
    StreamDelta, Usage,
};
use convlog_agent::{Tool, ToolContext, ToolError, ToolSpec};
use serde_json::json;

/// What the script answers for a view.
pub type Script =
    dyn Fn(&[ConversationEntry]) -> Result<ConversationEntry, ModelError> + Send + Sync;

/// A deterministic model: `script(view)`; every request recorded.
pub struct ScriptedClient {
    script: Box<Script>,
    /// The entries of every request, in order.
    pub requests: Mutex<Vec<Vec<ConversationEntry>>>,
    /// The render options of every request, in order.
    pub renders: Mutex<Vec<convlog::RenderOptions>>,
    /// The names of the tools offered in every request, in order.
    pub offered: Mutex<Vec<Vec<String>>>,
}

impl ScriptedClient {
    pub fn new(
        script: impl Fn(&[ConversationEntry]) -> Result<ConversationEntry, ModelError>
            + Send
            + Sync
            + 'static,
    ) -> Arc<ScriptedClient> {
        Arc::new(ScriptedClient {
            script: Box::new(script),
            requests: Mutex::new(Vec::new()),
            renders: Mutex::new(Vec::new()),
            offered: Mutex::new(Vec::new()),
        })
    }

    pub fn requests(&self) -> Vec<Vec<ConversationEntry>> {
        self.requests.lock().unwrap().clone()
    }
}

impl ModelClient for ScriptedClient {
    fn provider(&self) -> Provider {
        Provider::OpenAiChat
    }

    fn describe(&self) -> String {
        "scripted test model".to_string()
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
        sink: Option<DeltaSink<'a>>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            self.requests.lock().unwrap().push(request.entries.to_vec());
            self.renders.lock().unwrap().push(request.render.clone());
            let names = request.tools.iter().map(|spec| spec.name.clone());
            self.offered.lock().unwrap().push(names.collect());
            let entry = (self.script)(request.entries)?;
            if let Some(sink) = sink {
                if let Some(text) = &entry.content {
                    for piece in text.split_inclusive(' ') {
                        sink(&StreamDelta::Text(piece.to_string()));
                    }
                }
                for (index, call) in entry.tool_calls.iter().enumerate() {
                    sink(&StreamDelta::ToolCall {
                        index,
                        id: Some(call.call_id.clone()),
                        name: Some(call.name.clone()),
                        arguments: call.arguments.clone(),
                    });
                }
            }
            Ok(ModelReply {
                entry,
                usage: Some(Usage {
                    input_tokens: request.entries.len() as u64,
                    output_tokens: 1,
                }),
            })
        })
    }
}

/// The rounds of tool calls the weather script asks for: round `r` calls
/// `weather` once per city of `ROUNDS[r]`, in parallel.
pub const ROUNDS: [&[&str]; 2] = [&["paris", "rome", "oslo"], &["lima", "cairo"]];

/// Counts assistant entries after the last user entry of `view`.
fn rounds_done(view: &[ConversationEntry]) -> usize {
    let start = view
        .iter()
        .rposition(|entry| entry.role == Role::User)
        .unwrap_or(0);
    view[start..]
        .iter()
        .filter(|entry| entry.role == Role::Assistant)
        .count()
}

/// The weather script: one round of parallel calls per `rounds` element
/// after the last user entry, then a final answer naming every result it
/// was shown since that user entry.
pub fn weather_script(
    rounds: &'static [&'static [&'static str]],
) -> impl Fn(&[ConversationEntry]) -> Result<ConversationEntry, ModelError> + Send + Sync {
    move |view| {
        let done = rounds_done(view);
        let user = view
            .iter()
            .rev()
            .find(|entry| entry.role == Role::User)
            .and_then(|entry| entry.content.clone())
            .unwrap_or_default();
        if let Some(cities) = rounds.get(done) {
            let calls = cities.iter().map(|city| {
                ToolCall::new(
                    format!("call_{user_key}_{done}_{city}", user_key = user.len()),
                    "weather",
                    json!({ "city": city }).to_string(),
                )
            });
            let mut entry = ConversationEntry::assistant_calling("", 0, calls);
            entry.content = Some(format!("round {done}"));
            return Ok(entry);
        }
        let start = view
            .iter()
            .rposition(|entry| entry.role == Role::User)
            .unwrap_or(0);
        let results: Vec<String> = view[start..]
            .iter()
            .filter(|entry| entry.role == Role::Tool)
            .map(|entry| entry.content.clone().unwrap_or_default())
            .collect();
        Ok(ConversationEntry::assistant(
            "",
            0,
            format!("answer to {user}: {}", results.join("; ")),
        ))
    }
}

/// A model error as an HTTP client would return it.
pub fn status_error(status: u16, body: &str) -> ModelError {
    ModelError {
        kind: ModelErrorKind::Status {
            status,
            body: body.to_string(),
        },
        attempts: 3,
        url: "http://model.test/v1/chat/completions".to_string(),
    }
}

/// A host tool that answers `{name}: {city} sunny`, counts executions per
/// call id, and remembers which were resumed.
#[derive(Default)]
pub struct CountingTool {
    pub name: String,
    pub executions: Mutex<HashMap<String, usize>>,
    pub resumed: Mutex<Vec<String>>,
    /// Both calls of a batch wait here until each has started, when set.
    pub barrier: Option<Arc<tokio::sync::Barrier>>,
}

impl CountingTool {
    pub fn new(name: &str) -> Arc<CountingTool> {
        Arc::new(CountingTool {
            name: name.to_string(),
            ..CountingTool::default()
        })
    }

    pub fn executions(&self) -> HashMap<String, usize> {
        self.executions.lock().unwrap().clone()
    }

    pub fn total(&self) -> usize {
        self.executions.lock().unwrap().values().sum()
    }
}

/// The result text of a weather call.
pub fn weather_text(arguments: &str) -> String {
    let city = serde_json::from_str::<serde_json::Value>(arguments)
        .ok()
        .and_then(|value| value["city"].as_str().map(str::to_string))
        .unwrap_or_else(|| "?".to_string());
    format!("{city}: sunny")
}

impl Tool for CountingTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: "The weather of a city.".to_string(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }
    }

    fn call<'a>(
        &'a self,
        arguments: &'a str,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            if let Some(barrier) = &self.barrier {
                barrier.wait().await;
            }
            *self
                .executions
                .lock()
                .unwrap()
                .entry(context.call_id.clone())
                .or_default() += 1;
            if context.resumed {
                self.resumed.lock().unwrap().push(context.call_id.clone());
            }
            if arguments.contains("\"fail\"") {
                return Err(ToolError("no weather for fail".to_string()));
            }
            Ok(weather_text(arguments))
        })
    }
}

/// A tool that shares a `CountingTool`'s counters.
pub struct Shared(pub Arc<CountingTool>);

impl Tool for Shared {
    fn spec(&self) -> ToolSpec {
        self.0.spec()
    }

    fn call<'a>(
        &'a self,
        arguments: &'a str,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        self.0.call(arguments, context)
    }
}

/// An entry with what makes it differ between runs (message ids, times,
/// evaluation ids) left out; evaluation ids become their rank.
pub fn normalise(entries: &[ConversationEntry]) -> Vec<String> {
    let mut ranks: BTreeMap<String, usize> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for entry in entries {
        if !order.contains(&entry.evaluation_id) {
            order.push(entry.evaluation_id.clone());
        }
    }
    for (rank, id) in order.iter().enumerate() {
        ranks.insert(id.clone(), rank);
    }
    entries
        .iter()
        .map(|entry| {
            let calls: Vec<String> = entry
                .tool_calls
                .iter()
                .map(|call| {
                    format!(
                        "{}:{}({}) {} {:?}",
                        call.call_id,
                        call.name,
                        call.arguments,
                        call.status.as_str(),
                        call.error
                    )
                })
                .collect();
            format!(
                "e{} #{} t{} {:?} {:?} calls={:?} answers={:?}/{:?} err={} ns={:?} key={:?}",
                ranks[&entry.evaluation_id],
                entry.sequence,
                entry.turn,
                entry.role,
                entry.content,
                calls,
                entry.tool_call_id,
                entry.tool_name,
                entry.is_error,
                entry.prompt_ns,
                entry.prompt_key,
            )
        })
        .collect()
}

/// Panics when a request holds a call no result in it answers, or a
/// result whose call it does not hold.
pub fn assert_no_dangling(requests: &[Vec<ConversationEntry>]) {
    for (number, request) in requests.iter().enumerate() {
        let calls: Vec<(&str, &str)> = request
            .iter()
            .flat_map(|entry| {
                entry
                    .tool_calls
                    .iter()
                    .map(|call| (entry.evaluation_id.as_str(), call.call_id.as_str()))
            })
            .collect();
        let results: Vec<(&str, &str)> = request
            .iter()
            .filter(|entry| entry.role == Role::Tool)
            .map(|entry| {
                (
                    entry.evaluation_id.as_str(),
                    entry.tool_call_id.as_deref().unwrap_or(""),
                )
            })
            .collect();
        for call in &calls {
            assert!(
                results.contains(call),
                "request {number} holds the dangling call {call:?}"
            );
        }
        for result in &results {
            assert!(
                calls.contains(result),
                "request {number} holds the orphan result {result:?}"
            );
        }
    }
}

/// Every call in `entries` is completed or failed.
pub fn all_calls_finished(entries: &[ConversationEntry]) -> bool {
    entries
        .iter()
        .flat_map(|entry| &entry.tool_calls)
        .all(|call| matches!(call.status, ToolStatus::Completed | ToolStatus::Failed))
}
