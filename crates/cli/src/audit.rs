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
    let view = AuditView::open(dir, conversation)?;
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
    let mut out = std::io::stdout().lock();
    audit::tail(dir, &mut out, &options, &mut || false)?;
    Ok(())
}

/// `convlog export STORE --conversation ID --format html`: one self-contained page.
pub fn export_html(dir: &Path, conversation: &str) -> Result<(), Failure> {
    crate::shell::existing_store(dir)?;
    let bar = crate::shell::spinner("reading the conversation");
    let view = AuditView::open(dir, Some(conversation));
    let timeline = view.and_then(|view| view.timeline(conversation, &TimelineOptions::for_html()));
    bar.finish_and_clear();
    let timeline = timeline?;
    let options = HtmlOptions::new()
        .store(Some(dir.display().to_string()))
        .generated_at(Some(Timestamp::now()));
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    audit::write_html(&mut out, &timeline, &options)
        .and_then(|()| out.flush())
        .or_else(stdout_closed)
}
