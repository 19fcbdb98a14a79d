//! `convlog inspect`, `convlog tail` and `convlog export --format html`:
//! thin over `convlog::audit`. All three take no lock: they read beside a
//! running writer.

use std::io::{IsTerminal, Write};
use std::path::Path;

use clap::ValueEnum;
use convlog::audit::{
    self, AuditView, HtmlOptions, TailFormat, TailOptions, TailStart, TimelineOptions,
};
use convlog::model::Timestamp;

use crate::shell::{stdout_closed, Failure};

/// When to colour text output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorArg {
    /// On a terminal only (the default).
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

impl ColorArg {
    fn enabled(self) -> bool {
        match self {
            ColorArg::Auto => std::io::stdout().is_terminal(),
            ColorArg::Always => true,
            ColorArg::Never => false,
        }
    }
}

/// `convlog inspect STORE [--conversation ID] [--json] [--color WHEN]`.
pub fn inspect(
    dir: &Path,
    conversation: Option<&str>,
    json: bool,
    color: ColorArg,
) -> Result<(), Failure> {
    crate::shell::existing_store(dir)?;
    let key = crate::shell::store_key(None)?;
    if key.is_none() && convlog::erasure::is_encrypted_store(dir) {
        return inspect_sealed(dir, conversation, json);
    }
    let view = match AuditView::open_with_key(dir, conversation, key.as_ref()) {
        Ok(view) => view,
        // Sealed events and no key table beside them (it is missing): the
        // structure is what can be shown, with the reason.
        Err(error @ convlog::Error::UndecodableEvent { .. }) if key.is_none() => {
            let sealed = audit::SealedOverview::read(dir, conversation).is_ok_and(|overview| {
                overview
                    .conversations
                    .iter()
                    .any(|row| row.state != "clear")
            });
            if !sealed {
                return Err(error.into());
            }
            eprintln!("convlog: note: {error}");
            return inspect_sealed(dir, conversation, json);
        }
        Err(error) => return Err(error.into()),
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = match conversation {
        Some(id) => {
            let timeline = view.timeline(id, &TimelineOptions::default())?;
            if json {
                audit::write_json(&mut out, &timeline)
            } else {
                audit::write_timeline_text(&mut out, &timeline, color.enabled())
            }
        }
        None => {
            let overview = view.overview();
            if json {
                audit::write_json(&mut out, &overview)
            } else {
                audit::write_overview_text(&mut out, &overview, color.enabled())
            }
        }
    };
    written.and_then(|()| out.flush()).or_else(stdout_closed)
}

/// `convlog inspect` of an encrypted store without its store key: its
/// structure only, saying so in the output and on standard error.
fn inspect_sealed(dir: &Path, conversation: Option<&str>, json: bool) -> Result<(), Failure> {
    let overview = audit::SealedOverview::read(dir, conversation)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = if json {
        audit::write_json(&mut out, &overview)
    } else {
        audit::write_sealed_overview_text(&mut out, &overview)
    };
    written.and_then(|()| out.flush()).or_else(stdout_closed)?;
    eprintln!("{SEALED_INSPECT_NOTE}");
    Ok(())
}

/// What `inspect` says on standard error of an encrypted store read
/// without its key.
pub const SEALED_INSPECT_NOTE: &str = "convlog: note: the store is encrypted (docs/erasure.md): shown is its structure only (conversation ids, LSNs, sizes, key events, erasures); pass --key-file FILE or set CONVLOG_KEY_FILE to read its content";

/// `convlog tail STORE [-n N] [--follow] [--json] [--conversation ID]`.
pub fn tail(
    dir: &Path,
    last: u64,
    follow: bool,
    json: bool,
    conversation: Option<String>,
) -> Result<(), Failure> {
    crate::shell::existing_store(dir)?;
    let options = TailOptions::new()
        .start(TailStart::Last(usize::try_from(last).unwrap_or(usize::MAX)))
        .follow(follow)
        .format(if json {
            TailFormat::Json
        } else {
            TailFormat::Summary {
                color: std::io::stdout().is_terminal(),
            }
        })
        .conversation(conversation);
    let key = crate::shell::store_key(None)?;
    let mut out = std::io::stdout().lock();
    audit::tail_with_key(dir, key.as_ref(), &mut out, &options, &mut || false)?;
    if key.is_none() && convlog::erasure::is_encrypted_store(dir) {
        eprintln!("{SEALED_NOTE}");
    }
    Ok(())
}

/// What `tail` and `dump` say on an encrypted store read without its key.
pub const SEALED_NOTE: &str = "convlog: note: the store is encrypted (docs/erasure.md): its conversations' events are shown sealed, as stored (conversation id, LSN, size); pass --key-file FILE or set CONVLOG_KEY_FILE to read their content";

/// The audit view of `dir` with the store key (`--key-file`,
/// `CONVLOG_KEY_FILE`); on an encrypted store without it, an error that
/// says what to do.
fn open_view(dir: &Path, conversation: Option<&str>) -> Result<AuditView, Failure> {
    let key = crate::shell::store_key(None)?;
    if key.is_none() && convlog::erasure::is_encrypted_store(dir) {
        return Err(Failure(format!(
            "store {}: the store is encrypted (docs/erasure.md): its content is sealed and needs the store key: pass --key-file FILE or set CONVLOG_KEY_FILE. Without the key, `convlog inspect`, `tail` and `dump` show its structure (conversation ids, LSNs, sizes)",
            dir.display()
        )));
    }
    Ok(AuditView::open_with_key(dir, conversation, key.as_ref())?)
}

/// `convlog export STORE --conversation ID --format html`: one self-contained page.
pub fn export_html(dir: &Path, conversation: &str) -> Result<(), Failure> {
    crate::shell::existing_store(dir)?;
    let bar = crate::shell::spinner("reading the conversation");
    let view = open_view(dir, Some(conversation)).map_err(|Failure(message)| message);
    let timeline = view.and_then(|view| {
        view.timeline(conversation, &TimelineOptions::for_html())
            .map_err(|error| error.to_string())
    });
    bar.finish_and_clear();
    let timeline = timeline.map_err(Failure)?;
    let options = HtmlOptions::new()
        .store(Some(dir.display().to_string()))
        .generated_at(Some(Timestamp::now()));
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    audit::write_html(&mut out, &timeline, &options)
        .and_then(|()| out.flush())
        .or_else(stdout_closed)
}
