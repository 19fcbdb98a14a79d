//! The event codec on arbitrary bytes: never panics; a decoded event
//! encodes and decodes back to itself; and `peek_conversation_id`, which
//! decodes only the head of the body, gives the decoded event's
//! conversation id whenever the payload decodes.
#![no_main]

use convlog::codec::{decode_event, encode_event, peek_conversation_id};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let peeked = peek_conversation_id(data);
    if let Ok(event) = decode_event(data) {
        assert_eq!(
            peeked,
            event.conversation_id(),
            "peek and decode disagree about the conversation"
        );
        let bytes = encode_event(&event);
        assert_eq!(
            decode_event(&bytes).expect("re-encoded event decodes"),
            event
        );
        assert_eq!(peek_conversation_id(&bytes), event.conversation_id());
    }
});
