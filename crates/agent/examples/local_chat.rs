//! One conversation turn against a local OpenAI-compatible server (Ollama,
//! vLLM, llama.cpp's server, LM Studio, ...), with one host tool, recorded
//! in a convlog store; run it again with `--resume` after killing it to
//! carry an interrupted turn to its end.
//!
//! ```sh
//! # Ollama: `ollama serve` and `ollama pull llama3.2` first
//! cargo run -p convlog-agent --example local_chat -- "What is the weather in Paris?"
//! CONVLOG_BASE_URL=http://127.0.0.1:8000/v1 CONVLOG_MODEL=my-model \
//!     cargo run -p convlog-agent --example local_chat -- "Weather in Rome?"
//! cargo run -p convlog-agent --example local_chat -- --resume
//! ```
//!
//! The store is `./local-chat-store` (`CONVLOG_STORE` picks another).

use std::sync::Arc;

use convlog::{Store, StoreOptions};
use convlog_agent::{
    ApiKind, ClientConfig, Dialect, FunctionTool, HttpClient, RunEvent, Runner, RunnerOptions,
    StreamDelta, ToolContext, ToolError, Toolset,
};
use serde::Deserialize;
use serde_json::json;

const CONVERSATION: &str = "local-chat";

#[derive(Deserialize)]
struct City {
    city: String,
}

fn setting(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match chat().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn chat() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let store = Arc::new(Store::open(
        setting("CONVLOG_STORE", "local-chat-store"),
        StoreOptions::default(),
    )?);
    // A local server needs no key: none is sent.
    let config = ClientConfig::new(
        ApiKind::OpenAiCompatible(Dialect::new()),
        setting("CONVLOG_MODEL", "llama3.2"),
    )
    .base_url(setting("CONVLOG_BASE_URL", "http://127.0.0.1:11434/v1"));
    let weather = FunctionTool::typed(
        "weather",
        "The current weather of a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        |city: City, _context: ToolContext| async move {
            match city.city.to_lowercase().as_str() {
                "paris" => Ok("18C, light rain".to_string()),
                "rome" => Ok("24C, sunny".to_string()),
                other => Err(ToolError(format!("no weather station in {other}"))),
            }
        },
    );
    let runner = Runner::new(
        store,
        Arc::new(HttpClient::new(config)),
        Toolset::new().with(weather),
        RunnerOptions::new()
            .system_prompt(Some("You answer briefly. Use the weather tool.".into())),
    );

    // Print the answer as it streams, and each step as it is recorded.
    let observer = |event: &RunEvent| match event {
        RunEvent::Delta(StreamDelta::Text(text)) => print!("{text}"),
        RunEvent::ToolStarted { call, resumed } => {
            let again = if *resumed {
                " (again, after a resume)"
            } else {
                ""
            };
            println!("[tool] {}({}){again}", call.name, call.arguments);
        }
        RunEvent::ToolFinished(result) => {
            println!("[tool] -> {}", result.content.as_deref().unwrap_or(""));
        }
        _ => {}
    };
    let outcome = if args.first().map(String::as_str) == Some("--resume") {
        runner
            .resume_with(CONVERSATION, convlog::ResumeOptions::new(), Some(&observer))
            .await?
    } else {
        let question = args.join(" ");
        let question = if question.is_empty() {
            "What is the weather in Paris?".to_string()
        } else {
            question
        };
        runner.run_stream(CONVERSATION, question, &observer).await?
    };
    println!();
    println!(
        "stopped: {:?}; {} new entries recorded in evaluation {}",
        outcome.stop,
        outcome.entries.len(),
        outcome.evaluation_id
    );
    Ok(())
}
