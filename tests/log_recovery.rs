//! Recovery: torn tails are cut, damage is located, salvage keeps the prefix,
//! and stale bytes never come back as records.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use common::{data_end, read_all, segment_paths, small_segments};
use convlog::log::format::SEGMENT_HEADER_BYTES;
use convlog::log::{Durability, Log, LogOptions, LogReader, ReaderOptions};
use convlog::Error;
use proptest::prelude::*;

fn payload(index: usize) -> Vec<u8> {
    format!("event-{index}-").repeat(1 + index % 4).into_bytes()
}

/// Appends `count` single-event frames, each durable, and returns the end
/// offset of every frame in the (single) segment.
fn write_frames(dir: &Path, count: usize, durability: Durability) -> Vec<u64> {
    let log = Log::open(dir, LogOptions::default()).unwrap();
    for index in 0..count {
        log.append_with(&[payload(index)], durability).unwrap();
    }
    drop(log);
    let records = read_all(dir);
    let mut ends: Vec<u64> = records
        .iter()
        .skip(1)
        .map(|record| record.position.offset)
        .collect();
    ends.push(data_end(&segment_paths(dir)[0]));
    ends
}

fn copy_store(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.path().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

#[test]
fn truncating_the_last_record_at_every_byte_recovers_exactly_the_earlier_records() {
    let original = tempfile::tempdir().unwrap();
    let frame_ends = write_frames(original.path(), 6, Durability::Sync);
    let segment_name = segment_paths(original.path())[0]
        .file_name()
        .unwrap()
        .to_owned();
    let file_bytes = *frame_ends.last().unwrap();
    for cut in SEGMENT_HEADER_BYTES as u64..file_bytes {
        let dir = tempfile::tempdir().unwrap();
        copy_store(original.path(), dir.path());
        let segment = dir.path().join(&segment_name);
        OpenOptions::new()
            .write(true)
            .open(&segment)
            .unwrap()
            .set_len(cut)
            .unwrap();

        let whole_frames = frame_ends.iter().filter(|&&end| end <= cut).count();
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        let report = log.recovery_report().clone();
        let kept_bytes = frame_ends
            .iter()
            .copied()
            .filter(|&end| end <= cut)
            .max()
            .unwrap_or(SEGMENT_HEADER_BYTES as u64);
        // What the cut left of the torn frame: if it is only zero bytes (the
        // first byte of a frame, its checksum's lowest byte, is 0 in one
        // frame of 256: the segment's random salt seeds the chain), it
        // reads as the zeros of space allocated ahead (`docs/format.md`
        // 5.7), which recovery cuts without calling it torn.
        let original_bytes = std::fs::read(original.path().join(&segment_name)).unwrap();
        let left = &original_bytes[kept_bytes as usize..cut as usize];
        if cut == kept_bytes {
            assert_eq!(report.torn_tail, None, "cut {cut} is a frame boundary");
        } else if left.iter().all(|&byte| byte == 0) {
            assert_eq!(report.torn_tail, None, "cut {cut} left only zeros");
        } else {
            let torn = report.torn_tail.expect("a torn tail is reported");
            assert_eq!(torn.offset, kept_bytes, "cut {cut}");
            assert_eq!(torn.bytes_dropped, cut - kept_bytes, "cut {cut}");
        }
        assert_eq!(log.next_lsn(), whole_frames as u64 + 1, "cut {cut}");
        let records: Vec<Vec<u8>> = log
            .iter_from(1)
            .map(|record| record.unwrap().payload)
            .collect();
        let expected: Vec<Vec<u8>> = (0..whole_frames).map(payload).collect();
        assert_eq!(records, expected, "cut {cut}");
        // The file itself was cut, so a second recovery finds nothing to do.
        drop(log);
        assert_eq!(std::fs::metadata(&segment).unwrap().len(), kept_bytes);
        let again = Log::open(dir.path(), LogOptions::default()).unwrap();
        assert_eq!(again.recovery_report().torn_tail, None);
        assert_eq!(again.next_lsn(), whole_frames as u64 + 1);
    }
}

#[test]
fn appends_after_a_cut_tail_continue_the_lsn_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let frame_ends = write_frames(dir.path(), 3, Durability::Sync);
    let segment = &segment_paths(dir.path())[0];
    OpenOptions::new()
        .write(true)
        .open(segment)
        .unwrap()
        .set_len(frame_ends[2] - 3)
        .unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(log.append(&[b"after the crash"]).unwrap(), 3..4);
    drop(log);
    let records = read_all(dir.path());
    assert_eq!(
        records.iter().map(|record| record.lsn).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(records[2].payload, b"after the crash");
}

fn flip_bit(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x10;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_flipped_bit_in_a_sealed_segment_fails_open_with_segment_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = Log::open(dir.path(), small_segments()).unwrap();
        for index in 0..300 {
            log.append(&[payload(index)]).unwrap();
        }
    }
    let records = read_all(dir.path());
    let segments = segment_paths(dir.path());
    assert!(segments.len() >= 3, "test needs several segments");
    // Damage the third frame of the second segment.
    let second_first_lsn: u64 = segments[1]
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let damaged = records
        .iter()
        .filter(|record| record.position.segment == second_first_lsn)
        .nth(2)
        .unwrap()
        .clone();
    flip_bit(&segments[1], damaged.position.offset + 40);

    match Log::open(dir.path(), small_segments()) {
        Err(Error::Corrupted {
            segment,
            offset,
            reason,
        }) => {
            assert_eq!(segment, segments[1]);
            assert_eq!(offset, damaged.position.offset);
            assert!(reason.contains("checksum"), "reason: {reason}");
        }
        other => panic!("expected Corrupted, got {other:?}"),
    }
    // A reader reports the same location, never a damaged record.
    let read: Vec<_> = LogReader::open(dir.path()).unwrap().iter().collect();
    let error = read.last().unwrap().as_ref().unwrap_err();
    assert!(matches!(error, Error::Corrupted { offset, .. } if *offset == damaged.position.offset));
    assert_eq!(
        read.len() as u64,
        damaged.lsn,
        "every record before the damage, then the error"
    );
    assert!(matches!(
        convlog::log::verify(dir.path()),
        Err(Error::Corrupted { .. })
    ));

    // Salvage keeps every record before the damage and quarantines the rest.
    let salvage_reader =
        LogReader::open_with(dir.path(), ReaderOptions::new().salvage(true)).unwrap();
    assert_eq!(salvage_reader.iter().count() as u64, damaged.lsn - 1);
    let log = Log::open(dir.path(), small_segments().salvage(true)).unwrap();
    let salvage = log
        .recovery_report()
        .salvaged
        .clone()
        .expect("salvage report");
    assert_eq!(salvage.segment, segments[1]);
    assert_eq!(salvage.offset, damaged.position.offset);
    assert_eq!(
        salvage.quarantined.len(),
        segments.len() - 1,
        "damaged copy plus later segments"
    );
    assert!(salvage.quarantined.iter().all(|path| path.exists()));
    assert_eq!(log.next_lsn(), damaged.lsn);
    let kept: Vec<_> = log.iter_from(1).map(|record| record.unwrap()).collect();
    assert_eq!(kept, records[..(damaged.lsn - 1) as usize].to_vec());
    log.append(&[b"after salvage"]).unwrap();
    drop(log);
    assert_eq!(
        convlog::log::verify(dir.path()).unwrap().events,
        damaged.lsn
    );
}

#[test]
fn damage_in_the_last_segment_that_later_frames_prove_durable_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    // Under Sync, every frame's watermark covers all frames before it.
    write_frames(dir.path(), 5, Durability::Sync);
    let records = read_all(dir.path());
    let segment = &segment_paths(dir.path())[0];
    flip_bit(segment, records[1].position.offset + 36);
    match Log::open(dir.path(), LogOptions::default()) {
        Err(Error::Corrupted {
            segment: path,
            offset,
            ..
        }) => {
            assert_eq!(&path, segment);
            assert_eq!(offset, records[1].position.offset);
        }
        other => panic!("expected Corrupted, got {other:?}"),
    }
}

#[test]
fn damage_in_unsynced_frames_of_the_last_segment_is_a_torn_tail() {
    // A crash can persist later pages of an unsynced write before earlier
    // ones. Frames written without an fsync in between carry a watermark
    // that does not cover each other, so the hole is a torn tail.
    let dir = tempfile::tempdir().unwrap();
    write_frames(dir.path(), 5, Durability::None);
    let records = read_all(dir.path());
    let segment = &segment_paths(dir.path())[0];
    flip_bit(segment, records[2].position.offset + 36);
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let torn = log.recovery_report().torn_tail.clone().expect("torn tail");
    assert_eq!(torn.offset, records[2].position.offset);
    assert_eq!(log.next_lsn(), 3);
}

#[test]
fn zero_fill_and_garbage_after_the_last_record_never_come_back() {
    for tail in [
        vec![0u8; 4096],
        (0..3000u32).map(|byte| (byte * 7 % 251) as u8).collect(),
    ] {
        let dir = tempfile::tempdir().unwrap();
        write_frames(dir.path(), 4, Durability::Sync);
        let segment = &segment_paths(dir.path())[0];
        // Written right after the last frame, over whatever space the
        // writer had allocated there.
        let end = data_end(segment);
        std::os::unix::fs::FileExt::write_all_at(
            &OpenOptions::new().write(true).open(segment).unwrap(),
            &tail,
            end,
        )
        .unwrap();
        let length = std::fs::metadata(segment).unwrap().len();
        // A reader of the directory stops before the stale bytes.
        assert_eq!(read_all(dir.path()).len(), 4);
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        let torn = log.recovery_report().torn_tail.clone();
        if tail.iter().all(|&byte| byte == 0) {
            // Zeros after the frames are space allocated ahead and never
            // written: the log goes on in it, nothing is cut.
            assert_eq!(torn, None);
        } else {
            assert_eq!(torn.unwrap().bytes_dropped, length - end);
        }
        assert_eq!(log.next_lsn(), 5);
    }
}

#[test]
fn a_stale_frame_from_reused_space_is_not_taken_for_a_new_record() {
    // Write 4 frames, keep a copy of the file, cut back to 2 frames and append
    // 2 different ones; then paste the old bytes of frame 4 past the end, as
    // reused space would. The old frame has a valid checksum but a stale LSN.
    let dir = tempfile::tempdir().unwrap();
    let frame_ends = write_frames(dir.path(), 4, Durability::Sync);
    let segment = segment_paths(dir.path())[0].clone();
    let old = std::fs::read(&segment).unwrap();
    OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(frame_ends[1])
        .unwrap();
    {
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        log.append(&[b"new three"]).unwrap();
    }
    let stale_frame = &old[frame_ends[2] as usize..frame_ends[3] as usize];
    OpenOptions::new()
        .append(true)
        .open(&segment)
        .unwrap()
        .write_all(stale_frame)
        .unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    assert!(log.recovery_report().torn_tail.is_some());
    let payloads: Vec<Vec<u8>> = log
        .iter_from(1)
        .map(|record| record.unwrap().payload)
        .collect();
    assert_eq!(payloads, [payload(0), payload(1), b"new three".to_vec()]);
}

#[test]
fn leftover_temporary_segment_files_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    write_frames(dir.path(), 2, Durability::Sync);
    let leftover = dir.path().join("00000000000000000003.seg.tmp");
    std::fs::write(&leftover, b"half a header").unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(log.recovery_report().temporary_files_removed, 1);
    assert!(!leftover.exists());
    assert_eq!(log.next_lsn(), 3);
}

#[test]
fn a_missing_middle_segment_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = Log::open(dir.path(), small_segments()).unwrap();
        for index in 0..300 {
            log.append(&[payload(index)]).unwrap();
        }
    }
    let segments = segment_paths(dir.path());
    std::fs::remove_file(&segments[1]).unwrap();
    match Log::open(dir.path(), small_segments()) {
        Err(Error::Corrupted {
            segment, reason, ..
        }) => {
            assert_eq!(segment, segments[0]);
            assert!(reason.contains("next segment starts"), "reason: {reason}");
        }
        other => panic!("expected Corrupted, got {other:?}"),
    }
}

#[derive(Debug, Clone)]
enum Crash {
    /// Cut the last segment to this fraction of its length (per mille).
    Truncate(u16),
    /// Append zeros.
    ZeroTail(u16),
    /// Cut, then append garbage.
    TruncateThenGarbage(u16, Vec<u8>),
}

fn crash_strategy() -> impl Strategy<Value = Crash> {
    prop_oneof![
        (0u16..=1000).prop_map(Crash::Truncate),
        (1u16..2000).prop_map(Crash::ZeroTail),
        (
            (0u16..=1000),
            proptest::collection::vec(any::<u8>(), 1..200)
        )
            .prop_map(|(cut, garbage)| Crash::TruncateThenGarbage(cut, garbage)),
    ]
}

fn batches_strategy() -> impl Strategy<Value = Vec<Vec<Vec<u8>>>> {
    let event = proptest::collection::vec(any::<u8>(), 0..300);
    proptest::collection::vec(proptest::collection::vec(event, 1..6), 1..40)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random batches, a random crash that damages only the unsynced end:
    /// what recovery keeps is a prefix of what was appended, in whole batches,
    /// and includes every batch that ended before the damage.
    #[test]
    fn recovery_keeps_a_prefix_of_whole_batches(batches in batches_strategy(), crash in crash_strategy()) {
        let dir = tempfile::tempdir().unwrap();
        {
            let log = Log::open(dir.path(), small_segments()).unwrap();
            for batch in &batches {
                log.append_with(batch, Durability::None).unwrap();
            }
        }
        let records = read_all(dir.path());
        let last = segment_paths(dir.path()).pop().unwrap();
        let length = data_end(&last);
        let frames_region = length - SEGMENT_HEADER_BYTES as u64;
        let cut_at = |per_mille: u16| SEGMENT_HEADER_BYTES as u64 + frames_region * u64::from(per_mille) / 1000;
        let (cut, tail): (u64, Vec<u8>) = match &crash {
            Crash::Truncate(per_mille) => (cut_at(*per_mille), Vec::new()),
            Crash::ZeroTail(count) => (length, vec![0; usize::from(*count)]),
            Crash::TruncateThenGarbage(per_mille, garbage) => (cut_at(*per_mille), garbage.clone()),
        };
        let file = OpenOptions::new().write(true).open(&last).unwrap();
        file.set_len(cut).unwrap();
        drop(file);
        OpenOptions::new().append(true).open(&last).unwrap().write_all(&tail).unwrap();

        let last_first_lsn: u64 = last.file_stem().unwrap().to_str().unwrap().parse().unwrap();
        let log = Log::open(dir.path(), small_segments()).unwrap();
        let recovered: Vec<_> = log.iter_from(1).map(|record| record.unwrap()).collect();
        // A prefix, record for record.
        prop_assert!(recovered.len() <= records.len());
        prop_assert_eq!(&recovered[..], &records[..recovered.len()]);
        // Whole batches only.
        let mut boundaries = vec![0usize];
        for batch in &batches {
            boundaries.push(boundaries.last().unwrap() + batch.len());
        }
        prop_assert!(boundaries.contains(&recovered.len()), "{} is not a batch boundary", recovered.len());
        // Nothing before the damage was lost: every frame that ends at or
        // before the cut survives.
        let survivors = records.iter().filter(|record| {
            record.position.segment < last_first_lsn || {
                let next_frame = records
                    .iter()
                    .find(|later| later.position.segment == record.position.segment && later.position.offset > record.position.offset)
                    .map_or(length, |later| later.position.offset);
                next_frame <= cut
            }
        }).count();
        prop_assert_eq!(recovered.len(), survivors);
        prop_assert_eq!(log.next_lsn(), recovered.len() as u64 + 1);
    }
}

#[test]
fn a_segment_of_another_format_version_is_refused_and_never_salvaged() {
    let dir = tempfile::tempdir().unwrap();
    write_frames(dir.path(), 2, Durability::Sync);
    let segment = segment_paths(dir.path())[0].clone();
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[8..12].copy_from_slice(&(convlog::log::format::FORMAT_VERSION + 1).to_le_bytes());
    std::fs::write(&segment, &bytes).unwrap();
    let salvage = LogOptions::new().salvage(true);
    match Log::open(dir.path(), salvage) {
        Err(Error::UnsupportedVersion {
            path,
            version,
            supported,
        }) => {
            assert_eq!(path, segment);
            let supported_now = convlog::log::format::FORMAT_VERSION;
            assert_eq!((version, supported), (supported_now + 1, supported_now));
        }
        other => panic!("expected UnsupportedVersion, got {other:?}"),
    }
    assert_eq!(
        std::fs::read(&segment).unwrap(),
        bytes,
        "the file was left as it was"
    );
    assert!(!dir.path().join("quarantine").exists());
}
