//! Snapshots in a JetStream object store bucket, so that a host on another
//! machine opens a store from the snapshot the writer took.
//!
//! The seam is the core's [`Storage`]: the store writes and reads its
//! snapshot files through `options.log.storage` in its snapshot directory
//! (`Store::open_on`'s `dir`), and [`SnapshotBucket`] is a `Storage` whose
//! `snapshots` directory is the bucket `convlog-STORE` (stream
//! `OBJ_convlog-STORE`, the log stream's replica count). The snapshot
//! bytes, their format and every check on them are the core's: a snapshot
//! of another store, or one not bound to this log's chain, is skipped on
//! open exactly as a local one is, and a damaged one is skipped as
//! damaged.
//!
//! How the file operations map:
//!
//! - writing a snapshot (`create` of `NAME.tmp`, writes, `sync_all`) fills
//!   a buffer in memory; the `rename` into place uploads it as the object
//!   `NAME` (chunks first, then the object's metadata: an object is visible
//!   whole or not at all) and returns once the stream acknowledged it;
//! - `list_dir` lists the bucket's objects; `open_read` downloads one
//!   whole (the object store checks its SHA-256 digest) and reads from
//!   memory; `remove_file` deletes one (old snapshots past
//!   `StoreOptions::snapshots_kept`);
//! - anything outside the `snapshots` directory (the erasure key table),
//!   memory maps and locks are refused with `Unsupported`: an encrypted
//!   store on JetStream is not built yet.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_nats::jetstream::object_store::{self, ObjectStore};
use async_nats::jetstream::stream::StorageType;
use async_nats::jetstream::{context, ErrorCode};
use convlog::storage::{LockGuard, SealedFile, SharedBytes, Storage, StorageFile};
use convlog::store::{Store, StoreBuilder, StoreOptions};
use convlog::{Error, Result};
use futures_util::StreamExt;
use parking_lot::Mutex;
use tokio::io::AsyncReadExt;

use crate::{JetStreamLog, JetStreamOptions, Shared};

/// The directory of a store's snapshots, relative to its snapshot root
/// (the core's `snapshot::SNAPSHOT_DIR`).
const SNAPSHOT_DIR: &str = "snapshots";

/// The object store bucket holding the snapshots of store `store`.
pub fn snapshot_bucket_name(store: &str) -> String {
    format!("convlog-{store}")
}

/// Snapshots of a JetStream-backed store in the store's object store
/// bucket: a [`Storage`] to give the store
/// ([`StoreOptions::storage`]) with [`SnapshotBucket::dir`] as its
/// snapshot directory. [`open_store_shared`] does both.
///
/// ```no_run
/// use std::sync::Arc;
/// use convlog::{StoreBuilder, StoreOptions};
/// use convlog_nats::{JetStreamLog, JetStreamOptions, SnapshotBucket};
/// # fn main() -> convlog::Result<()> {
/// let log = JetStreamLog::open("nats://127.0.0.1:4222/agents", JetStreamOptions::new())?;
/// let bucket = SnapshotBucket::open(&log)?;
/// let store = StoreBuilder::new(bucket.dir())
///     .options(StoreOptions::new().storage(Arc::new(bucket)))
///     .open_on(log)?;
/// # Ok(()) }
/// ```
pub struct SnapshotBucket {
    shared: Arc<Shared>,
    bucket_name: String,
    replicas: usize,
    /// The snapshot root the store is given (the log's name,
    /// `nats://servers/STORE`), and its `snapshots` directory.
    root: PathBuf,
    snapshots: PathBuf,
    /// Creates the bucket when it is missing (a writer's).
    create: bool,
    /// The bucket, once found or created.
    bucket: Mutex<Option<ObjectStore>>,
    /// Snapshots being written: file name → bytes, uploaded at the rename.
    pending: Mutex<HashMap<String, Arc<Mutex<Vec<u8>>>>>,
}

impl std::fmt::Debug for SnapshotBucket {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SnapshotBucket")
            .field("bucket", &self.bucket_name)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl SnapshotBucket {
    /// The snapshot bucket of `log`'s store, on `log`'s connection. A
    /// writer's log creates the bucket if it is missing (with the stream's
    /// replica count); a follower's reads it if it is there (a store
    /// without one has no snapshots yet).
    pub fn open(log: &JetStreamLog) -> Result<SnapshotBucket> {
        let shared = Arc::clone(&log.shared);
        let store = shared
            .subject_prefix
            .strip_prefix("convlog.")
            .expect("the subject prefix is convlog.STORE")
            .to_string();
        let root = shared.name.clone();
        let bucket = SnapshotBucket {
            bucket_name: snapshot_bucket_name(&store),
            replicas: shared.replicas,
            snapshots: root.join(SNAPSHOT_DIR),
            root,
            create: log.writer.is_some(),
            bucket: Mutex::new(None),
            pending: Mutex::new(HashMap::new()),
            shared,
        };
        if bucket.create {
            bucket.bucket().map_err(|error| Error::Io {
                operation: "open the snapshot bucket of",
                path: bucket.root.clone(),
                source: error,
            })?;
        }
        Ok(bucket)
    }

    /// The snapshot directory to give the store (`Store::open_on`'s `dir`):
    /// the log's name, `nats://servers/STORE`; the snapshots show as
    /// `nats://servers/STORE/snapshots/<LSN>.snap` in reports and errors.
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// The bucket's name (`convlog-STORE`; its stream is `OBJ_convlog-STORE`).
    pub fn bucket_name(&self) -> &str {
        &self.bucket_name
    }

    /// The bucket: found (or created, for a writer) at the first use and
    /// kept. `Ok(None)`: a follower's store has no bucket yet.
    fn lookup(&self) -> io::Result<Option<ObjectStore>> {
        let mut slot = self.bucket.lock();
        if let Some(bucket) = slot.as_ref() {
            return Ok(Some(bucket.clone()));
        }
        let context = self.shared.context.clone();
        let name = self.bucket_name.clone();
        let config = object_store::Config {
            bucket: name.clone(),
            description: Some(format!(
                "convlog snapshots of the store in stream {}",
                crate::stream_name(name.strip_prefix("convlog-").unwrap_or(&name))
            )),
            storage: StorageType::File,
            num_replicas: self.replicas,
            ..Default::default()
        };
        let create = self.create;
        let found = self.shared.block(async move {
            let bucket = loop {
                match context.get_object_store(&name).await {
                    Ok(bucket) => break bucket,
                    Err(error) => {
                        if !stream_missing(&error) {
                            return Err(format!("bucket {name}: {error}"));
                        }
                        if !create {
                            return Ok(None);
                        }
                    }
                }
                match context.create_object_store(config.clone()).await {
                    Ok(bucket) => break bucket,
                    // Another host created it meanwhile: look it up again.
                    Err(error) if stream_exists(&error) => {}
                    Err(error) => return Err(format!("creating bucket {name}: {error}")),
                }
            };
            if !create {
                return Ok(Some(bucket));
            }
            // The object store creates its stream with direct gets, which
            // any replica answers, also one that has not stored the newest
            // snapshot yet: a snapshot just written could be "not found"
            // (by its own writer reading it back, or by a host opening
            // from it). Without them, reads go to the stream's leader.
            let stream_name = format!("OBJ_{name}");
            let stream = context
                .get_stream(&stream_name)
                .await
                .map_err(|error| format!("bucket {name}: {error}"))?;
            let mut stream_config = stream.cached_info().config.clone();
            if !stream_config.allow_direct {
                return Ok(Some(bucket));
            }
            stream_config.allow_direct = false;
            context
                .update_stream(stream_config)
                .await
                .map_err(|error| format!("bucket {name}: turning direct gets off: {error}"))?;
            context
                .get_object_store(&name)
                .await
                .map(Some)
                .map_err(|error| format!("bucket {name}: {error}"))
        });
        let found = found.map_err(io::Error::other)?;
        slot.clone_from(&found);
        Ok(found)
    }

    fn bucket(&self) -> io::Result<ObjectStore> {
        self.lookup()?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("the snapshot bucket {} does not exist", self.bucket_name),
            )
        })
    }

    /// The object name of `path` if it is in the snapshot directory.
    fn object(&self, path: &Path) -> io::Result<String> {
        path.parent()
            .filter(|parent| *parent == self.snapshots)
            .and_then(|_| path.file_name())
            .and_then(|name| name.to_str())
            .map(str::to_string)
            .ok_or_else(|| unsupported(path))
    }

    fn is_snapshot_dir(&self, path: &Path) -> bool {
        path == self.snapshots
    }
}

/// Whether looking a bucket up failed because its stream does not exist.
fn stream_missing(error: &async_nats::jetstream::context::ObjectStoreError) -> bool {
    std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<context::GetStreamError>())
        .is_some_and(|error| {
            matches!(
                error.kind(),
                context::GetStreamErrorKind::JetStream(inner)
                    if inner.error_code() == ErrorCode::STREAM_NOT_FOUND
            )
        })
}

/// Whether creating a bucket failed because another host created it first.
fn stream_exists(error: &async_nats::jetstream::context::CreateObjectStoreError) -> bool {
    std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<context::CreateStreamError>())
        .is_some_and(|error| {
            matches!(
                error.kind(),
                context::CreateStreamErrorKind::JetStream(inner)
                    if inner.error_code() == ErrorCode::STREAM_NAME_EXIST
            )
        })
}

fn unsupported(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "{} is not in a JetStream store's snapshot bucket: a store on JetStream keeps only its snapshots there (an encrypted store on JetStream is not supported yet)",
            path.display()
        ),
    )
}

// SAFETY: `read_immutable` never maps anything (it refuses), so no
// `SealedFile` is passed on; every other method works on the bucket's
// objects, which convlog never maps.
#[allow(unsafe_code)]
unsafe impl Storage for SnapshotBucket {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        if self.is_snapshot_dir(path) || path == self.root {
            return self.bucket().map(drop);
        }
        Err(unsupported(path))
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        if !self.is_snapshot_dir(path) {
            return Err(unsupported(path));
        }
        let Some(bucket) = self.lookup()? else {
            return Ok(Vec::new());
        };
        let names = self.shared.block(async move {
            let mut list = bucket.list().await.map_err(io::Error::other)?;
            let mut names = Vec::new();
            while let Some(info) = list.next().await {
                let info = info.map_err(io::Error::other)?;
                if !info.deleted {
                    names.push(info.name);
                }
            }
            Ok::<_, io::Error>(names)
        })?;
        Ok(names)
    }

    fn exists(&self, path: &Path) -> bool {
        if self.is_snapshot_dir(path) {
            return matches!(self.lookup(), Ok(Some(_)));
        }
        let Ok(name) = self.object(path) else {
            return false;
        };
        if self.pending.lock().contains_key(&name) {
            return true;
        }
        let Ok(Some(bucket)) = self.lookup() else {
            return false;
        };
        self.shared
            .block(async move { bucket.info(&name).await })
            .is_ok_and(|info| !info.deleted)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let name = self.object(path)?;
        let bytes = Arc::new(Mutex::new(Vec::new()));
        self.pending.lock().insert(name, Arc::clone(&bytes));
        Ok(Box::new(MemoryFile {
            bytes,
            writable: true,
        }))
    }

    fn open_write(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        Err(unsupported(path))
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let name = self.object(path)?;
        if let Some(bytes) = self.pending.lock().get(&name) {
            return Ok(Box::new(MemoryFile {
                bytes: Arc::new(Mutex::new(bytes.lock().clone())),
                writable: false,
            }));
        }
        let bucket = self.bucket()?;
        let shown = path.display().to_string();
        let bytes = self.shared.block(async move {
            let mut object = bucket.get(&name).await.map_err(|error| {
                let kind = if error.kind() == object_store::GetErrorKind::NotFound {
                    io::ErrorKind::NotFound
                } else {
                    io::ErrorKind::Other
                };
                io::Error::new(kind, format!("{shown}: {error}"))
            })?;
            let mut bytes = Vec::new();
            // Fails on a digest mismatch: an object damaged in the stream.
            object.read_to_end(&mut bytes).await?;
            Ok::<_, io::Error>(bytes)
        })?;
        Ok(Box::new(MemoryFile {
            bytes: Arc::new(Mutex::new(bytes)),
            writable: false,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let from_name = self.object(from)?;
        let to_name = self.object(to)?;
        let bytes = self
            .pending
            .lock()
            .get(&from_name)
            .map(|bytes| bytes.lock().clone())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "{}: only a snapshot being written is renamed in a snapshot bucket",
                        from.display()
                    ),
                )
            })?;
        let bucket = self.bucket()?;
        let name = to_name.clone();
        self.shared.block(async move {
            bucket
                .put(name.as_str(), &mut bytes.as_slice())
                .await
                .map(drop)
                .map_err(io::Error::other)
        })?;
        self.pending.lock().remove(&from_name);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let name = self.object(path)?;
        if self.pending.lock().remove(&name).is_some() {
            return Ok(());
        }
        let bucket = self.bucket()?;
        self.shared.block(async move {
            bucket.delete(&name).await.map_err(|error| {
                let kind = if error.kind() == object_store::DeleteErrorKind::NotFound {
                    io::ErrorKind::NotFound
                } else {
                    io::ErrorKind::Other
                };
                io::Error::new(kind, error.to_string())
            })
        })
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        // An object is durable once its upload is acknowledged.
        if self.is_snapshot_dir(path) || path == self.root {
            return Ok(());
        }
        Err(unsupported(path))
    }

    fn read_immutable(&self, path: &Path, _sealed: SealedFile) -> io::Result<SharedBytes> {
        Err(unsupported(path))
    }

    fn try_lock(&self, path: &Path) -> io::Result<LockGuard> {
        Err(unsupported(path))
    }
}

/// A snapshot in memory: being written (uploaded at the rename) or
/// downloaded whole.
#[derive(Debug)]
struct MemoryFile {
    bytes: Arc<Mutex<Vec<u8>>>,
    writable: bool,
}

impl MemoryFile {
    fn check_writable(&self) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "a snapshot in a bucket is written once, never changed",
            ))
        }
    }
}

impl StorageFile for MemoryFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_writable()?;
        let mut bytes = self.bytes.lock();
        let offset = usize::try_from(offset).map_err(io::Error::other)?;
        let end = offset + buf.len();
        if bytes.len() < end {
            bytes.resize(end, 0);
        }
        bytes[offset..end].copy_from_slice(buf);
        Ok(())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let bytes = self.bytes.lock();
        let Ok(offset) = usize::try_from(offset) else {
            return Ok(0);
        };
        if offset >= bytes.len() {
            return Ok(0);
        }
        let read = buf.len().min(bytes.len() - offset);
        buf[..read].copy_from_slice(&bytes[offset..offset + read]);
        Ok(read)
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        let len = usize::try_from(len).map_err(io::Error::other)?;
        self.bytes.lock().resize(len, 0);
        Ok(())
    }

    fn size_bytes(&self) -> io::Result<u64> {
        Ok(self.bytes.lock().len() as u64)
    }
}

/// Opens the store at `url` (`nats://host:port[,host:port...]/STORE`) for
/// writing, with its snapshots in the store's bucket ([`SnapshotBucket`]):
/// no local directory, and a host on any machine opens from the newest
/// snapshot any writer took.
pub fn open_store_shared(
    url: &str,
    options: StoreOptions,
    nats: JetStreamOptions,
) -> Result<Store> {
    open_store_shared_with(url, options, nats, false, |builder| builder)
}

/// Opens the store at `url` read-only (a follower of whoever writes it),
/// starting from the newest snapshot in its bucket.
pub fn open_store_shared_read_only(
    url: &str,
    options: StoreOptions,
    nats: JetStreamOptions,
) -> Result<Store> {
    open_store_shared_with(url, options, nats, true, |builder| builder)
}

/// [`open_store_shared`] (or, with `read_only`,
/// [`open_store_shared_read_only`]) with host reducers: `reducers` adds
/// them to the builder (`|builder| builder.reducer(MyReducer)`).
pub fn open_store_shared_with(
    url: &str,
    options: StoreOptions,
    nats: JetStreamOptions,
    read_only: bool,
    reducers: impl FnOnce(StoreBuilder) -> StoreBuilder,
) -> Result<Store> {
    let log = if read_only {
        JetStreamLog::open_follower(url, nats)?
    } else {
        JetStreamLog::open(url, nats)?
    };
    let bucket = SnapshotBucket::open(&log)?;
    let builder = StoreBuilder::new(bucket.dir()).options(options.storage(Arc::new(bucket)));
    reducers(builder).open_on(log)
}
