//! What every command shares: the failure a command reports, opening a
//! store (as its writer, or read-only beside one), and printing (summary
//! rows, JSON, progress on stderr, a closed standard output).

use std::io::Write;
use std::path::Path;

use convlog::control::ContextsReducer;
use convlog::erasure::StoreKey;
use convlog::log::LogReader;
use convlog::store::{StoreBuilder, StoreOptions};
use convlog::{Error, Store};

/// Width of the label column of summaries.
const LABEL_WIDTH: usize = 17;

/// Why a command failed: the message printed after `convlog: error: `.
#[derive(Debug)]
pub struct Failure(pub String);

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        match error {
            Error::DirectoryNotEmpty { .. } => Failure(format!(
                "{error}; pass --create-in-nonempty to create it there anyway"
            )),
            other => Failure(other.to_string()),
        }
    }
}

/// Prints one summary row. A reader that went away (`convlog stats STORE |
/// head -2`) ends the output quietly, as for `dump`: the rows after it are
/// dropped and the command finishes; any other write failure is an error
/// that stops the command (exit 1).
pub fn row(label: &str, value: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    if let Err(error) = writeln!(out, "{label:<LABEL_WIDTH$}{value}") {
        if let Err(Failure(message)) = stdout_closed(error) {
            eprintln!("convlog: error: {message}");
            std::process::exit(1);
        }
    }
}

/// Fails unless `dir` holds a store, so a mistyped path is not created
/// (for a store URL: unless the cluster has the store).
pub fn existing_store(dir: &Path) -> Result<(), Failure> {
    if crate::remote::is_url(dir) {
        return crate::remote::check_exists(dir);
    }
    LogReader::open(dir)?;
    Ok(())
}

/// The environment variable naming an encrypted store's key file
/// (docs/erasure.md): every command that opens a store reads it.
pub const KEY_FILE_ENV: &str = "CONVLOG_KEY_FILE";

/// The global `--key-file` option, when given.
static KEY_FILE_ARG: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();

/// Records the global `--key-file` option (once, at start).
pub fn set_key_file(path: Option<std::path::PathBuf>) {
    let _ = KEY_FILE_ARG.set(path);
}

/// The store key: from `key_file` (a command's own `--key`) when given,
/// else the global `--key-file`, else `CONVLOG_KEY_FILE` when set; `None`
/// for none of them (a store in the clear).
pub fn store_key(key_file: Option<&Path>) -> Result<Option<StoreKey>, Failure> {
    let from_env = std::env::var_os(KEY_FILE_ENV).filter(|value| !value.is_empty());
    let global = KEY_FILE_ARG.get().cloned().flatten();
    match key_file
        .map(Path::to_path_buf)
        .or(global)
        .or(from_env.map(Into::into))
    {
        Some(path) => Ok(Some(StoreKey::from_file(path)?)),
        None => Ok(None),
    }
}

/// Opens the store read-only (a directory or a store URL), beside any running writer: no lock, nothing
/// written. No host reducers: a snapshot taken by a host without them still
/// serves conversations.
///
/// With `CONVLOG_TAMPER_KEY_FILE` set, a snapshot whose keyed tag fails is
/// ignored (docs/tamper.md): reads come from the log the key vouches for.
pub fn open_store_read_only(dir: &Path) -> Result<Store, Failure> {
    let options = StoreOptions::default()
        .encryption(store_key(None)?)
        .tamper(crate::tamper::WriterArgs::default().options()?);
    let store = if crate::remote::is_url(dir) {
        crate::remote::open(dir, options, true)?
    } else {
        Store::open_read_only(dir, options)?
    };
    // Catch up now, so a damaged log fails here with its location.
    store.refresh()?;
    Ok(store)
}

/// Opens (or creates) the store as its writer, with the host reducers every
/// command registers: [`ContextsReducer`], so the snapshots `convlog
/// snapshot` writes carry the contexts of `create-context` and a compacted
/// store still knows them.
///
/// A tamper-evident store is written with the key of
/// `CONVLOG_TAMPER_KEY_FILE` unless `options` carry one (docs/tamper.md).
pub fn open_store(dir: &Path, options: StoreOptions) -> Result<Store, Failure> {
    let options = match options.encryption {
        Some(_) => options,
        None => options.encryption(store_key(None)?),
    };
    let options = match options.log.tamper {
        Some(_) => options,
        None => options.tamper(crate::tamper::WriterArgs::default().options()?),
    };
    if crate::remote::is_url(dir) {
        return crate::remote::open(dir, options, false);
    }
    Ok(StoreBuilder::new(dir)
        .options(options)
        .reducer(ContextsReducer)
        .open()?)
}

/// Writes `value` to standard output as pretty JSON and a newline.
pub fn print_json(value: &impl serde::Serialize) -> Result<(), Failure> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|error| Failure(format!("the output has no JSON form: {error}")))?;
    text.push('\n');
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .or_else(stdout_closed)
}

pub fn lsn_range(first_lsn: u64, next_lsn: u64) -> String {
    if next_lsn > first_lsn {
        format!("{first_lsn}..={}", next_lsn - 1)
    } else {
        format!("empty (the next LSN is {next_lsn})")
    }
}

/// Bytes in the store's segment files (the work a full read does).
pub fn segment_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .filter(|entry| {
                    entry
                        .path()
                        .extension()
                        .is_some_and(|extension| extension == "seg")
                })
                .filter_map(|entry| entry.metadata().ok())
                .map(|metadata| metadata.len())
                .sum()
        })
        .unwrap_or(0)
}

/// A byte progress bar on stderr; indicatif draws nothing when stderr is
/// not a terminal, so pipes and CI logs stay clean.
pub fn progress_bar(total_bytes: u64, label: &'static str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total_bytes),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, {eta} left)",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(label);
    bar
}

/// A spinner on stderr for work without a known size (hidden off a terminal).
pub fn spinner(label: &'static str) -> indicatif::ProgressBar {
    let bar =
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(label);
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// A reader that went away (`convlog dump | head`) ends the output quietly.
pub fn stdout_closed(error: std::io::Error) -> Result<(), Failure> {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        Ok(())
    } else {
        Err(Failure(format!("write to standard output: {error}")))
    }
}
