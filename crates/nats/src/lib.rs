//! convlog's store on a replicated NATS JetStream log.
//!
//! [`JetStreamLog`] implements convlog's log boundary
//! ([`EventLog`]) over one JetStream stream per store, so
//! [`Store::open_on`] runs the whole store (appends, conversation reads,
//! resume, snapshots, host reducers, provider renders, message control)
//! on a cluster of `nats-server`s instead of a local segment log.
//! [`open_store`] opens one by URL: `nats://host:port/STORE`.
//!
//! The mapping (docs/scale-out.md says why):
//!
//! - **One stream per store**, named `convlog-STORE`, replicated
//!   ([`JetStreamOptions::replicas`], 3 by default), holding the subjects
//!   `convlog.STORE.>`. Its description carries the store identity
//!   (`convlog store id=<hex> format=1`), checked on every open.
//! - **One message per batch**: a batch is atomic because a message is.
//!   Headers carry the batch's first LSN, its event count and its chain
//!   values (a CRC-32 over the previous value and the batch, as in
//!   [`MemoryLog`](convlog::log::MemoryLog)); the body is the events'
//!   payloads, each behind its length.
//! - **One subject per conversation**: a batch whose events all belong to
//!   one conversation goes to `convlog.STORE.c.<hex of its id>`; a batch
//!   mixing conversations (or holding events of none) to `convlog.STORE.x`.
//! - **LSNs are gap-free** although a batch of `n` events is one stream
//!   message: the writer assigns them and publishes with
//!   `Nats-Expected-Last-Sequence`, so no two writers can both append
//!   after the same message. A locator is the message's stream sequence.
//! - **Many writers**: any number of handles, in any processes, append to
//!   one store ([`EventLog::many_writers`]). An append that loses the race
//!   for the stream's end stores nothing and fails with
//!   [`Error::Conflict`] (no conversation) after the handle has learnt the
//!   new end; a [`Store`] on the handle catches its index up with the
//!   other writers' batches and retries (checking a conditional append's
//!   version again), so two hosts racing on one conversation get one
//!   success and one `Conflict`, never an interleaving.
//! - **Retries never store twice**: each append carries a `Nats-Msg-Id`
//!   unique to the writing handle and the batch's first LSN, so an append
//!   retried after a timeout is deduplicated by the stream.
//! - **Durable** means acknowledged by the stream: stored by a quorum of
//!   its replicas.
//! - **Compaction** purges the stream up to a sequence; the last batch is
//!   always kept (it carries the next LSN and the chain).
//!
//! The trait is synchronous; the log owns a small tokio runtime and never
//! blocks inside someone else's: called from within a runtime, it hands the
//! work to its own and waits on a channel.

use std::future::Future;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, context::PublishErrorKind, stream};
use async_nats::HeaderMap;
use bytes::{BufMut, Bytes, BytesMut};
use convlog::log::boundary::{
    new_store_id, payload_conversation_id, store_id_hex, LogStoreId as StoreId,
};
use convlog::log::{
    Binding, Dropped, Durability, EventLog, Locator, LogCursor, Lsn, Position, Record,
};
use convlog::store::{Store, StoreOptions};
use convlog::{Error, Result};
use parking_lot::Mutex;

mod snapshots;
mod surface;
pub use snapshots::{
    open_store_shared, open_store_shared_read_only, open_store_shared_with, snapshot_bucket_name,
    SnapshotBucket,
};
pub use surface::{options_from_env, REPLICAS_ENV};

/// The `segment` of every locator a [`JetStreamLog`] hands out; the
/// `offset` is the batch's stream sequence.
pub const JETSTREAM_SEGMENT: u64 = 1;

/// The longest store name a URL may carry (`[A-Za-z0-9_-]`, 1 to this many
/// characters): it becomes a stream name and a subject token.
pub const STORE_NAME_MAX: usize = 64;

/// The first pause before an append whose acknowledgement timed out (or
/// whose stream had no leader, or whose connection broke) is sent again,
/// with the same message id; each pause doubles, up to
/// [`APPEND_RETRY_PAUSE_MAX`], until [`JetStreamOptions::append_retry_window`]
/// is spent.
pub const APPEND_RETRY_PAUSE_MIN: Duration = Duration::from_millis(20);

/// The longest pause between two tries of one append.
pub const APPEND_RETRY_PAUSE_MAX: Duration = Duration::from_secs(1);

/// How many messages a cursor asks for at once.
pub const READ_AHEAD: u64 = 64;

/// The longest conversation subject token; a longer conversation id maps
/// to `convlog.STORE.l.<CRC-32 of the id>`.
pub const SUBJECT_TOKEN_MAX: usize = 256;

/// The most bytes of batches a writer keeps in memory by default to serve
/// [`EventLog::read_batch`] without a round-trip (the batches it appended
/// or read most recently; the oldest stream sequences go first):
/// [`JetStreamOptions::batch_cache_bytes`].
pub const BATCH_CACHE_BYTES: usize = 16 << 20;

/// The format of the messages: the description's `format=`.
pub const MESSAGE_FORMAT: u32 = 1;

/// The stream's deduplication window: how long a retried append is
/// recognised by its message id.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

const HEADER_FIRST_LSN: &str = "Convlog-First-Lsn";
const HEADER_COUNT: &str = "Convlog-Count";
const HEADER_PREVIOUS_CHAIN: &str = "Convlog-Previous-Chain";
const HEADER_CHAIN: &str = "Convlog-Chain";
/// Room kept for the headers when a batch is checked against the server's
/// `max_payload` (they take well under this).
const HEADER_ROOM: usize = 512;

/// How to open a [`JetStreamLog`].
#[derive(Debug, Clone)]
pub struct JetStreamOptions {
    replicas: usize,
    connect_timeout: Duration,
    request_timeout: Duration,
    append_retry_window: Duration,
    create: bool,
    expect_store_id: Option<StoreId>,
    batch_cache_bytes: usize,
}

impl Default for JetStreamOptions {
    fn default() -> JetStreamOptions {
        JetStreamOptions {
            replicas: 3,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            append_retry_window: Duration::from_secs(30),
            create: true,
            expect_store_id: None,
            batch_cache_bytes: BATCH_CACHE_BYTES,
        }
    }
}

impl JetStreamOptions {
    /// The defaults: 3 replicas, a 5 s connect timeout, a 10 s request
    /// timeout, the stream created when missing.
    pub fn new() -> JetStreamOptions {
        JetStreamOptions::default()
    }

    /// The replica count of a stream this open creates (1 to 5; JetStream's
    /// limit). An existing stream keeps its own ([`JetStreamLog::replicas`]).
    pub fn replicas(mut self, replicas: usize) -> JetStreamOptions {
        self.replicas = replicas;
        self
    }

    /// How long connecting to the cluster may take before the open fails.
    pub fn connect_timeout(mut self, timeout: Duration) -> JetStreamOptions {
        self.connect_timeout = timeout;
        self
    }

    /// How long one request (a publish's acknowledgement, a read) may take
    /// before it fails (an append is then retried within
    /// [`JetStreamOptions::append_retry_window`]).
    pub fn request_timeout(mut self, timeout: Duration) -> JetStreamOptions {
        self.request_timeout = timeout;
        self
    }

    /// How long an append keeps trying (a stream electing a new leader
    /// after its leader died takes a few seconds) before the handle gives
    /// up and is poisoned (30 s by default). Reads (message gets, the
    /// stream's state) retry as long before they fail.
    pub fn append_retry_window(mut self, window: Duration) -> JetStreamOptions {
        self.append_retry_window = window;
        self
    }

    /// Whether a missing stream is created (true by default). A follower
    /// never creates one.
    pub fn create(mut self, create: bool) -> JetStreamOptions {
        self.create = create;
        self
    }

    /// Fails the open unless the stream holds this store.
    pub fn expect_store_id(mut self, store_id: StoreId) -> JetStreamOptions {
        self.expect_store_id = Some(store_id);
        self
    }

    /// How many bytes of batches a writer keeps in memory to serve reads
    /// without a round-trip to the stream ([`BATCH_CACHE_BYTES`] by
    /// default); 0 keeps none, so every read of a batch is a message fetch
    /// (what a follower always does). A follower keeps no cache whatever
    /// this says.
    pub fn batch_cache_bytes(mut self, bytes: usize) -> JetStreamOptions {
        self.batch_cache_bytes = bytes;
        self
    }

    fn check(&self) -> Result<()> {
        if !(1..=5).contains(&self.replicas) {
            return Err(Error::InvalidOption {
                option: "JetStreamOptions::replicas",
                reason: format!("{} replicas; JetStream streams have 1 to 5", self.replicas),
            });
        }
        for (option, timeout) in [
            ("JetStreamOptions::connect_timeout", self.connect_timeout),
            ("JetStreamOptions::request_timeout", self.request_timeout),
            (
                "JetStreamOptions::append_retry_window",
                self.append_retry_window,
            ),
        ] {
            if timeout.is_zero() {
                return Err(Error::InvalidOption {
                    option,
                    reason: "a zero timeout fails every request".to_string(),
                });
            }
        }
        Ok(())
    }
}

/// A parsed `nats://host:port[,host:port...]/STORE` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreUrl {
    /// The servers to connect to (`host:port`).
    pub servers: Vec<String>,
    /// The store's name.
    pub store: String,
}

impl StoreUrl {
    /// Parses `nats://host:port[,host:port...]/STORE`.
    pub fn parse(url: &str) -> Result<StoreUrl> {
        let invalid = |reason: String| Error::InvalidOption {
            option: "store URL",
            reason: format!("{url:?}: {reason} (expected nats://host:port/STORE)"),
        };
        let rest = url
            .strip_prefix("nats://")
            .ok_or_else(|| invalid("it does not start with nats://".to_string()))?;
        let (hosts, store) = rest
            .split_once('/')
            .ok_or_else(|| invalid("it names no store after the host".to_string()))?;
        let servers: Vec<String> = hosts.split(',').map(str::to_string).collect();
        if servers.iter().any(|server| server.is_empty()) {
            return Err(invalid("a server address is empty".to_string()));
        }
        check_store_name(store).map_err(invalid)?;
        Ok(StoreUrl {
            servers,
            store: store.to_string(),
        })
    }

    /// Whether `path` is a store URL rather than a directory.
    pub fn is_url(path: &str) -> bool {
        path.starts_with("nats://")
    }

    fn display(&self) -> PathBuf {
        PathBuf::from(format!("nats://{}/{}", self.servers.join(","), self.store))
    }
}

fn check_store_name(store: &str) -> std::result::Result<(), String> {
    if store.is_empty() || store.len() > STORE_NAME_MAX {
        return Err(format!(
            "the store name is {} characters; it has 1 to {STORE_NAME_MAX} (STORE_NAME_MAX)",
            store.len()
        ));
    }
    if let Some(bad) = store
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "the store name has {bad:?}; it is made of ASCII letters, digits, '-' and '_'"
        ));
    }
    Ok(())
}

/// The stream a store lives in.
pub fn stream_name(store: &str) -> String {
    format!("convlog-{store}")
}

/// The subject prefix of a store's messages (`convlog.STORE`).
pub fn subject_prefix(store: &str) -> String {
    format!("convlog.{store}")
}

/// Opens the store at `url` (`nats://host:port/STORE`) with its snapshots
/// in the local directory `snapshot_dir` ([`open_store_shared`] keeps them
/// in the store's object store bucket instead; see docs/scale-out.md).
pub fn open_store(
    url: &str,
    snapshot_dir: impl AsRef<Path>,
    options: StoreOptions,
    nats: JetStreamOptions,
) -> Result<Store> {
    Store::open_on(JetStreamLog::open(url, nats)?, snapshot_dir, options)
}

/// Opens the store at `url` read-only: a follower of whoever writes it.
pub fn open_store_read_only(
    url: &str,
    snapshot_dir: impl AsRef<Path>,
    options: StoreOptions,
    nats: JetStreamOptions,
) -> Result<Store> {
    Store::open_on(
        JetStreamLog::open_follower(url, nats)?,
        snapshot_dir,
        options,
    )
}

/// One batch's headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchHead {
    sequence: u64,
    first_lsn: Lsn,
    count: u64,
    previous_chain: u32,
    chain: u32,
}

impl BatchHead {
    fn end_lsn(&self) -> Lsn {
        self.first_lsn + self.count
    }
}

/// What the writer knows of the stream's end.
#[derive(Debug)]
struct WriterState {
    first_lsn: Lsn,
    next_lsn: Lsn,
    durable_lsn: Lsn,
    /// The stream sequence of the last batch (0: none yet).
    last_sequence: u64,
    /// The chain value after the last batch (0: none yet).
    last_chain: u32,
    /// Why the writer stopped, once it has.
    poisoned: Option<String>,
}

struct Shared {
    /// `nats://servers/STORE`: names the log in errors.
    name: PathBuf,
    store_id: StoreId,
    stream: stream::Stream,
    context: jetstream::Context,
    subject_prefix: String,
    max_payload: usize,
    replicas: usize,
    /// Makes message ids unique to this handle.
    writer_id: String,
    append_retry_window: Duration,
    /// Batches by stream sequence, for a writer's reads (`None` for a
    /// follower opened on its own: another process's purge would leave it
    /// serving dropped batches). Batches never change once stored, and
    /// the writer's purges evict what they drop.
    cache: Option<Mutex<BatchCache>>,
    /// The highest stream sequence this handle knows the stream holds (it
    /// appended, read or was told of it): a cursor past it asks the stream
    /// where it ends before reading ahead.
    last_known: AtomicU64,
    /// The highest first LSN this handle has seen the stream hold: another
    /// writer's compaction moves it, and this handle learns of it when it
    /// reads the stream's ends.
    first_known: AtomicU64,
    runtime: Option<tokio::runtime::Runtime>,
}

/// Recently appended or read batches, at most `budget` bytes
/// ([`JetStreamOptions::batch_cache_bytes`]).
struct BatchCache {
    batches: std::collections::BTreeMap<u64, Vec<Record>>,
    bytes: usize,
    budget: usize,
}

impl BatchCache {
    fn size(records: &[Record]) -> usize {
        records
            .iter()
            .map(|record| record.payload.len() + std::mem::size_of::<Record>())
            .sum()
    }

    fn new(budget: usize) -> BatchCache {
        BatchCache {
            batches: std::collections::BTreeMap::new(),
            bytes: 0,
            budget,
        }
    }

    fn insert(&mut self, sequence: u64, records: Vec<Record>) {
        let size = BatchCache::size(&records);
        if size > self.budget {
            return;
        }
        if let Some(old) = self.batches.insert(sequence, records) {
            self.bytes -= BatchCache::size(&old);
        }
        self.bytes += size;
        while self.bytes > self.budget {
            let Some((_, evicted)) = self.batches.pop_first() else {
                break;
            };
            self.bytes -= BatchCache::size(&evicted);
        }
    }

    /// Forgets every batch below `sequence` (purged).
    fn evict_below(&mut self, sequence: u64) {
        let kept = self.batches.split_off(&sequence);
        let dropped = std::mem::replace(&mut self.batches, kept);
        self.bytes -= dropped
            .values()
            .map(|records| BatchCache::size(records))
            .sum::<usize>();
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Dropping a runtime blocks; inside another runtime that panics.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Shared {
    /// Runs `future` on the log's own runtime and waits for it.
    fn block<F>(&self, future: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let runtime = self
            .runtime
            .as_ref()
            .expect("the runtime lives as long as the log");
        block_on(runtime, future)
    }

    fn io(&self, operation: &'static str, kind: io::ErrorKind, message: String) -> Error {
        Error::Io {
            operation,
            path: self.name.clone(),
            source: io::Error::new(kind, message),
        }
    }

    fn compacted(&self, first_missing: Lsn, next_present: Lsn) -> Error {
        Error::Compacted {
            store: self.name.clone(),
            first_missing,
            next_present,
        }
    }

    /// Runs a request, trying it again while it fails (a timeout, no
    /// stream leader during an election, a broken connection), with pauses
    /// doubling from [`APPEND_RETRY_PAUSE_MIN`] to [`APPEND_RETRY_PAUSE_MAX`],
    /// for at most [`JetStreamOptions::append_retry_window`]: reads, like
    /// appends, ride out a leader failover. `Ok(Err(..))` is an answer
    /// `done` accepts as final (say, no message there).
    fn retrying<T, E: std::fmt::Display>(
        &self,
        what: &str,
        mut request: impl FnMut() -> std::result::Result<T, E>,
        done: impl Fn(&E) -> bool,
    ) -> std::result::Result<std::result::Result<T, E>, String> {
        let deadline = std::time::Instant::now() + self.append_retry_window;
        let mut pause = APPEND_RETRY_PAUSE_MIN;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            match request() {
                Ok(value) => return Ok(Ok(value)),
                Err(error) if done(&error) => return Ok(Err(error)),
                Err(error) => {
                    if std::time::Instant::now() + pause > deadline {
                        return Err(format!("{what}: {error} (try {attempt})"));
                    }
                    tracing::warn!(attempt, %error, "{what} of {} failed", self.name.display());
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(APPEND_RETRY_PAUSE_MAX);
                }
            }
        }
    }

    /// The message at `sequence`: `Ok(None)` if the stream has none there.
    fn get(&self, sequence: u64) -> Result<Option<jetstream::message::StreamMessage>> {
        let got = self
            .retrying(
                &format!("message {sequence}"),
                || {
                    let stream = self.stream.clone();
                    self.block(async move { stream.get_raw_message(sequence).await })
                },
                is_no_message,
            )
            .map_err(|message| self.io("read", io::ErrorKind::Other, message))?;
        match got {
            Ok(message) => Ok(Some(message)),
            Err(_) => Ok(None),
        }
    }

    /// The messages from `from` on, up to `count` of them, fetched at once;
    /// stops before the first sequence the stream does not hold.
    fn get_many(&self, from: u64, count: u64) -> Result<Vec<jetstream::message::StreamMessage>> {
        let stream = self.stream.clone();
        let results = self.block(async move {
            let gets = (from..from + count).map(|sequence| {
                let stream = stream.clone();
                async move { stream.get_raw_message(sequence).await }
            });
            futures_util::future::join_all(gets).await
        });
        let mut messages = Vec::new();
        for (sequence, result) in (from..).zip(results) {
            match result {
                Ok(message) => messages.push(message),
                Err(error) if is_no_message(&error) => break,
                // A failover, say: that one again, with retries.
                Err(_) => match self.get(sequence)? {
                    Some(message) => messages.push(message),
                    None => break,
                },
            }
        }
        Ok(messages)
    }

    /// The stream's first and last sequence and message count, asked of
    /// its leader.
    fn stream_state(&self) -> Result<stream::State> {
        self.retrying(
            "the stream's state",
            || {
                let stream = self.stream.clone();
                self.block(async move { stream.get_info().await })
            },
            |_| false,
        )
        .map(|info| {
            let state = info.expect("every error is retried").state;
            self.last_known
                .fetch_max(state.last_sequence, Ordering::AcqRel);
            state
        })
        .map_err(|message| self.io("read the state of", io::ErrorKind::Other, message))
    }

    fn head_at(&self, sequence: u64) -> Result<Option<BatchHead>> {
        match self.get(sequence)? {
            Some(message) => self.head(&message).map(Some),
            None => Ok(None),
        }
    }

    fn head(&self, message: &jetstream::message::StreamMessage) -> Result<BatchHead> {
        parse_head(message).map_err(|reason| self.damaged(message.sequence, reason))
    }

    fn damaged(&self, sequence: u64, reason: String) -> Error {
        Error::Corrupted {
            segment: self.name.clone(),
            offset: sequence,
            reason: format!("stream message {sequence}: {reason}"),
        }
    }

    fn records(
        &self,
        message: &jetstream::message::StreamMessage,
    ) -> Result<(BatchHead, Vec<Record>)> {
        let head = self.head(message)?;
        let payloads = decode_body(&message.payload)
            .map_err(|reason| self.damaged(message.sequence, reason))?;
        if payloads.len() as u64 != head.count {
            return Err(self.damaged(
                message.sequence,
                format!(
                    "the body holds {} events, the header says {}",
                    payloads.len(),
                    head.count
                ),
            ));
        }
        let chain = chain(head.previous_chain, &payloads);
        if chain != head.chain {
            return Err(self.damaged(
                message.sequence,
                format!(
                    "the events' chain value is {chain:08x}, the header says {:08x}",
                    head.chain
                ),
            ));
        }
        let position = Position {
            segment: JETSTREAM_SEGMENT,
            offset: message.sequence,
        };
        let records: Vec<Record> = (head.first_lsn..)
            .zip(payloads)
            .map(|(lsn, payload)| Record {
                lsn,
                position,
                payload,
            })
            .collect();
        if let Some(cache) = &self.cache {
            cache.lock().insert(message.sequence, records.clone());
        }
        self.last_known
            .fetch_max(message.sequence, Ordering::AcqRel);
        Ok((head, records))
    }

    /// The batch holding `lsn`, found by bisecting the stream's sequences
    /// (LSNs grow with them); `None` if no batch holds it.
    fn find(&self, lsn: Lsn, state: &stream::State) -> Result<Option<BatchHead>> {
        if state.messages == 0 {
            return Ok(None);
        }
        let (mut low, mut high) = (state.first_sequence, state.last_sequence);
        while low <= high {
            let middle = low + (high - low) / 2;
            let Some(head) = self.head_at(middle)? else {
                // Purged while we searched: the prefix is gone.
                return Ok(None);
            };
            if lsn < head.first_lsn {
                if middle == 0 {
                    break;
                }
                high = middle - 1;
            } else if lsn >= head.end_lsn() {
                low = middle + 1;
            } else {
                return Ok(Some(head));
            }
        }
        Ok(None)
    }

    /// The log's first LSN, next LSN and last chain value as the stream
    /// holds them now.
    fn ends(&self) -> Result<(Lsn, Lsn, u32, stream::State)> {
        let state = self.stream_state()?;
        if state.messages == 0 {
            if state.last_sequence > 0 {
                return Err(self.io(
                    "open",
                    io::ErrorKind::InvalidData,
                    format!(
                        "stream {} was purged of every message outside convlog (its last sequence is {}): the store's next LSN is lost",
                        self.stream.cached_info().config.name,
                        state.last_sequence
                    ),
                ));
            }
            return Ok((1, 1, 0, state));
        }
        let first = self.head_at(state.first_sequence)?;
        let last = self.head_at(state.last_sequence)?;
        match (first, last) {
            (Some(first), Some(last)) => {
                self.first_known
                    .fetch_max(first.first_lsn, Ordering::AcqRel);
                Ok((first.first_lsn, last.end_lsn(), last.chain, state))
            }
            _ => Err(self.io(
                "read the ends of",
                io::ErrorKind::Other,
                "the stream changed while it was read; try again".to_string(),
            )),
        }
    }
}

fn is_no_message(error: &stream::RawMessageError) -> bool {
    matches!(error.kind(), stream::RawMessageErrorKind::NoMessageFound)
        || matches!(
            error.kind(),
            stream::RawMessageErrorKind::JetStream(inner)
                if inner.error_code() == jetstream::ErrorCode::NO_MESSAGE_FOUND
        )
}

/// Runs `future` on `runtime` and waits for it, from any thread: directly
/// outside a runtime, through a channel inside one (never blocking that
/// runtime's `block_on`, which would panic).
fn block_on<F>(runtime: &tokio::runtime::Runtime, future: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    if tokio::runtime::Handle::try_current().is_err() {
        return runtime.block_on(future);
    }
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = sender.send(future.await);
    });
    receiver
        .recv()
        .expect("the log's runtime runs its tasks to the end")
}

fn parse_head(
    message: &jetstream::message::StreamMessage,
) -> std::result::Result<BatchHead, String> {
    let number = |name: &str| -> std::result::Result<u64, String> {
        let value = message
            .headers
            .get(name)
            .ok_or_else(|| format!("no {name} header: not a convlog batch"))?;
        value
            .as_str()
            .parse()
            .map_err(|_| format!("header {name} is {:?}, not a number", value.as_str()))
    };
    let chain_value = |name: &str| -> std::result::Result<u32, String> {
        let value = message
            .headers
            .get(name)
            .ok_or_else(|| format!("no {name} header: not a convlog batch"))?;
        u32::from_str_radix(value.as_str(), 16)
            .map_err(|_| format!("header {name} is {:?}, not 8 hex digits", value.as_str()))
    };
    let head = BatchHead {
        sequence: message.sequence,
        first_lsn: number(HEADER_FIRST_LSN)?,
        count: number(HEADER_COUNT)?,
        previous_chain: chain_value(HEADER_PREVIOUS_CHAIN)?,
        chain: chain_value(HEADER_CHAIN)?,
    };
    if head.first_lsn == 0 || head.count == 0 {
        return Err(format!(
            "first LSN {} and count {}: both are at least 1",
            head.first_lsn, head.count
        ));
    }
    Ok(head)
}

/// The chain value after a batch of `payloads` following `previous` (the
/// same function as `MemoryLog`'s).
fn chain(previous: u32, payloads: &[Vec<u8>]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&previous.to_le_bytes());
    for payload in payloads {
        hasher.update(&(payload.len() as u64).to_le_bytes());
        hasher.update(payload);
    }
    hasher.finalize()
}

fn encode_body(payloads: &[Vec<u8>]) -> Bytes {
    let size = payloads.iter().map(|payload| 4 + payload.len()).sum();
    let mut body = BytesMut::with_capacity(size);
    for payload in payloads {
        body.put_u32_le(payload.len() as u32);
        body.put_slice(payload);
    }
    body.freeze()
}

fn decode_body(mut body: &[u8]) -> std::result::Result<Vec<Vec<u8>>, String> {
    let mut payloads = Vec::new();
    while !body.is_empty() {
        let Some((length, rest)) = body.split_first_chunk::<4>() else {
            return Err(format!("{} stray bytes after the last event", body.len()));
        };
        let length = u32::from_le_bytes(*length) as usize;
        if rest.len() < length {
            return Err(format!(
                "event {} is {length} bytes, only {} follow",
                payloads.len(),
                rest.len()
            ));
        }
        payloads.push(rest[..length].to_vec());
        body = &rest[length..];
    }
    Ok(payloads)
}

/// The subject of a batch: its conversation's, when it has one.
fn batch_subject(prefix: &str, payloads: &[Vec<u8>]) -> String {
    let mut conversations = payloads
        .iter()
        .map(|payload| payload_conversation_id(payload));
    let first = conversations.next().flatten();
    match first {
        Some(id) if conversations.all(|other| other == Some(id)) => {
            if id.len() * 2 <= SUBJECT_TOKEN_MAX {
                let hex: String = id.bytes().map(|byte| format!("{byte:02x}")).collect();
                format!("{prefix}.c.{hex}")
            } else {
                format!("{prefix}.l.{:08x}", crc32fast::hash(id.as_bytes()))
            }
        }
        _ => format!("{prefix}.x"),
    }
}

/// The subject of a conversation's batches (those holding only its events).
pub fn conversation_subject(store: &str, conversation_id: &str) -> String {
    let prefix = subject_prefix(store);
    // The subject `batch_subject` picks for a batch of this conversation.
    if conversation_id.len() * 2 <= SUBJECT_TOKEN_MAX {
        let hex: String = conversation_id
            .bytes()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        format!("{prefix}.c.{hex}")
    } else {
        format!(
            "{prefix}.l.{:08x}",
            crc32fast::hash(conversation_id.as_bytes())
        )
    }
}

fn description(store_id: &StoreId) -> String {
    format!(
        "convlog store id={} format={MESSAGE_FORMAT}",
        store_id_hex(store_id)
    )
}

fn parse_description(text: &str) -> Option<StoreId> {
    let rest = text.strip_prefix("convlog store id=")?;
    let (hex, format) = rest.split_once(" format=")?;
    if format != MESSAGE_FORMAT.to_string() || hex.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (index, byte) in id.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(index * 2..index * 2 + 2)?, 16).ok()?;
    }
    Some(id)
}

/// The configuration of a new store's stream.
fn stream_config(url: &StoreUrl, store_id: &StoreId, replicas: usize) -> stream::Config {
    stream::Config {
        name: stream_name(&url.store),
        subjects: vec![format!("{}.>", subject_prefix(&url.store))],
        description: Some(description(store_id)),
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        max_messages: -1,
        max_bytes: -1,
        max_messages_per_subject: -1,
        max_age: Duration::ZERO,
        discard: stream::DiscardPolicy::Old,
        duplicate_window: DUPLICATE_WINDOW,
        deny_delete: true,
        deny_purge: false,
        allow_rollup: false,
        ..Default::default()
    }
}

/// Why an existing stream cannot hold a convlog store, if it cannot.
fn config_problem(url: &StoreUrl, config: &stream::Config) -> Option<String> {
    let subjects = vec![format!("{}.>", subject_prefix(&url.store))];
    if config.subjects != subjects {
        return Some(format!(
            "its subjects are {:?}, not {subjects:?}",
            config.subjects
        ));
    }
    if config.retention != stream::RetentionPolicy::Limits {
        return Some(format!(
            "its retention is {:?}; a convlog stream keeps every message until the store compacts (limits)",
            config.retention
        ));
    }
    let limits = [
        ("max_msgs", config.max_messages),
        ("max_bytes", config.max_bytes),
        ("max_msgs_per_subject", config.max_messages_per_subject),
    ];
    for (name, value) in limits {
        if value >= 0 {
            return Some(format!(
                "its {name} is {value}; a convlog stream has none (-1): the stream would drop events the store has not compacted"
            ));
        }
    }
    if !config.max_age.is_zero() {
        return Some(format!(
            "its max_age is {:?}; a convlog stream has none (0): the stream would drop events the store has not compacted",
            config.max_age
        ));
    }
    if config.allow_rollup || config.sealed {
        return Some("it allows rollups or is sealed; a convlog stream does neither".to_string());
    }
    if config.duplicate_window.is_zero() {
        return Some(
            "its duplicate window is 0: a retried append could be stored twice".to_string(),
        );
    }
    None
}

/// An [`EventLog`] over a NATS JetStream stream: see the crate
/// documentation for the mapping. Writers append; followers
/// ([`JetStreamLog::open_follower`], [`JetStreamLog::follower`]) read.
pub struct JetStreamLog {
    shared: Arc<Shared>,
    /// The writer's view of the stream's end; `None` for a follower.
    writer: Option<Mutex<WriterState>>,
    /// A follower: one past the last event a cursor returned.
    seen: Arc<AtomicU64>,
}

impl std::fmt::Debug for JetStreamLog {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("JetStreamLog")
            .field("name", &self.shared.name)
            .field("writable", &self.writer.is_some())
            .finish_non_exhaustive()
    }
}

impl JetStreamLog {
    /// Opens (creating it if missing, unless [`JetStreamOptions::create`]
    /// is false) the store at `url` (`nats://host:port[,host:port...]/STORE`)
    /// for writing.
    pub fn open(url: &str, options: JetStreamOptions) -> Result<JetStreamLog> {
        JetStreamLog::open_with(url, options, true)
    }

    /// Opens the store at `url` as a follower: it reads what a writer
    /// appends and writes nothing. The stream must exist.
    pub fn open_follower(url: &str, options: JetStreamOptions) -> Result<JetStreamLog> {
        JetStreamLog::open_with(url, options.create(false), false)
    }

    /// A follower on the same connection.
    pub fn follower(&self) -> JetStreamLog {
        JetStreamLog {
            shared: Arc::clone(&self.shared),
            writer: None,
            seen: Arc::new(AtomicU64::new(1)),
        }
    }

    /// The name the log goes by in errors: `nats://servers/STORE`.
    pub fn name(&self) -> &Path {
        &self.shared.name
    }

    /// The replica count of the stream.
    pub fn replicas(&self) -> usize {
        self.shared.replicas
    }

    /// The largest message the server takes (its `max_payload`): a batch
    /// must fit in it, with its headers.
    pub fn max_payload(&self) -> usize {
        self.shared.max_payload
    }

    /// The stream sequence of the last batch this writer appended or found
    /// (0 for none); `None` for a follower.
    pub fn last_sequence(&self) -> Option<u64> {
        self.writer
            .as_ref()
            .map(|writer| writer.lock().last_sequence)
    }

    fn open_with(url: &str, options: JetStreamOptions, writable: bool) -> Result<JetStreamLog> {
        options.check()?;
        let url = StoreUrl::parse(url)?;
        let name = url.display();
        let io = |operation: &'static str, kind: io::ErrorKind, message: String| Error::Io {
            operation,
            path: name.clone(),
            source: io::Error::new(kind, message),
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("convlog-nats")
            .enable_all()
            .build()
            .map_err(|error| Error::Io {
                operation: "start the NATS client runtime for",
                path: name.clone(),
                source: error,
            })?;
        let connect_timeout = options.connect_timeout;
        let request_timeout = options.request_timeout;
        let servers = url.servers.clone();
        let client = block_on(&runtime, async move {
            let connect = async_nats::ConnectOptions::new()
                .connection_timeout(connect_timeout)
                .request_timeout(Some(request_timeout))
                .connect(servers);
            // `connect` tries each server in turn; bound the whole attempt.
            tokio::time::timeout(connect_timeout, connect).await
        })
        .map_err(|_| {
            io(
                "connect to",
                io::ErrorKind::TimedOut,
                format!(
                    "no server answered within {connect_timeout:?} (JetStreamOptions::connect_timeout)"
                ),
            )
        })?
        .map_err(|error| {
            io(
                "connect to",
                io::ErrorKind::ConnectionRefused,
                format!("{error}; is a nats-server with JetStream running there?"),
            )
        })?;
        let max_payload = client.server_info().max_payload;
        // The context spawns its acknowledgement task: build it on the
        // log's runtime.
        let context = {
            let _entered = runtime.enter();
            jetstream::ContextBuilder::new()
                .timeout(request_timeout)
                .build(client)
        };
        let stream_name = stream_name(&url.store);
        let new_id = new_store_id();
        let config = stream_config(&url, &new_id, options.replicas);
        let create = options.create && writable;
        let lookup_context = context.clone();
        let stream = block_on(&runtime, async move {
            loop {
                match lookup_context.get_stream(&config.name).await {
                    Ok(stream) => return Ok(stream),
                    Err(error) => {
                        let missing = matches!(
                            error.kind(),
                            jetstream::context::GetStreamErrorKind::JetStream(inner)
                                if inner.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
                        );
                        if !missing || !create {
                            return Err((missing, error.to_string()));
                        }
                    }
                }
                match lookup_context.create_stream(config.clone()).await {
                    Ok(stream) => return Ok(stream),
                    // Another host created it first: look it up again.
                    Err(error)
                        if matches!(
                            error.kind(),
                            jetstream::context::CreateStreamErrorKind::JetStream(inner)
                                if inner.error_code() == jetstream::ErrorCode::STREAM_NAME_EXIST
                        ) => {}
                    Err(error) => return Err((false, format!("creating stream {}: {error}", config.name))),
                }
            }
        })
        .map_err(|(missing, message)| {
            if missing {
                io(
                    "open",
                    io::ErrorKind::NotFound,
                    format!("the cluster has no stream {stream_name}: no store of that name (a follower never creates one)"),
                )
            } else {
                io("open", io::ErrorKind::Other, message)
            }
        })?;
        let info = stream.cached_info();
        if let Some(problem) = config_problem(&url, &info.config) {
            return Err(io(
                "open",
                io::ErrorKind::InvalidData,
                format!("stream {stream_name} cannot hold a convlog store: {problem}"),
            ));
        }
        let store_id = info
            .config
            .description
            .as_deref()
            .and_then(parse_description)
            .ok_or_else(|| {
                io(
                    "open",
                    io::ErrorKind::InvalidData,
                    format!(
                        "stream {stream_name} is not a convlog store: its description is {:?}, not \"convlog store id=<32 hex digits> format={MESSAGE_FORMAT}\"",
                        info.config.description
                    ),
                )
            })?;
        if let Some(expected) = options.expect_store_id {
            if expected != store_id {
                return Err(io(
                    "open",
                    io::ErrorKind::InvalidData,
                    format!(
                        "stream {stream_name} holds store {}, not the expected {}",
                        store_id_hex(&store_id),
                        store_id_hex(&expected)
                    ),
                ));
            }
        }
        let replicas = info.config.num_replicas;
        let shared = Arc::new(Shared {
            name: name.clone(),
            store_id,
            stream,
            context,
            subject_prefix: subject_prefix(&url.store),
            max_payload,
            replicas,
            writer_id: uuid::Uuid::new_v4().simple().to_string(),
            append_retry_window: options.append_retry_window,
            cache: (writable && options.batch_cache_bytes > 0)
                .then(|| Mutex::new(BatchCache::new(options.batch_cache_bytes))),
            last_known: AtomicU64::new(0),
            first_known: AtomicU64::new(1),
            runtime: Some(runtime),
        });
        let writer = if writable {
            let (first_lsn, next_lsn, last_chain, state) = shared.ends()?;
            Some(Mutex::new(WriterState {
                first_lsn,
                next_lsn,
                durable_lsn: next_lsn,
                last_sequence: state.last_sequence,
                last_chain,
                poisoned: None,
            }))
        } else {
            None
        };
        Ok(JetStreamLog {
            shared,
            writer,
            seen: Arc::new(AtomicU64::new(1)),
        })
    }

    fn writer(&self, operation: &'static str) -> Result<&Mutex<WriterState>> {
        self.writer.as_ref().ok_or_else(|| Error::ReadOnly {
            store: self.shared.name.clone(),
            operation,
        })
    }

    fn poisoned(&self, cause: &str) -> Error {
        Error::Poisoned {
            store: self.shared.name.clone(),
            cause: cause.to_string(),
        }
    }

    /// Publishes one batch (with retries under the same message id);
    /// returns its stream sequence.
    fn publish(
        &self,
        subject: String,
        headers: HeaderMap,
        body: Bytes,
        expected_last_sequence: u64,
        message_id: String,
    ) -> std::result::Result<(u64, bool), (PublishErrorKind, String)> {
        let deadline = std::time::Instant::now() + self.shared.append_retry_window;
        let mut pause = APPEND_RETRY_PAUSE_MIN;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let context = self.shared.context.clone();
            let publish = jetstream::message::PublishMessage::build()
                .headers(headers.clone())
                .payload(body.clone())
                .expected_last_sequence(expected_last_sequence)
                .message_id(&message_id);
            let subject = subject.clone();
            let result = self
                .shared
                .block(async move { context.send_publish(subject, publish).await?.await });
            let error = match result {
                Ok(ack) => return Ok((ack.sequence, ack.duplicate)),
                Err(error) => error,
            };
            let kind = error.kind();
            // Worth another try: no ack in time, no stream leader (yet),
            // a broken connection. Never a wrong last sequence (another
            // writer) or an oversized message.
            let retry = matches!(
                kind,
                PublishErrorKind::TimedOut
                    | PublishErrorKind::BrokenPipe
                    | PublishErrorKind::StreamNotFound
                    | PublishErrorKind::Other
            );
            tracing::warn!(attempt, %error, "append to {} failed", self.shared.name.display());
            if !retry || std::time::Instant::now() + pause > deadline {
                return Err((kind, format!("{error} (try {attempt})")));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(APPEND_RETRY_PAUSE_MAX);
        }
    }
}

impl EventLog for JetStreamLog {
    fn store_id(&self) -> StoreId {
        self.shared.store_id
    }

    fn is_writable(&self) -> bool {
        self.writer.is_some()
    }

    /// Every writable handle may append: the stream orders them (see
    /// [`EventLog::many_writers`]).
    fn claim_writer(&self) -> Result<()> {
        Ok(())
    }

    /// A writer shares the stream with any number of other writers: every
    /// append names the stream sequence it follows
    /// (`Nats-Expected-Last-Sequence`); one that loses the race stores
    /// nothing and is [`Error::Conflict`] (no conversation), after this
    /// handle learnt the stream's new end.
    fn many_writers(&self) -> bool {
        self.writer.is_some()
    }

    /// Every append waits for the stream's acknowledgement (stored by a
    /// quorum of replicas), whatever `durability` asks.
    fn append(
        &self,
        payloads: &[Vec<u8>],
        _durability: Durability,
    ) -> Result<(Range<Lsn>, Locator)> {
        let writer = self.writer("append")?;
        if payloads.is_empty() {
            return Err(Error::EmptyBatch);
        }
        let body = encode_body(payloads);
        let body_length = body.len();
        let limit = self.shared.max_payload.saturating_sub(HEADER_ROOM);
        if body.len() > limit {
            return Err(Error::LimitExceeded {
                what: "a batch as a NATS message",
                actual: body.len() as u64,
                limit: limit as u64,
                constant: "the server's max_payload less convlog_nats's header room",
            });
        }
        let subject = batch_subject(&self.shared.subject_prefix, payloads);
        let mut state = writer.lock();
        if let Some(cause) = &state.poisoned {
            return Err(self.poisoned(cause));
        }
        let first_lsn = state.next_lsn;
        let count = payloads.len() as u64;
        let chain_after = chain(state.last_chain, payloads);
        let mut headers = HeaderMap::new();
        headers.insert(HEADER_FIRST_LSN, first_lsn.to_string().as_str());
        headers.insert(HEADER_COUNT, count.to_string().as_str());
        headers.insert(
            HEADER_PREVIOUS_CHAIN,
            format!("{:08x}", state.last_chain).as_str(),
        );
        headers.insert(HEADER_CHAIN, format!("{chain_after:08x}").as_str());
        let message_id = format!("{}-{first_lsn}", self.shared.writer_id);
        let expected = state.last_sequence;
        match self.publish(subject, headers, body, expected, message_id) {
            Ok((sequence, _duplicate)) if sequence == expected + 1 => {
                if let Some(cache) = &self.shared.cache {
                    let position = Position {
                        segment: JETSTREAM_SEGMENT,
                        offset: sequence,
                    };
                    let records = (first_lsn..)
                        .zip(payloads)
                        .map(|(lsn, payload)| Record {
                            lsn,
                            position,
                            payload: payload.clone(),
                        })
                        .collect();
                    cache.lock().insert(sequence, records);
                }
                self.shared.last_known.fetch_max(sequence, Ordering::AcqRel);
                state.last_sequence = sequence;
                state.last_chain = chain_after;
                state.next_lsn = first_lsn + count;
                state.durable_lsn = state.next_lsn;
                Ok((
                    first_lsn..first_lsn + count,
                    Position {
                        segment: JETSTREAM_SEGMENT,
                        offset: sequence,
                    },
                ))
            }
            Ok((sequence, _)) => {
                let cause = format!(
                    "the stream stored the batch at LSN {first_lsn} as message {sequence}, not {}: the stream is not what this writer knew",
                    expected + 1
                );
                state.poisoned = Some(cause.clone());
                Err(self.poisoned(&cause))
            }
            Err((PublishErrorKind::WrongLastSequence, message)) => {
                // Another writer appended after message `expected`: the
                // stream stored nothing of this batch (a retry of one it
                // had stored would have been answered as a duplicate, which
                // the stream checks first). Learn the stream's end, so the
                // next try lands after it.
                let (first_lsn_now, next_lsn, last_chain, stream) = self.shared.ends()?;
                if stream.last_sequence <= expected {
                    return Err(self.shared.io(
                        "append to",
                        io::ErrorKind::Other,
                        format!(
                            "the stream refused the batch after message {expected} ({message}) but ends at message {}",
                            stream.last_sequence
                        ),
                    ));
                }
                tracing::debug!(
                    expected,
                    last = stream.last_sequence,
                    "another writer appended to {} first",
                    self.shared.name.display()
                );
                state.first_lsn = first_lsn_now;
                state.next_lsn = next_lsn;
                state.durable_lsn = next_lsn;
                state.last_sequence = stream.last_sequence;
                state.last_chain = last_chain;
                Err(Error::Conflict {
                    store: self.shared.name.clone(),
                    conversation_id: None,
                    expected: first_lsn,
                    actual: next_lsn,
                })
            }
            // Only when the headers push a batch just under the limit over
            // it: the client refused to send it, so nothing was stored.
            Err((PublishErrorKind::MaxPayloadExceeded, message)) => {
                tracing::warn!("{message}");
                Err(Error::LimitExceeded {
                    what: "a batch as a NATS message, with its headers",
                    actual: body_length as u64 + HEADER_ROOM as u64,
                    limit: self.shared.max_payload as u64,
                    constant: "the server's max_payload",
                })
            }
            Err((_, message)) => {
                // Unknown whether the stream stored it: stop, as the
                // segment log stops after a failed write.
                let cause = format!(
                    "the append at LSN {first_lsn} failed ({message}) and kept failing for the append retry window; whether the stream stored it is unknown"
                );
                state.poisoned = Some(cause.clone());
                Err(self.poisoned(&cause))
            }
        }
    }

    fn read_batch(&self, locator: Locator) -> Result<Vec<Record>> {
        if locator.segment != JETSTREAM_SEGMENT {
            return Err(Error::PositionNotFound {
                store: self.shared.name.clone(),
                segment: locator.segment,
                offset: locator.offset,
            });
        }
        if let Some(cache) = &self.shared.cache {
            if let Some(records) = cache.lock().batches.get(&locator.offset) {
                return Ok(records.clone());
            }
        }
        match self.shared.get(locator.offset)? {
            Some(message) => Ok(self.shared.records(&message)?.1),
            None => {
                let (first_lsn, _, _, state) = self.shared.ends()?;
                if locator.offset < state.first_sequence {
                    Err(self.shared.compacted(1, first_lsn))
                } else {
                    Err(Error::PositionNotFound {
                        store: self.shared.name.clone(),
                        segment: locator.segment,
                        offset: locator.offset,
                    })
                }
            }
        }
    }

    fn read_from(&self, lsn: Lsn) -> Box<dyn LogCursor> {
        Box::new(JetStreamCursor {
            shared: Arc::clone(&self.shared),
            seen: Arc::clone(&self.seen),
            next_lsn: lsn,
            next_sequence: None,
            buffered: std::collections::VecDeque::new(),
            stopped: false,
        })
    }

    fn first_lsn(&self) -> Lsn {
        match &self.writer {
            // Another writer may have compacted since this one did.
            Some(writer) => writer
                .lock()
                .first_lsn
                .max(self.shared.first_known.load(Ordering::Acquire)),
            None => self
                .shared
                .ends()
                .map(|(first, ..)| first)
                .unwrap_or_else(|_| self.seen.load(Ordering::Acquire)),
        }
    }

    fn next_lsn(&self) -> Lsn {
        match &self.writer {
            Some(writer) => writer.lock().next_lsn,
            None => self.seen.load(Ordering::Acquire),
        }
    }

    fn durable_lsn(&self) -> Lsn {
        match &self.writer {
            Some(writer) => writer.lock().durable_lsn,
            None => self.seen.load(Ordering::Acquire),
        }
    }

    /// Purges the stream below the batch holding `lsn`; the last batch is
    /// always kept.
    fn drop_before(&self, lsn: Lsn) -> Result<Dropped> {
        let writer = self.writer("compact")?;
        let mut writer_state = writer.lock();
        // The stream's end, not this writer's: other writers may have
        // appended after what it knows, and only the last batch the stream
        // holds may be kept for an LSN at or past the end.
        let (_, next_lsn, _, state) = self.shared.ends()?;
        let keep = if lsn >= next_lsn {
            state.last_sequence
        } else {
            match self.shared.find(lsn, &state)? {
                Some(head) => head.sequence,
                None => state.first_sequence,
            }
        };
        if keep > state.first_sequence {
            let stream = self.shared.stream.clone();
            self.shared
                .block(async move { stream.purge().sequence(keep).await })
                .map_err(|error| {
                    self.shared
                        .io("purge", io::ErrorKind::Other, error.to_string())
                })?;
            if let Some(cache) = &self.shared.cache {
                cache.lock().evict_below(keep);
            }
            if let Some(head) = self.shared.head_at(keep)? {
                writer_state.first_lsn = head.first_lsn;
                self.shared
                    .first_known
                    .fetch_max(head.first_lsn, Ordering::AcqRel);
            }
        }
        Ok(Dropped {
            first_lsn: writer_state
                .first_lsn
                .max(self.shared.first_known.load(Ordering::Acquire)),
            removed: Vec::new(),
        })
    }

    /// Every acknowledged append is already durable (stored by a quorum).
    fn sync(&self) -> Result<()> {
        let writer = self.writer("sync")?;
        let state = writer.lock();
        match &state.poisoned {
            Some(cause) => Err(self.poisoned(cause)),
            None => Ok(()),
        }
    }

    fn binding_at(&self, lsn: Lsn) -> Result<Binding> {
        let known = self.writer.as_ref().and_then(|writer| {
            let writer = writer.lock();
            // Past this writer's end: other writers may have appended.
            (lsn <= writer.next_lsn).then_some((
                writer
                    .first_lsn
                    .max(self.shared.first_known.load(Ordering::Acquire)),
                writer.next_lsn,
                writer.last_chain,
            ))
        });
        let (first_lsn, next_lsn, last_chain, state) = match known {
            Some((first_lsn, next_lsn, last_chain)) => (first_lsn, next_lsn, last_chain, None),
            None => {
                let (first, next, chain, state) = self.shared.ends()?;
                (first, next, chain, Some(state))
            }
        };
        if lsn < first_lsn {
            return Ok(Binding::BeforeStart { first_lsn });
        }
        if lsn > next_lsn {
            return Ok(Binding::PastEnd { next_lsn });
        }
        if lsn == next_lsn {
            return Ok(Binding::Found(last_chain));
        }
        let state = match state {
            Some(state) => state,
            None => self.shared.stream_state()?,
        };
        match self.shared.find(lsn, &state)? {
            Some(head) if head.first_lsn == lsn => Ok(Binding::Found(head.previous_chain)),
            Some(head) => Ok(Binding::InsideBatch {
                batch_first_lsn: head.first_lsn,
                batch_end_lsn: head.end_lsn(),
            }),
            None => Ok(Binding::BeforeStart {
                first_lsn: self.first_lsn(),
            }),
        }
    }

    fn durability(&self) -> Durability {
        Durability::Group
    }

    fn is_poisoned(&self) -> bool {
        self.writer
            .as_ref()
            .is_some_and(|writer| writer.lock().poisoned.is_some())
    }
}

/// Reads a [`JetStreamLog`] from an LSN on, following it.
struct JetStreamCursor {
    shared: Arc<Shared>,
    seen: Arc<AtomicU64>,
    next_lsn: Lsn,
    /// The stream sequence to read next, once found.
    next_sequence: Option<u64>,
    buffered: std::collections::VecDeque<Record>,
    stopped: bool,
}

impl JetStreamCursor {
    /// The batches from `sequence` on that a writer's cache holds, in
    /// order, up to the first it does not (at most [`READ_AHEAD`]).
    fn cached_from(&self, sequence: u64) -> Vec<(u64, Vec<Record>)> {
        let Some(cache) = &self.shared.cache else {
            return Vec::new();
        };
        let cache = cache.lock();
        (sequence..sequence + READ_AHEAD)
            .map_while(|at| cache.batches.get(&at).map(|records| (at, records.clone())))
            .collect()
    }

    /// Fills the buffer; `Ok(false)` at the end of what the stream holds.
    fn fill(&mut self) -> Result<bool> {
        let sequence = match self.next_sequence {
            Some(sequence) => sequence,
            None => {
                let (first_lsn, next_lsn, _, state) = self.shared.ends()?;
                if self.next_lsn < first_lsn {
                    return Err(self.shared.compacted(self.next_lsn, first_lsn));
                }
                if self.next_lsn >= next_lsn {
                    return Ok(false);
                }
                match self.shared.find(self.next_lsn, &state)? {
                    Some(head) => head.sequence,
                    None => return Ok(false),
                }
            }
        };
        // A writer's own batches (and those it read) are in its cache.
        let mut batches = self.cached_from(sequence);
        if batches.is_empty() {
            // Read ahead as far as the stream is known to reach; past that,
            // ask where it ends first (one request, not READ_AHEAD gets of
            // messages that are not there).
            let mut last = self.shared.last_known.load(Ordering::Acquire);
            if sequence > last {
                last = self.shared.stream_state()?.last_sequence;
            }
            if sequence > last {
                self.next_sequence = Some(sequence);
                return Ok(false);
            }
            let count = (last - sequence + 1).min(READ_AHEAD);
            let messages = self.shared.get_many(sequence, count)?;
            if messages.is_empty() {
                let state = self.shared.stream_state()?;
                if sequence < state.first_sequence {
                    let (first_lsn, ..) = self.shared.ends()?;
                    return Err(self.shared.compacted(self.next_lsn, first_lsn));
                }
                self.next_sequence = Some(sequence);
                return Ok(false);
            }
            for message in &messages {
                batches.push((message.sequence, self.shared.records(message)?.1));
            }
        }
        let mut next_sequence = sequence;
        for (batch_sequence, records) in batches {
            // A stored batch holds at least one event (checked on decode).
            let (Some(first), Some(last)) = (records.first(), records.last()) else {
                continue;
            };
            let (first_lsn, end_lsn) = (first.lsn, last.lsn + 1);
            if end_lsn <= self.next_lsn {
                next_sequence = batch_sequence + 1;
                continue;
            }
            if first_lsn > self.next_lsn {
                return Err(self.shared.damaged(
                    batch_sequence,
                    format!(
                        "the batch starts at LSN {first_lsn}; LSN {} was expected (a gap)",
                        self.next_lsn
                    ),
                ));
            }
            let next = self.next_lsn;
            self.buffered
                .extend(records.into_iter().filter(|record| record.lsn >= next));
            self.next_lsn = end_lsn;
            next_sequence = batch_sequence + 1;
        }
        self.next_sequence = Some(next_sequence);
        // `next_lsn` now tracks what is buffered; records returned set it.
        if let Some(first) = self.buffered.front() {
            self.next_lsn = first.lsn;
        }
        Ok(!self.buffered.is_empty())
    }
}

impl Iterator for JetStreamCursor {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        if self.stopped {
            return None;
        }
        if self.buffered.is_empty() {
            match self.fill() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(error) => {
                    self.stopped = true;
                    return Some(Err(error));
                }
            }
        }
        let record = self.buffered.pop_front()?;
        self.next_lsn = record.lsn + 1;
        self.seen.fetch_max(record.lsn + 1, Ordering::AcqRel);
        Some(Ok(record))
    }
}

impl LogCursor for JetStreamCursor {
    fn next_lsn(&self) -> Lsn {
        self.next_lsn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_bad_ones_say_what_is_wrong() {
        let url = StoreUrl::parse("nats://127.0.0.1:4222,127.0.0.1:4223/agents").unwrap();
        assert_eq!(url.servers, ["127.0.0.1:4222", "127.0.0.1:4223"]);
        assert_eq!(url.store, "agents");
        for (bad, says) in [
            ("http://x/agents", "nats://"),
            ("nats://127.0.0.1:4222", "names no store"),
            ("nats://127.0.0.1:4222/", "1 to 64"),
            ("nats://127.0.0.1:4222/a.b", "'.'"),
            ("nats://,127.0.0.1:4222/a", "empty"),
        ] {
            let error = StoreUrl::parse(bad).unwrap_err().to_string();
            assert!(error.contains(says), "{bad}: {error}");
        }
        let long = format!("nats://h:1/{}", "s".repeat(STORE_NAME_MAX + 1));
        assert!(StoreUrl::parse(&long).is_err());
    }

    #[test]
    fn bodies_round_trip_and_damage_is_named() {
        let payloads = vec![b"one".to_vec(), Vec::new(), b"three".to_vec()];
        assert_eq!(decode_body(&encode_body(&payloads)).unwrap(), payloads);
        let body = encode_body(&payloads);
        assert!(decode_body(&body[..body.len() - 1])
            .unwrap_err()
            .contains("event 2"));
        assert!(decode_body(&[1, 0]).unwrap_err().contains("stray"));
    }

    #[test]
    fn the_batch_cache_stays_within_its_budget_and_forgets_purged_batches() {
        let batch = |sequence: u64, bytes: usize| {
            vec![Record {
                lsn: sequence,
                position: Position {
                    segment: JETSTREAM_SEGMENT,
                    offset: sequence,
                },
                payload: vec![0; bytes],
            }]
        };
        let mut cache = BatchCache::new(BATCH_CACHE_BYTES);
        let quarter = BATCH_CACHE_BYTES / 4;
        for sequence in 1..=6 {
            cache.insert(sequence, batch(sequence, quarter));
        }
        assert!(cache.bytes <= BATCH_CACHE_BYTES);
        assert_eq!(cache.batches.keys().copied().collect::<Vec<_>>(), [4, 5, 6]);
        cache.evict_below(6);
        assert_eq!(cache.batches.keys().copied().collect::<Vec<_>>(), [6]);
        assert_eq!(cache.bytes, BatchCache::size(&batch(6, quarter)));
        // A batch larger than the whole budget is not kept.
        cache.insert(7, batch(7, BATCH_CACHE_BYTES));
        assert!(!cache.batches.contains_key(&7));
    }

    #[test]
    fn descriptions_carry_the_store_identity() {
        let id = new_store_id();
        assert_eq!(parse_description(&description(&id)), Some(id));
        assert_eq!(parse_description("orders stream"), None);
        assert_eq!(
            parse_description(&description(&id).replace("format=1", "format=2")),
            None
        );
    }

    #[test]
    fn a_conversation_has_one_subject() {
        use convlog::model::{ConversationEntry, Role};
        let event = |conversation: &str| {
            convlog::codec::encode_event(
                &ConversationEntry::new("e", 0, Role::User, Some("x".into()))
                    .recorded_in(conversation),
            )
        };
        let prefix = subject_prefix("s");
        assert_eq!(
            batch_subject(&prefix, &[event("ab"), event("ab")]),
            conversation_subject("s", "ab")
        );
        assert_eq!(conversation_subject("s", "ab"), "convlog.s.c.6162");
        assert_eq!(
            batch_subject(&prefix, &[event("a"), event("b")]),
            "convlog.s.x"
        );
        let long = "z".repeat(SUBJECT_TOKEN_MAX);
        assert!(batch_subject(&prefix, &[event(&long)]).starts_with("convlog.s.l."));
    }
}
