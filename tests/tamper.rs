//! Tamper evidence (`docs/tamper.md`): every edit someone who can write the
//! store's files can make is found by `tamper::verify` and named, with
//! where; accidental damage keeps its `Corrupted` error.
//!
//! The attacker here knows the format and recomputes every CRC, LSN and
//! link (the helper `rewrite` re-encodes the whole segment); what they do
//! not have is the key.

mod common;

use std::path::{Path, PathBuf};

use convlog::log::format::{
    self, FrameDecode, FrameTrailer, SegmentLink, FRAME_TRAILER_BYTES, SEGMENT_HEADER_BYTES,
};
use convlog::log::{Durability, Log, LogOptions};
use convlog::tamper::{self, Checkpoint, TamperKey, TamperKind, TamperOptions};
use convlog::Error;

use common::segment_paths;

const EVENTS: usize = 6;

fn key() -> TamperKey {
    TamperKey::from_seed([0x5a; 32])
}

fn payload(index: usize) -> Vec<u8> {
    format!("conversation {} event {index}", index % 2).into_bytes()
}

fn options(key: TamperKey) -> LogOptions {
    LogOptions::new()
        .durability(Durability::Sync)
        .tamper(TamperOptions::new(key))
}

/// A tamper-evident store with `EVENTS` one-event frames and a checkpoint
/// at its end (kept outside the store).
fn store(dir: &Path) -> Checkpoint {
    let log = Log::open(dir, options(key())).unwrap();
    for index in 0..EVENTS {
        log.append(&[payload(index)]).unwrap();
    }
    log.checkpoint().unwrap()
}

/// One frame as an attacker handles it: its events and its trailer.
#[derive(Clone, Debug)]
struct Frame {
    payloads: Vec<Vec<u8>>,
    trailer: Option<FrameTrailer>,
}

/// The frames of a single-segment store, and the header's link and salt.
fn frames(segment: &Path) -> (SegmentLink, u32, Vec<Frame>) {
    let bytes = std::fs::read(segment).unwrap();
    let header = format::decode_segment_header(&bytes).unwrap();
    let mut frames = Vec::new();
    let mut offset = SEGMENT_HEADER_BYTES;
    while let FrameDecode::Complete(frame) = format::decode_frame(&bytes[offset..]) {
        frames.push(Frame {
            payloads: frame.events().map(<[u8]>::to_vec).collect(),
            trailer: frame.trailer(),
        });
        offset += frame.size_bytes();
    }
    let link = SegmentLink {
        store_id: header.store_id,
        prev_chain: header.prev_chain,
        keyed: header.keyed,
    };
    (link, header.salt, frames)
}

/// Writes `frames` back as the store's only segment, numbered from LSN 1,
/// with every CRC and link recomputed.
fn write_segment(segment: &Path, link: SegmentLink, salt: u32, frames: &[Frame]) {
    let header = format::encode_segment_header(1, link, salt);
    let mut chain = format::decode_segment_header(&header).unwrap().crc;
    let mut bytes = header.to_vec();
    let mut lsn = 1;
    for frame in frames {
        chain = format::encode_frame_with_trailer(
            &mut bytes,
            lsn,
            lsn,
            chain,
            &frame.payloads,
            frame.trailer.as_ref(),
        );
        lsn += frame.payloads.len() as u64;
    }
    std::fs::write(segment, bytes).unwrap();
}

/// Edits the frames of the store at `dir` as an attacker would.
fn rewrite(dir: &Path, edit: impl FnOnce(&mut Vec<Frame>)) {
    let segment = segment_paths(dir)[0].clone();
    let (link, salt, mut list) = frames(&segment);
    edit(&mut list);
    write_segment(&segment, link, salt, &list);
}

/// Verifies with the key and the checkpoint; returns the tampering found.
fn tampering(dir: &Path, checkpoint: Option<&Checkpoint>) -> (TamperKind, u64, PathBuf, String) {
    match tamper::verify(dir, Some(&key()), None, checkpoint) {
        Err(Error::Tampered {
            kind,
            lsn,
            segment,
            detail,
            ..
        }) => (kind, lsn, segment, detail),
        other => panic!("expected Error::Tampered, got {other:?}"),
    }
}

#[test]
fn an_untouched_store_verifies_with_the_key_and_with_the_public_key_alone() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = store(dir.path());
    assert_eq!(checkpoint.lsn, EVENTS as u64);
    let report = tamper::verify(dir.path(), Some(&key()), None, Some(&checkpoint)).unwrap();
    assert_eq!(report.frames_authenticated, EVENTS as u64);
    assert_eq!(report.epochs, vec![(0, 1)]);
    let public = key().public();
    let report = tamper::verify(dir.path(), None, Some(&public), Some(&checkpoint)).unwrap();
    assert_eq!((report.frames_authenticated, report.keyed), (0, false));
    // The store's readers and the structural verify see ordinary events.
    let records = common::read_all(dir.path());
    assert_eq!(records.len(), EVENTS);
    assert_eq!(records[2].payload, payload(2));
    convlog::log::verify(dir.path()).unwrap();
}

#[test]
fn changed_content_is_named_with_its_lsn() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = store(dir.path());
    rewrite(dir.path(), |frames| {
        frames[2].payloads[0] = b"conversation 0 event 2: the tool said yes".to_vec();
    });
    // The CRCs are right: nothing accidental is seen.
    convlog::log::verify(dir.path()).unwrap();
    let (kind, lsn, segment, detail) = tampering(dir.path(), Some(&checkpoint));
    assert_eq!((kind, lsn), (TamperKind::ContentChanged, 3));
    assert_eq!(segment, segment_paths(dir.path())[0]);
    assert!(detail.contains("events"), "{detail}");
}

#[test]
fn changed_content_with_the_digests_recomputed_fails_the_tag_and_the_public_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = store(dir.path());
    rewrite(dir.path(), |frames| {
        frames[2].payloads[0] = b"edited".to_vec();
        // The digest chain is public: recompute it from the edit on.
        let store_id = format::decode_segment_header(
            &std::fs::read(segment_paths(dir.path())[0].clone()).unwrap(),
        )
        .unwrap()
        .store_id;
        let mut digest = frames[1].trailer.unwrap().digest;
        for (index, frame) in frames.iter_mut().enumerate().skip(2) {
            let mut body = Vec::new();
            for payload in &frame.payloads {
                body.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                body.extend_from_slice(payload);
            }
            let events: [u8; 32] = {
                use sha2::Digest as _;
                sha2::Sha256::digest(&body).into()
            };
            digest = tamper::chain_digest(&digest, &store_id, index as u64 + 1, 1, &events);
            frame.trailer.as_mut().unwrap().digest = digest;
        }
    });
    let (kind, lsn, _, _) = tampering(dir.path(), Some(&checkpoint));
    assert_eq!((kind, lsn), (TamperKind::Forged, 3));
    // A verifier with the public key only: the checkpoint catches it.
    let public = key().public();
    match tamper::verify(dir.path(), None, Some(&public), Some(&checkpoint)) {
        Err(Error::Tampered { kind, lsn, .. }) => {
            assert_eq!((kind, lsn), (TamperKind::RolledBack, EVENTS as u64))
        }
        other => panic!("expected Tampered, got {other:?}"),
    }
}

#[test]
fn a_truncated_tail_is_caught_by_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = store(dir.path());
    rewrite(dir.path(), |frames| frames.truncate(EVENTS - 2));
    let (kind, lsn, _, detail) = tampering(dir.path(), Some(&checkpoint));
    assert_eq!((kind, lsn), (TamperKind::Truncated, EVENTS as u64 - 1));
    assert!(detail.contains("events 5..=6 are missing"), "{detail}");
    // Without a checkpoint a cut tail cannot be told from a shorter log.
    tamper::verify(dir.path(), Some(&key()), None, None).unwrap();
}

#[test]
fn a_deleted_middle_event_is_named() {
    let dir = tempfile::tempdir().unwrap();
    store(dir.path());
    rewrite(dir.path(), |frames| {
        frames.remove(2);
    });
    let (kind, lsn, _, detail) = tampering(dir.path(), None);
    assert_eq!((kind, lsn), (TamperKind::Deleted, 3));
    assert!(detail.contains("written as LSN 4"), "{detail}");
}

#[test]
fn reordered_events_are_named() {
    let dir = tempfile::tempdir().unwrap();
    store(dir.path());
    rewrite(dir.path(), |frames| frames.swap(2, 3));
    let (kind, lsn, _, detail) = tampering(dir.path(), None);
    assert_eq!((kind, lsn), (TamperKind::Reordered, 3));
    assert!(detail.contains("written as LSN 4"), "{detail}");
}

#[test]
fn a_forged_inserted_event_is_named() {
    let dir = tempfile::tempdir().unwrap();
    store(dir.path());
    rewrite(dir.path(), |frames| {
        // The attacker copies a trailer's shape and guesses a tag.
        let mut trailer = frames[1].trailer.unwrap();
        trailer.auth_lsn = 3;
        trailer.tag = [0xee; 16];
        frames.insert(
            2,
            Frame {
                payloads: vec![b"conversation 0 tool result: approved".to_vec()],
                trailer: Some(trailer),
            },
        );
    });
    let (kind, lsn, _, _) = tampering(dir.path(), None);
    assert_eq!((kind, lsn), (TamperKind::Inserted, 3));
}

#[test]
fn a_forged_frame_in_place_is_named() {
    let dir = tempfile::tempdir().unwrap();
    store(dir.path());
    rewrite(dir.path(), |frames| {
        frames[3].trailer.as_mut().unwrap().tag[0] ^= 1;
    });
    let (kind, lsn, _, _) = tampering(dir.path(), None);
    assert_eq!((kind, lsn), (TamperKind::Forged, 4));
}

#[test]
fn an_event_replayed_from_another_conversation_is_named() {
    let dir = tempfile::tempdir().unwrap();
    store(dir.path());
    // Event 1 (LSN 2) is conversation 1's; it is appended again at the end.
    rewrite(dir.path(), |frames| {
        let copy = frames[1].clone();
        frames.push(copy);
    });
    let (kind, lsn, _, detail) = tampering(dir.path(), None);
    assert_eq!((kind, lsn), (TamperKind::Replayed, EVENTS as u64 + 1));
    assert!(detail.contains("written as LSN 2"), "{detail}");
    assert!(detail.contains("of this store"), "{detail}");
}

#[test]
fn an_event_replayed_from_another_store_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    store(dir.path());
    store(other.path());
    let (_, _, foreign) = frames(&segment_paths(other.path())[0]);
    rewrite(dir.path(), |frames| frames.push(foreign[2].clone()));
    let (kind, lsn, _, detail) = tampering(dir.path(), None);
    assert_eq!((kind, lsn), (TamperKind::Replayed, EVENTS as u64 + 1));
    assert!(detail.contains("another store"), "{detail}");
    // A store with another key: its frames are forgeries here.
    let third = tempfile::tempdir().unwrap();
    let log = Log::open(
        third.path(),
        LogOptions::new().tamper(TamperOptions::new(TamperKey::from_seed([1; 32]))),
    )
    .unwrap();
    log.append(&[b"elsewhere".as_slice()]).unwrap();
    drop(log);
    let (_, _, alien) = frames(&segment_paths(third.path())[0]);
    rewrite(dir.path(), |frames| {
        frames.pop();
        frames.push(alien[0].clone());
    });
    let (kind, lsn, _, _) = tampering(dir.path(), None);
    assert_eq!((kind, lsn), (TamperKind::Forged, EVENTS as u64 + 1));
}

#[test]
fn a_rollback_replaying_old_events_is_named() {
    let dir = tempfile::tempdir().unwrap();
    store(dir.path());
    // Cut back to LSN 3, then put events 2 and 3 after it again.
    rewrite(dir.path(), |frames| {
        frames.truncate(3);
        let replay = frames[1..3].to_vec();
        frames.extend(replay);
    });
    let (kind, lsn, _, _) = tampering(dir.path(), None);
    assert_eq!((kind, lsn), (TamperKind::Replayed, 4));
}

#[test]
fn a_rollback_the_writer_then_extended_is_caught_by_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let copy = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), options(key())).unwrap();
    for index in 0..3 {
        log.append(&[payload(index)]).unwrap();
    }
    drop(log);
    copy_store(dir.path(), copy.path());
    let checkpoint = {
        let log = Log::open(dir.path(), options(key())).unwrap();
        for index in 3..EVENTS {
            log.append(&[payload(index)]).unwrap();
        }
        log.checkpoint().unwrap()
    };
    // The old copy is put back and the (honest) writer appends to it.
    restore(copy.path(), dir.path());
    let log = Log::open(dir.path(), options(key())).unwrap();
    for index in 0..4 {
        log.append(&[format!("other {index}").into_bytes()])
            .unwrap();
    }
    drop(log);
    // Every frame is genuine: only the checkpoint kept outside shows it.
    tamper::verify(dir.path(), Some(&key()), None, None).unwrap();
    let (kind, lsn, _, _) = tampering(dir.path(), Some(&checkpoint));
    assert_eq!((kind, lsn), (TamperKind::RolledBack, EVENTS as u64));
}

#[test]
fn a_whole_older_copy_restored_is_caught_by_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let copy = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), options(key())).unwrap();
    for index in 0..3 {
        log.append(&[payload(index)]).unwrap();
    }
    drop(log);
    copy_store(dir.path(), copy.path());
    let checkpoint = {
        let log = Log::open(dir.path(), options(key())).unwrap();
        log.append(&[payload(3)]).unwrap();
        log.checkpoint().unwrap()
    };
    restore(copy.path(), dir.path());
    tamper::verify(dir.path(), Some(&key()), None, None).unwrap();
    let (kind, lsn, _, detail) = tampering(dir.path(), Some(&checkpoint));
    assert_eq!((kind, lsn), (TamperKind::Truncated, 4));
    assert!(detail.contains("older copy"), "{detail}");
}

#[test]
fn changed_metadata_the_store_identity_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = store(dir.path());
    let segment = segment_paths(dir.path())[0].clone();
    let (mut link, salt, list) = frames(&segment);
    link.store_id[0] ^= 0xff;
    write_segment(&segment, link, salt, &list);
    let (kind, _, _, detail) = tampering(dir.path(), Some(&checkpoint));
    assert_eq!(kind, TamperKind::IdentityChanged);
    assert!(detail.contains("another store"), "{detail}");
    // Without a checkpoint the first frame no longer chains.
    let (kind, lsn, _, _) = tampering(dir.path(), None);
    assert_eq!((kind, lsn), (TamperKind::ContentChanged, 1));
}

#[test]
fn changed_metadata_the_trailer_epoch_is_named() {
    let dir = tempfile::tempdir().unwrap();
    store(dir.path());
    rewrite(dir.path(), |frames| {
        frames[4].trailer.as_mut().unwrap().reserved = 1;
    });
    let (kind, lsn, _, _) = tampering(dir.path(), None);
    assert_eq!((kind, lsn), (TamperKind::Forged, 5));
}

#[test]
fn stripped_trailers_are_named() {
    let dir = tempfile::tempdir().unwrap();
    store(dir.path());
    rewrite(dir.path(), |frames| {
        for frame in frames.iter_mut() {
            frame.trailer = None;
        }
    });
    // The attacker also relabels the segment as version 2.
    let segment = segment_paths(dir.path())[0].clone();
    let (mut link, salt, list) = frames(&segment);
    link.keyed = false;
    write_segment(&segment, link, salt, &list);
    convlog::log::verify(dir.path()).unwrap();
    let (kind, lsn, _, _) = tampering(dir.path(), None);
    assert_eq!((kind, lsn), (TamperKind::Stripped, 1));
}

#[test]
fn accidental_damage_stays_corrupted_not_tampered() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = store(dir.path());
    let segment = segment_paths(dir.path())[0].clone();
    let mut bytes = std::fs::read(&segment).unwrap();
    // A bit flip in the second frame's payload, CRC left as it was.
    let (_, _, list) = frames(&segment);
    let first = 32 + 4 + list[0].payloads[0].len() + FRAME_TRAILER_BYTES;
    bytes[SEGMENT_HEADER_BYTES + first + 40] ^= 0x10;
    std::fs::write(&segment, bytes).unwrap();
    match tamper::verify(dir.path(), Some(&key()), None, Some(&checkpoint)) {
        Err(Error::Corrupted { segment: at, .. }) => assert_eq!(at, segment),
        other => panic!("expected Corrupted, got {other:?}"),
    }
}

#[test]
fn a_forged_checkpoint_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut checkpoint = store(dir.path());
    checkpoint.lsn -= 1;
    let (kind, _, _, detail) = tampering(dir.path(), Some(&checkpoint));
    assert_eq!(kind, TamperKind::ForgedCheckpoint);
    assert!(detail.contains("signature"), "{detail}");
}

#[test]
fn the_writer_refuses_to_extend_a_forged_head() {
    let dir = tempfile::tempdir().unwrap();
    store(dir.path());
    rewrite(dir.path(), |frames| {
        frames.last_mut().unwrap().trailer.as_mut().unwrap().tag[3] ^= 4;
    });
    match Log::open(dir.path(), options(key())) {
        Err(Error::Tampered { kind, lsn, .. }) => {
            assert_eq!((kind, lsn), (TamperKind::Forged, EVENTS as u64))
        }
        other => panic!("expected Tampered, got {other:?}"),
    }
}

#[test]
fn a_tamper_evident_store_needs_its_key_and_a_plain_store_refuses_one() {
    let keyed = tempfile::tempdir().unwrap();
    store(keyed.path());
    let error = Log::open(keyed.path(), LogOptions::new()).unwrap_err();
    assert!(
        error.to_string().contains("is tamper-evident") && error.to_string().contains("key"),
        "{error}"
    );
    let plain = tempfile::tempdir().unwrap();
    Log::open(plain.path(), LogOptions::new())
        .unwrap()
        .append(&[b"x".as_slice()])
        .unwrap();
    let error = Log::open(plain.path(), options(key())).unwrap_err();
    assert!(
        error.to_string().contains("without tamper evidence"),
        "{error}"
    );
    // A plain store's log has nothing to sign.
    let log = Log::open(plain.path(), LogOptions::new()).unwrap();
    assert!(matches!(log.checkpoint(), Err(Error::InvalidOption { .. })));
}

#[cfg(unix)]
#[test]
fn a_key_file_others_can_read_is_refused_and_one_in_the_store_too() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tamper.key");
    key().write(&path).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let loaded = TamperKey::load(&path).unwrap();
    assert_eq!(loaded.epochs(), vec![0]);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let error = TamperKey::load(&path).unwrap_err().to_string();
    assert!(
        error.contains("0644") && error.contains("chmod 600") && error.contains("tamper.key"),
        "{error}"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert!(TamperKey::load(&path).is_err());
    // A key kept inside the store directory is refused.
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let inside = store.join("tamper.key");
    key().write(&inside).unwrap();
    let options = LogOptions::new().tamper(TamperOptions::new(TamperKey::load(&inside).unwrap()));
    let error = Log::open(&store, options).unwrap_err().to_string();
    assert!(error.contains("inside the store directory"), "{error}");
    // So is a checkpoint path there.
    let options =
        LogOptions::new().tamper(TamperOptions::new(key()).checkpoint_path(store.join("head")));
    let error = Log::open(&store, options).unwrap_err().to_string();
    assert!(error.contains("checkpoint file"), "{error}");
}

#[test]
fn checkpoints_are_published_at_intervals_to_a_file_and_a_callback() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let head = outside.path().join("head");
    let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let recorder = std::sync::Arc::clone(&seen);
    let tamper = TamperOptions::new(key())
        .checkpoint_path(&head)
        .checkpoint_every_events(2)
        .on_checkpoint(move |checkpoint| recorder.lock().push(checkpoint.lsn));
    let log = Log::open(dir.path(), LogOptions::new().tamper(tamper)).unwrap();
    for index in 0..5 {
        log.append(&[payload(index)]).unwrap();
    }
    assert_eq!(*seen.lock(), vec![2, 4]);
    let published = Checkpoint::load(&head).unwrap();
    assert_eq!(published.lsn, 4);
    let on_demand = log.checkpoint().unwrap();
    assert_eq!(on_demand.lsn, 5);
    assert_eq!(Checkpoint::load(&head).unwrap(), on_demand);
    drop(log);
    tamper::verify(dir.path(), Some(&key()), None, Some(&published)).unwrap();
    tamper::verify(dir.path(), Some(&key()), None, Some(&on_demand)).unwrap();
}

#[test]
fn a_rotation_is_recorded_in_the_log_and_verifies_with_the_new_key_file() {
    let dir = tempfile::tempdir().unwrap();
    store(dir.path());
    let checkpoint = {
        let log = Log::open(
            dir.path(),
            options(key().rotated_with_seed([0x77; 32]).unwrap()),
        )
        .unwrap();
        for index in 0..3 {
            log.append(&[payload(index)]).unwrap();
        }
        log.checkpoint().unwrap()
    };
    assert_eq!(checkpoint.epoch, 1);
    let rotated = key().rotated_with_seed([0x77; 32]).unwrap();
    let report = tamper::verify(dir.path(), Some(&rotated), None, Some(&checkpoint)).unwrap();
    assert_eq!(report.epochs, vec![(0, 1), (1, EVENTS as u64 + 1)]);
    // The public keys of both epochs verify the checkpoint and the chain.
    tamper::verify(dir.path(), None, Some(&rotated.public()), Some(&checkpoint)).unwrap();
    // The old key file alone cannot check the frames after the rotation.
    let error = tamper::verify(dir.path(), Some(&key()), None, None).unwrap_err();
    assert!(error.to_string().contains("epoch 1"), "{error}");
    // The writer will not go back to the old key once the log rotated.
    let error = Log::open(dir.path(), options(key())).unwrap_err();
    assert!(error.to_string().contains("epoch 1"), "{error}");
    // A holder of the new key alone cannot move the rotation earlier: the
    // first frame of epoch 1 is also tagged with epoch 0's key.
    let only_new = TamperKey::from_seed([0x77; 32]);
    assert!(tamper::verify(dir.path(), Some(&only_new), None, None).is_err());
}

#[test]
fn a_torn_tail_of_a_tamper_evident_store_still_recovers_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    store(dir.path());
    let segment = segment_paths(dir.path())[0].clone();
    let end = common::data_end(&segment);
    // Half a frame written after the last one, never synced: a torn tail.
    let mut torn = Vec::new();
    format::encode_frame_with_trailer(
        &mut torn,
        EVENTS as u64 + 1,
        EVENTS as u64 + 1,
        0,
        &[b"half written".as_slice()],
        Some(&FrameTrailer {
            auth_lsn: EVENTS as u64 + 1,
            key_epoch: 0,
            reserved: 0,
            digest: [0; 32],
            tag: [0; 16],
        }),
    );
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes.truncate(end as usize);
    bytes.extend_from_slice(&torn[..torn.len() / 2]);
    std::fs::write(&segment, bytes).unwrap();
    let log = Log::open(dir.path(), options(key())).unwrap();
    assert!(log.recovery_report().torn_tail.is_some());
    log.append(&[payload(99)]).unwrap();
    let checkpoint = log.checkpoint().unwrap();
    drop(log);
    tamper::verify(dir.path(), Some(&key()), None, Some(&checkpoint)).unwrap();
}

#[test]
fn a_tamper_evident_log_verifies_across_segment_rolls_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let tamper = TamperOptions::new(key());
    let options = common::small_segments()
        .durability(Durability::None)
        .tamper(tamper);
    for round in 0..3 {
        let log = Log::open(dir.path(), options.clone()).unwrap();
        for index in 0..200 {
            let batch = [payload(index), format!("round {round}").into_bytes()];
            log.append(&batch).unwrap();
        }
    }
    assert!(segment_paths(dir.path()).len() > 3);
    let log = Log::open(dir.path(), options).unwrap();
    let checkpoint = log.checkpoint().unwrap();
    drop(log);
    let report = tamper::verify(dir.path(), Some(&key()), None, Some(&checkpoint)).unwrap();
    assert_eq!(report.frames_authenticated, 600);
    assert_eq!(checkpoint.lsn, 1200);
}

fn copy_store(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

fn restore(copy: &Path, store: &Path) {
    for path in segment_paths(store) {
        std::fs::remove_file(path).unwrap();
    }
    copy_store(copy, store);
}

#[test]
fn a_tamper_evident_conversation_store_snapshots_reopens_and_verifies() {
    use convlog::model::{ConversationEntry, Role};
    use convlog::store::StoreOptions;
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let head = outside.path().join("head");
    let options = || {
        StoreOptions::new().log(
            LogOptions::new().tamper(
                TamperOptions::new(key())
                    .checkpoint_path(&head)
                    .checkpoint_every_events(3),
            ),
        )
    };
    for round in 0..2u64 {
        let store = convlog::Store::open(dir.path(), options()).unwrap();
        for sequence in 0..4 {
            let entry =
                ConversationEntry::new("e", round * 4 + sequence, Role::User, Some("hi".into()));
            store.append(&[entry.recorded_in("c")]).unwrap();
        }
        store.snapshot().unwrap();
    }
    let store = convlog::Store::open(dir.path(), options()).unwrap();
    assert_eq!(store.conversation("c").unwrap().entries().count(), 8);
    drop(store);
    convlog::store::verify(dir.path(), &mut |_| {}).unwrap();
    let checkpoint = Checkpoint::load(&head).unwrap();
    assert_eq!(checkpoint.lsn, 6);
    tamper::verify(dir.path(), Some(&key()), None, Some(&checkpoint)).unwrap();
}

#[test]
fn a_store_signs_a_checkpoint_on_demand_publishes_it_and_calls_the_host() {
    use convlog::model::{ConversationEntry, Role};
    use convlog::store::StoreOptions;
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let head = outside.path().join("head");
    let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let recorder = std::sync::Arc::clone(&seen);
    let tamper = TamperOptions::new(key())
        .checkpoint_path(&head)
        .on_checkpoint(move |checkpoint| recorder.lock().push(checkpoint.lsn));
    let store = convlog::Store::open(dir.path(), StoreOptions::new().tamper(Some(tamper))).unwrap();
    assert!(store.is_tamper_evident());
    for sequence in 0..3 {
        let entry = ConversationEntry::new("e", sequence, Role::User, Some("hi".into()));
        store.append(&[entry.recorded_in("c")]).unwrap();
    }
    let checkpoint = store.checkpoint().unwrap();
    assert_eq!(checkpoint.lsn, 3);
    assert_eq!(*seen.lock(), vec![3]);
    assert_eq!(Checkpoint::load(&head).unwrap(), checkpoint);
    assert_eq!(key().public().check(&checkpoint), Ok(()));
    drop(store);
    tamper::verify(dir.path(), None, Some(&key().public()), Some(&checkpoint)).unwrap();

    // A read-only store cannot sign; a plain store has nothing to sign.
    let follower = convlog::Store::open_read_only(dir.path(), StoreOptions::new()).unwrap();
    assert!(!follower.is_tamper_evident());
    assert!(matches!(follower.checkpoint(), Err(Error::ReadOnly { .. })));
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = convlog::Store::open(plain_dir.path(), StoreOptions::new()).unwrap();
    match plain.checkpoint() {
        Err(Error::InvalidOption { reason, .. }) => {
            assert!(reason.contains("not tamper-evident"), "{reason}")
        }
        other => panic!("expected InvalidOption, got {other:?}"),
    }
}

/// A tamper-evident conversation store with one snapshot; returns the
/// snapshot file.
fn store_with_snapshot(dir: &Path) -> PathBuf {
    use convlog::model::{ConversationEntry, Role};
    let store = convlog::Store::open(dir, store_options()).unwrap();
    for sequence in 0..3 {
        let entry = ConversationEntry::new("e", sequence, Role::User, Some("secret plan".into()));
        store.append(&[entry.recorded_in("c")]).unwrap();
    }
    store.snapshot().unwrap().path
}

fn store_options() -> convlog::StoreOptions {
    convlog::StoreOptions::new().tamper(Some(TamperOptions::new(key())))
}

fn texts(store: &convlog::Store) -> Vec<String> {
    store
        .conversation("c")
        .unwrap()
        .entries()
        .filter_map(|entry| entry.content.clone())
        .collect()
}

/// Rewrites a snapshot as an attacker who knows the format would: every
/// "secret plan" in its slices becomes "benign talk", every checksum is
/// recomputed, and the writer's keyed tag is put back at the end.
fn edit_snapshot(dir: &Path, path: &Path) {
    use convlog::storage::FileSystem;
    use convlog::store::snapshot;
    let original = std::fs::read(path).unwrap();
    let tag = original[original.len() - tamper::SNAPSHOT_TAG_BYTES..].to_vec();
    let loaded = snapshot::load(&FileSystem, path).unwrap();
    let mut edited = 0;
    let blobs: Vec<(String, Vec<u8>)> = loaded
        .conversations
        .keys()
        .map(|id| {
            let mut blob = loaded.read_blob(id).unwrap().unwrap();
            for at in 0..blob.len().saturating_sub(10) {
                if &blob[at..at + 11] == b"secret plan" {
                    blob[at..at + 11].copy_from_slice(b"benign talk");
                    edited += 1;
                }
            }
            (id.clone(), blob)
        })
        .collect();
    assert!(edited > 0, "the slice holds the text");
    let host_slices = loaded.host_slices.clone().into_iter().collect();
    let written = snapshot::write(
        &FileSystem,
        dir,
        loaded.lsn,
        loaded.binding,
        loaded.last_frame_offset,
        blobs.into_iter().map(Ok),
        host_slices,
    )
    .unwrap();
    assert_eq!(written, path);
    let mut bytes = std::fs::read(path).unwrap();
    bytes.extend_from_slice(&tag);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn an_edited_snapshot_is_named_by_verify_and_ignored_by_an_open_with_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_with_snapshot(dir.path());
    tamper::verify(dir.path(), Some(&key()), None, None).unwrap();
    let report = tamper::verify(dir.path(), Some(&key()), None, None).unwrap();
    assert_eq!(report.snapshots_authenticated, 1);
    edit_snapshot(dir.path(), &path);

    // Every checksum holds: the ordinary checks pass, and a reader without
    // the key is served the edited text from the snapshot.
    convlog::store::verify(dir.path(), &mut |_| {}).unwrap();
    let blind = convlog::Store::open_read_only(dir.path(), convlog::StoreOptions::new()).unwrap();
    assert_eq!(texts(&blind), vec!["benign talk"; 3]);
    drop(blind);

    // With the key, verify names it.
    let (kind, lsn, file, detail) = tampering(dir.path(), None);
    assert_eq!(kind, TamperKind::SnapshotChanged);
    assert_eq!(lsn, 4);
    assert_eq!(file, path);
    assert!(detail.contains("keyed tag"), "{detail}");
    // The message names the file a snapshot, not a segment.
    let message = tamper::verify(dir.path(), Some(&key()), None, None)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains(&format!("(snapshot {}, offset ", path.display())),
        "{message}"
    );
    assert!(!message.contains("segment"), "{message}");

    // Opening with the key ignores it and replays the log: the true text.
    for read_only in [false, true] {
        let store = if read_only {
            convlog::Store::open_read_only(dir.path(), store_options()).unwrap()
        } else {
            convlog::Store::open(dir.path(), store_options()).unwrap()
        };
        assert_eq!(texts(&store), vec!["secret plan"; 3]);
        let skipped = &store.open_report().skipped_snapshots;
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert_eq!(skipped[0].0, path);
        assert!(skipped[0].1.contains("tampered"), "{:?}", skipped[0].1);
    }
}

#[test]
fn a_snapshot_without_its_tag_or_under_another_key_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_with_snapshot(dir.path());
    let original = std::fs::read(&path).unwrap();
    // The tag cut off: the file is a well-formed plain snapshot.
    std::fs::write(
        &path,
        &original[..original.len() - tamper::SNAPSHOT_TAG_BYTES],
    )
    .unwrap();
    let (kind, _, _, detail) = tampering(dir.path(), None);
    assert_eq!(kind, TamperKind::SnapshotChanged);
    assert!(detail.contains("carries no keyed tag"), "{detail}");
    // Tagged by another key: the tag of another tamper-evident store's
    // snapshot at the same LSN, with another key, put on this one.
    let other_dir = tempfile::tempdir().unwrap();
    let other_path = {
        use convlog::model::{ConversationEntry, Role};
        let options = convlog::StoreOptions::new()
            .tamper(Some(TamperOptions::new(TamperKey::from_seed([0x11; 32]))));
        let store = convlog::Store::open(other_dir.path(), options).unwrap();
        for sequence in 0..3 {
            let entry = ConversationEntry::new("e", sequence, Role::User, Some("x".into()));
            store.append(&[entry.recorded_in("c")]).unwrap();
        }
        store.snapshot().unwrap().path
    };
    let other = std::fs::read(other_path).unwrap();
    let mut forged = original[..original.len() - tamper::SNAPSHOT_TAG_BYTES].to_vec();
    forged.extend_from_slice(&other[other.len() - tamper::SNAPSHOT_TAG_BYTES..]);
    std::fs::write(&path, &forged).unwrap();
    let (kind, _, _, detail) = tampering(dir.path(), None);
    assert_eq!(kind, TamperKind::SnapshotChanged);
    assert!(detail.contains("does not authenticate"), "{detail}");
    // Put back, it verifies again.
    std::fs::write(&path, &original).unwrap();
    tamper::verify(dir.path(), Some(&key()), None, None).unwrap();
}

/// A tamper-evident segment of version 3 (development builds hashed its
/// chain and tags otherwise, `docs/format.md` 11) is refused, named, with
/// the way to copy its events, and left as it is: read with this build's
/// hashes, every frame would look tampered with.
#[test]
fn a_version_3_tamper_evident_segment_is_refused_not_reported_as_tampered() {
    let dir = tempfile::tempdir().unwrap();
    store(dir.path());
    let segment = segment_paths(dir.path())[0].clone();
    let mut bytes = std::fs::read(&segment).unwrap();
    assert_eq!(bytes[8..12], format::FORMAT_VERSION_KEYED.to_le_bytes());
    bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..SEGMENT_HEADER_BYTES - 4]);
    bytes[SEGMENT_HEADER_BYTES - 4..SEGMENT_HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&segment, &bytes).unwrap();

    let opened = Log::open(dir.path(), options(key())).map(|_| ());
    let verified = convlog::store::verify(dir.path(), &mut |_| {}).map(|_| ());
    for result in [opened, verified] {
        match result {
            Err(error @ Error::UnsupportedVersion { .. }) => {
                let Error::UnsupportedVersion {
                    version, supported, ..
                } = &error
                else {
                    unreachable!()
                };
                assert_eq!((*version, *supported), (3, format::FORMAT_VERSION_KEYED));
                let message = error.to_string();
                assert!(message.contains("version 3"), "{message}");
                assert!(message.contains("convlog dump"), "{message}");
            }
            other => panic!("expected UnsupportedVersion, got {other:?}"),
        }
    }
    let checked = tamper::verify(dir.path(), Some(&key()), None, None);
    assert!(
        matches!(checked, Err(Error::UnsupportedVersion { version: 3, .. })),
        "{checked:?}"
    );
    assert_eq!(std::fs::read(&segment).unwrap(), bytes, "left as it was");
}
