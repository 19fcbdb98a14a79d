//! Building a [`ClientConfig`]: each API kind's default base URL and key
//! variable, default timeouts and retries, and a builder setter per field.
//!
//! [`ClientConfig::new`] never fails: a hosted API whose key variable is
//! unset, or an OpenAI-compatible endpoint without a base URL, is reported
//! by [`ClientConfig::check`], which [`super::HttpClient`] calls before its
//! first request (a [`super::ModelErrorKind::Request`] naming the variable
//! or setter). A host that wants to fail early calls `check` itself.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::{ApiKind, ClientConfig, Dialect, Reasoning};

/// OpenAI's API (Chat Completions and Responses).
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// Anthropic's API (the wire adds `/v1/messages`).
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// Gemini's API.
pub const GEMINI_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";
/// Ollama's default local address, used when `OLLAMA_HOST` is unset.
pub const OLLAMA_BASE_URL: &str = "http://127.0.0.1:11434";
/// Ollama's port, when `OLLAMA_HOST` names a host without one.
pub const OLLAMA_DEFAULT_PORT: u16 = 11434;

/// The key variable of OpenAI Chat and Responses.
pub const OPENAI_API_KEY_VAR: &str = "OPENAI_API_KEY";
/// The key variable of Anthropic.
pub const ANTHROPIC_API_KEY_VAR: &str = "ANTHROPIC_API_KEY";
/// Gemini's key variables, in the order they are read.
pub const GEMINI_API_KEY_VARS: [&str; 2] = ["GEMINI_API_KEY", "GOOGLE_API_KEY"];
/// Where Ollama's address is read from.
pub const OLLAMA_HOST_VAR: &str = "OLLAMA_HOST";

/// Default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default request timeout (for a stream: the longest silence between two
/// chunks). Long, since a reasoning model may think for minutes.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
/// Default attempts per call, the first included.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 4;
/// Default first backoff (doubled per retry).
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_millis(500);
/// Default longest wait between two attempts.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(30);

impl ClientConfig {
    /// A config for `model` behind `api`, with the kind's default base URL,
    /// its key from the conventional environment variable (`OPENAI_API_KEY`,
    /// `ANTHROPIC_API_KEY`, `GEMINI_API_KEY` then `GOOGLE_API_KEY`; none for
    /// Ollama and OpenAI-compatible endpoints), Ollama's address from
    /// `OLLAMA_HOST` when set, and the default timeouts and retries.
    ///
    /// An OpenAI-compatible endpoint has no default base URL: set one with
    /// [`ClientConfig::base_url`] ([`ClientConfig::check`] says so
    /// otherwise).
    pub fn new(api: ApiKind, model: impl Into<String>) -> ClientConfig {
        ClientConfig::with_env(api, model, |name| std::env::var(name).ok())
    }

    /// [`ClientConfig::new`], reading variables through `env` instead of the
    /// process environment (for tests and hosts with their own settings).
    pub fn with_env(
        api: ApiKind,
        model: impl Into<String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> ClientConfig {
        let env = |name: &str| env(name).filter(|value| !value.trim().is_empty());
        let base_url = match &api {
            ApiKind::OpenAiChat | ApiKind::OpenAiResponses => OPENAI_BASE_URL.to_string(),
            ApiKind::Anthropic => ANTHROPIC_BASE_URL.to_string(),
            ApiKind::Gemini => GEMINI_BASE_URL.to_string(),
            ApiKind::Ollama => env(OLLAMA_HOST_VAR)
                .map(|host| ollama_base_url(&host))
                .unwrap_or_else(|| OLLAMA_BASE_URL.to_string()),
            ApiKind::OpenAiCompatible(_) => String::new(),
        };
        let api_key = key_vars(&api).iter().find_map(|name| env(name));
        ClientConfig {
            api,
            model: model.into(),
            base_url,
            api_key,
            headers: Vec::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            max_tokens: None,
            temperature: None,
            reasoning: None,
        }
    }

    /// Whether the config can make a request: a base URL is set, and a
    /// hosted API (OpenAI, Anthropic, Gemini) has a key. The error names
    /// the environment variable or setter that fixes it.
    pub fn check(&self) -> Result<(), String> {
        if self.base_url.trim().is_empty() {
            return Err(match self.api {
                ApiKind::OpenAiCompatible(_) => format!(
                    "an OpenAI-compatible endpoint has no default base URL: set one (ClientConfig::base_url, e.g. http://127.0.0.1:11434/v1) for model {:?}",
                    self.model
                ),
                _ => format!("no base URL set for model {:?}", self.model),
            });
        }
        let vars = key_vars(&self.api);
        let needs_key = !matches!(self.api, ApiKind::Ollama | ApiKind::OpenAiCompatible(_));
        if needs_key && self.api_key.as_deref().is_none_or(|key| key.is_empty()) {
            return Err(format!(
                "no API key for {}: set {} (or ClientConfig::api_key)",
                self.api.provider(),
                vars.join(" or ")
            ));
        }
        if self.max_attempts == 0 {
            return Err("max_attempts must be at least 1".to_string());
        }
        Ok(())
    }

    /// Sets the model name.
    pub fn model(mut self, model: impl Into<String>) -> ClientConfig {
        self.model = model.into();
        self
    }

    /// Sets the base URL (a trailing `/` is dropped).
    pub fn base_url(mut self, base_url: impl Into<String>) -> ClientConfig {
        let base_url: String = base_url.into();
        self.base_url = base_url.trim_end_matches('/').to_string();
        self
    }

    /// Sets the key (`None`: send no credentials).
    pub fn api_key(mut self, api_key: Option<String>) -> ClientConfig {
        self.api_key = api_key;
        self
    }

    /// Adds an extra header sent with every request (after the defaults,
    /// so it wins over a default of the same name).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> ClientConfig {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Replaces the extra headers.
    pub fn headers(mut self, headers: Vec<(String, String)>) -> ClientConfig {
        self.headers = headers;
        self
    }

    /// Sets the connect timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> ClientConfig {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the request timeout (for a stream: the longest silence between
    /// two chunks).
    pub fn request_timeout(mut self, timeout: Duration) -> ClientConfig {
        self.request_timeout = timeout;
        self
    }

    /// Sets the attempts per call, the first included (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> ClientConfig {
        self.max_attempts = attempts;
        self
    }

    /// Sets the first backoff.
    pub fn initial_backoff(mut self, backoff: Duration) -> ClientConfig {
        self.initial_backoff = backoff;
        self
    }

    /// Sets the longest wait between two attempts.
    pub fn max_backoff(mut self, backoff: Duration) -> ClientConfig {
        self.max_backoff = backoff;
        self
    }

    /// Sets the output token limit.
    pub fn max_tokens(mut self, max_tokens: Option<u32>) -> ClientConfig {
        self.max_tokens = max_tokens;
        self
    }

    /// Sets the sampling temperature.
    pub fn temperature(mut self, temperature: Option<f64>) -> ClientConfig {
        self.temperature = temperature;
        self
    }

    /// Sets the reasoning requested.
    pub fn reasoning(mut self, reasoning: Option<Reasoning>) -> ClientConfig {
        self.reasoning = reasoning;
        self
    }
}

impl Dialect {
    /// No extras: plain OpenAI fields only.
    pub fn new() -> Dialect {
        Dialect::default()
    }

    /// Sets whether the assistant's reasoning is sent back as
    /// `reasoning_content`.
    pub fn reasoning_content(mut self, reasoning_content: bool) -> Dialect {
        self.reasoning_content = reasoning_content;
        self
    }

    /// Adds a top-level field merged into every request body (it wins over
    /// a field the wire sets, `messages` included: use with care).
    pub fn extra(mut self, key: impl Into<String>, value: Value) -> Dialect {
        self.extra_body.insert(key.into(), value);
        self
    }

    /// Replaces the extra fields.
    pub fn extra_body(mut self, extra_body: BTreeMap<String, Value>) -> Dialect {
        self.extra_body = extra_body;
        self
    }
}

/// The environment variables a kind's key is read from, in order.
fn key_vars(api: &ApiKind) -> &'static [&'static str] {
    match api {
        ApiKind::OpenAiChat | ApiKind::OpenAiResponses => &[OPENAI_API_KEY_VAR],
        ApiKind::Anthropic => &[ANTHROPIC_API_KEY_VAR],
        ApiKind::Gemini => &GEMINI_API_KEY_VARS,
        ApiKind::Ollama | ApiKind::OpenAiCompatible(_) => &[],
    }
}

/// `OLLAMA_HOST` as a base URL: `host`, `host:port` or a URL; the scheme
/// defaults to `http` and the port to 11434 (as Ollama's own client reads
/// it).
fn ollama_base_url(host: &str) -> String {
    let host = host.trim().trim_end_matches('/');
    let (scheme, rest) = match host.split_once("://") {
        Some((scheme, rest)) => (scheme, rest),
        None => ("http", host),
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    let has_port = match authority.rsplit_once(':') {
        // `[::1]:port` or `host:port`, not a bare IPv6 address.
        Some((head, port)) => {
            !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && !head.ends_with(':')
        }
        None => false,
    };
    if has_port || host.contains("://") {
        format!("{scheme}://{rest}")
    } else {
        format!("{scheme}://{rest}:{OLLAMA_DEFAULT_PORT}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        }
    }

    #[test]
    fn the_debug_form_shows_neither_the_key_nor_header_values() {
        let config = ClientConfig::new(ApiKind::OpenAiChat, "gpt-4o")
            .api_key(Some("sk-secret-key".to_string()))
            .header("x-other-secret", "hidden-value");
        let printed = format!("{config:?}");
        assert!(!printed.contains("sk-secret-key"), "{printed}");
        assert!(!printed.contains("hidden-value"), "{printed}");
        assert!(printed.contains("<redacted>") && printed.contains("x-other-secret"));
    }

    #[test]
    fn defaults_per_kind() {
        let none = env_of(&[]);
        let openai = ClientConfig::with_env(ApiKind::OpenAiChat, "gpt", &none);
        assert_eq!(openai.base_url, OPENAI_BASE_URL);
        assert_eq!(openai.api_key, None);
        assert!(openai.check().unwrap_err().contains("OPENAI_API_KEY"));
        let anthropic = ClientConfig::with_env(ApiKind::Anthropic, "claude", &none);
        assert_eq!(anthropic.base_url, ANTHROPIC_BASE_URL);
        assert!(anthropic.check().unwrap_err().contains("ANTHROPIC_API_KEY"));
        let gemini = ClientConfig::with_env(ApiKind::Gemini, "g", &none);
        assert_eq!(gemini.base_url, GEMINI_BASE_URL);
        let message = gemini.check().unwrap_err();
        assert!(
            message.contains("GEMINI_API_KEY or GOOGLE_API_KEY"),
            "{message}"
        );
        let ollama = ClientConfig::with_env(ApiKind::Ollama, "llama", &none);
        assert_eq!(ollama.base_url, OLLAMA_BASE_URL);
        assert_eq!(ollama.check(), Ok(()));
        let compatible =
            ClientConfig::with_env(ApiKind::OpenAiCompatible(Dialect::new()), "m", &none);
        assert!(compatible.check().unwrap_err().contains("base URL"));
        let compatible = compatible.base_url("http://localhost:8000/v1/");
        assert_eq!(compatible.base_url, "http://localhost:8000/v1");
        assert_eq!(compatible.check(), Ok(()));
        assert_eq!(openai.max_attempts, DEFAULT_MAX_ATTEMPTS);
        assert_eq!(openai.request_timeout, DEFAULT_REQUEST_TIMEOUT);
    }

    #[test]
    fn keys_come_from_their_variables() {
        let env = env_of(&[
            ("OPENAI_API_KEY", "sk-o"),
            ("ANTHROPIC_API_KEY", "sk-a"),
            ("GOOGLE_API_KEY", "g-google"),
        ]);
        let key = |api| ClientConfig::with_env(api, "m", &env).api_key;
        assert_eq!(key(ApiKind::OpenAiChat).as_deref(), Some("sk-o"));
        assert_eq!(key(ApiKind::OpenAiResponses).as_deref(), Some("sk-o"));
        assert_eq!(key(ApiKind::Anthropic).as_deref(), Some("sk-a"));
        assert_eq!(key(ApiKind::Gemini).as_deref(), Some("g-google"));
        assert_eq!(key(ApiKind::Ollama), None);
        assert_eq!(key(ApiKind::OpenAiCompatible(Dialect::new())), None);
        let both = env_of(&[
            ("GEMINI_API_KEY", "g-gemini"),
            ("GOOGLE_API_KEY", "g-google"),
        ]);
        let gemini = ClientConfig::with_env(ApiKind::Gemini, "m", both);
        assert_eq!(gemini.api_key.as_deref(), Some("g-gemini"));
        let blank = env_of(&[("OPENAI_API_KEY", "  ")]);
        assert_eq!(
            ClientConfig::with_env(ApiKind::OpenAiChat, "m", blank).api_key,
            None
        );
    }

    #[test]
    fn ollama_host_forms() {
        assert_eq!(ollama_base_url("example.com"), "http://example.com:11434");
        assert_eq!(ollama_base_url("0.0.0.0:9000"), "http://0.0.0.0:9000");
        assert_eq!(
            ollama_base_url("https://ollama.example/"),
            "https://ollama.example"
        );
        assert_eq!(
            ollama_base_url("http://10.0.0.2:11434"),
            "http://10.0.0.2:11434"
        );
        assert_eq!(ollama_base_url("[::1]:8080"), "http://[::1]:8080");
        let env = env_of(&[("OLLAMA_HOST", "gpu-box")]);
        let config = ClientConfig::with_env(ApiKind::Ollama, "m", env);
        assert_eq!(config.base_url, "http://gpu-box:11434");
    }
}
