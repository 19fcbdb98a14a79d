//! Key files for Python: the store key of encryption at rest
//! (docs/erasure.md), the tamper key and checkpoint options of
//! `Store.open` (docs/tamper.md), checkpoints as dicts, and
//! `convlog.keygen`. Every key comes from a file the caller names: the
//! package reads no environment variable for keys.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use convlog::erasure::StoreKey;
use convlog::tamper::{Checkpoint, PublicKey, TamperKey, TamperOptions};
use parking_lot::Mutex;
use pyo3::prelude::*;
use serde_json::{json, Value};

use crate::convert;
use crate::errors;

/// The longest `by` of `Store.erase` (who asked for the erasure), in
/// characters: it is recorded in the log, in the clear (the server's limit
/// on the reason of an erasure over HTTP is the same).
pub const ERASE_BY_CHARS_MAX: usize = 256;

/// The store key read from `key_file` (mode 600, outside the store), if one
/// was given.
pub fn store_key(key_file: Option<&Path>) -> convlog::Result<Option<StoreKey>> {
    key_file.map(StoreKey::from_file).transpose()
}

/// The tamper key file at `path`. The library refuses a bad tamper key
/// file with `InvalidOption`, a bad store key file with `KeyFile`; the
/// package raises `KeyFileError` for both, so one `except` covers every
/// refused key file.
pub fn tamper_key(path: &Path) -> convlog::Result<TamperKey> {
    TamperKey::load(path).map_err(|error| as_key_file(path, error))
}

/// The public key file at `path` (`KeyFileError` when refused, as above).
pub fn public_key(path: &Path) -> convlog::Result<PublicKey> {
    PublicKey::load(path).map_err(|error| as_key_file(path, error))
}

fn as_key_file(path: &Path, error: convlog::Error) -> convlog::Error {
    match error {
        convlog::Error::InvalidOption {
            option: "tamper key file" | "tamper key or checkpoint file",
            reason,
        } => convlog::Error::KeyFile {
            path: path.to_path_buf(),
            reason,
        },
        other => other,
    }
}

/// A host's Python callable for every checkpoint the writer signs
/// (`Store.open(..., on_checkpoint=...)`). The writer signs under locks of
/// its own, so the callable is never called there: the writer queues each
/// checkpoint, and the `Store` call that made it (an append, `checkpoint()`,
/// `close()`, a write of message control, ...) hands the queue to the
/// callable once its native work has returned, in the calling thread, with
/// the GIL held and no lock of the store held. The callable may use the
/// store.
#[derive(Clone, Default)]
pub struct CheckpointFeed(Option<Arc<Feed>>);

struct Feed {
    callable: Py<PyAny>,
    /// The checkpoint file, for the dicts' `path`.
    path: Option<PathBuf>,
    queued: Mutex<Vec<Checkpoint>>,
}

impl CheckpointFeed {
    pub fn new(callable: Option<Py<PyAny>>, path: Option<PathBuf>) -> CheckpointFeed {
        CheckpointFeed(callable.map(|callable| {
            Arc::new(Feed {
                callable,
                path,
                queued: Mutex::new(Vec::new()),
            })
        }))
    }

    /// Whether a callable was given.
    pub fn is_some(&self) -> bool {
        self.0.is_some()
    }

    /// `options` with the writer's callback that queues each checkpoint.
    pub fn attach(&self, options: TamperOptions) -> TamperOptions {
        match &self.0 {
            Some(feed) => {
                let feed = Arc::clone(feed);
                options.on_checkpoint(move |checkpoint| feed.queued.lock().push(*checkpoint))
            }
            None => options,
        }
    }

    /// Calls the callable with each queued checkpoint (as
    /// `Store.checkpoint()` returns it), oldest first. Every one is handed
    /// over even if the callable raises; the first exception is returned.
    pub fn deliver(&self, py: Python<'_>) -> PyResult<()> {
        let Some(feed) = &self.0 else {
            return Ok(());
        };
        let queued = std::mem::take(&mut *feed.queued.lock());
        let mut first_error = None;
        for checkpoint in queued {
            let value = checkpoint_value(&checkpoint, feed.path.as_deref());
            let called = convert::to_py(py, &value)
                .and_then(|value| feed.callable.call1(py, (value,)).map(drop));
            if let Err(error) = called {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// What `Store.open` takes for tamper evidence.
#[derive(Debug, Default, Clone)]
pub struct TamperArgs {
    /// The secret tamper key file (`tamper_key_file`).
    pub key_file: Option<PathBuf>,
    /// Where each checkpoint is published (`checkpoint_file`).
    pub checkpoint_file: Option<PathBuf>,
    /// Sign a checkpoint every this many events (`checkpoint_every_events`).
    pub checkpoint_every_events: Option<u64>,
    /// Whether a callable for the checkpoints was given (`on_checkpoint`).
    pub on_checkpoint: bool,
}

impl TamperArgs {
    /// The tamper options of the arguments; `None` without a key. A
    /// checkpoint option without the key, a checkpoint option on a
    /// read-only open (only the writer signs) and an interval of 0 are
    /// refused with `InvalidOption` naming the argument.
    pub fn options(&self, read_only: bool) -> convlog::Result<Option<TamperOptions>> {
        let Some(key_file) = &self.key_file else {
            if self.checkpoint_file.is_some() {
                return Err(invalid(
                    "checkpoint_file",
                    "a checkpoint is signed with the tamper key: give tamper_key_file too",
                ));
            }
            if self.checkpoint_every_events.is_some() {
                return Err(invalid(
                    "checkpoint_every_events",
                    "checkpoints are signed with the tamper key: give tamper_key_file too",
                ));
            }
            if self.on_checkpoint {
                return Err(invalid(
                    "on_checkpoint",
                    "checkpoints are signed with the tamper key: give tamper_key_file too",
                ));
            }
            return Ok(None);
        };
        if read_only {
            let given = if self.checkpoint_file.is_some() {
                Some("checkpoint_file")
            } else if self.checkpoint_every_events.is_some() {
                Some("checkpoint_every_events")
            } else if self.on_checkpoint {
                Some("on_checkpoint")
            } else {
                None
            };
            if let Some(option) = given {
                return Err(invalid(
                    option,
                    "a read-only store signs no checkpoints (its writer does); opened read-only, the tamper key only checks the snapshots' keyed tags",
                ));
            }
        }
        if self.checkpoint_every_events == Some(0) {
            return Err(invalid(
                "checkpoint_every_events",
                "it is 0; it must be at least 1 (or None: checkpoints only on demand, Store.checkpoint())",
            ));
        }
        let mut options = TamperOptions::new(tamper_key(key_file)?);
        if let Some(file) = &self.checkpoint_file {
            options = options.checkpoint_path(file.clone());
        }
        if let Some(every) = self.checkpoint_every_events {
            options = options.checkpoint_every_events(every);
        }
        Ok(Some(options))
    }
}

/// `Error::InvalidOption` for a Python argument.
pub fn invalid(option: &'static str, reason: &str) -> convlog::Error {
    convlog::Error::InvalidOption {
        option,
        reason: reason.to_string(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A checkpoint as `Store.checkpoint()` returns it: `lsn`, `epoch`,
/// `store_id` and `digest` (hex), `text` (the checkpoint file's text, to
/// ship elsewhere) and `path` (the file it was published to, if any).
pub fn checkpoint_value(checkpoint: &Checkpoint, path: Option<&Path>) -> Value {
    json!({
        "lsn": checkpoint.lsn,
        "epoch": checkpoint.epoch,
        "store_id": hex(&checkpoint.store_id),
        "digest": hex(&checkpoint.digest),
        "text": checkpoint.to_text(),
        "path": path.map(|path| path.to_string_lossy().into_owned()),
    })
}

/// `convlog.keygen(path, *, encryption=False, public=None, rotate=None)`:
/// makes a key file (mode 600; it must not exist), as `convlog keygen`
/// does. Without `encryption`, a tamper key and its public key file
/// (`public`, default `path + ".pub"`); with `rotate`, the new file holds
/// the old file's keys and a new one. With `encryption`, a store key.
#[pyfunction]
#[pyo3(signature = (path, *, encryption=false, public=None, rotate=None))]
pub fn keygen(
    py: Python<'_>,
    path: PathBuf,
    encryption: bool,
    public: Option<PathBuf>,
    rotate: Option<PathBuf>,
) -> PyResult<Py<PyAny>> {
    if encryption && (public.is_some() || rotate.is_some()) {
        return Err(errors::invalid_argument(
            "keygen(encryption=True) makes a store key, which has no public key and no rotation: leave public and rotate out".to_string(),
        ));
    }
    let value = py
        .detach(|| -> convlog::Result<Value> {
            if encryption {
                StoreKey::generate_file(&path)?;
                return Ok(json!({
                    "key": path.to_string_lossy(),
                    "encryption": true,
                }));
            }
            let secret = match &rotate {
                Some(old) => tamper_key(old)?.rotated()?,
                None => TamperKey::generate()?,
            };
            let public_path = public.clone().unwrap_or_else(|| {
                let mut name = path.as_os_str().to_owned();
                name.push(".pub");
                PathBuf::from(name)
            });
            secret.write(&path)?;
            secret.public().write(&public_path)?;
            Ok(json!({
                "key": path.to_string_lossy(),
                "encryption": false,
                "public": public_path.to_string_lossy(),
                "epochs": secret.epochs(),
                "epoch": secret.epoch(),
            }))
        })
        .map_err(errors::to_py)?;
    convert::to_py(py, &value)
}
