//! Model-based: random appends (single and batch), syncs, crashes that cut
//! or garble the unsynced tail, and reopens, compared with an in-memory list.
//! After every reopen the log must hold every durably acknowledged event and
//! be a prefix of what was appended, in whole batches.
#![no_main]

use convlog::log::{Durability, Log, LogOptions};
use libfuzzer_sys::fuzz_target;

fn options() -> LogOptions {
    LogOptions::new().segment_bytes_max(4096)
}

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir_in(std::env::var_os("CONVLOG_FUZZ_TMP").unwrap_or_else(|| "/dev/shm".into()))
        .or_else(|_| tempfile::tempdir())
        .expect("temporary directory");
    let mut appended: Vec<Vec<u8>> = Vec::new();
    let mut batch_ends: Vec<usize> = vec![0];
    let mut durable = 0usize;
    let mut log = Some(Log::open(dir.path(), options()).expect("open"));
    let mut bytes = data.iter().copied();
    while let Some(op) = bytes.next() {
        let argument = bytes.next().unwrap_or(0);
        match op % 6 {
            0 | 1 => {
                let count = 1 + usize::from(argument % 4);
                let batch: Vec<Vec<u8>> = (0..count)
                    .map(|index| vec![argument.wrapping_add(index as u8); usize::from(argument) * 3])
                    .collect();
                let durability = if op % 6 == 0 { Durability::Sync } else { Durability::None };
                let lsns = log.as_ref().expect("open").append_with(&batch, durability).expect("append");
                assert_eq!(lsns.start as usize, appended.len() + 1);
                appended.extend(batch);
                batch_ends.push(appended.len());
                if durability == Durability::Sync {
                    durable = appended.len();
                }
            }
            2 => {
                log.as_ref().expect("open").sync().expect("sync");
                durable = appended.len();
            }
            3 | 4 => {
                // Crash: drop the writer without a final sync being relied
                // on, then damage the unsynced end of the last segment.
                drop(log.take());
                let mut segments: Vec<_> = std::fs::read_dir(dir.path())
                    .expect("list")
                    .map(|entry| entry.expect("entry").path())
                    .filter(|path| path.extension().is_some_and(|extension| extension == "seg"))
                    .collect();
                segments.sort();
                let last = segments.last().expect("a segment");
                let mut content = std::fs::read(last).expect("read");
                // Only bytes past the durable end may be damaged; find where
                // the first not-yet-durable record starts.
                let reader = convlog::log::LogReader::open(dir.path()).expect("reader");
                let first_unsynced = reader
                    .iter_from(durable as u64 + 1)
                    .next()
                    .and_then(Result::ok)
                    .filter(|record| record.position.segment == last.file_stem().and_then(|s| s.to_str()).and_then(|s| s.parse().ok()).unwrap_or(0))
                    .map(|record| record.position.offset as usize);
                if let Some(start) = first_unsynced {
                    let cut = start + usize::from(argument) * 7 % (content.len() - start + 1);
                    content.truncate(cut);
                    if op % 6 == 4 {
                        content.extend(std::iter::repeat_n(argument, usize::from(argument)));
                    }
                    std::fs::write(last, &content).expect("write");
                }
                log = Some(Log::open(dir.path(), options()).expect("reopen after crash"));
                let recovered: Vec<Vec<u8>> = log
                    .as_ref()
                    .expect("open")
                    .iter_from(1)
                    .map(|record| record.expect("no corrupt record is returned").payload)
                    .collect();
                assert!(recovered.len() >= durable, "lost a durable event");
                assert!(recovered.len() <= appended.len());
                assert_eq!(&recovered[..], &appended[..recovered.len()], "not a prefix");
                assert!(batch_ends.contains(&recovered.len()), "a batch was cut");
                appended.truncate(recovered.len());
                batch_ends.retain(|end| *end <= recovered.len());
                durable = recovered.len();
            }
            _ => {
                drop(log.take());
                log = Some(Log::open(dir.path(), options()).expect("reopen"));
                assert_eq!(log.as_ref().expect("open").next_lsn() as usize, appended.len() + 1);
                durable = appended.len();
            }
        }
    }
});
