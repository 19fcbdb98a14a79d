//! The record frame decoder on arbitrary bytes: never panics; a frame it
//! accepts is internally consistent.
#![no_main]

use convlog::log::format::{decode_frame, encode_frame_with_trailer, FrameDecode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let FrameDecode::Complete(frame) = decode_frame(data) {
        assert!(frame.size_bytes() <= data.len());
        let events: Vec<&[u8]> = frame.events().collect();
        assert_eq!(events.len(), frame.event_count as usize);
        // Re-encoding what was decoded (with its trailer, if the frame is
        // a tamper-evident one) gives the same bytes back.
        assert!(frame.trailer_bytes.is_empty() || frame.trailer().is_some());
        let trailer = frame.trailer();
        let mut again = Vec::new();
        let crc = encode_frame_with_trailer(
            &mut again,
            frame.first_lsn,
            frame.durable_lsn,
            frame.previous_crc,
            &events,
            trailer.as_ref(),
        );
        assert_eq!(crc, frame.crc);
        assert_eq!(&again[..], &data[..frame.size_bytes()]);
    }
});
