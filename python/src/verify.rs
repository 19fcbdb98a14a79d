//! `convlog.verify`: a store's checks without opening it for writing —
//! every frame and snapshot (accidental damage: `CorruptedError`), with
//! the store key every sealed event of an encrypted store
//! (docs/erasure.md), and with a tamper key, a public key and a checkpoint
//! kept outside the store, the keyed chain (tampering: `TamperedError`,
//! docs/tamper.md). The same checks as `convlog verify`.

use std::path::{Path, PathBuf};

use convlog::erasure::{Unsealed, Unsealer};
use convlog::log::LogReader;
use convlog::store::StoreVerifyReport;
use convlog::tamper::{Checkpoint, PublicKey, TamperKey, TamperReport};
use pyo3::prelude::*;
use serde_json::{json, Value};

use crate::convert;
use crate::errors;
use crate::keys;

/// The keys and checkpoint `verify` checks a store with, loaded (so a bad
/// key file fails before the store is read).
struct Keys {
    store: Option<convlog::erasure::StoreKey>,
    tamper: Option<TamperKey>,
    public: Option<PublicKey>,
    head: Option<Checkpoint>,
}

impl Keys {
    fn load(
        key_file: Option<&Path>,
        tamper_key_file: Option<&Path>,
        public_key_file: Option<&Path>,
        head: Option<&Path>,
    ) -> convlog::Result<Keys> {
        if tamper_key_file.is_none() {
            if public_key_file.is_some() && head.is_none() {
                return Err(keys::invalid(
                    "public_key_file",
                    "a public key checks the store against a checkpoint: give head too (or tamper_key_file to check every frame)",
                ));
            }
            if head.is_some() && public_key_file.is_none() {
                return Err(keys::invalid(
                    "head",
                    "a checkpoint's signature is checked with the tamper key or its public key: give tamper_key_file or public_key_file too",
                ));
            }
        }
        Ok(Keys {
            store: keys::store_key(key_file)?,
            tamper: tamper_key_file.map(keys::tamper_key).transpose()?,
            public: public_key_file.map(keys::public_key).transpose()?,
            head: head.map(Checkpoint::load).transpose()?,
        })
    }

    fn tamper_given(&self) -> bool {
        self.tamper.is_some() || self.head.is_some()
    }
}

/// Opens every sealed event of the encrypted store at `dir` with the store
/// key: each must open under its conversation's key (its AEAD tag checks
/// the bytes and the conversation), unless that conversation was erased.
fn verify_sealed(
    dir: &Path,
    key: &convlog::erasure::StoreKey,
    next_lsn: u64,
) -> convlog::Result<Value> {
    let unsealer = Unsealer::open(dir, key)?;
    let (mut opened, mut erased) = (0u64, 0u64);
    for record in LogReader::open(dir)?.iter() {
        let record = record?;
        if record.lsn >= next_lsn {
            break;
        }
        let event = record.event()?;
        if !convlog::erasure::is_sealed(&event) {
            continue;
        }
        match unsealer.unseal(record.lsn, event)? {
            Unsealed::Plain(_) => opened += 1,
            Unsealed::Erased(_) => erased += 1,
        }
    }
    Ok(json!({
        "sealed_events": opened,
        "erased_events": erased,
        "erased_conversations": unsealer.erased(),
    }))
}

fn tamper_value(report: &TamperReport) -> Value {
    json!({
        "keyed": report.keyed,
        "frames_authenticated": report.frames_authenticated,
        "snapshots_authenticated": report.snapshots_authenticated,
        "epochs": report
            .epochs
            .iter()
            .map(|(epoch, lsn)| json!({"epoch": epoch, "first_lsn": lsn}))
            .collect::<Vec<_>>(),
        "checkpoint_lsn": report.checkpoint_lsn,
    })
}

fn store_value(report: &StoreVerifyReport) -> Value {
    let snapshots: Vec<Value> = report
        .snapshots
        .iter()
        .map(|(file, check)| match check {
            Ok((lsn, conversations)) => json!({
                "path": file.to_string_lossy(), "ok": true, "lsn": lsn,
                "conversations": conversations, "problem": null,
            }),
            Err(problem) => json!({
                "path": file.to_string_lossy(), "ok": false, "lsn": null,
                "conversations": null, "problem": problem,
            }),
        })
        .collect();
    let log = &report.log;
    json!({
        "segments": log.segments,
        "frames": log.frames,
        "events": log.events,
        "bytes": log.bytes,
        "first_lsn": log.first_lsn,
        "next_lsn": log.next_lsn,
        "torn_tail": log.torn_tail.as_ref().map(|(segment, offset)| json!({
            "segment": segment.to_string_lossy(), "offset": offset,
        })),
        "conversations": report.conversations,
        "snapshots": snapshots,
        "chosen_snapshot": report.chosen_snapshot.as_ref().map(|(file, lsn)| json!({
            "path": file.to_string_lossy(), "lsn": lsn,
        })),
    })
}

/// Checks the store at `path` without opening it for writing (beside a
/// running writer too): raises `CorruptedError` at the first accidental
/// damage; with `key_file`, opens every sealed event; with
/// `tamper_key_file` (every frame) or `public_key_file` and `head` (the
/// history up to the checkpoint), raises `TamperedError` for tampering.
#[pyfunction]
#[pyo3(signature = (path, *, key_file=None, tamper_key_file=None, public_key_file=None, head=None))]
pub fn verify(
    py: Python<'_>,
    path: PathBuf,
    key_file: Option<PathBuf>,
    tamper_key_file: Option<PathBuf>,
    public_key_file: Option<PathBuf>,
    head: Option<PathBuf>,
) -> PyResult<Py<PyAny>> {
    let value = py
        .detach(|| -> convlog::Result<Value> {
            if let Some(url) = path.to_str().filter(|text| text.starts_with("nats://")) {
                return Err(keys::invalid(
                    "path",
                    &format!("verify reads a store directory's segment and snapshot files; {url} is a store URL (a JetStream stream keeps its own checksums)"),
                ));
            }
            let keys = Keys::load(
                key_file.as_deref(),
                tamper_key_file.as_deref(),
                public_key_file.as_deref(),
                head.as_deref(),
            )?;
            let report = convlog::store::verify(&path, &mut |_| {})?;
            let encryption = match &keys.store {
                Some(key) => verify_sealed(&path, key, report.log.next_lsn)?,
                None => Value::Null,
            };
            let tamper = if keys.tamper_given() {
                tamper_value(&convlog::tamper::verify(
                    &path,
                    keys.tamper.as_ref(),
                    keys.public.as_ref(),
                    keys.head.as_ref(),
                )?)
            } else {
                Value::Null
            };
            let mut value = store_value(&report);
            value["encryption"] = encryption;
            value["tamper"] = tamper;
            Ok(value)
        })
        .map_err(errors::to_py)?;
    convert::to_py(py, &value)
}
