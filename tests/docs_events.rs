//! `docs/events.md` cannot rot: every JSON example in it goes through the
//! real parser (`convlog::json`), each event type has its section and at
//! least one example, and every example survives a write and a re-read.

use convlog::json::{self, EVENT_TYPES};
use convlog::model::Timestamp;
use convlog::Event;

const EVENTS_MD: &str = include_str!("../docs/events.md");

/// The body of every ```json block, with the line it starts on.
fn json_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (index, line) in markdown.lines().enumerate() {
        let fence = line.trim_start();
        match &mut current {
            None if fence.starts_with("```json") => current = Some((index + 2, String::new())),
            None => {}
            Some(_) if fence.starts_with("```") => blocks.extend(current.take()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    assert!(
        current.is_none(),
        "docs/events.md: a ```json block is not closed"
    );
    blocks
}

fn parse(line_number: usize, text: &str) -> Vec<Event> {
    json::parse_line(line_number as u64, text, &mut |_, _| Ok(0))
        .unwrap_or_else(|error| panic!("docs/events.md line {line_number}: {error}\n{text}"))
}

#[test]
fn every_example_is_accepted_by_the_parser() {
    let blocks = json_blocks(EVENTS_MD);
    assert!(blocks.len() >= 10, "found only {} examples", blocks.len());
    for (line, body) in &blocks {
        let events = parse(*line, body);
        assert!(
            !events.is_empty(),
            "line {line}: the example holds no event"
        );
        // The examples are spread over lines to be read; on one line, as
        // `convlog append` reads them, they mean the same.
        let one_line = body.replace('\n', " ");
        assert_eq!(parse(*line, &one_line).len(), events.len(), "line {line}");
    }
}

#[test]
fn every_event_type_has_a_section_and_an_example() {
    let blocks = json_blocks(EVENTS_MD);
    let mut examples: Vec<&'static str> = Vec::new();
    for (line, body) in &blocks {
        examples.extend(parse(*line, body).iter().map(Event::type_name));
    }
    for type_name in EVENT_TYPES {
        assert!(
            EVENTS_MD.contains(&format!("\n## `{type_name}`\n")),
            "docs/events.md has no section `## `{type_name}``"
        );
        assert!(
            examples.contains(&type_name),
            "docs/events.md has no example of {type_name}"
        );
    }
}

#[test]
fn every_example_round_trips_through_the_output_form() {
    for (line, body) in json_blocks(EVENTS_MD) {
        for event in parse(line, &body) {
            let written = json::to_json_line(1, &event).unwrap();
            let again = json::parse_line_at(1, &written, Timestamp(0), &mut |_, _| {
                panic!("a written event has every sequence")
            })
            .unwrap_or_else(|error| panic!("line {line}: {error}\n{written}"));
            assert_eq!(again, vec![event], "line {line}");
        }
    }
}

/// `n` with a comma between thousands, as the page writes numbers.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[test]
fn every_documented_limit_is_the_one_in_the_code() {
    use convlog::log::format::{BATCH_BYTES_MAX, BATCH_EVENTS_MAX, EVENT_BYTES_MAX};
    use convlog::model::{
        ID_BYTES_MAX, LABEL_BYTES_MAX, METADATA_ENTRIES_MAX, REPLACED_ENTRIES_MAX, SEQUENCE_MAX,
        TEXT_BYTES_MAX, TOOL_CALLS_MAX, TURN_MAX,
    };
    const MIB: usize = 1024 * 1024;
    let documented = [
        format!("1 to {ID_BYTES_MAX} bytes of UTF-8 (`ID_BYTES_MAX`)"),
        format!("at most {} MiB (`TEXT_BYTES_MAX`)", TEXT_BYTES_MAX / MIB),
        format!("at most {} KiB (`LABEL_BYTES_MAX`)", LABEL_BYTES_MAX / 1024),
        format!("at most {} (`TOOL_CALLS_MAX`)", thousands(TOOL_CALLS_MAX)),
        format!("at most {METADATA_ENTRIES_MAX} pairs (`METADATA_ENTRIES_MAX`)"),
        format!(
            "at most {} (`REPLACED_ENTRIES_MAX`)",
            thousands(REPLACED_ENTRIES_MAX)
        ),
        format!(
            "at most {} events (`BATCH_EVENTS_MAX`)",
            thousands(BATCH_EVENTS_MAX)
        ),
        format!(
            "{} MiB of encoded events (`BATCH_BYTES_MAX`)",
            BATCH_BYTES_MAX / MIB
        ),
        format!(
            "at most {} MiB encoded (`EVENT_BYTES_MAX`)",
            EVENT_BYTES_MAX / MIB
        ),
    ];
    // The page wraps its lines; compare with single spaces.
    let page = EVENTS_MD.split_whitespace().collect::<Vec<_>>().join(" ");
    for text in documented {
        assert!(page.contains(&text), "docs/events.md lacks {text:?}");
    }
    assert_eq!(SEQUENCE_MAX, (1 << 53) - 1);
    assert!(page.contains("2^53 - 1 (`SEQUENCE_MAX`"));
    assert_eq!(u64::from(TURN_MAX), (1 << 31) - 1);
    assert!(page.contains("2^31 - 1 (`TURN_MAX`)"));
}
