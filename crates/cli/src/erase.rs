//! `convlog erase` and `convlog keygen`: erasing a conversation of an
//! encrypted store, and making a store key file (docs/erasure.md).

use std::path::Path;

use convlog::store::StoreOptions;

use crate::shell::{existing_store, open_store, print_json, row, store_key, Failure, KEY_FILE_ENV};

/// `convlog erase STORE --conversation ID [--key FILE] [--by WHO]`.
pub fn erase(
    dir: &Path,
    conversation: &str,
    key_file: Option<&Path>,
    by: &str,
    tamper: &crate::tamper::WriterArgs,
) -> Result<(), Failure> {
    existing_store(dir)?;
    let Some(key) = store_key(key_file)? else {
        return Err(Failure(format!(
            "erase needs the store key: pass --key FILE or set {KEY_FILE_ENV}"
        )));
    };
    let options = StoreOptions::new()
        .encryption(Some(key))
        .tamper(tamper.options()?);
    let store = open_store(dir, options)?;
    let report = store.erase(conversation, by)?;
    // The erasure event is signed like any append: a checkpoint covering it.
    tamper.finish(&store)?;
    match (report.erasure, report.lsn) {
        (Some(erasure), Some(lsn)) => print_json(&serde_json::json!({
            "erased": erasure.conversation_id,
            "by": erasure.by,
            "at": erasure.at,
            "lsn": lsn,
        })),
        _ => print_json(&serde_json::json!({
            "erased": conversation,
            "note": "it was erased before",
        })),
    }
}

/// `convlog keygen FILE`.
pub fn keygen(path: &Path) -> Result<(), Failure> {
    convlog::erasure::StoreKey::generate_file(path)?;
    row("key file", path.display());
    row(
        "use",
        format!("{KEY_FILE_ENV}={} convlog append STORE ...", path.display()),
    );
    row(
        "keep",
        "outside the store directory, backed up apart from the store: without it the store does not open",
    );
    Ok(())
}
