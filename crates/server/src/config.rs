//! The server's configuration file (TOML): agents with their upstream model
//! and MCP tools, and users with their bearer tokens (stored hashed).
//!
//! ```toml
//! resume_on_start = true            # optional: carry interrupted generations on at start
//!
//! [[agents]]
//! id = "assistant"
//! provider = "openai"               # openai | openai-responses | anthropic | gemini | ollama | openai-compatible
//! model = "gpt-4o-mini"
//! base_url = "http://127.0.0.1:9000/v1"   # optional: the provider's default otherwise
//! api_key_env = "OPENAI_API_KEY"    # optional: the variable holding the key
//! system_prompt = "Be brief."       # optional
//! max_steps = 8                     # optional: model calls per generation
//!
//! [[agents.mcp]]                    # optional, any number: tools over MCP
//! command = "python3"
//! args = ["tools.py"]
//!
//! [[users]]
//! id = "alice"
//! token_sha256 = "9f86d0…"          # hex SHA-256 of the token
//!
//! [[users]]
//! id = "bob"
//! token_env = "BOB_TOKEN"           # or: the token is read from this variable at start, then hashed
//!
//! [limits]                          # optional
//! streams_per_user = 8              # event streams one user may hold open (429 beyond)
//! stream_keepalive_seconds = 15     # keep-alive comment interval of an idle stream
//!
//! [tamper]                          # optional: a tamper-evident store (docs/tamper.md)
//! key_file = "/etc/convlog/audit.key"          # the tamper key (mode 0600, outside the store)
//! checkpoint_file = "/audit/store.head"        # optional: where checkpoints are published
//! checkpoint_every_events = 1000               # optional: sign one every N events
//! auditors = ["alice"]                         # users who may POST /checkpoint
//! ```

use std::collections::BTreeSet;
use std::path::Path;

use convlog_agent::{ApiKind, ClientConfig, Dialect};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The configuration file's contents.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// At start, carry on every generation a stop or crash interrupted in
    /// a tool call (a call whose `running` status is recorded without a
    /// result), in the background, one context after another (default
    /// false: the next `/chat/invoke` of the context carries it on).
    #[serde(default)]
    pub resume_on_start: bool,
    /// The agents contexts can be created with.
    #[serde(default)]
    pub agents: Vec<AgentConfig>,
    /// The users and their tokens.
    #[serde(default)]
    pub users: Vec<UserConfig>,
    /// Limits that may be changed from their defaults.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// Tamper evidence (`[tamper]`, docs/tamper.md): the key the server
    /// writes the store with, its checkpoints, and who may ask for one.
    #[serde(default)]
    pub tamper: Option<TamperConfig>,
}

/// `[tamper]`: the server writes a tamper-evident store (docs/tamper.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TamperConfig {
    /// The tamper key file (mode 0600, outside the store; `convlog keygen`).
    pub key_file: std::path::PathBuf,
    /// Where each checkpoint is written (atomically; outside the store).
    pub checkpoint_file: Option<std::path::PathBuf>,
    /// Sign a checkpoint every this many events (default: only on
    /// `POST /checkpoint` and when the server stops).
    pub checkpoint_every_events: Option<u64>,
    /// The users who may make a checkpoint (`POST /checkpoint`); others
    /// get 403.
    #[serde(default)]
    pub auditors: Vec<String>,
}

/// The configurable limits (`[limits]`); each defaults to its named
/// constant.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Event streams one user may hold open at once (429 beyond); default
    /// [`STREAMS_PER_USER_MAX`](crate::stream::STREAMS_PER_USER_MAX).
    pub streams_per_user: usize,
    /// Seconds between keep-alive comments on an idle event stream;
    /// default [`STREAM_KEEPALIVE`](crate::stream::STREAM_KEEPALIVE).
    pub stream_keepalive_seconds: u64,
}

/// The longest keep-alive interval the configuration accepts, in seconds.
pub const STREAM_KEEPALIVE_SECONDS_MAX: u64 = 3_600;

impl Default for LimitsConfig {
    fn default() -> LimitsConfig {
        LimitsConfig {
            streams_per_user: crate::stream::STREAMS_PER_USER_MAX,
            stream_keepalive_seconds: crate::stream::STREAM_KEEPALIVE.as_secs(),
        }
    }
}

/// One agent: an upstream model and its tools.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The agent's id (`agent_id` of the contexts that use it).
    pub id: String,
    /// The wire format: `openai`, `openai-responses`, `anthropic`, `gemini`,
    /// `ollama` or `openai-compatible`.
    pub provider: String,
    /// The upstream model name.
    pub model: String,
    /// The upstream's base URL (the provider's default when absent).
    pub base_url: Option<String>,
    /// The environment variable holding the upstream's API key (the
    /// provider's conventional variable when absent).
    pub api_key_env: Option<String>,
    /// The system prompt the model is shown when the context has none.
    pub system_prompt: Option<String>,
    /// Model calls per generation (the runner's default when absent).
    pub max_steps: Option<u32>,
    /// MCP servers whose tools this agent may call.
    #[serde(default)]
    pub mcp: Vec<McpConfig>,
}

/// An MCP server started at startup, its tools given to one agent.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// The program.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
}

/// A user and their bearer token.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// The user id (`user_id` of the contexts they create).
    pub id: String,
    /// The hex SHA-256 of the token.
    pub token_sha256: Option<String>,
    /// The environment variable holding the token (read at start).
    pub token_env: Option<String>,
}

impl Config {
    /// Reads and checks the configuration file at `path`.
    pub fn load(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            format!("cannot read the configuration {}: {error}", path.display())
        })?;
        Config::parse(&text).map_err(|error| format!("configuration {}: {error}", path.display()))
    }

    /// Parses and checks a configuration.
    pub fn parse(text: &str) -> Result<Config, String> {
        let config: Config = toml::from_str(text).map_err(|error| error.to_string())?;
        let mut ids = BTreeSet::new();
        for agent in &config.agents {
            if !ids.insert(agent.id.as_str()) {
                return Err(format!("agent {:?} is configured twice", agent.id));
            }
            agent.api_kind()?;
        }
        if config.limits.streams_per_user == 0 {
            return Err("limits.streams_per_user must be at least 1".to_string());
        }
        if !(1..=STREAM_KEEPALIVE_SECONDS_MAX).contains(&config.limits.stream_keepalive_seconds) {
            return Err(format!(
                "limits.stream_keepalive_seconds must be 1 to {STREAM_KEEPALIVE_SECONDS_MAX}, not {}",
                config.limits.stream_keepalive_seconds
            ));
        }
        let mut users = BTreeSet::new();
        for user in &config.users {
            if user.id.is_empty() {
                return Err("a user has an empty id".to_string());
            }
            if !users.insert(user.id.as_str()) {
                return Err(format!("user {:?} is configured twice", user.id));
            }
        }
        if let Some(tamper) = &config.tamper {
            if tamper.checkpoint_every_events == Some(0) {
                return Err("tamper.checkpoint_every_events must be at least 1".to_string());
            }
            if let Some(auditor) = tamper
                .auditors
                .iter()
                .find(|auditor| !users.contains(auditor.as_str()))
            {
                return Err(format!(
                    "tamper.auditors names {auditor:?}, which is not a configured user"
                ));
            }
        }
        Ok(config)
    }

    /// The users' token hashes, reading `token_env` variables through `env`.
    pub fn tokens(&self, env: impl Fn(&str) -> Option<String>) -> Result<Tokens, String> {
        let mut users = Vec::new();
        for user in &self.users {
            let hash = match (&user.token_sha256, &user.token_env) {
                (Some(hex), None) => parse_hash(hex).ok_or_else(|| {
                    format!("user {:?}: token_sha256 must be 64 hex digits", user.id)
                })?,
                (None, Some(name)) => {
                    let token = env(name).filter(|token| !token.is_empty()).ok_or_else(|| {
                        format!(
                            "user {:?}: the variable {name} holding the token is unset or empty",
                            user.id
                        )
                    })?;
                    hash_token(&token)
                }
                _ => {
                    return Err(format!(
                        "user {:?}: give exactly one of token_sha256 and token_env",
                        user.id
                    ))
                }
            };
            users.push((hash, user.id.clone()));
        }
        Ok(Tokens { users })
    }
}

impl AgentConfig {
    /// The upstream client's configuration.
    /// The wire format named by `provider`.
    pub fn api_kind(&self) -> Result<ApiKind, String> {
        Ok(match self.provider.as_str() {
            "openai" => ApiKind::OpenAiChat,
            "openai-responses" => ApiKind::OpenAiResponses,
            "anthropic" => ApiKind::Anthropic,
            "gemini" => ApiKind::Gemini,
            "ollama" => ApiKind::Ollama,
            "openai-compatible" => ApiKind::OpenAiCompatible(Dialect::new()),
            other => {
                return Err(format!(
                    "agent {:?}: unknown provider {other:?} (expected openai, openai-responses, anthropic, gemini, ollama or openai-compatible)",
                    self.id
                ))
            }
        })
    }

    /// The upstream client's configuration, reading variables through
    /// `env`; fails when it cannot make a request (no key for a hosted
    /// API, no base URL for an OpenAI-compatible one).
    pub fn client_config(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ClientConfig, String> {
        let api = self.api_kind()?;
        let mut config = ClientConfig::with_env(api, self.model.clone(), &env);
        if let Some(base_url) = &self.base_url {
            config = config.base_url(base_url.clone());
        }
        if let Some(name) = &self.api_key_env {
            config = config.api_key(env(name));
        }
        config
            .check()
            .map_err(|error| format!("agent {:?}: {error}", self.id))?;
        Ok(config)
    }
}

/// The SHA-256 of a token.
pub fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn parse_hash(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut hash = [0u8; 32];
    for (index, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[index * 2..index * 2 + 2], 16).ok()?;
    }
    Some(hash)
}

/// Token hashes to user ids.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    users: Vec<([u8; 32], String)>,
}

impl Tokens {
    /// The user whose token is `token`: its hash is compared with every
    /// user's in constant time (all of them, whatever matched).
    pub fn user(&self, token: &str) -> Option<&str> {
        let hash = hash_token(token);
        let mut found = None;
        for (candidate, user) in &self.users {
            if bool::from(candidate.ct_eq(&hash)) {
                found = Some(user.as_str());
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_hashed_and_matched() {
        let config = Config::parse(
            r#"
[[users]]
id = "alice"
token_sha256 = "2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90"
[[users]]
id = "bob"
token_env = "BOB"
"#,
        )
        .unwrap();
        let tokens = config
            .tokens(|name| (name == "BOB").then(|| "bob-secret".to_string()))
            .unwrap();
        // sha256("secret1")
        assert_eq!(tokens.user("secret1"), None);
        assert_eq!(tokens.user("bob-secret"), Some("bob"));
        assert_eq!(
            hash_token("alice"),
            parse_hash("2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90").unwrap()
        );
        assert_eq!(tokens.user("alice"), Some("alice"));
    }

    #[test]
    fn bad_configurations_say_what() {
        let error =
            Config::parse("[[agents]]\nid = \"a\"\nprovider = \"x\"\nmodel = \"m\"\n").unwrap_err();
        assert!(error.contains("unknown provider \"x\""), "{error}");
        let error = Config::parse("[[users]]\nid = \"a\"\ntoken = \"t\"\n").unwrap_err();
        assert!(error.contains("unknown field `token`"), "{error}");
        let config = Config::parse("[[users]]\nid = \"a\"\ntoken_sha256 = \"zz\"\n").unwrap();
        let error = config.tokens(|_| None).unwrap_err();
        assert!(error.contains("64 hex digits"), "{error}");
        let error = Config::parse("[limits]\nstreams_per_user = 0\n").unwrap_err();
        assert!(
            error.contains("streams_per_user must be at least 1"),
            "{error}"
        );
        let error = Config::parse("[limits]\nstream_keepalive_seconds = 0\n").unwrap_err();
        assert!(
            error.contains("stream_keepalive_seconds must be 1 to"),
            "{error}"
        );
        let error = Config::parse("[limits]\nstreams = 3\n").unwrap_err();
        assert!(error.contains("unknown field `streams`"), "{error}");
        let error =
            Config::parse("[tamper]\nkey_file = \"k\"\nauditors = [\"eve\"]\n").unwrap_err();
        assert!(
            error.contains("\"eve\", which is not a configured user"),
            "{error}"
        );
        let error =
            Config::parse("[tamper]\nkey_file = \"k\"\ncheckpoint_every_events = 0\n").unwrap_err();
        assert!(
            error.contains("checkpoint_every_events must be at least 1"),
            "{error}"
        );
        let error = Config::parse("[tamper]\nkey = \"k\"\n").unwrap_err();
        assert!(error.contains("unknown field `key`"), "{error}");
        let config = Config::parse("[limits]\nstreams_per_user = 3\n").unwrap();
        assert_eq!(config.limits.streams_per_user, 3);
        assert_eq!(
            config.limits.stream_keepalive_seconds,
            crate::stream::STREAM_KEEPALIVE.as_secs()
        );
    }
}
