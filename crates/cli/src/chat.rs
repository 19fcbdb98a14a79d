//! `convlog chat` (one evaluation against a real provider) and `convlog
//! resume --continue` (an interrupted evaluation carried to its end), on
//! the agent runner of `convlog-agent`.
//!
//! Both print what they recorded: a readable line per new entry (or, with
//! `--json`, the entries as JSON lines), then why the run stopped.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use convlog::model::{ConversationEntry, Role, ToolStatus};
use convlog::resume::{PromptIdentity, ResumeOptions};
use convlog::store::StoreOptions;
use convlog_agent::tools::McpServer;
use convlog_agent::{
    ApiKind, ClientConfig, Dialect, HttpClient, RunError, RunEvent, RunOutcome, Runner,
    RunnerOptions, StopReason, StreamDelta, Toolset,
};

use crate::shell::{existing_store, open_store, stdout_closed, Failure};

/// Worker threads of the command's tokio runtime (model calls and tool
/// calls wait on I/O; store work runs on the blocking pool).
const RUNTIME_WORKER_THREADS: usize = 2;

/// The providers `--provider` accepts, as listed in errors and help.
pub const PROVIDERS: &str =
    "openai, openai-responses, anthropic, gemini, ollama, openai-compatible";

/// What talks to the model and which tools it gets: the options `chat`
/// and `resume --continue` share.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// The API: openai, openai-responses, anthropic, gemini, ollama,
    /// openai-compatible (needs --base-url).
    #[arg(long, value_name = "P", value_parser = parse_provider)]
    pub provider: Option<ApiKind>,
    /// The model name, as the provider knows it.
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// The API's base URL (default: the provider's own; Ollama's from
    /// OLLAMA_HOST when set). Required for openai-compatible.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// An extra HTTP header sent with every request (repeatable).
    #[arg(long = "header", value_name = "NAME:VALUE", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// openai-compatible: send the assistant's reasoning back as
    /// `reasoning_content` (DeepSeek, GLM, vLLM).
    #[arg(long)]
    pub reasoning_content: bool,
    /// Request timeout in seconds (for a stream: the longest silence).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: Option<u64>,
    /// Start an MCP server over stdio and offer its tools (repeatable).
    /// CMD is split like a shell does: words, 'single' and "double"
    /// quotes, backslash escapes.
    #[arg(long = "tool-server", value_name = "CMD", value_parser = split_command)]
    pub tool_servers: Vec<Vec<String>>,
    /// How long one tool call may run, in seconds.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub tool_timeout: Option<u64>,
    /// Model calls allowed in the evaluation.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_steps: Option<u32>,
    /// Print the model's text as it arrives.
    #[arg(long, conflicts_with = "json")]
    pub stream: bool,
    /// Print the new entries as JSON lines, then the stop reason as a JSON
    /// line.
    #[arg(long)]
    pub json: bool,
}

impl ModelArgs {
    /// The first of these flags given, if any (for `resume` without
    /// `--continue`, where none applies).
    pub fn first_flag(&self) -> Option<&'static str> {
        [
            (self.provider.is_some(), "--provider"),
            (self.model.is_some(), "--model"),
            (self.base_url.is_some(), "--base-url"),
            (!self.headers.is_empty(), "--header"),
            (self.reasoning_content, "--reasoning-content"),
            (self.timeout.is_some(), "--timeout"),
            (!self.tool_servers.is_empty(), "--tool-server"),
            (self.tool_timeout.is_some(), "--tool-timeout"),
            (self.max_steps.is_some(), "--max-steps"),
            (self.stream, "--stream"),
            (self.json, "--json"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }
}

/// `--provider`: the API kind.
fn parse_provider(text: &str) -> Result<ApiKind, String> {
    match text {
        "openai" => Ok(ApiKind::OpenAiChat),
        "openai-responses" => Ok(ApiKind::OpenAiResponses),
        "anthropic" => Ok(ApiKind::Anthropic),
        "gemini" => Ok(ApiKind::Gemini),
        "ollama" => Ok(ApiKind::Ollama),
        "openai-compatible" => Ok(ApiKind::OpenAiCompatible(Dialect::new())),
        other => Err(format!("unknown provider {other:?} (one of: {PROVIDERS})")),
    }
}

/// `--header NAME:VALUE`.
fn parse_header(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?} is not NAME:VALUE"))?;
    let name = name.trim();
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{text:?}: the header name {name:?} is not a token"));
    }
    Ok((name.to_string(), value.trim().to_string()))
}

/// Splits a command line into words the way a POSIX shell does for plain
/// words, 'single quotes' (literal), "double quotes" (backslash escapes
/// `"`, `\`, `$` and `` ` ``) and backslash escapes outside quotes. No
/// expansion of any kind.
pub fn split_command(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(format!("{text:?}: a ' quote is not closed")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(format!("{text:?}: a \" quote is not closed")),
                        },
                        Some(c) => word.push(c),
                        None => return Err(format!("{text:?}: a \" quote is not closed")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => word.push(c),
                    None => return Err(format!("{text:?}: ends with a lone backslash")),
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err("the tool server command is empty".to_string());
    }
    Ok(words)
}

/// What the runner records besides the model's answers.
pub struct Recording {
    /// `--system`.
    pub system: Option<String>,
    /// `--prompt`.
    pub prompt: Option<PromptIdentity>,
}

/// `convlog chat STORE --conversation ID --provider P --model M MESSAGE`.
pub fn chat(
    dir: &Path,
    conversation: &str,
    message: String,
    recording: Recording,
    args: ModelArgs,
    tamper: &crate::tamper::WriterArgs,
) -> Result<(), Failure> {
    let config = client_config("chat", &args)?;
    let store = Arc::new(open_store(
        dir,
        StoreOptions::new().tamper(tamper.options()?),
    )?);
    let job = Job {
        store: Arc::clone(&store),
        config,
        recording,
        args,
    };
    let outcome = runtime()?.block_on(job.execute(conversation, Some(message), None));
    // What the run recorded is signed also when it stopped on an error.
    let signed = tamper.finish(&store);
    outcome.and(signed)
}

/// `convlog resume STORE --conversation ID --continue --provider P --model M`.
pub fn resume_continue(
    dir: &Path,
    conversation: &str,
    evaluation: Option<String>,
    prompt: Option<PromptIdentity>,
    args: ModelArgs,
    tamper: &crate::tamper::WriterArgs,
) -> Result<(), Failure> {
    let config = client_config("resume", &args)?;
    existing_store(dir)?;
    let store = Arc::new(open_store(
        dir,
        StoreOptions::new().tamper(tamper.options()?),
    )?);
    let job = Job {
        store: Arc::clone(&store),
        config,
        recording: Recording {
            system: None,
            prompt,
        },
        args,
    };
    let outcome = runtime()?.block_on(job.execute(conversation, None, Some(evaluation)));
    let signed = tamper.finish(&store);
    outcome.and(signed)
}

/// The async runtime the agent runner runs on (two workers).
pub fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(RUNTIME_WORKER_THREADS)
        .enable_all()
        .build()
        .map_err(|error| Failure(format!("cannot start the async runtime: {error}")))
}

/// The client configuration of the flags, checked (a missing key names
/// its variable) before anything is recorded.
fn client_config(subcommand: &str, args: &ModelArgs) -> Result<ClientConfig, Failure> {
    let Some(mut api) = args.provider.clone() else {
        crate::usage_error(
            subcommand,
            clap::error::ErrorKind::MissingRequiredArgument,
            &format!("--provider is required (one of: {PROVIDERS})"),
        );
    };
    let Some(model) = args.model.clone() else {
        crate::usage_error(
            subcommand,
            clap::error::ErrorKind::MissingRequiredArgument,
            "--model is required",
        );
    };
    if args.reasoning_content {
        match &mut api {
            ApiKind::OpenAiCompatible(dialect) => {
                *dialect = dialect.clone().reasoning_content(true);
            }
            _ => {
                return Err(Failure(
                    "--reasoning-content applies only to --provider openai-compatible".to_string(),
                ))
            }
        }
    }
    let mut config = ClientConfig::new(api, model);
    if let Some(base_url) = &args.base_url {
        config = config.base_url(base_url.clone());
    }
    for (name, value) in &args.headers {
        config = config.header(name.clone(), value.clone());
    }
    if let Some(seconds) = args.timeout {
        config = config.request_timeout(Duration::from_secs(seconds));
    }
    if matches!(config.api, ApiKind::OpenAiCompatible(_)) && args.base_url.is_none() {
        return Err(Failure(
            "--provider openai-compatible needs --base-url (e.g. http://127.0.0.1:11434/v1 for Ollama)"
                .to_string(),
        ));
    }
    config.check().map_err(Failure)?;
    Ok(config)
}

/// One run or resume.
struct Job {
    store: Arc<convlog::Store>,
    config: ClientConfig,
    recording: Recording,
    args: ModelArgs,
}

impl Job {
    /// Starts the tool servers, runs (`input`) or resumes (`evaluation`),
    /// prints, and stops the servers.
    async fn execute(
        self,
        conversation: &str,
        input: Option<String>,
        evaluation: Option<Option<String>>,
    ) -> Result<(), Failure> {
        let mut servers = Vec::new();
        let outcome = match self.start_tools(&mut servers).await {
            Ok(tools) => self.drive(tools, conversation, input, evaluation).await,
            Err(failure) => Err(failure),
        };
        for server in &servers {
            server.shutdown().await;
        }
        outcome
    }

    async fn start_tools(&self, servers: &mut Vec<McpServer>) -> Result<Toolset, Failure> {
        let mut tools = Toolset::new();
        if let Some(seconds) = self.args.tool_timeout {
            tools = tools.timeout(Duration::from_secs(seconds));
        }
        for words in &self.args.tool_servers {
            let (program, args) = words.split_first().expect("split_command gives a word");
            let server = McpServer::spawn(program, args)
                .await
                .map_err(|error| Failure(error.to_string()))?;
            for tool in server.tools() {
                let name = convlog_agent::Tool::spec(&tool).name;
                if tools.get(&name).is_some() {
                    return Err(Failure(format!(
                        "tool {name:?} is offered by two tool servers (the second: {})",
                        server.command()
                    )));
                }
            }
            tools.insert_mcp(&server);
            servers.push(server);
        }
        Ok(tools)
    }

    async fn drive(
        &self,
        tools: Toolset,
        conversation: &str,
        input: Option<String>,
        evaluation: Option<Option<String>>,
    ) -> Result<(), Failure> {
        let mut options = RunnerOptions::new()
            .system_prompt(self.recording.system.clone())
            .prompt(self.recording.prompt.clone());
        if let Some(max_steps) = self.args.max_steps {
            options = options.max_steps(max_steps);
        }
        let client = Arc::new(HttpClient::new(self.config.clone()));
        let runner = Runner::new(Arc::clone(&self.store), client, tools, options);
        let live = Live::new(self.args.stream);
        let observer = |event: &RunEvent| live.event(event);
        let observer: Option<convlog_agent::RunObserver<'_>> =
            self.args.stream.then_some(&observer);
        let (outcome, resumed) = match (input, evaluation) {
            (Some(input), _) => {
                if self.args.stream {
                    live.line(&format!("user: {input}"));
                }
                let outcome = match observer {
                    Some(observer) => runner.run_stream(conversation, input, observer).await,
                    None => runner.run(conversation, input).await,
                };
                (outcome, BTreeSet::new())
            }
            (None, evaluation) => {
                let options = ResumeOptions::new()
                    .evaluation_id(evaluation.flatten())
                    .prompt(self.recording.prompt.clone());
                let resumed = self.running_calls(conversation, &options)?;
                let outcome = runner.resume_with(conversation, options, observer).await;
                (outcome, resumed)
            }
        };
        // A failure mid-stream ends the streamed line before the error.
        live.close_line();
        let outcome = outcome.map_err(run_failure)?;
        if self.args.json {
            print_json_lines(&outcome)
        } else {
            if !self.args.stream {
                for entry in &outcome.entries {
                    live.line(&entry_line(entry, &resumed));
                }
            }
            live.line(&stop_line(&outcome));
            Ok(())
        }
    }

    /// The calls a resume will run again (their `running` status was
    /// recorded): marked resumed in the output.
    fn running_calls(
        &self,
        conversation: &str,
        options: &ResumeOptions,
    ) -> Result<BTreeSet<String>, Failure> {
        // One read before the run starts, with nothing else on the runtime.
        let state = self.store.resume(conversation, options)?;
        Ok(state
            .unfinished_calls
            .iter()
            .filter(|unfinished| unfinished.call.status == ToolStatus::Running)
            .map(|unfinished| unfinished.call.call_id.clone())
            .collect())
    }
}

/// A run error as the command's failure.
fn run_failure(error: RunError) -> Failure {
    match error {
        RunError::Store(error) => Failure::from(error),
        other => Failure(other.to_string()),
    }
}

/// Prints as the run goes (`--stream`), or the lines of the end.
struct Live {
    stream: bool,
    /// Answer text printed on the current line without its newline.
    open_line: Mutex<bool>,
    /// The calls started again after a resume (`--stream`).
    resumed: Mutex<BTreeSet<String>>,
}

impl Live {
    fn new(stream: bool) -> Live {
        Live {
            stream,
            open_line: Mutex::new(false),
            resumed: Mutex::new(BTreeSet::new()),
        }
    }

    fn write(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        if let Err(error) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            if let Err(Failure(message)) = stdout_closed(error) {
                eprintln!("convlog: error: {message}");
                std::process::exit(1);
            }
        }
    }

    /// Ends the streamed line, if one is open.
    fn close_line(&self) {
        let mut open = self.open_line.lock().unwrap_or_else(|p| p.into_inner());
        if std::mem::take(&mut *open) {
            self.write("\n");
        }
    }

    /// A whole line, after closing a streamed one.
    fn line(&self, text: &str) {
        self.close_line();
        self.write(text);
        self.write("\n");
    }

    fn event(&self, event: &RunEvent) {
        if !self.stream {
            return;
        }
        match event {
            RunEvent::Delta(StreamDelta::Text(text)) => {
                let mut open = self.open_line.lock().unwrap_or_else(|p| p.into_inner());
                if !*open {
                    self.write("assistant: ");
                    *open = true;
                }
                self.write(text);
            }
            RunEvent::AssistantRecorded(entry) => {
                let streamed = *self.open_line.lock().unwrap_or_else(|p| p.into_inner());
                if !streamed {
                    if let Some(text) = entry.content.as_deref().filter(|text| !text.is_empty()) {
                        self.line(&format!("assistant: {}", one_line(text)));
                    }
                }
                for call in &entry.tool_calls {
                    self.line(&format!(
                        "assistant: call {}({}) [{}]",
                        call.name, call.arguments, call.call_id
                    ));
                }
                self.close_line();
            }
            RunEvent::ToolStarted {
                call,
                resumed: true,
            } => {
                self.resumed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(call.call_id.clone());
            }
            RunEvent::ToolFinished(entry) => {
                let resumed = self
                    .resumed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                self.line(&entry_line(entry, &resumed));
            }
            _ => {}
        }
    }
}

/// Newlines shown as `\n`, so an entry stays on one line.
fn one_line(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// The readable line of one recorded entry; `resumed` holds the calls
/// that were run again after a resume.
fn entry_line(entry: &ConversationEntry, resumed: &BTreeSet<String>) -> String {
    let text = entry.content.as_deref().map(one_line).unwrap_or_default();
    match entry.role {
        Role::System => match (&entry.prompt_ns, &entry.prompt_key, text.is_empty()) {
            (None, None, true) => "system: (no system prompt)".to_string(),
            (namespace, key, _) if namespace.is_some() || key.is_some() => format!(
                "system [{}/{}]: {text}",
                namespace.as_deref().unwrap_or("-"),
                key.as_deref().unwrap_or("-")
            ),
            _ => format!("system: {text}"),
        },
        Role::User => format!("user: {text}"),
        Role::Assistant => {
            let mut parts = Vec::new();
            if !text.is_empty() {
                parts.push(text);
            }
            for call in &entry.tool_calls {
                parts.push(format!(
                    "call {}({}) [{}] {}",
                    call.name,
                    call.arguments,
                    call.call_id,
                    status_name(call.status)
                ));
            }
            format!("assistant: {}", parts.join("; "))
        }
        Role::Tool => {
            let call = entry.tool_call_id.as_deref().unwrap_or("?");
            let mut label = format!(
                "tool {} [{call}]",
                entry.tool_name.as_deref().unwrap_or("?")
            );
            if resumed.contains(call) {
                label.push_str(" (resumed)");
            }
            if entry.is_error {
                label.push_str(" error");
            }
            format!("{label}: {text}")
        }
    }
}

fn status_name(status: ToolStatus) -> &'static str {
    match status {
        ToolStatus::Pending => "pending",
        ToolStatus::Running => "running",
        ToolStatus::Completed => "completed",
        ToolStatus::Failed => "failed",
    }
}

/// The readable stop line.
fn stop_line(outcome: &RunOutcome) -> String {
    let evaluation = &outcome.evaluation_id;
    match &outcome.stop {
        StopReason::Final => format!("stop: final answer (evaluation {evaluation})"),
        StopReason::StepLimit { max_steps } => format!(
            "stop: step limit of {max_steps} model calls reached (evaluation {evaluation}); continue with resume --continue --max-steps N"
        ),
        StopReason::PendingCalls(calls) => format!(
            "stop: pending calls for tools this command does not have (evaluation {evaluation}): {}",
            calls
                .iter()
                .map(|call| format!("{} [{}]", call.name, call.call_id))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        StopReason::AlreadyFinished => {
            format!("stop: evaluation {evaluation} was already finished; nothing was done")
        }
        _ => format!("stop: {:?} (evaluation {evaluation})", outcome.stop),
    }
}

/// `--json`: each new entry as a JSON line, then the stop line
/// (`{"stop": ..., "evaluation_id": ..., ...}`).
fn print_json_lines(outcome: &RunOutcome) -> Result<(), Failure> {
    let mut text = String::new();
    for entry in &outcome.entries {
        text.push_str(&serde_json::to_string(entry).map_err(json_failure)?);
        text.push('\n');
    }
    let mut stop = serde_json::json!({
        "stop": match &outcome.stop {
            StopReason::Final => "final",
            StopReason::StepLimit { .. } => "step_limit",
            StopReason::PendingCalls(_) => "pending_calls",
            StopReason::AlreadyFinished => "already_finished",
            _ => "other",
        },
        "evaluation_id": outcome.evaluation_id,
        "input_tokens": outcome.usage.input_tokens,
        "output_tokens": outcome.usage.output_tokens,
    });
    match &outcome.stop {
        StopReason::StepLimit { max_steps } => stop["max_steps"] = (*max_steps).into(),
        StopReason::PendingCalls(calls) => {
            stop["pending_calls"] = serde_json::to_value(calls).map_err(json_failure)?;
        }
        _ => {}
    }
    text.push_str(&stop.to_string());
    text.push('\n');
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .or_else(stdout_closed)
}

fn json_failure(error: serde_json::Error) -> Failure {
    Failure(format!("the output has no JSON form: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_split_like_a_shell() {
        let split = |text: &str| split_command(text).unwrap();
        assert_eq!(split("python3 server.py"), ["python3", "server.py"]);
        assert_eq!(
            split("  a   'b c'  \"d \\\" e\" f\\ g "),
            ["a", "b c", "d \" e", "f g"]
        );
        assert_eq!(split("x '' y"), ["x", "", "y"]);
        assert_eq!(split(r#"a"b"'c'"#), ["abc"]);
        for bad in ["", "   ", "'open", "\"open", "trailing\\"] {
            assert!(split_command(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn providers_and_headers_parse() {
        assert_eq!(parse_provider("openai").unwrap(), ApiKind::OpenAiChat);
        assert!(parse_provider("openai-compatible").is_ok());
        let error = parse_provider("mistral").unwrap_err();
        assert!(
            error.contains("unknown provider") && error.contains("ollama"),
            "{error}"
        );
        assert_eq!(
            parse_header("X-Trace: a:b").unwrap(),
            ("X-Trace".to_string(), "a:b".to_string())
        );
        assert!(parse_header("novalue").is_err());
        assert!(parse_header(": v").is_err());
    }
}
