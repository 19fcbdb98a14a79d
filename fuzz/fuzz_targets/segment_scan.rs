//! Segment recovery's scan on arbitrary bytes, as a sealed and as a last
//! segment: never panics, and what it calls valid really is.
#![no_main]

use convlog::log::recovery::{scan_segment, ScanEnd};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for last in [false, true] {
        if let Ok(scan) = scan_segment(data, last) {
            assert!(scan.valid_bytes as usize <= data.len());
            assert!(scan.next_lsn >= scan.first_lsn);
            if scan.end == ScanEnd::Clean {
                assert_eq!(scan.valid_bytes as usize, data.len());
            }
            if !last {
                assert!(!matches!(scan.end, ScanEnd::Torn { .. }), "a sealed segment never has a torn tail");
                assert!(!matches!(scan.end, ScanEnd::Unused { .. }), "a sealed segment ends at its data");
            }
            if let ScanEnd::Unused { offset } = scan.end {
                assert_eq!(offset, scan.valid_bytes);
                assert!(data[offset as usize..].iter().all(|&byte| byte == 0), "unused space is zeros");
            }
            // The valid prefix scans clean on its own.
            let prefix = scan_segment(&data[..scan.valid_bytes as usize], last).expect("header was valid");
            assert_eq!(prefix.end, ScanEnd::Clean);
            assert_eq!(prefix.next_lsn, scan.next_lsn);
        }
    }
});
