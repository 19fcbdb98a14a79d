//! The event codec on arbitrary bytes: never panics; a decoded event
//! encodes and decodes back to itself.
#![no_main]

use convlog::codec::{decode_event, encode_event};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(event) = decode_event(data) {
        let bytes = encode_event(&event);
        assert_eq!(decode_event(&bytes).expect("re-encoded event decodes"), event);
    }
});
