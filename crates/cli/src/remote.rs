//! Stores by URL: `nats://host:port[,host:port...]/STORE`, a store on a
//! NATS JetStream cluster (docs/scale-out.md), with its snapshots in the
//! store's object store bucket. The commands that work through the
//! `Store` API take one wherever they take a store directory; the ones
//! that read or copy a directory's files refuse it, saying so.

use std::path::Path;

use convlog::store::StoreOptions;
use convlog::Store;

use crate::shell::Failure;

/// The form of a store URL, for messages.
pub const URL_FORM: &str = "nats://host:port[,host:port...]/STORE";

/// Whether `store` is a store URL rather than a directory.
pub fn is_url(store: &Path) -> bool {
    store
        .to_str()
        .is_some_and(|text| text.starts_with("nats://"))
}

/// Fails for a command that works on a store directory's files when it is
/// given a store URL: `what` says what it does with the files.
pub fn refuse_url(command: &str, store: &Path, what: &str) -> Result<(), Failure> {
    if is_url(store) {
        return Err(Failure(format!(
            "convlog {command} {what}; it does not take a store URL ({URL_FORM}: {}), only a store directory. On a JetStream store use the commands that go through the store (append, export, resume, chat, snapshot, compact, import, serve and the message-control commands; docs/scale-out.md)",
            store.display()
        )));
    }
    Ok(())
}

/// Opens the store at the URL `store`, as its writer or read-only, with
/// the host reducers every command registers.
#[cfg(feature = "nats")]
pub fn open(store: &Path, options: StoreOptions, read_only: bool) -> Result<Store, Failure> {
    let url = url_text(store)?;
    if options.encryption.is_some() {
        return Err(Failure(format!(
            "{url}: encryption at rest (a store key) is not supported on a JetStream store yet"
        )));
    }
    if options.log.tamper.is_some() {
        return Err(Failure(format!(
            "{url}: tamper evidence (a tamper key) is not supported on a JetStream store yet"
        )));
    }
    let nats = convlog_nats::options_from_env()?;
    Ok(convlog_nats::open_store_shared_with(
        url,
        options,
        nats,
        read_only,
        |builder| builder.reducer(convlog::control::ContextsReducer),
    )?)
}

/// Without the `nats` feature a store URL is refused.
#[cfg(not(feature = "nats"))]
pub fn open(store: &Path, _options: StoreOptions, _read_only: bool) -> Result<Store, Failure> {
    Err(Failure(format!(
        "{}: this convlog was built without the `nats` feature, so it opens store directories only, not {URL_FORM}",
        store.display()
    )))
}

#[cfg(feature = "nats")]
fn url_text(store: &Path) -> Result<&str, Failure> {
    store
        .to_str()
        .ok_or_else(|| Failure(format!("{}: a store URL is text", store.display())))
}

/// Fails unless the store at the URL `store` exists (a follower never
/// creates one), so a mistyped store name is not created.
#[cfg(feature = "nats")]
pub fn check_exists(store: &Path) -> Result<(), Failure> {
    let url = url_text(store)?;
    convlog_nats::JetStreamLog::open_follower(url, convlog_nats::options_from_env()?)?;
    Ok(())
}

#[cfg(not(feature = "nats"))]
pub fn check_exists(store: &Path) -> Result<(), Failure> {
    open(store, StoreOptions::new(), true).map(drop)
}
