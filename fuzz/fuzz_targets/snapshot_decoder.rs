//! The snapshot decoder on arbitrary file contents: never panics, never
//! allocates without bound; every blob it hands out passed its checksum.
#![no_main]

use convlog::storage::FileSystem;
use convlog::store::snapshot;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir_in(std::env::var_os("CONVLOG_FUZZ_TMP").unwrap_or_else(|| "/dev/shm".into()))
        .or_else(|_| tempfile::tempdir())
        .expect("temporary directory");
    // Not a snapshot file name (20 digits): the name/header LSN check does
    // not apply, so inputs of any LSN reach the decoder past the header.
    let path = dir.path().join("fuzz-input.snap");
    std::fs::write(&path, data).expect("write input");
    if let Ok(loaded) = snapshot::load(&FileSystem, &path) {
        let ids: Vec<String> = loaded.conversations.keys().cloned().collect();
        for id in ids {
            if let Ok(Some(blob)) = loaded.read_blob(&id) {
                let _ = loaded.decode_slice(&blob);
            }
        }
    }
    let _ = snapshot::verify(&FileSystem, &path);
});
