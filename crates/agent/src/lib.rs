//! The convlog agent runner.
//!
//! A loop that calls a model over its provider's HTTP API, runs the tools it
//! asks for (host tools and MCP servers), and records every step in a
//! [`convlog::Store`] the moment it happens, so that a host killed at any
//! point carries on with [`Runner::resume`] without running a finished
//! tool twice.
//!
//! | | |
//! |---|---|
//! | the loop | [`Runner`] ([`RunnerOptions`]): `run`, `run_stream`, `resume`, `answer_call`; [`RunOutcome`], [`StopReason`], [`RunEvent`] |
//! | models | [`HttpClient`] for OpenAI Chat (and compatible servers), OpenAI Responses, Anthropic, Gemini, Ollama ([`ClientConfig`], [`ApiKind`]); or your own [`ModelClient`] |
//! | tools | [`Toolset`] of host tools ([`Tool`], [`FunctionTool`]) and MCP servers ([`McpServer`]) |
//! | message control | [`RunnerGenerator`]: the runner as `convlog::control::Generator` |
//!
//! `docs/runner.md` describes the loop, what is recorded when, and resume.
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

pub mod client;
pub mod runner;
pub mod tools;

pub use client::{
    ApiKind, ClientConfig, Dialect, HttpClient, ModelClient, ModelError, ModelReply, ModelRequest,
    StreamDelta,
};
pub use runner::{
    ConversationClaim, RunError, RunEvent, RunObserver, RunOutcome, Runner, RunnerGenerator,
    RunnerOptions, StopReason, DEFAULT_MAX_STEPS, MODEL_CALL_FAILED, TOOL_RESULT_BYTES_MAX,
};
pub use tools::{FunctionTool, McpServer, Tool, ToolContext, ToolError, ToolSpec, Toolset};
