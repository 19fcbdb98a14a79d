//! Tamper evidence: a keyed chain over the log's frames, signed checkpoints
//! published outside the store, and the verification that tells edits by
//! someone who can write the files from accidental damage.
//!
//! Opt-in per store ([`crate::log::LogOptions::tamper`]). Every frame of a
//! tamper-evident store (segment format version 4) ends in a trailer
//! (`docs/format.md`, 2.7) holding:
//!
//! - the **digest chain**: `d_i = BLAKE3-keyed(d_{i-1}; store identity,
//!   LSN, event count, SHA-256(events))`, keyed by the previous digest
//!   only, so that anyone can recompute it and compare it with a signed
//!   checkpoint;
//! - the **keyed tag**: `BLAKE3-keyed(K_epoch, epoch, LSN, d_i)`, which only
//!   a holder of the key can compute: it proves each frame, its place and
//!   everything before it were written by the key holder;
//! - the LSN the writer gave the frame and the key's epoch, so that a frame
//!   moved elsewhere says where it came from.
//!
//! A **checkpoint** is the writer's Ed25519 signature over (store identity,
//! LSN, `d_LSN`, epoch), written to a file outside the store and handed to
//! a callback. [`verify`] checks a store against the keys and the newest
//! checkpoint it is given. `docs/tamper.md` has the threat model.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ed25519_dalek::{Signer, SigningKey, VerifyingKey};

use crate::error::{Error, Result};
use crate::log::format::{StoreId, CHAIN_DIGEST_BYTES, FRAME_TAG_BYTES, STORE_ID_BYTES};
use crate::log::Lsn;

mod verify;

pub use verify::{verify, TamperReport};

/// Bytes of a key's secret seed (the Ed25519 seed; the tag key is derived
/// from it).
pub const KEY_SEED_BYTES: usize = 32;
/// Bytes of an Ed25519 public key.
pub const PUBLIC_KEY_BYTES: usize = 32;
/// Bytes of an Ed25519 signature.
pub const SIGNATURE_BYTES: usize = 64;
/// The most keys (epochs) one key file may hold.
pub const KEY_EPOCHS_MAX: usize = 1024;
/// Largest key, public key or checkpoint file read, in bytes.
pub const KEY_FILE_BYTES_MAX: u64 = 256 * 1024;

const KEY_FILE_MAGIC: &str = "convlog tamper key v1";
const PUBLIC_FILE_MAGIC: &str = "convlog tamper public key v1";
const CHECKPOINT_MAGIC: &str = "convlog checkpoint v1";
const TAG_KEY_CONTEXT: &str = "convlog 2026-11 frame tag key v1";
/// The chain step's domain: 4 bytes, so that its input fills exactly one
/// BLAKE3 block (see [`chain_digest`]).
const CHAIN_DOMAIN: &[u8] = b"CVC4";
/// The frame tag's domain: 20 bytes, so that its input fills exactly one
/// BLAKE3 block (see [`tag_with`]).
const TAG_DOMAIN: &[u8] = b"convlog frame tag 4\0";
const ROTATION_DOMAIN: &[u8] = b"convlog key rotation v1\0";
const CHECKPOINT_DOMAIN: &[u8] = b"convlog checkpoint v1\0";
const SNAPSHOT_TAG_DOMAIN: &[u8] = b"convlog snapshot tag v1\0";

/// Magic bytes of a snapshot file's keyed tag (`docs/format.md`, 13).
pub const SNAPSHOT_TAG_MAGIC: [u8; 8] = *b"CVLSNTAG";
/// Bytes of a snapshot file's keyed tag, after its directory: the magic,
/// the key's epoch (`u32`), 4 reserved zero bytes, and the 32-byte
/// BLAKE3-keyed tag over the header and the digest of everything between
/// the header and the tag.
pub const SNAPSHOT_TAG_BYTES: usize = 48;

/// A chain digest (BLAKE3, 32 bytes).
pub type Digest = [u8; CHAIN_DIGEST_BYTES];
/// A frame's keyed tag.
pub type Tag = [u8; FRAME_TAG_BYTES];

/// The digest the chain starts from, before a store's first frame.
pub const GENESIS_DIGEST: Digest = [0; CHAIN_DIGEST_BYTES];

/// What kind of tampering [`verify`] found (in [`Error::Tampered`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TamperKind {
    /// A frame's events are not the ones the writer tagged.
    ContentChanged,
    /// A frame's tag does not authenticate it: written without the key.
    Forged,
    /// A frame written without the key was inserted; the frames after it
    /// were renumbered.
    Inserted,
    /// Events are missing from the middle of the log.
    Deleted,
    /// Frames are out of the order the writer wrote them in.
    Reordered,
    /// A frame the writer wrote at an earlier LSN (of this store or another
    /// copy) appears again.
    Replayed,
    /// Events a checkpoint covers are missing from the end of the log (the
    /// tail was cut, or an older copy of the store was put back).
    Truncated,
    /// The history up to a checkpoint's LSN is not the one signed (rolled
    /// back and written again, or rewritten).
    RolledBack,
    /// The store's identity is not the one in its checkpoint or tags.
    IdentityChanged,
    /// Tamper evidence was removed: segments without trailers in a store
    /// the keys or checkpoint say is tamper-evident.
    Stripped,
    /// A checkpoint whose signature does not verify.
    ForgedCheckpoint,
    /// A frame tagged with a key that an earlier frame had already
    /// rotated away from.
    RetiredKey,
    /// A snapshot file whose keyed tag is missing or does not authenticate
    /// it: it was edited (or written without the key).
    SnapshotChanged,
}

impl fmt::Display for TamperKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            TamperKind::ContentChanged => "changed content",
            TamperKind::Forged => "forged frame",
            TamperKind::Inserted => "inserted frame",
            TamperKind::Deleted => "deleted events",
            TamperKind::Reordered => "reordered frames",
            TamperKind::Replayed => "replayed frame",
            TamperKind::Truncated => "truncated log",
            TamperKind::RolledBack => "rolled-back history",
            TamperKind::IdentityChanged => "changed store identity",
            TamperKind::Stripped => "stripped tamper evidence",
            TamperKind::ForgedCheckpoint => "forged checkpoint",
            TamperKind::RetiredKey => "retired key used",
            TamperKind::SnapshotChanged => "changed snapshot",
        })
    }
}

impl TamperKind {
    /// What kind of file the evidence of this kind is in (the file
    /// `Error::Tampered`'s `segment` field names): `"snapshot"` for
    /// [`TamperKind::SnapshotChanged`], `"segment"` for every other kind.
    pub fn file_kind(&self) -> &'static str {
        match self {
            TamperKind::SnapshotChanged => "snapshot",
            _ => "segment",
        }
    }
}

/// One key: its epoch (0 for a store's first key, one more at each
/// rotation) and its secret seed.
struct EpochKey {
    epoch: u32,
    tag_key: [u8; 32],
    signing: SigningKey,
}

impl EpochKey {
    fn from_seed(epoch: u32, seed: [u8; KEY_SEED_BYTES]) -> EpochKey {
        EpochKey {
            epoch,
            tag_key: blake3::derive_key(TAG_KEY_CONTEXT, &seed),
            signing: SigningKey::from_bytes(&seed),
        }
    }
}

impl Drop for EpochKey {
    fn drop(&mut self) {
        self.tag_key = [0; 32];
    }
}

/// A secret key file's keys: one per epoch, the newest the one the writer
/// tags and signs with, the older ones kept to verify frames written before
/// each rotation. Never stored in the store directory.
pub struct TamperKey {
    /// Oldest first; epochs strictly increasing.
    keys: Vec<EpochKey>,
    /// The file it was read from, if any.
    path: Option<PathBuf>,
}

impl fmt::Debug for TamperKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("TamperKey")
            .field("epochs", &self.epochs())
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn random_seed() -> Result<[u8; KEY_SEED_BYTES]> {
    let mut seed = [0u8; KEY_SEED_BYTES];
    getrandom::fill(&mut seed).map_err(|error| {
        Error::io(
            "read the operating system's random source for a key",
            "getrandom",
        )(std::io::Error::other(error.to_string()))
    })?;
    Ok(seed)
}

impl TamperKey {
    /// A new key of epoch 0 from the operating system's random source.
    pub fn generate() -> Result<TamperKey> {
        Ok(TamperKey {
            keys: vec![EpochKey::from_seed(0, random_seed()?)],
            path: None,
        })
    }

    /// A key of epoch 0 from a given seed (tests, or a seed held in a
    /// secrets manager).
    pub fn from_seed(seed: [u8; KEY_SEED_BYTES]) -> TamperKey {
        TamperKey {
            keys: vec![EpochKey::from_seed(0, seed)],
            path: None,
        }
    }

    /// The same keys plus a new one of the next epoch, which the writer
    /// uses from its next open on (the rotation is recorded in the log by
    /// the first frame it tags, whose tag the old key also covers).
    pub fn rotated(&self) -> Result<TamperKey> {
        self.rotated_with_seed(random_seed()?)
    }

    /// [`TamperKey::rotated`] with a given seed.
    pub fn rotated_with_seed(&self, seed: [u8; KEY_SEED_BYTES]) -> Result<TamperKey> {
        if self.keys.len() >= KEY_EPOCHS_MAX {
            return Err(Error::LimitExceeded {
                what: "keys (epochs) in a tamper key file",
                actual: self.keys.len() as u64 + 1,
                limit: KEY_EPOCHS_MAX as u64,
                constant: "KEY_EPOCHS_MAX",
            });
        }
        let mut keys: Vec<EpochKey> = self
            .keys
            .iter()
            .map(|key| EpochKey::from_seed(key.epoch, key.signing.to_bytes()))
            .collect();
        keys.push(EpochKey::from_seed(self.newest().epoch + 1, seed));
        Ok(TamperKey { keys, path: None })
    }

    /// The epochs the file holds, oldest first.
    pub fn epochs(&self) -> Vec<u32> {
        self.keys.iter().map(|key| key.epoch).collect()
    }

    /// The newest epoch: the one the writer tags and signs with.
    pub fn epoch(&self) -> u32 {
        self.newest().epoch
    }

    /// The file the key was read from.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn newest(&self) -> &EpochKey {
        self.keys.last().expect("a key file holds at least one key")
    }

    fn key(&self, epoch: u32) -> Option<&EpochKey> {
        self.keys.iter().find(|key| key.epoch == epoch)
    }

    /// The public keys of every epoch, for verifiers without the secret.
    pub fn public(&self) -> PublicKey {
        PublicKey {
            keys: self
                .keys
                .iter()
                .map(|key| (key.epoch, key.signing.verifying_key()))
                .collect(),
        }
    }

    /// Reads a key file, refusing one that group or others may read.
    pub fn load(path: impl AsRef<Path>) -> Result<TamperKey> {
        let path = path.as_ref();
        check_private(path)?;
        let text = read_small(path, "tamper key file")?;
        let mut lines = text.lines().enumerate();
        expect_magic(path, &mut lines, KEY_FILE_MAGIC)?;
        let mut keys: Vec<EpochKey> = Vec::new();
        for (index, line) in lines {
            if line.trim().is_empty() {
                continue;
            }
            let (epoch, hex) = epoch_line(path, index, line, "key")?;
            if keys.last().is_some_and(|last| last.epoch >= epoch) {
                return Err(bad_file(
                    path,
                    index,
                    "epochs must increase from line to line",
                ));
            }
            if keys.len() >= KEY_EPOCHS_MAX {
                return Err(bad_file(
                    path,
                    index,
                    "more keys than KEY_EPOCHS_MAX (1024)",
                ));
            }
            keys.push(EpochKey::from_seed(epoch, decode_hex(path, index, hex)?));
        }
        if keys.is_empty() {
            return Err(bad_file(path, 0, "no `key EPOCH HEX` line"));
        }
        Ok(TamperKey {
            keys,
            path: Some(path.to_path_buf()),
        })
    }

    /// Writes the key file at `path` (which must not exist), readable and
    /// writable by its owner only.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        let mut text = format!("{KEY_FILE_MAGIC}\n");
        for key in &self.keys {
            text.push_str(&format!(
                "key {} {}\n",
                key.epoch,
                hex(&key.signing.to_bytes())
            ));
        }
        write_new(path.as_ref(), &text, true)
    }

    /// Tags a frame: the newest key's tag over (epoch, LSN, digest), and
    /// when the previous frame was tagged with an older epoch, that epoch's
    /// key over the result (the rotation, chained with the old key).
    pub(crate) fn tag(&self, lsn: Lsn, digest: &Digest, previous_epoch: Option<u32>) -> Tag {
        let newest = self.newest();
        let rotated_from = previous_epoch
            .filter(|&epoch| epoch != newest.epoch)
            .and_then(|epoch| self.key(epoch));
        tag_with(newest, rotated_from, lsn, digest)
    }

    /// The keyed tag a snapshot file ends with, by the newest key: over
    /// its header and the BLAKE3 digest of its bytes between the header
    /// and the tag ([`SNAPSHOT_TAG_BYTES`]).
    pub(crate) fn snapshot_tag(&self, header: &[u8], body: &Digest) -> [u8; SNAPSHOT_TAG_BYTES] {
        let newest = self.newest();
        let mut trailer = [0u8; SNAPSHOT_TAG_BYTES];
        trailer[..8].copy_from_slice(&SNAPSHOT_TAG_MAGIC);
        trailer[8..12].copy_from_slice(&newest.epoch.to_le_bytes());
        trailer[16..].copy_from_slice(&snapshot_tag_with(newest, header, body));
        trailer
    }

    /// Checks a snapshot file's tag (see [`TamperKey::snapshot_tag`]);
    /// `Err` says why it does not authenticate the file.
    pub(crate) fn check_snapshot_tag(
        &self,
        header: &[u8],
        body: &Digest,
        trailer: &[u8],
    ) -> std::result::Result<(), String> {
        if trailer.len() != SNAPSHOT_TAG_BYTES || trailer[..8] != SNAPSHOT_TAG_MAGIC {
            return Err("it carries no keyed tag after its directory".to_string());
        }
        let epoch = u32::from_le_bytes(trailer[8..12].try_into().expect("4 bytes"));
        if trailer[12..16] != [0; 4] {
            return Err("its tag's reserved bytes are not 0".to_string());
        }
        let Some(key) = self.key(epoch) else {
            return Err(format!(
                "it is tagged with the key of epoch {epoch}, which the key file does not hold (it holds epochs {:?})",
                self.epochs()
            ));
        };
        if snapshot_tag_with(key, header, body)[..] != trailer[16..] {
            return Err(format!(
                "its keyed tag (epoch {epoch}) does not authenticate its bytes: the file was changed after the writer tagged it"
            ));
        }
        Ok(())
    }

    /// Signs a checkpoint with the newest key.
    pub fn sign(&self, store_id: StoreId, lsn: Lsn, digest: Digest) -> Checkpoint {
        let newest = self.newest();
        let message = checkpoint_message(&store_id, lsn, &digest, newest.epoch);
        Checkpoint {
            store_id,
            lsn,
            digest,
            epoch: newest.epoch,
            signature: newest.signing.sign(&message).to_bytes(),
        }
    }
}

fn tag_with(key: &EpochKey, rotated_from: Option<&EpochKey>, lsn: Lsn, digest: &Digest) -> Tag {
    // One keyed hash of the whole input, laid out on the stack (the
    // writer runs this under its mutex): see `chain_digest`.
    let input: [u8; TAG_INPUT_BYTES] = concat(&[
        TAG_DOMAIN,
        &key.epoch.to_le_bytes(),
        &lsn.to_le_bytes(),
        digest,
    ]);
    let mut tag = [0u8; FRAME_TAG_BYTES];
    tag.copy_from_slice(&blake3::keyed_hash(&key.tag_key, &input).as_bytes()[..FRAME_TAG_BYTES]);
    if let Some(old) = rotated_from {
        let input: [u8; ROTATION_INPUT_BYTES] = concat(&[
            ROTATION_DOMAIN,
            &old.epoch.to_le_bytes(),
            &key.epoch.to_le_bytes(),
            &tag,
        ]);
        tag.copy_from_slice(
            &blake3::keyed_hash(&old.tag_key, &input).as_bytes()[..FRAME_TAG_BYTES],
        );
    }
    tag
}

fn snapshot_tag_with(key: &EpochKey, header: &[u8], body: &Digest) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_keyed(&key.tag_key);
    hasher.update(SNAPSHOT_TAG_DOMAIN);
    hasher.update(&key.epoch.to_le_bytes());
    hasher.update(&(header.len() as u64).to_le_bytes());
    hasher.update(header);
    hasher.update(body);
    *hasher.finalize().as_bytes()
}

/// The public keys of a key file's epochs: enough to check checkpoints'
/// signatures and the digest chain, not the frames' tags.
#[derive(Debug, Clone)]
pub struct PublicKey {
    keys: Vec<(u32, VerifyingKey)>,
}

impl PublicKey {
    /// Reads a public key file (`convlog keygen` writes it beside the key).
    pub fn load(path: impl AsRef<Path>) -> Result<PublicKey> {
        let path = path.as_ref();
        let text = read_small(path, "tamper public key file")?;
        let mut lines = text.lines().enumerate();
        expect_magic(path, &mut lines, PUBLIC_FILE_MAGIC)?;
        let mut keys = Vec::new();
        for (index, line) in lines {
            if line.trim().is_empty() {
                continue;
            }
            if keys.len() >= KEY_EPOCHS_MAX {
                return Err(bad_file(
                    path,
                    index,
                    "more keys than KEY_EPOCHS_MAX (1024)",
                ));
            }
            let (epoch, hex) = epoch_line(path, index, line, "public")?;
            let bytes: [u8; PUBLIC_KEY_BYTES] = decode_hex(path, index, hex)?;
            let key = VerifyingKey::from_bytes(&bytes)
                .map_err(|_| bad_file(path, index, "not an Ed25519 public key"))?;
            keys.push((epoch, key));
        }
        if keys.is_empty() {
            return Err(bad_file(path, 0, "no `public EPOCH HEX` line"));
        }
        Ok(PublicKey { keys })
    }

    /// Writes the public key file at `path` (which must not exist).
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        let mut text = format!("{PUBLIC_FILE_MAGIC}\n");
        for (epoch, key) in &self.keys {
            text.push_str(&format!("public {epoch} {}\n", hex(&key.to_bytes())));
        }
        write_new(path.as_ref(), &text, false)
    }

    /// Checks a checkpoint's signature; `Err` says why it does not verify.
    pub fn check(&self, checkpoint: &Checkpoint) -> std::result::Result<(), String> {
        let Some((_, key)) = self
            .keys
            .iter()
            .find(|(epoch, _)| *epoch == checkpoint.epoch)
        else {
            return Err(format!(
                "it is signed with the key of epoch {}, which the keys given do not hold",
                checkpoint.epoch
            ));
        };
        let message = checkpoint_message(
            &checkpoint.store_id,
            checkpoint.lsn,
            &checkpoint.digest,
            checkpoint.epoch,
        );
        let signature = ed25519_dalek::Signature::from_bytes(&checkpoint.signature);
        key.verify_strict(&message, &signature).map_err(|_| {
            "its signature does not verify with the public key of its epoch".to_string()
        })
    }
}

/// A signed statement by the writer: store `store_id` held, at LSN `lsn`
/// (every event up to and including it), the chain digest `digest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// The store's identity.
    pub store_id: StoreId,
    /// The last LSN covered (0 for an empty log).
    pub lsn: Lsn,
    /// The chain digest after the frame that ends at `lsn`.
    pub digest: Digest,
    /// The epoch of the key that signed it.
    pub epoch: u32,
    /// Ed25519 signature over the domain, identity, LSN, digest and epoch.
    pub signature: [u8; SIGNATURE_BYTES],
}

fn checkpoint_message(store_id: &StoreId, lsn: Lsn, digest: &Digest, epoch: u32) -> Vec<u8> {
    let mut message = Vec::with_capacity(CHECKPOINT_DOMAIN.len() + 16 + 8 + 32 + 4);
    message.extend_from_slice(CHECKPOINT_DOMAIN);
    message.extend_from_slice(store_id);
    message.extend_from_slice(&lsn.to_le_bytes());
    message.extend_from_slice(digest);
    message.extend_from_slice(&epoch.to_le_bytes());
    message
}

impl Checkpoint {
    /// The checkpoint as the text of a checkpoint file.
    pub fn to_text(&self) -> String {
        format!(
            "{CHECKPOINT_MAGIC}\nstore {}\nlsn {}\ndigest {}\nepoch {}\nsignature {}\n",
            hex(&self.store_id),
            self.lsn,
            hex(&self.digest),
            self.epoch,
            hex(&self.signature)
        )
    }

    /// Reads a checkpoint file.
    pub fn load(path: impl AsRef<Path>) -> Result<Checkpoint> {
        let path = path.as_ref();
        let text = read_small(path, "checkpoint file")?;
        let mut lines = text.lines().enumerate();
        expect_magic(path, &mut lines, CHECKPOINT_MAGIC)?;
        let mut fields: [Option<(usize, &str)>; 5] = [None; 5];
        const NAMES: [&str; 5] = ["store", "lsn", "digest", "epoch", "signature"];
        for (index, line) in lines {
            if line.trim().is_empty() {
                continue;
            }
            let (name, value) = line
                .split_once(' ')
                .ok_or_else(|| bad_file(path, index, "expected `NAME VALUE`"))?;
            let slot = NAMES
                .iter()
                .position(|known| *known == name)
                .ok_or_else(|| bad_file(path, index, &format!("unknown field `{name}`")))?;
            if fields[slot].replace((index, value.trim())).is_some() {
                return Err(bad_file(
                    path,
                    index,
                    &format!("field `{name}` given twice"),
                ));
            }
        }
        let field = |slot: usize| {
            fields[slot]
                .ok_or_else(|| bad_file(path, 0, &format!("the `{}` line is missing", NAMES[slot])))
        };
        let number = |slot: usize| -> Result<u64> {
            let (index, value) = field(slot)?;
            value
                .parse()
                .map_err(|_| bad_file(path, index, &format!("`{}` is not a number", NAMES[slot])))
        };
        let (index, store) = field(0)?;
        let store_id: [u8; STORE_ID_BYTES] = decode_hex(path, index, store)?;
        let (index, digest) = field(2)?;
        let digest = decode_hex(path, index, digest)?;
        let (index, signature) = field(4)?;
        let signature = decode_hex(path, index, signature)?;
        let epoch = number(3)?;
        Ok(Checkpoint {
            store_id,
            lsn: number(1)?,
            digest,
            epoch: u32::try_from(epoch).map_err(|_| {
                bad_file(
                    path,
                    field(3).map_or(0, |(index, _)| index),
                    "epoch exceeds u32",
                )
            })?,
            signature,
        })
    }

    /// Writes the checkpoint to `path` atomically (a temporary file beside
    /// it, fsynced, renamed over it, the directory fsynced): a crash leaves
    /// the old checkpoint or the new one.
    pub fn publish(&self, path: &Path) -> Result<()> {
        let mut temporary = path.as_os_str().to_owned();
        temporary.push(".tmp");
        let temporary = PathBuf::from(temporary);
        let mut file = std::fs::File::create(&temporary)
            .map_err(Error::io("create checkpoint file", &temporary))?;
        file.write_all(self.to_text().as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(Error::io("write checkpoint file", &temporary))?;
        drop(file);
        std::fs::rename(&temporary, path).map_err(Error::io("rename checkpoint file", path))?;
        let parent = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        std::fs::File::open(parent)
            .and_then(|directory| directory.sync_all())
            .map_err(Error::io("fsync checkpoint directory", parent))
    }
}

/// A host's callback for each checkpoint the writer signs.
pub type CheckpointCallback = Arc<dyn Fn(&Checkpoint) + Send + Sync>;

/// Tamper evidence for a log ([`crate::log::LogOptions::tamper`]).
#[derive(Clone)]
#[non_exhaustive]
pub struct TamperOptions {
    /// The key file's keys (the newest tags and signs).
    pub key: Arc<TamperKey>,
    /// Where each checkpoint is written (atomically replacing the last);
    /// must be outside the store directory.
    pub checkpoint_path: Option<PathBuf>,
    /// Sign a checkpoint after every this many events (`None`: only on
    /// demand, [`crate::log::Log::checkpoint`]).
    pub checkpoint_every_events: Option<u64>,
    /// Called with each checkpoint, after it is published to the file.
    pub on_checkpoint: Option<CheckpointCallback>,
}

impl fmt::Debug for TamperOptions {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("TamperOptions")
            .field("key", &self.key)
            .field("checkpoint_path", &self.checkpoint_path)
            .field("checkpoint_every_events", &self.checkpoint_every_events)
            .field("on_checkpoint", &self.on_checkpoint.is_some())
            .finish()
    }
}

impl TamperOptions {
    /// Tamper evidence with `key`, checkpoints only on demand and not
    /// published to a file.
    pub fn new(key: TamperKey) -> TamperOptions {
        TamperOptions {
            key: Arc::new(key),
            checkpoint_path: None,
            checkpoint_every_events: None,
            on_checkpoint: None,
        }
    }

    /// Publishes every checkpoint to `path` (outside the store).
    pub fn checkpoint_path(mut self, path: impl Into<PathBuf>) -> TamperOptions {
        self.checkpoint_path = Some(path.into());
        self
    }

    /// Signs a checkpoint after every `events` events (at least 1).
    pub fn checkpoint_every_events(mut self, events: u64) -> TamperOptions {
        self.checkpoint_every_events = Some(events);
        self
    }

    /// Calls `callback` with every checkpoint.
    pub fn on_checkpoint(
        mut self,
        callback: impl Fn(&Checkpoint) + Send + Sync + 'static,
    ) -> TamperOptions {
        self.on_checkpoint = Some(Arc::new(callback));
        self
    }

    /// Checks the options against the store directory they are used for.
    pub(crate) fn check(&self, store: &Path) -> Result<()> {
        if self.checkpoint_every_events == Some(0) {
            return Err(Error::InvalidOption {
                option: "TamperOptions::checkpoint_every_events",
                reason: "it is 0; it must be at least 1 (or None for checkpoints on demand only)"
                    .to_string(),
            });
        }
        let inside = |path: &Path| is_inside(path, store);
        if let Some(path) = self.key.path().filter(|path| inside(path)) {
            return Err(Error::InvalidOption {
                option: "TamperOptions::key",
                reason: format!(
                    "the key file {} is inside the store directory {}: anyone who can write the store could then read the key; keep it elsewhere",
                    path.display(),
                    store.display()
                ),
            });
        }
        if let Some(path) = self.checkpoint_path.as_deref().filter(|path| inside(path)) {
            return Err(Error::InvalidOption {
                option: "TamperOptions::checkpoint_path",
                reason: format!(
                    "the checkpoint file {} is inside the store directory {}: a checkpoint only proves anything kept where whoever edits the store cannot reach",
                    path.display(),
                    store.display()
                ),
            });
        }
        Ok(())
    }
}

/// Whether `path` lies in directory `dir` (both resolved as far as they exist).
fn is_inside(path: &Path, dir: &Path) -> bool {
    let resolve = |path: &Path| -> PathBuf {
        let absolute = if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::env::current_dir().unwrap_or_default().join(path)
        };
        // The deepest existing ancestor, canonicalized, plus the rest.
        let mut existing = absolute.as_path();
        let mut rest = Vec::new();
        loop {
            if let Ok(canonical) = existing.canonicalize() {
                let mut resolved = canonical;
                for part in rest.iter().rev() {
                    resolved.push(part);
                }
                return resolved;
            }
            match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_owned());
                    existing = parent;
                }
                _ => return absolute,
            }
        }
    };
    resolve(path).starts_with(resolve(dir))
}

/// The digest of a frame's events as the frame holds them (each a `u32`
/// length, then its bytes): SHA-256, which this CPU family computes with
/// its SHA instructions (`sha2` picks them at run time) in about 60% of
/// BLAKE3's time for a body of one chunk or less, the common frame
/// (`docs/performance.md`, "Where the chain's cost is").
pub(crate) fn events_digest<P: AsRef<[u8]>>(payloads: &[P]) -> Digest {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    for payload in payloads {
        let payload = payload.as_ref();
        hasher.update((payload.len() as u32).to_le_bytes());
        hasher.update(payload);
    }
    hasher.finalize().into()
}

/// The digest of a frame's body bytes (its events, without a trailer):
/// the same as [`events_digest`] of the events the body holds.
pub(crate) fn body_digest(body: &[u8]) -> Digest {
    use sha2::Digest as _;
    sha2::Sha256::digest(body).into()
}

/// The chain digest after a frame: BLAKE3 in its keyed mode with the
/// digest before it as the key, over the store identity, the frame's first
/// LSN, its event count and its events' digest (`docs/format.md`, 2.7).
///
/// The writer computes it under its mutex, once per frame, so its input is
/// one BLAKE3 block (64 bytes: one compression). Keying by the previous
/// digest puts it where BLAKE3's compression takes its chaining value; the
/// key is public (anyone holding the log can recompute the chain, as a
/// verifier with the public key only does), so the chain relies on
/// collision resistance, as an unkeyed chain does, not on a secret.
pub fn chain_digest(
    previous: &Digest,
    store_id: &StoreId,
    first_lsn: Lsn,
    event_count: u32,
    events: &Digest,
) -> Digest {
    let input: [u8; CHAIN_INPUT_BYTES] = concat(&[
        CHAIN_DOMAIN,
        store_id,
        &first_lsn.to_le_bytes(),
        &event_count.to_le_bytes(),
        events,
    ]);
    *blake3::keyed_hash(previous, &input).as_bytes()
}

/// Bytes of one BLAKE3 block: an input of at most this many bytes costs one
/// compression.
const BLAKE3_BLOCK_BYTES: usize = 64;

/// Bytes hashed by [`chain_digest`] (the previous digest is the key).
const CHAIN_INPUT_BYTES: usize = CHAIN_DOMAIN.len()
    + std::mem::size_of::<StoreId>()
    + std::mem::size_of::<Lsn>()
    + std::mem::size_of::<u32>()
    + CHAIN_DIGEST_BYTES;
const _: () = assert!(CHAIN_INPUT_BYTES == BLAKE3_BLOCK_BYTES);

/// Bytes of a frame tag's keyed hash input ([`tag_with`]).
const TAG_INPUT_BYTES: usize =
    TAG_DOMAIN.len() + std::mem::size_of::<u32>() + std::mem::size_of::<Lsn>() + CHAIN_DIGEST_BYTES;
const _: () = assert!(TAG_INPUT_BYTES == BLAKE3_BLOCK_BYTES);

/// Bytes of a rotation tag's keyed hash input ([`tag_with`]).
const ROTATION_INPUT_BYTES: usize =
    ROTATION_DOMAIN.len() + 2 * std::mem::size_of::<u32>() + FRAME_TAG_BYTES;

/// `parts` one after the other in an array of exactly their total length
/// `N` (a mismatch is a bug of the caller's constant).
fn concat<const N: usize>(parts: &[&[u8]]) -> [u8; N] {
    let mut out = [0u8; N];
    let mut at = 0;
    for part in parts {
        out[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    assert_eq!(at, N, "the parts fill the array exactly");
    out
}

/// Where a tamper-evident log's chain stands after recovery: the trailer
/// of its last frame (in the active segment, or the newest sealed segment
/// holding one), checked against the key so that a writer never extends a
/// chain whose head someone forged.
pub(crate) fn resume_head(
    storage: &dyn crate::storage::Storage,
    dir: &Path,
    recovered: &crate::log::recovery::Recovered,
    key: &TamperKey,
) -> Result<crate::log::writer::ChainHead> {
    let mut found = recovered
        .last_trailer
        .map(|trailer| (trailer, recovered.active.path.clone()));
    if found.is_none() {
        for sealed in recovered.sealed.iter().rev() {
            let bytes = crate::log::recovery::read_whole(storage, &sealed.path)?;
            let scan =
                crate::log::recovery::scan_segment(&bytes, false).map_err(|(offset, reason)| {
                    Error::Corrupted {
                        segment: sealed.path.clone(),
                        offset,
                        reason,
                    }
                })?;
            if let Some(trailer) = scan.last_trailer {
                found = Some((trailer, sealed.path.clone()));
                break;
            }
        }
    }
    let Some((trailer, segment)) = found else {
        return Ok(crate::log::writer::ChainHead {
            digest: GENESIS_DIGEST,
            epoch: None,
        });
    };
    let Some(epoch_key) = key.key(trailer.key_epoch) else {
        return Err(Error::InvalidOption {
            option: "TamperOptions::key",
            reason: format!(
                "store {}'s last frame (LSN {}) is tagged with the key of epoch {}, which the key file does not hold (it holds epochs {:?}): give the newest key file, which keeps every older key",
                dir.display(),
                trailer.auth_lsn,
                trailer.key_epoch,
                key.epochs()
            ),
        });
    };
    // The frame may be the first of its epoch (its tag then also covers
    // the previous epoch's key).
    let authentic = std::iter::once(None)
        .chain(
            key.keys
                .iter()
                .filter(|old| old.epoch < epoch_key.epoch)
                .map(Some),
        )
        .any(|rotated_from| {
            tag_with(epoch_key, rotated_from, trailer.auth_lsn, &trailer.digest) == trailer.tag
        });
    if !authentic || trailer.reserved != 0 {
        return Err(Error::Tampered {
            store: dir.to_path_buf(),
            kind: TamperKind::Forged,
            lsn: trailer.auth_lsn,
            segment,
            offset: 0,
            detail: "the log's last frame is not authenticated by the key, so the writer will not extend its chain; run `convlog verify STORE --key KEYFILE` to find what was changed".to_string(),
        });
    }
    Ok(crate::log::writer::ChainHead {
        digest: trailer.digest,
        epoch: Some(trailer.key_epoch),
    })
}

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn decode_hex<const N: usize>(path: &Path, index: usize, text: &str) -> Result<[u8; N]> {
    let text = text.trim();
    if text.len() != 2 * N || !text.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Err(bad_file(
            path,
            index,
            &format!("expected {} hex digits, found {:?}", 2 * N, text),
        ));
    }
    let mut out = [0u8; N];
    for (slot, pair) in out.iter_mut().zip(text.as_bytes().chunks(2)) {
        let pair = std::str::from_utf8(pair).expect("hex digits are ASCII");
        *slot = u8::from_str_radix(pair, 16).expect("checked hex digits");
    }
    Ok(out)
}

fn bad_file(path: &Path, index: usize, reason: &str) -> Error {
    Error::InvalidOption {
        option: "tamper key or checkpoint file",
        reason: format!("{} line {}: {reason}", path.display(), index + 1),
    }
}

fn expect_magic<'a>(
    path: &Path,
    lines: &mut impl Iterator<Item = (usize, &'a str)>,
    magic: &str,
) -> Result<()> {
    match lines.next() {
        Some((_, line)) if line.trim() == magic => Ok(()),
        _ => Err(bad_file(
            path,
            0,
            &format!("expected the first line `{magic}`"),
        )),
    }
}

fn epoch_line<'a>(path: &Path, index: usize, line: &'a str, word: &str) -> Result<(u32, &'a str)> {
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(found), Some(epoch), Some(hex), None) if found == word => {
            let epoch = epoch
                .parse()
                .map_err(|_| bad_file(path, index, "the epoch is not a number"))?;
            Ok((epoch, hex))
        }
        _ => Err(bad_file(
            path,
            index,
            &format!("expected `{word} EPOCH HEX`"),
        )),
    }
}

fn read_small(path: &Path, what: &'static str) -> Result<String> {
    let metadata = std::fs::metadata(path).map_err(Error::io(what, path))?;
    if metadata.len() > KEY_FILE_BYTES_MAX {
        return Err(Error::LimitExceeded {
            what,
            actual: metadata.len(),
            limit: KEY_FILE_BYTES_MAX,
            constant: "KEY_FILE_BYTES_MAX",
        });
    }
    let bytes = std::fs::read(path).map_err(Error::io(what, path))?;
    String::from_utf8(bytes).map_err(|_| bad_file(path, 0, "the file is not UTF-8 text"))
}

/// Refuses a key file that group or others may read or write.
fn check_private(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let metadata = std::fs::metadata(path).map_err(Error::io("tamper key file", path))?;
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(Error::InvalidOption {
                option: "tamper key file",
                reason: format!(
                    "{} has mode {mode:04o}: group or others may access it; a tamper key must be private to its owner (chmod 600 {})",
                    path.display(),
                    path.display()
                ),
            });
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

fn write_new(path: &Path, text: &str, private: bool) -> Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options
        .open(path)
        .map_err(Error::io("create key file (it must not exist yet)", path))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(Error::io("write key file", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_round_trips_and_a_changed_field_breaks_its_signature() {
        let key = TamperKey::from_seed([7; 32]);
        let checkpoint = key.sign([1; 16], 42, [9; 32]);
        let public = key.public();
        assert_eq!(public.check(&checkpoint), Ok(()));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("head");
        checkpoint.publish(&path).unwrap();
        assert_eq!(Checkpoint::load(&path).unwrap(), checkpoint);
        let mut later = checkpoint;
        later.lsn = 43;
        assert!(public.check(&later).is_err());
    }

    /// The chain step, the events' digest and the tags hash exactly the
    /// pieces `docs/format.md` (2.7) lists (a verifier written from the
    /// document agrees with the writer), the chain step and the tag in one
    /// BLAKE3 block each.
    #[test]
    fn the_chain_and_tags_hash_the_pieces_the_format_lists() {
        let (previous, store_id, events) = ([1; 32], [2; 16], [3; 32]);
        // The chain step: BLAKE3 keyed by the previous digest, over one
        // block.
        let mut hasher = blake3::Hasher::new_keyed(&previous);
        let pieces: &[&[u8]] = &[
            b"CVC4",
            &store_id,
            &77u64.to_le_bytes(),
            &5u32.to_le_bytes(),
            &events,
        ];
        let mut length = 0;
        for piece in pieces {
            hasher.update(piece);
            length += piece.len();
        }
        assert_eq!(length, 64, "one BLAKE3 block");
        let digest = chain_digest(&previous, &store_id, 77, 5, &events);
        assert_eq!(&digest, hasher.finalize().as_bytes());

        // The events' digest: SHA-256 of the body as the frame holds it.
        let body = [&3u32.to_le_bytes()[..], b"abc", &0u32.to_le_bytes()[..]].concat();
        let expected: [u8; 32] = {
            use sha2::Digest as _;
            sha2::Sha256::digest(&body).into()
        };
        assert_eq!(
            events_digest(&[b"abc".as_slice(), b"".as_slice()]),
            expected
        );
        assert_eq!(body_digest(&body), expected);

        let old = TamperKey::from_seed([1; 32]);
        let new = old.rotated_with_seed([2; 32]).unwrap();
        let (key_0, key_1) = (&new.keys[0], &new.keys[1]);
        let mut hasher = blake3::Hasher::new_keyed(&key_1.tag_key);
        let pieces: &[&[u8]] = &[
            b"convlog frame tag 4\0",
            &1u32.to_le_bytes(),
            &77u64.to_le_bytes(),
            &digest,
        ];
        for piece in pieces {
            hasher.update(piece);
        }
        let plain: Tag = hasher.finalize().as_bytes()[..FRAME_TAG_BYTES]
            .try_into()
            .unwrap();
        assert_eq!(new.tag(77, &digest, Some(1)), plain);
        let mut hasher = blake3::Hasher::new_keyed(&key_0.tag_key);
        let pieces: &[&[u8]] = &[
            ROTATION_DOMAIN,
            &0u32.to_le_bytes(),
            &1u32.to_le_bytes(),
            &plain,
        ];
        for piece in pieces {
            hasher.update(piece);
        }
        let rotated: Tag = hasher.finalize().as_bytes()[..FRAME_TAG_BYTES]
            .try_into()
            .unwrap();
        assert_eq!(new.tag(77, &digest, Some(0)), rotated);
    }

    #[test]
    fn a_rotation_tag_needs_both_keys() {
        let old = TamperKey::from_seed([1; 32]);
        let new = old.rotated_with_seed([2; 32]).unwrap();
        let digest = [5; 32];
        let plain = new.tag(3, &digest, Some(1));
        let rotation = new.tag(3, &digest, Some(0));
        assert_ne!(plain, rotation);
        assert_eq!(new.epochs(), vec![0, 1]);
    }
}
