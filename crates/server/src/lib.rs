//! `convlog serve`: convlog's message-control API over HTTP, one process
//! owning the store for any number of clients.
//!
//! [`Server::open`] opens the store (taking its writer lock), reads the
//! tokens and starts each agent's upstream client and MCP tools;
//! [`Server::serve`] answers on a listener until its shutdown future
//! resolves, then finishes the requests in flight and syncs the store.
//! [`run`] is the whole of `convlog serve`. `docs/server.md` describes the
//! configuration, the endpoints and the operations.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod api;
pub mod appender;
pub mod config;
mod error;
mod handlers;
pub mod meta;
pub mod metrics;
pub mod stream;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use convlog::control::{ContextsReducer, MessageControl};
use convlog::erasure::StoreKey;
use convlog::store::StoreBuilder;
use convlog::Store;
use convlog::StoreOptions;
use convlog_agent::{HttpClient, McpServer, Runner, RunnerOptions, Toolset};
use tokio::net::TcpListener;
use utoipa::OpenApi;

pub use config::{Config, Tokens};
pub use error::ApiError;

/// The largest request body, in bytes (413 beyond).
pub const REQUEST_BODY_BYTES_MAX: usize = 4 * 1024 * 1024;
/// The most messages one add-messages or set-messages request may carry
/// (413 beyond).
pub const MESSAGES_PER_REQUEST_MAX: usize = 1_000;
/// The longest context id, in characters.
pub const CONTEXT_ID_CHARS_MAX: usize = 128;
/// The largest `user_defined` object, in bytes of compact JSON (413 beyond).
pub const USER_DEFINED_BYTES_MAX: usize = 64 * 1024;
/// How long one request may take before the server answers 503 (a
/// generation still running then finishes and is saved as requested).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a shutdown waits for requests in flight.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// The header carrying the request id (taken from the request when it
/// holds a usable one, else made up), echoed in every response.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// The longest request id taken from a request.
pub const REQUEST_ID_CHARS_MAX: usize = 128;
/// The longest `reason` of an erasure (`POST /contexts/{id}/erase`), in
/// characters.
pub const ERASE_REASON_CHARS_MAX: usize = 256;

/// What the handlers share.
pub struct AppState {
    store: Arc<Store>,
    /// Writes the batches of `POST /contexts/{id}/events`, gathered; `None`
    /// on a JetStream store, whose every append is a round trip to the
    /// cluster, durable whatever the durability asked: there, appends run
    /// on the blocking pool, many in flight at once.
    appender: Option<appender::Appender>,
    control: MessageControl,
    tokens: Tokens,
    agents: BTreeMap<String, Arc<Runner>>,
    create_lock: parking_lot::Mutex<()>,
    metrics: metrics::Metrics,
    streams: Arc<stream::Streams>,
    handle: tokio::runtime::Handle,
    /// Set once the server stops: recorded generations in flight are
    /// cancelled where they stand (every step so far is recorded).
    stopping: tokio::sync::watch::Sender<bool>,
    /// The users who may make a checkpoint (`[tamper] auditors`).
    auditors: std::collections::BTreeSet<String>,
    /// Whether a checkpoint is published when the server stops (a
    /// tamper-evident store with a checkpoint file).
    checkpoint_on_stop: bool,
    /// The OpenAPI document served (`GET /openapi.json`), made once.
    openapi: String,
    _mcp: Vec<McpServer>,
}

/// The OpenAPI document, from the handlers' own types.
#[derive(OpenApi)]
#[openapi(
    info(title = "convlog server", description = "convlog's message-control API: contexts, chat, invoke, add-ai-message, add-messages, set-messages."),
    paths(
        handlers::chat,
        handlers::add_ai_message,
        handlers::invoke,
        handlers::add_messages,
        handlers::set_messages,
        handlers::create_context,
        handlers::list_contexts,
        handlers::get_context,
        handlers::update_context,
        handlers::append_events,
        handlers::resume,
        handlers::export,
        handlers::erase_context,
        stream::stream_events,
        handlers::health,
        handlers::checkpoint,
    ),
    components(schemas(api::MessageSchema)),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The OpenAPI document as JSON.
pub fn openapi_json() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serializes")
}

/// The OpenAPI document a server with the agents `agents` serves: as
/// [`openapi_json`], with `agent_id` of `POST /contexts` limited to those
/// agents (the handler refuses any other).
pub fn served_openapi_json<'a>(agents: impl IntoIterator<Item = &'a str>) -> String {
    use utoipa::openapi::{RefOr, Schema};
    let mut document = ApiDoc::openapi();
    let agents: Vec<serde_json::Value> = agents.into_iter().map(Into::into).collect();
    let agent_id = document
        .components
        .as_mut()
        .and_then(|components| components.schemas.get_mut("CreateContextRequest"))
        .and_then(|schema| match schema {
            RefOr::T(Schema::Object(object)) => object.properties.get_mut("agent_id"),
            _ => None,
        });
    match agent_id {
        Some(RefOr::T(Schema::Object(agent_id))) => agent_id.enum_values = Some(agents),
        _ => unreachable!("CreateContextRequest has an agent_id string"),
    }
    document
        .to_pretty_json()
        .expect("the OpenAPI document serializes")
}

/// The environment variable naming the store key file of an encrypted
/// store (the same as the `convlog` command's).
pub const STORE_KEY_FILE_ENV: &str = "CONVLOG_KEY_FILE";

/// The environment variable naming the tamper key file when the
/// configuration has no `[tamper]` (the same as the `convlog` command's).
pub const TAMPER_KEY_FILE_ENV: &str = "CONVLOG_TAMPER_KEY_FILE";
/// The environment variable naming the checkpoint file when the
/// configuration has no `[tamper]` (the same as the `convlog` command's).
pub const CHECKPOINT_FILE_ENV: &str = "CONVLOG_TAMPER_CHECKPOINT";

/// The tamper options of `[tamper]`, else of the environment variables;
/// `None` for neither (a store without tamper evidence).
fn tamper_options(
    config: &Config,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<convlog::tamper::TamperOptions>, String> {
    let set = |name: &str| env(name).filter(|value| !value.is_empty());
    let (key_file, checkpoint_file, every) = match &config.tamper {
        Some(tamper) => (
            tamper.key_file.clone(),
            tamper.checkpoint_file.clone(),
            tamper.checkpoint_every_events,
        ),
        None => match set(TAMPER_KEY_FILE_ENV) {
            Some(key) => (key.into(), set(CHECKPOINT_FILE_ENV).map(Into::into), None),
            None => return Ok(None),
        },
    };
    let key = convlog::tamper::TamperKey::load(&key_file)
        .map_err(|error| format!("[tamper] key_file: {error}"))?;
    let mut options = convlog::tamper::TamperOptions::new(key);
    if let Some(path) = checkpoint_file {
        options = options.checkpoint_path(path);
    }
    if let Some(every) = every {
        options = options.checkpoint_every_events(every);
    }
    Ok(Some(options))
}

/// Whether `store` is a store URL (`nats://...`) rather than a directory.
pub fn is_store_url(store: &Path) -> bool {
    store
        .to_str()
        .is_some_and(|text| text.starts_with("nats://"))
}

/// Opens the JetStream store at the URL `url` as its writer, with the
/// server's host reducers and its snapshots in the store's bucket.
#[cfg(feature = "nats")]
fn open_url(
    url: &Path,
    key: Option<StoreKey>,
    tamper: Option<convlog::tamper::TamperOptions>,
) -> Result<Store, String> {
    let text = url.to_str().unwrap_or_default();
    if key.is_some() {
        return Err(format!(
            "{text}: encryption at rest ({STORE_KEY_FILE_ENV}) is not supported on a JetStream store yet"
        ));
    }
    if tamper.is_some() {
        return Err(format!(
            "{text}: tamper evidence ([tamper] or {TAMPER_KEY_FILE_ENV}) is not supported on a JetStream store yet"
        ));
    }
    let nats = convlog_nats::options_from_env().map_err(|error| error.to_string())?;
    convlog_nats::open_store_shared_with(text, StoreOptions::default(), nats, false, |builder| {
        builder
            .reducer(ContextsReducer)
            .reducer(meta::ServerMetaReducer)
            .reducer(meta::GenerationsReducer)
    })
    .map_err(|error| error.to_string())
}

/// Without the `nats` feature a store URL is refused.
#[cfg(not(feature = "nats"))]
fn open_url(
    url: &Path,
    _key: Option<StoreKey>,
    _tamper: Option<convlog::tamper::TamperOptions>,
) -> Result<Store, String> {
    Err(format!(
        "{}: this server was built without the `nats` feature, so it serves store directories only",
        url.display()
    ))
}

/// A server ready to serve: its store open, its agents started.
pub struct Server {
    state: Arc<AppState>,
    resume_on_start: bool,
}

impl Server {
    /// Opens the store at `store_dir` (creating it if missing; fails with
    /// the store's lock error when another process writes it) or at the
    /// store URL `nats://host:port[,host:port...]/STORE` (a JetStream store,
    /// docs/scale-out.md; the `nats` feature), reads the
    /// tokens (`token_env` through `env`) and starts every agent's client
    /// and MCP servers.
    pub async fn open(
        store_dir: &Path,
        config: &Config,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Server, String> {
        let tokens = config.tokens(&env)?;
        let dir = store_dir.to_path_buf();
        // An encrypted store (docs/erasure.md) opens with its store key,
        // named as for the command's other store commands.
        let key = match env(STORE_KEY_FILE_ENV).filter(|path| !path.is_empty()) {
            Some(path) => Some(StoreKey::from_file(path).map_err(|error| error.to_string())?),
            None => None,
        };
        // A tamper-evident store (docs/tamper.md) is written with its key.
        let tamper = tamper_options(config, &env)?;
        let checkpoint_on_stop = tamper
            .as_ref()
            .is_some_and(|tamper| tamper.checkpoint_path.is_some());
        let store = tokio::task::spawn_blocking(move || {
            if is_store_url(&dir) {
                return open_url(&dir, key, tamper);
            }
            StoreBuilder::new(&dir)
                .options(StoreOptions::default().encryption(key).tamper(tamper))
                .reducer(ContextsReducer)
                .reducer(meta::ServerMetaReducer)
                .reducer(meta::GenerationsReducer)
                .open()
                .map_err(|error| error.to_string())
        })
        .await
        .map_err(|error| error.to_string())??;
        let store = Arc::new(store);
        let appender = if is_store_url(store_dir) {
            None
        } else {
            Some(
                appender::Appender::start(&store)
                    .map_err(|error| format!("could not start the appending thread: {error}"))?,
            )
        };
        let streams = Arc::new(stream::Streams::new(
            config.limits.streams_per_user,
            Duration::from_secs(config.limits.stream_keepalive_seconds),
        ));
        streams.observe(&store);
        let mut agents = BTreeMap::new();
        let mut mcp = Vec::new();
        for agent in &config.agents {
            let client = HttpClient::new(agent.client_config(&env)?);
            let mut tools = Toolset::new();
            for server in &agent.mcp {
                let started = McpServer::spawn(&server.command, &server.args)
                    .await
                    .map_err(|error| {
                        format!(
                            "agent {:?}: MCP server {:?} did not start: {error}",
                            agent.id, server.command
                        )
                    })?;
                tools.insert_mcp(&started);
                mcp.push(started);
            }
            let mut options =
                RunnerOptions::new().default_system_prompt(agent.system_prompt.clone());
            if let Some(max_steps) = agent.max_steps {
                options = options.max_steps(max_steps);
            }
            let runner = Runner::new(Arc::clone(&store), Arc::new(client), tools, options);
            agents.insert(agent.id.clone(), Arc::new(runner));
        }
        let openapi = served_openapi_json(agents.keys().map(String::as_str));
        Ok(Server {
            state: Arc::new(AppState {
                control: MessageControl::new(Arc::clone(&store)),
                store,
                appender,
                tokens,
                agents,
                create_lock: parking_lot::Mutex::new(()),
                metrics: metrics::Metrics::default(),
                streams,
                handle: tokio::runtime::Handle::current(),
                stopping: tokio::sync::watch::Sender::new(false),
                auditors: config
                    .tamper
                    .iter()
                    .flat_map(|tamper| tamper.auditors.iter().cloned())
                    .collect(),
                checkpoint_on_stop,
                openapi,
                _mcp: mcp,
            }),
            resume_on_start: config.resume_on_start,
        })
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.state.store
    }

    /// The HTTP routes.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/chat", post(handlers::chat))
            .route("/chat/add-ai-message", post(handlers::add_ai_message))
            .route("/chat/invoke", post(handlers::invoke))
            .route("/context/add-messages", post(handlers::add_messages))
            .route("/context/set-messages", post(handlers::set_messages))
            .route(
                "/contexts",
                post(handlers::create_context).get(handlers::list_contexts),
            )
            .route(
                "/contexts/{context_id}",
                get(handlers::get_context).patch(handlers::update_context),
            )
            .route(
                "/contexts/{context_id}/events",
                post(handlers::append_events),
            )
            .route(
                "/contexts/{context_id}/events/stream",
                get(stream::stream_events),
            )
            .route("/contexts/{context_id}/resume", get(handlers::resume))
            .route("/contexts/{context_id}/export", get(handlers::export))
            .route(
                "/contexts/{context_id}/erase",
                post(handlers::erase_context),
            )
            .route("/health", get(handlers::health))
            .route("/checkpoint", post(handlers::checkpoint))
            .route("/openapi.json", get(openapi))
            .route("/metrics", get(render_metrics))
            .fallback(not_found)
            .method_not_allowed_fallback(method_not_allowed)
            .layer(DefaultBodyLimit::max(REQUEST_BODY_BYTES_MAX))
            .layer(axum::middleware::from_fn_with_state(
                Arc::clone(&self.state),
                request_frame,
            ))
            .with_state(Arc::clone(&self.state))
    }

    /// The open event streams (`GET /contexts/{context_id}/events/stream`).
    pub fn streams(&self) -> &Arc<stream::Streams> {
        &self.state.streams
    }

    /// Serves on `listener` until `shutdown` resolves; then stops
    /// accepting, ends the event streams, cancels the recorded generations
    /// in flight where they stand (each step so far is recorded: the next
    /// `/chat/invoke`, or the next start with `resume_on_start`, carries
    /// them on), waits up to [`SHUTDOWN_GRACE`] for the other requests in
    /// flight, and syncs the store. With `resume_on_start` configured, it
    /// first starts carrying on the interrupted generations, in the
    /// background.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), String> {
        let router = self.router();
        if self.resume_on_start {
            let state = Arc::clone(&self.state);
            tokio::spawn(async move { state.resume_interrupted().await });
        }
        let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
        let generations = self.state.stopping.clone();
        let streams = Arc::clone(&self.state.streams);
        let signal = async move {
            shutdown.await;
            generations.send_replace(true);
            // Streams follow a context for as long as their client stays:
            // ended here, or the graceful shutdown would wait for them.
            streams.shut_down();
            let _ = stopping_tx.send(());
        };
        let serving = axum::serve(listener, router).with_graceful_shutdown(signal);
        let serving = tokio::spawn(async move { serving.await });
        tokio::pin!(serving);
        tokio::select! {
            result = &mut serving => {
                result.map_err(|error| error.to_string())?.map_err(|error| error.to_string())?;
            }
            _ = async {
                let _ = stopping_rx.await;
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } => {
                tracing::warn!("requests still in flight after {SHUTDOWN_GRACE:?}: stopping anyway");
            }
        }
        let state = Arc::clone(&self.state);
        let store = Arc::clone(&self.state.store);
        let checkpoint = self.state.checkpoint_on_stop;
        tokio::task::spawn_blocking(move || {
            // The appending thread answers what it holds, then ends: it
            // keeps no reference to the store past this point, so the
            // store's lock goes with the server's own.
            if let Some(appender) = &state.appender {
                appender.shut_down();
            }
            drop(state);
            store.sync()?;
            // The last checkpoint covers everything the server wrote.
            if checkpoint {
                let signed = store.checkpoint()?;
                tracing::info!(lsn = signed.lsn, "checkpoint signed and published");
            }
            Ok::<(), convlog::Error>(())
        })
        .await
        .map_err(|error| error.to_string())?
        .map_err(|error| error.to_string())?;
        tracing::info!("store synced; server stopped");
        Ok(())
    }
}

async fn openapi(axum::extract::State(state): axum::extract::State<Arc<AppState>>) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        state.openapi.clone(),
    )
        .into_response()
}

async fn render_metrics(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
) -> Response {
    let writer = state.store.log().writer_stats();
    let gauges = metrics::Gauges {
        store_events: state.store.next_lsn().saturating_sub(1),
        contexts: state
            .control
            .registry()
            .map_or(0, |registry| registry.len()),
        appends: writer.frames,
        fsyncs: writer.syncs,
        writes: writer.writes,
        streams_open: state.streams.open() as u64,
        streams_opened: state.streams.opened_total(),
        stream_events: state.streams.events_sent(),
    };
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(&gauges),
    )
        .into_response()
}

async fn not_found(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("No endpoint {} {}", request.method(), request.uri().path()),
    )
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "Method {} is not allowed on {}",
            request.method(),
            request.uri().path()
        ),
    )
}

/// The request id, a log line per request, and the request timeout.
async fn request_frame(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let header = HeaderName::from_static(REQUEST_ID_HEADER);
    let id = request
        .headers()
        .get(&header)
        .and_then(|value| value.to_str().ok())
        .filter(|id| {
            !id.is_empty()
                && id.len() <= REQUEST_ID_CHARS_MAX
                && id.bytes().all(|b| b.is_ascii_graphic())
        })
        .map(str::to_string)
        .unwrap_or_else(made_up_request_id);
    let value = HeaderValue::from_str(&id).expect("a checked request id is a header value");
    request.headers_mut().insert(header.clone(), value.clone());
    // The log line's fields, copied only when the line is written (the
    // `convlog` command logs requests with `CONVLOG_LOG=info`).
    let logged = tracing::enabled!(tracing::Level::INFO);
    let method = request.method().clone();
    let path = if logged {
        request.uri().path().to_string()
    } else {
        String::new()
    };
    // A shared string: cloning it copies no text.
    let matched = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .cloned();
    let route = matched
        .as_ref()
        .map_or("unmatched", |matched| matched.as_str());
    let started = Instant::now();
    let mut response = match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "The request took longer than {} s",
                REQUEST_TIMEOUT.as_secs()
            ),
        )
        .into_response(),
    };
    response.headers_mut().insert(header, value);
    state
        .metrics
        .observe(route, response.status().as_u16(), started.elapsed());
    if logged {
        tracing::info!(
            request_id = %id,
            %method,
            path,
            status = response.status().as_u16(),
            micros = started.elapsed().as_micros() as u64,
            "request"
        );
    }
    response
}

/// A request id for a request that brought none: a random prefix drawn
/// once per process and a counter (32 hex digits, like a UUID without
/// dashes), so a request costs no call for randomness.
fn made_up_request_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static IDS: OnceLock<(u64, AtomicU64)> = OnceLock::new();
    let (prefix, counter) =
        IDS.get_or_init(|| (uuid::Uuid::new_v4().as_u64_pair().0, AtomicU64::new(0)));
    format!(
        "{prefix:016x}{:016x}",
        counter.fetch_add(1, Ordering::Relaxed)
    )
}

/// `convlog serve`'s arguments.
#[derive(Debug, Clone)]
pub struct ServeArgs {
    /// The store directory, or a store URL (`nats://host:port/STORE`).
    pub store: PathBuf,
    /// Where to listen.
    pub listen: SocketAddr,
    /// The configuration file.
    pub config: PathBuf,
}

/// The default listening address: loopback only (TLS and outside access
/// belong to a reverse proxy).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// `convlog serve`: reads the configuration, opens the store, listens, and
/// serves until SIGTERM or SIGINT. Prints `listening on ADDR` on standard
/// error once it accepts connections.
pub fn run(args: ServeArgs) -> Result<(), String> {
    let config = Config::load(&args.config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the runtime: {error}"))?;
    let result = runtime.block_on(async {
        // Before anything else: a signal during startup stops it cleanly.
        let shutdown = shutdown_signal()?;
        let server = Server::open(&args.store, &config, |name| std::env::var(name).ok()).await?;
        let listener = TcpListener::bind(args.listen)
            .await
            .map_err(|error| format!("cannot listen on {}: {error}", args.listen))?;
        let address = listener.local_addr().map_err(|error| error.to_string())?;
        eprintln!("listening on {address}");
        tracing::info!(%address, store = %args.store.display(), "listening");
        server.serve(listener, shutdown).await
    });
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    result
}

/// Resolves on SIGTERM or SIGINT. The handlers are installed when this
/// is called (not when the future is first polled), so a signal that
/// arrives at any later point stops the server cleanly instead of killing
/// it. Must be called inside a runtime.
pub fn shutdown_signal() -> Result<impl Future<Output = ()> + Send + 'static, String> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let install = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|error| format!("cannot handle {name}: {error}"))
        };
        let mut terminate = install(SignalKind::terminate(), "SIGTERM")?;
        let mut interrupt = install(SignalKind::interrupt(), "SIGINT")?;
        Ok(async move {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
            tracing::info!("shutdown requested");
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("shutdown requested");
        })
    }
}
