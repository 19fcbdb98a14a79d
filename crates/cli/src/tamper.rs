//! `convlog keygen` and the tamper-evidence half of `convlog verify`
//! (`--key`, `--public`, `--head`): docs/tamper.md.

use std::path::{Path, PathBuf};

use convlog::tamper::{Checkpoint, PublicKey, TamperKey};

use crate::shell::{row, Failure};

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
                "ok: {} frame(s) authenticated by the key{tail}",
                report.frames_authenticated
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
