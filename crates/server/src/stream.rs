//! `GET /contexts/{context_id}/events/stream`: a context's events as
//! Server-Sent Events, first those already stored after the point the
//! client names, then each new one as it is appended.
//!
//! Streams are woken, never polled: the server observes its store
//! ([`convlog::Store::observe`] on [`ServerMetaReducer`], which every
//! event passes through, whoever appended it: a handler or the agent
//! runner) and bumps a per-context [`watch`] channel that the context's
//! streams wait on. A woken stream reads what its context gained since its
//! last event from the store's index and log, off the executor.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use convlog::control::Principal;
use convlog::log::Lsn;
use convlog::{Event, Store};
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::error::ApiError;
use crate::handlers::Caller;
use crate::meta::ServerMetaReducer;
use crate::AppState;

/// How many event streams one user may hold open at once (429 beyond),
/// unless the configuration's `[limits] streams_per_user` says otherwise.
pub const STREAMS_PER_USER_MAX: usize = 8;
/// How often an idle stream sends a keep-alive comment, unless the
/// configuration's `[limits] stream_keepalive_seconds` says otherwise.
pub const STREAM_KEEPALIVE: Duration = Duration::from_secs(15);
/// The most events one read of the store hands a stream (it reads again
/// for the rest): bounds what a stream buffers.
pub const STREAM_READ_EVENTS_MAX: usize = 256;
/// The request header a reconnecting client names its last event with.
pub const LAST_EVENT_ID_HEADER: &str = "last-event-id";

/// The open streams: per-user counts, per-context wake-ups, the shutdown.
pub struct Streams {
    /// Per context someone streams: the LSN of its last event appended.
    contexts: Mutex<HashMap<String, watch::Sender<Lsn>>>,
    /// Open streams per user.
    per_user: Mutex<HashMap<String, usize>>,
    open: AtomicUsize,
    opened_total: AtomicU64,
    events_sent: AtomicU64,
    limit: usize,
    keepalive: Duration,
    shutdown: watch::Sender<bool>,
}

impl Streams {
    /// No streams yet; at most `limit` per user, idle ones kept alive every
    /// `keepalive`.
    pub fn new(limit: usize, keepalive: Duration) -> Streams {
        Streams {
            contexts: Mutex::new(HashMap::new()),
            per_user: Mutex::new(HashMap::new()),
            open: AtomicUsize::new(0),
            opened_total: AtomicU64::new(0),
            events_sent: AtomicU64::new(0),
            limit,
            keepalive,
            shutdown: watch::channel(false).0,
        }
    }

    /// Wakes the streams of `store`'s contexts on every event it folds.
    pub fn observe(self: &Arc<Self>, store: &Store) {
        let streams = Arc::clone(self);
        store.observe::<ServerMetaReducer>(move |_, event: &Event, lsn| {
            if streams.open.load(Ordering::Acquire) == 0 {
                return;
            }
            let Some(context_id) = event.conversation_id() else {
                return;
            };
            if let Some(sender) = streams.contexts.lock().get(context_id) {
                sender.send_replace(lsn);
            }
        });
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Streams opened since start.
    pub fn opened_total(&self) -> u64 {
        self.opened_total.load(Ordering::Relaxed)
    }

    /// Events sent on streams since start.
    pub fn events_sent(&self) -> u64 {
        self.events_sent.load(Ordering::Relaxed)
    }

    /// Ends every stream (they finish the event they are sending), and
    /// refuses new ones: the server is shutting down.
    pub fn shut_down(&self) {
        self.shutdown.send_replace(true);
    }

    /// A slot for one more stream of `user`, or 429 at the limit.
    fn acquire(self: &Arc<Self>, user: &str) -> Result<Slot, ApiError> {
        if *self.shutdown.borrow() {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "The server is shutting down",
            ));
        }
        let mut per_user = self.per_user.lock();
        let count = per_user.entry(user.to_string()).or_default();
        if *count >= self.limit {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "Too many event streams: user {user:?} has {count} open, the limit is {}; close one first",
                    self.limit
                ),
            ));
        }
        *count += 1;
        self.open.fetch_add(1, Ordering::AcqRel);
        self.opened_total.fetch_add(1, Ordering::Relaxed);
        Ok(Slot {
            streams: Arc::clone(self),
            user: user.to_string(),
        })
    }

    /// Wake-ups for `context_id`'s appends from now on.
    fn subscribe(self: &Arc<Self>, context_id: &str) -> Subscription {
        let mut contexts = self.contexts.lock();
        let sender = contexts
            .entry(context_id.to_string())
            .or_insert_with(|| watch::channel(0).0);
        Subscription {
            receiver: Some(sender.subscribe()),
            streams: Arc::clone(self),
            context_id: context_id.to_string(),
        }
    }
}

/// One open stream's place under its user's limit; freed when dropped
/// (the stream ended, or its client went away).
struct Slot {
    streams: Arc<Streams>,
    user: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut per_user = self.streams.per_user.lock();
        if let Some(count) = per_user.get_mut(&self.user) {
            *count -= 1;
            if *count == 0 {
                per_user.remove(&self.user);
            }
        }
        self.streams.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A stream's wake-ups; the context's channel goes with its last stream.
struct Subscription {
    receiver: Option<watch::Receiver<Lsn>>,
    streams: Arc<Streams>,
    context_id: String,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        drop(self.receiver.take());
        let mut contexts = self.streams.contexts.lock();
        if contexts
            .get(&self.context_id)
            .is_some_and(|sender| sender.receiver_count() == 0)
        {
            contexts.remove(&self.context_id);
        }
    }
}

/// What a stream holds between events.
struct Following {
    state: Arc<AppState>,
    user: String,
    context_id: String,
    /// The LSN of the last event sent (or the one the client resumed after).
    after: Lsn,
    /// Events read but not sent yet.
    queue: VecDeque<(Lsn, String)>,
    /// Events still to send before the stream ends (`limit`).
    remaining: Option<u64>,
    subscription: Subscription,
    shutdown: watch::Receiver<bool>,
    /// Set after a final error event: the stream ends.
    done: bool,
    _slot: Slot,
}

/// Follow a context's events as Server-Sent Events (its owner, or anyone
/// if it is public).
///
/// Each event's `id` is its LSN and its `data` the event's JSON line (its
/// JSON form, `docs/events.md`, with `lsn` first). The stream first sends
/// the context's stored events after the resume point, then each new one
/// as it is appended, with keep-alive comments while idle. It resumes
/// after the LSN in the `Last-Event-ID` header (as browsers send on
/// reconnecting) or else in `from` (0, the default, sends everything); it
/// ends after `limit` events when given, when the context stops being
/// readable by the caller, or when the server shuts down.
#[utoipa::path(get, path = "/contexts/{context_id}/events/stream", tag = "context",
    params(
        ("context_id" = String, Path, description = "The context", example = "ctx_123"),
        ("from" = Option<u64>, Query, description = "Send the events after this LSN (default 0: all)"),
        ("limit" = Option<u64>, Query, description = "End the stream after this many events (default: follow until the client leaves)", minimum = 1),
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this LSN (takes precedence over from)"),
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The events, as Server-Sent Events", content_type = "text/event-stream", body = String),
        (status = 400, description = "Invalid query or Last-Event-ID", body = crate::api::ErrorBody),
        (status = 401, description = "No or invalid token", body = crate::api::ErrorBody),
        (status = 403, description = "Context does not belong to user", body = crate::api::ErrorBody),
        (status = 404, description = "No such context", body = crate::api::ErrorBody),
        (status = 410, description = "The context was erased", body = crate::api::ErrorBody),
        (status = 429, description = "Too many streams open for this user", body = crate::api::ErrorBody),
        (status = 503, description = "The server is shutting down", body = crate::api::ErrorBody),
    ))]
pub async fn stream_events(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(context_id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<BTreeMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|error| ApiError::bad_request(error.body_text()))?;
    if let Some(key) = query
        .keys()
        .find(|key| !matches!(key.as_str(), "from" | "limit"))
    {
        return Err(ApiError::bad_request(format!(
            "Unknown query parameter {key:?}, expected one of: from, limit"
        )));
    }
    let from = match query.get("from") {
        None => 0,
        Some(text) => text.parse::<Lsn>().map_err(|_| {
            ApiError::bad_request(format!(
                "from must be an LSN (a whole number), not {text:?}"
            ))
        })?,
    };
    let after = match headers.get(LAST_EVENT_ID_HEADER) {
        None => from,
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|text| text.trim().parse::<Lsn>().ok())
            .ok_or_else(|| {
                ApiError::bad_request(
                    "Last-Event-ID must be an LSN (a whole number): the id of the last event received",
                )
            })?,
    };
    let remaining = match query.get("limit") {
        None => None,
        Some(text) => Some(
            text.parse::<u64>()
                .ok()
                .filter(|limit| *limit >= 1)
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "limit must be a whole number of events, at least 1, not {text:?}"
                    ))
                })?,
        ),
    };
    readable(&state, &caller.0, &context_id)?;
    let slot = state.streams.acquire(&caller.0)?;
    let subscription = state.streams.subscribe(&context_id);
    let keepalive = state.streams.keepalive;
    let following = Following {
        shutdown: state.streams.shutdown.subscribe(),
        state,
        user: caller.0,
        context_id,
        after,
        queue: VecDeque::new(),
        remaining,
        subscription,
        done: false,
        _slot: slot,
    };
    let events = futures_util::stream::unfold(following, next_event);
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(keepalive).text("keep-alive"))
        .into_response())
}

/// Whether `user` may read `context_id`: its owner, or anyone if public.
fn readable(state: &AppState, user: &str, context_id: &str) -> Result<(), ApiError> {
    if state.store.is_erased(context_id) {
        return Err(convlog::Error::Erased {
            conversation_id: context_id.to_string(),
        }
        .into());
    }
    let registry = state.control.registry()?;
    let info = registry.get(context_id).ok_or_else(|| {
        ApiError::from(convlog::Error::ContextNotFound {
            context_id: context_id.to_string(),
        })
    })?;
    if !info.allows(&Principal::user(user.to_string())) {
        return Err(convlog::Error::NotContextOwner {
            context_id: context_id.to_string(),
        }
        .into());
    }
    Ok(())
}

/// The stream's next event: a queued one, else what a read of the store
/// finds, else the first one after a wake-up. `None` ends the stream.
async fn next_event(mut following: Following) -> Option<(Result<SseEvent, Infallible>, Following)> {
    loop {
        if following.done || *following.shutdown.borrow() {
            return None;
        }
        if let Some((lsn, line)) = following.queue.pop_front() {
            following.after = lsn;
            if let Some(remaining) = &mut following.remaining {
                *remaining -= 1;
                if *remaining == 0 {
                    following.done = true;
                }
            }
            following
                .state
                .streams
                .events_sent
                .fetch_add(1, Ordering::Relaxed);
            let event = SseEvent::default().id(lsn.to_string()).data(line);
            return Some((Ok(event), following));
        }
        let state = Arc::clone(&following.state);
        let user = following.user.clone();
        let context_id = following.context_id.clone();
        let after = following.after;
        let read = tokio::task::spawn_blocking(move || {
            readable(&state, &user, &context_id)?;
            read_after(&state.store, &context_id, after, STREAM_READ_EVENTS_MAX)
                .map_err(ApiError::from)
        })
        .await;
        match read {
            Ok(Ok(events)) if !events.is_empty() => {
                following.queue.extend(events);
                continue;
            }
            Ok(Ok(_)) => {}
            Ok(Err(error)) => {
                // Sent as an `error` event: the response already began.
                following.done = true;
                let event = SseEvent::default().event("error").data(error.message);
                return Some((Ok(event), following));
            }
            Err(error) => {
                tracing::error!(%error, "stream read task failed");
                return None;
            }
        }
        let receiver = following
            .subscription
            .receiver
            .as_mut()
            .expect("a live subscription has its receiver");
        tokio::select! {
            changed = receiver.changed() => {
                if changed.is_err() {
                    return None;
                }
            }
            _ = following.shutdown.changed() => {}
        }
    }
}

/// Up to `max` events of `context_id` with LSNs above `after`, as
/// `(LSN, JSON line)`, in LSN order.
///
/// The store's index names the frames (atomic batches) holding the
/// context's events; only those are read. A frame may hold other
/// conversations' events too: they are skipped. When a snapshot has
/// folded the frames after `after` out of the index, the log is scanned
/// from `after` instead.
pub fn read_after(
    store: &Store,
    context_id: &str,
    after: Lsn,
    max: usize,
) -> convlog::Result<Vec<(Lsn, String)>> {
    let mut out = Vec::new();
    let log = store.log();
    let start = (after + 1).max(log.first_lsn());
    let end = log.next_lsn();
    if start >= end {
        return Ok(out);
    }
    let take = |record: convlog::log::Record, out: &mut Vec<(Lsn, String)>| {
        let event = record.event()?;
        // The store's own key bookkeeping (`convlog.key_made`) is not the
        // context's content: never sent to clients.
        if event.conversation_id() == Some(context_id)
            && !convlog::erasure::is_key_bookkeeping(&event)
        {
            // On an encrypted store: opened with the context's key.
            let event = store.unseal_event(record.lsn, event)?;
            out.push((record.lsn, convlog::json::to_json_line(record.lsn, &event)?));
        }
        Ok::<(), convlog::Error>(())
    };
    let Some(frames) = store.conversation_batches_since(context_id, start) else {
        // Scan: the snapshot folded the index entries away.
        for record in log.iter_from(start) {
            let record = record?;
            if record.lsn >= end || out.len() >= max {
                break;
            }
            take(record, &mut out)?;
        }
        return Ok(out);
    };
    // The rest of the frame holding `start`, which began before it (a
    // client that resumes inside a batch); the index lists frames by
    // their first event of this context only.
    let mut read_through = start;
    if frames.first() != Some(&start) {
        let mut cursor = log.iter_from(start);
        if let Some(first) = cursor.next() {
            let first = first?;
            let position = first.position;
            read_through = first.lsn + 1;
            take(first, &mut out)?;
            for record in cursor {
                let record = record?;
                if record.position != position {
                    break;
                }
                read_through = record.lsn + 1;
                take(record, &mut out)?;
            }
        }
    }
    for frame in frames {
        if out.len() >= max {
            break;
        }
        if frame < read_through {
            continue;
        }
        let mut position = None;
        for record in log.iter_from(frame) {
            let record = record?;
            if *position.get_or_insert(record.position) != record.position {
                break;
            }
            take(record, &mut out)?;
        }
    }
    out.truncate(max);
    Ok(out)
}
