//! The JSON event input on arbitrary text: never panics; what it accepts
//! validates, and prints back to JSON that parses to the same events.
#![no_main]

use convlog::json::{parse_line_at, to_json_line};
use convlog::model::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut next = |_: &str, _: &str| Ok(0);
    if let Ok(events) = parse_line_at(1, text, Timestamp(1_000_000), &mut next) {
        for event in &events {
            event.validate().expect("accepted events are valid");
            let line = to_json_line(7, event).expect("an accepted event prints");
            let again = parse_line_at(1, &line, Timestamp(1_000_000), &mut next).expect("printed event parses");
            assert_eq!(&again, std::slice::from_ref(event));
        }
    }
});
