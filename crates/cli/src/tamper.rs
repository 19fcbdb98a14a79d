//! `convlog keygen` and the tamper-evidence half of `convlog verify`
//! (`--key`, `--public`, `--head`): docs/tamper.md.

use std::path::{Path, PathBuf};

use convlog::tamper::{Checkpoint, PublicKey, TamperKey, TamperOptions};
use convlog::Store;

use crate::shell::{row, Failure};

/// The environment variable naming the tamper key file every command that
/// writes a store signs with (`--tamper-key` overrides it).
pub const TAMPER_KEY_FILE_ENV: &str = "CONVLOG_TAMPER_KEY_FILE";
/// The environment variable naming the checkpoint file (outside the store)
/// a writing command publishes its checkpoints to (`--checkpoint`
/// overrides it).
pub const CHECKPOINT_FILE_ENV: &str = "CONVLOG_TAMPER_CHECKPOINT";

/// How a command that writes a store signs it: `--tamper-key`,
/// `--checkpoint`, `--checkpoint-every` (docs/tamper.md). The key is
/// needed to write a tamper-evident store, and creates one when the store
/// is new.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct WriterArgs {
    /// The tamper key file (default: $CONVLOG_TAMPER_KEY_FILE): needed to
    /// write a tamper-evident store; a new store is created tamper-evident.
    #[arg(long = "tamper-key", value_name = "KEYFILE")]
    pub key: Option<PathBuf>,
    /// Publish a signed checkpoint to FILE (outside the store) when the
    /// command finishes, and every --checkpoint-every events (default:
    /// $CONVLOG_TAMPER_CHECKPOINT). Needs the tamper key.
    #[arg(long, value_name = "FILE")]
    pub checkpoint: Option<PathBuf>,
    /// Also sign a checkpoint every N events while the command runs.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub checkpoint_every: Option<u64>,
}

fn from_env(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
}

impl WriterArgs {
    /// The tamper options of the flags, or of the environment variables
    /// for those not given; `None` without a key.
    pub fn options(&self) -> Result<Option<TamperOptions>, Failure> {
        let key = self.key.clone().or_else(|| from_env(TAMPER_KEY_FILE_ENV));
        let checkpoint = self
            .checkpoint
            .clone()
            .or_else(|| from_env(CHECKPOINT_FILE_ENV));
        let Some(key) = key else {
            if let Some(checkpoint) = &checkpoint {
                return Err(Failure(format!(
                    "a checkpoint file ({}) was given without a tamper key: give --tamper-key KEYFILE or set {TAMPER_KEY_FILE_ENV}",
                    checkpoint.display()
                )));
            }
            if self.checkpoint_every.is_some() {
                return Err(Failure(format!(
                    "--checkpoint-every needs a tamper key: give --tamper-key KEYFILE or set {TAMPER_KEY_FILE_ENV}"
                )));
            }
            return Ok(None);
        };
        let mut options = TamperOptions::new(TamperKey::load(&key)?);
        if let Some(checkpoint) = checkpoint {
            options = options.checkpoint_path(checkpoint);
        }
        if let Some(every) = self.checkpoint_every {
            options = options.checkpoint_every_events(every);
        }
        Ok(Some(options))
    }

    /// Signs the store's final checkpoint when the command is done, if a
    /// checkpoint file was given and the store is tamper-evident; says so
    /// on standard error (standard output is the command's own).
    pub fn finish(&self, store: &Store) -> Result<(), Failure> {
        let file = self
            .checkpoint
            .clone()
            .or_else(|| from_env(CHECKPOINT_FILE_ENV));
        if let (Some(file), true) = (file, store.is_tamper_evident()) {
            let checkpoint = store.checkpoint()?;
            eprintln!(
                "convlog: checkpoint of LSN {} signed (key epoch {}) and written to {}",
                checkpoint.lsn,
                checkpoint.epoch,
                file.display()
            );
        }
        Ok(())
    }
}

/// What `verify` checks a tamper-evident store with.
#[derive(Debug, Default)]
pub struct TamperArgs {
    /// The secret key file (`--key`).
    pub key: Option<PathBuf>,
    /// A public key file (`--public`).
    pub public: Option<PathBuf>,
    /// The newest checkpoint kept outside the store (`--head`).
    pub head: Option<PathBuf>,
}

impl TamperArgs {
    /// Whether any tamper option was given.
    pub fn given(&self) -> bool {
        self.key.is_some() || self.public.is_some() || self.head.is_some()
    }
}

/// The public key file written beside `key` unless `--public` names one.
fn default_public(key: &Path) -> PathBuf {
    let mut name = key.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

/// `convlog keygen KEYFILE [--public FILE] [--rotate OLD_KEYFILE]`.
pub fn keygen(key: &Path, public: Option<&Path>, rotate: Option<&Path>) -> Result<(), Failure> {
    let secret = match rotate {
        Some(old) => TamperKey::load(old)?.rotated()?,
        None => TamperKey::generate()?,
    };
    let public_path = public.map_or_else(|| default_public(key), Path::to_path_buf);
    secret.write(key)?;
    secret.public().write(&public_path)?;
    row(
        "key",
        format!("{} (mode 0600; keep it outside every store)", key.display()),
    );
    row("public key", public_path.display());
    row(
        "epochs",
        format!("{:?} (the writer uses {})", secret.epochs(), secret.epoch()),
    );
    Ok(())
}

/// The tamper check of `convlog verify`, after the store's own checks.
pub fn verify(dir: &Path, args: &TamperArgs) -> Result<(), Failure> {
    if args.key.is_none() && args.head.is_none() {
        return Err(Failure(
            "--public checks a store against a checkpoint: give --head CHECKPOINT too (or --key KEYFILE to check every frame)".to_string(),
        ));
    }
    let key = args.key.as_deref().map(TamperKey::load).transpose()?;
    let public = args.public.as_deref().map(PublicKey::load).transpose()?;
    let head = args.head.as_deref().map(Checkpoint::load).transpose()?;
    let report = convlog::tamper::verify(dir, key.as_ref(), public.as_ref(), head.as_ref())?;
    let epochs: Vec<String> = report
        .epochs
        .iter()
        .map(|(epoch, lsn)| format!("{epoch} from LSN {lsn}"))
        .collect();
    if !epochs.is_empty() {
        row("key epochs", epochs.join(", "));
    }
    if let Some(lsn) = report.checkpoint_lsn {
        row(
            "checkpoint",
            format!("LSN {lsn}: signature ok, the log's history up to it is the one signed"),
        );
    }
    let tail = match report.checkpoint_lsn {
        Some(lsn) if lsn + 1 < report.log.next_lsn => format!(
            "; events after LSN {lsn} are {}",
            if report.keyed {
                "authenticated by the key, but a cut there would not show without a newer checkpoint"
            } else {
                "NOT authenticated (a public key proves only up to the checkpoint)"
            }
        ),
        _ => String::new(),
    };
    if report.keyed {
        row(
            "tamper",
            format!(
                "ok: {} frame(s) authenticated by the key, {} snapshot(s) by their keyed tag{tail}",
                report.frames_authenticated, report.snapshots_authenticated
            ),
        );
    } else {
        row(
            "tamper",
            format!("ok: checked with the public key only{tail}"),
        );
    }
    Ok(())
}
