//! The record frame decoder on arbitrary bytes: never panics; a frame it
//! accepts is internally consistent.
#![no_main]

use convlog::log::format::{decode_frame, encode_frame, FrameDecode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let FrameDecode::Complete(frame) = decode_frame(data) {
        assert!(frame.size_bytes() <= data.len());
        let events: Vec<&[u8]> = frame.events().collect();
        assert_eq!(events.len(), frame.event_count as usize);
        // Re-encoding what was decoded gives the same bytes back.
        let mut again = Vec::new();
        let crc = encode_frame(&mut again, frame.first_lsn, frame.durable_lsn, frame.previous_crc, &events);
        assert_eq!(crc, frame.crc);
        assert_eq!(&again[..], &data[..frame.size_bytes()]);
    }
});
