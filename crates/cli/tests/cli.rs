//! Black-box tests of the `convlog` binary: JSON lines in, LSNs and JSON
//! lines out, located errors, exit codes 0 / 1 / 2.

use std::path::{Path, PathBuf};
use std::process::Output;

use convlog::log::LogOptions;
use convlog::model::{ConversationEntry, ConversationRecorded, Role, Timestamp};
use convlog::{Event, Store, StoreOptions};
use serde_json::Value;

mod common;

use common::{path_arg as path, run_convlog as run, stderr, stdout};

/// `convlog append STORE` of these lines; asserts nothing.
fn append(store: &Path, lines: &[&str]) -> Output {
    let mut input = lines.join("\n");
    input.push('\n');
    run(&["append", path(store)], input.as_bytes())
}

/// `convlog dump STORE ARGS`, which must succeed, parsed line by line.
fn dump(store: &Path, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["dump", path(store)];
    all.extend_from_slice(args);
    let output = run(&all, b"");
    assert_eq!(output.status.code(), Some(0), "dump: {}", stderr(&output));
    stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).expect("dump prints JSON lines"))
        .collect()
}

fn user(conversation: &str, evaluation: &str, content: &str) -> String {
    format!(
        r#"{{"type":"conversation_recorded","conversation_id":"{conversation}","entry":{{"evaluation_id":"{evaluation}","role":"user","content":"{content}"}}}}"#
    )
}

fn lsns(output: &Output) -> Vec<u64> {
    stdout(output)
        .lines()
        .map(|line| line.parse().expect("append prints one LSN per line"))
        .collect()
}

fn contents(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|event| event["entry"]["content"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn append_prints_gap_free_lsns_and_skips_empty_lines() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let output = append(
        &store,
        &[
            &user("c1", "e1", "one"),
            "",
            "   ",
            &user("c1", "e1", "two"),
            &user("c2", "e1", "three"),
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(lsns(&output), [1, 2, 3]);
    assert_eq!(stderr(&output), "");
    let output = append(&store, &[&user("c1", "e1", "four")]);
    assert_eq!(lsns(&output), [4], "a second run continues the log");
}

#[test]
fn a_batch_array_gets_consecutive_lsns() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let batch = format!(
        "[{},{},{}]",
        user("c1", "e1", "b1"),
        user("c1", "e1", "b2"),
        user("c2", "e1", "b3")
    );
    let output = append(
        &store,
        &[
            &user("c1", "e1", "first"),
            &batch,
            &user("c1", "e1", "last"),
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(lsns(&output), [1, 2, 3, 4, 5]);
    let events = dump(&store, &[]);
    assert_eq!(contents(&events), ["first", "b1", "b2", "b3", "last"]);
    let printed: Vec<u64> = events
        .iter()
        .map(|event| event["lsn"].as_u64().unwrap())
        .collect();
    assert_eq!(printed, [1, 2, 3, 4, 5]);
}

#[test]
fn a_bad_line_is_reported_with_line_and_field_and_not_appended() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let long_id = "x".repeat(convlog::model::ID_BYTES_MAX + 1);
    let mut input = [
        user("c1", "e1", "good-1"),
        r#"{"type":"conversation_recorded","conversation_id":"c1","entry":{"evaluation_id":"e1","role":"robot"}}"#.to_string(),
        user("c1", "e1", "good-3"),
        r#"{"type":"conversation_recorded","entry":{"evaluation_id":"e1","role":"user"}}"#.to_string(),
        r#"{"type":"conversation_recorded", "conversation_id": "#.to_string(),
        user(&long_id, "e1", "too long"),
        r#"[{"type":"custom","kind":"k","payload":""},{"type":"tool_status","conversation_id":"c1","evaluation_id":"e1","call_id":"k","status":"done"}]"#.to_string(),
        user("c1", "e1", "good-8"),
    ]
    .join("\n")
    .into_bytes();
    input.extend_from_slice(b"\n{\"type\":\"custom\",\"kind\":\"\xff\"}\n");
    input.extend_from_slice(user("c1", "e1", "good-10").as_bytes());
    let output = run(&["append", path(&store)], &input);
    let errors = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{errors}");
    for expected in [
        "convlog: error: line 2: entry.role: unknown variant `robot`",
        "convlog: error: line 4: conversation_id: missing",
        "convlog: error: line 5: invalid JSON at column",
        "convlog: error: line 6: conversation_id: must be 1 to 256 bytes",
        "convlog: error: line 7: [1].status: unknown variant `done`",
        "convlog: error: line 9: not UTF-8",
        "6 line(s) rejected and not appended (lines 2, 4, 5, 6, 7, 9)",
    ] {
        assert!(
            errors.contains(expected),
            "stderr lacks {expected:?}:\n{errors}"
        );
    }
    assert_eq!(lsns(&output), [1, 2, 3, 4]);
    let events = dump(&store, &[]);
    assert_eq!(contents(&events), ["good-1", "good-3", "good-8", "good-10"]);
}

#[test]
fn omitted_message_id_sequence_and_created_at_are_filled() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let explicit = r#"{"type":"conversation_recorded","conversation_id":"c1","entry":{"evaluation_id":"a","role":"user","sequence":10}}"#;
    let output = append(
        &store,
        &[
            &user("c1", "a", "s0"),
            &user("c1", "a", "s1"),
            &format!("[{},{}]", user("c1", "a", "s2"), user("c1", "b", "other-0")),
            explicit,
            &user("c1", "a", "s11"),
            &user("c2", "a", "new conversation"),
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let output = append(
        &store,
        &[&user("c1", "a", "next run"), &user("c1", "b", "other-1")],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));

    let events = dump(&store, &[]);
    let sequences: Vec<u64> = events
        .iter()
        .map(|event| event["entry"]["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, [0, 1, 2, 0, 10, 11, 0, 12, 1]);
    let mut ids: Vec<&str> = events
        .iter()
        .map(|event| event["entry"]["message_id"].as_str().unwrap())
        .collect();
    for id in &ids {
        assert_eq!(uuid::Uuid::parse_str(id).unwrap().get_version_num(), 4);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), events.len(), "every message gets its own id");
    for event in &events {
        for time in [&event["created_at"], &event["entry"]["created_at"]] {
            let time = time.as_str().expect("created_at is filled");
            let parsed = Timestamp::parse_rfc3339(time).unwrap();
            assert!(parsed.0 > 1_700_000_000_000_000, "{time} is about now");
        }
    }
}

#[test]
fn dump_round_trips_what_append_stored() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    let second = dir.path().join("second");
    let lines = [
        r#"{"type":"conversation_recorded","conversation_id":"ctx_123","session_id":"s1","entry":{"evaluation_id":"eval-7","turn":1,"role":"assistant","content":"Let me look that up.","reasoning":{"text":"need two lookups","signature":"EqQBCkYIBx...","redacted":false},"tool_calls":[{"call_id":"call_1","name":"search","arguments":"{\"q\":\"paris\"}","status":"pending"},{"call_id":"call_2","name":"search","arguments":"not json","status":"pending"}],"finish_reason":"tool_calls","prompt_ns":"travel","prompt_key":"planner","metadata":{"k":"v"}}}"#,
        r#"{"type":"tool_status","conversation_id":"ctx_123","evaluation_id":"eval-7","call_id":"call_1","status":"running"}"#,
        r#"{"type":"conversation_recorded","conversation_id":"ctx_123","entry":{"evaluation_id":"eval-7","role":"tool","tool_call_id":"call_1","tool_name":"search","content":"Paris: 18C","is_error":false}}"#,
        r#"{"type":"history_curated","conversation_id":"ctx_123","strategy":"sliding_window(50)","original_count":3,"curated_count":2}"#,
        r#"{"type":"messages_replaced","conversation_id":"ctx_9","entries":[{"evaluation_id":"e","role":"system","content":"be brief"}]}"#,
        r#"{"type":"custom","kind":"budget","conversation_id":null,"payload":"AAEC/w=="}"#,
    ];
    let output = append(&first, &lines);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let dumped = run(&["dump", path(&first)], b"");
    assert_eq!(dumped.status.code(), Some(0), "{}", stderr(&dumped));
    let output = run(&["append", path(&second)], &dumped.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(lsns(&output), [1, 2, 3, 4, 5, 6]);
    let again = run(&["dump", path(&second)], b"");
    assert_eq!(
        stdout(&again),
        stdout(&dumped),
        "dump | append | dump is the identity"
    );
    let events = dump(&first, &[]);
    assert_eq!(events[5]["payload"], "AAEC/w==");
    assert_eq!(events[0]["entry"]["tool_calls"][1]["arguments"], "not json");
}

#[test]
fn dump_filters_by_conversation_and_starts_at_from() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let output = append(
        &store,
        &[
            &user("c1", "e", "a"),
            &user("c2", "e", "b"),
            &user("c1", "e", "c"),
            r#"{"type":"custom","kind":"k","payload":""}"#,
            &user("c2", "e", "d"),
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let only = dump(&store, &["--conversation", "c2"]);
    assert_eq!(contents(&only), ["b", "d"]);
    assert!(only.iter().all(|event| event["conversation_id"] == "c2"));
    let from = dump(&store, &["--from", "3"]);
    let printed: Vec<u64> = from
        .iter()
        .map(|event| event["lsn"].as_u64().unwrap())
        .collect();
    assert_eq!(printed, [3, 4, 5]);
    assert!(dump(&store, &["--conversation", "nobody"]).is_empty());
    assert!(dump(&store, &["--from", "99"]).is_empty());
}

/// A store written by the library with 4 KiB segments: several sealed ones.
fn small_segment_store(dir: &Path, events: usize) -> Vec<PathBuf> {
    let options = StoreOptions::new().segment_bytes_max(4096);
    let store = Store::open(dir, options).unwrap();
    for index in 0..events {
        let entry = ConversationEntry::new(
            "eval-1",
            index as u64,
            Role::User,
            Some(format!("message {index}: {}", "lorem ipsum ".repeat(20))),
        );
        let event = Event::ConversationRecorded(Box::new(ConversationRecorded {
            conversation_id: format!("ctx_{}", index % 3),
            session_id: None,
            created_at: Timestamp::now(),
            entry,
        }));
        store.append(&[event]).unwrap();
    }
    drop(store);
    segments(dir)
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "seg"))
        .collect();
    segments.sort();
    segments
}

#[test]
fn verify_passes_a_good_store_and_locates_a_flipped_byte() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let files = small_segment_store(&store, 60);
    assert!(files.len() >= 3, "small segments roll: {files:?}");

    let output = run(&["verify", path(&store)], b"");
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(report.contains("events           60"), "{report}");
    assert!(report.contains("LSN range        1..=60"), "{report}");
    assert!(report.contains("conversations    3"), "{report}");
    assert!(
        report.contains(&format!("segments         {}", files.len())),
        "{report}"
    );
    assert!(report.contains("result           ok"), "{report}");

    let sealed = &files[0];
    let mut bytes = std::fs::read(sealed).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(sealed, &bytes).unwrap();
    let output = run(&["verify", path(&store)], b"");
    let errors = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{errors}");
    let name = sealed.file_name().unwrap().to_str().unwrap();
    assert!(errors.starts_with("convlog: error: "), "{errors}");
    assert!(errors.contains(name), "names the segment: {errors}");
    assert!(errors.contains("offset"), "names the offset: {errors}");
}

#[test]
fn snapshot_then_stats_and_verify_show_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let output = append(
        &store,
        &[
            &user("c1", "e", "a"),
            &user("c2", "e", "b"),
            &user("c1", "e", "c"),
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));

    let stats = run(&["stats", path(&store)], b"");
    assert_eq!(stats.status.code(), Some(0), "{}", stderr(&stats));
    assert!(
        stdout(&stats).contains("snapshot LSN     none"),
        "{}",
        stdout(&stats)
    );

    let output = run(&["snapshot", path(&store)], b"");
    let printed = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(printed.contains("lsn              4 "), "{printed}");
    assert!(printed.contains("conversations    2"), "{printed}");
    assert!(printed.contains(".snap"), "{printed}");

    let stats = run(&["stats", path(&store)], b"");
    let printed = stdout(&stats);
    assert_eq!(stats.status.code(), Some(0), "{}", stderr(&stats));
    for expected in [
        "snapshot LSN     4",
        "LSN range        1..=3",
        "events           3",
        "conversations    2",
        "segments         1 (",
        "index            ",
        "bytes per event  ",
    ] {
        assert!(
            printed.contains(expected),
            "stats lacks {expected:?}:\n{printed}"
        );
    }

    let verify = run(&["verify", path(&store)], b"");
    let printed = stdout(&verify);
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
    assert!(
        printed.contains("LSN 4, 2 conversation(s), ok"),
        "{printed}"
    );
}

#[test]
fn compact_deletes_only_with_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let before = small_segment_store(&store, 60);
    let output = run(&["snapshot", path(&store)], b"");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));

    let output = run(&["compact", path(&store)], b"");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("removed          nothing: "),
        "{}",
        stdout(&output)
    );
    assert!(
        stdout(&output).contains("--delete-covered"),
        "{}",
        stdout(&output)
    );
    assert_eq!(segments(&store), before);

    let output = run(&["compact", path(&store), "--delete-covered"], b"");
    let printed = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let after = segments(&store);
    assert!(after.len() < before.len(), "{printed}");
    let removed = before.len() - after.len();
    assert!(
        printed.contains(&format!("removed          {removed} segment(s)")),
        "{printed}"
    );
    assert!(
        printed.contains(before[0].file_name().unwrap().to_str().unwrap()),
        "{printed}"
    );

    // What is left still dumps and verifies.
    let events = dump(&store, &[]);
    assert_eq!(events.last().unwrap()["lsn"], 60);
    let verify = run(&["verify", path(&store)], b"");
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
}

#[test]
fn dump_reads_while_a_writer_holds_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    small_segment_store(&store, 5);
    let writer = Store::open(&store, StoreOptions::default()).unwrap();
    assert_eq!(dump(&store, &[]).len(), 5);
    // stats, resume and export open the store read-only beside the writer,
    // and see what it appends meanwhile.
    let stats = run(&["stats", path(&store)], b"");
    assert_eq!(stats.status.code(), Some(0), "{}", stderr(&stats));
    assert!(stdout(&stats).contains("1..=5"), "{}", stdout(&stats));
    let ids: Vec<String> = dump(&store, &[])
        .iter()
        .filter_map(|event| event["conversation_id"].as_str().map(str::to_string))
        .collect();
    let conversation = ids.first().expect("the store has a conversation").clone();
    let resume = run(
        &["resume", path(&store), "--conversation", &conversation],
        b"",
    );
    assert_eq!(resume.status.code(), Some(0), "{}", stderr(&resume));
    let export = |format: &str| {
        run(
            &[
                "export",
                path(&store),
                "--conversation",
                &conversation,
                "--format",
                format,
            ],
            b"",
        )
    };
    let before = export("jsonl");
    assert_eq!(before.status.code(), Some(0), "{}", stderr(&before));
    writer
        .append(&[convlog::model::ConversationEntry::new(
            "eval-late",
            1,
            convlog::model::Role::User,
            Some("appended while the reader runs".into()),
        )
        .recorded_in(&conversation)])
        .unwrap();
    let after = export("jsonl");
    assert_eq!(after.status.code(), Some(0), "{}", stderr(&after));
    assert!(stdout(&after).contains("appended while the reader runs"));
    assert!(stdout(&run(&["stats", path(&store)], b"")).contains("1..=6"));
    // A command that writes still needs the lock.
    let output = run(&["snapshot", path(&store)], b"");
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("locked"), "{}", stderr(&output));
    drop(writer);
}

#[test]
fn commands_on_a_missing_store_fail_without_creating_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    for command in ["dump", "verify", "snapshot", "compact", "stats"] {
        let output = run(&[command, path(&missing)], b"");
        assert_eq!(output.status.code(), Some(1), "{command}");
        let errors = stderr(&output);
        assert!(
            errors.starts_with("convlog: error: "),
            "{command}: {errors}"
        );
        assert!(
            errors.contains("missing"),
            "{command} names the store: {errors}"
        );
        assert!(!missing.exists(), "{command} created the store");
    }
}

#[test]
fn every_subcommand_help_shows_an_example() {
    for command in [
        "append", "dump", "verify", "snapshot", "compact", "stats", "demo",
    ] {
        let output = run(&[command, "--help"], b"");
        assert_eq!(output.status.code(), Some(0), "{command}");
        let help = stdout(&output);
        assert!(help.contains("Example"), "{command} --help:\n{help}");
        assert!(
            help.contains(&format!("convlog {command}")),
            "{command} --help:\n{help}"
        );
    }
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let store = path(&store);
    for args in [
        vec![],
        vec!["frobnicate"],
        vec!["append"],
        vec!["append", store, "--durability", "fast"],
        vec!["append", store, "--interval-ms", "5"],
        vec!["dump", store, "--from", "0"],
        vec!["dump", store, "--from", "x"],
        vec!["compact", store, "--delete-everything"],
    ] {
        let output = run(&args, b"");
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    assert!(
        !Path::new(store).exists(),
        "no usage error touches the store"
    );
}

#[test]
fn append_accepts_every_durability() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let line = format!("{}\n", user("c1", "e", "x"));
    for (index, args) in [
        vec!["--durability", "sync"],
        vec!["--durability", "group"],
        vec!["--durability", "periodic", "--interval-ms", "10"],
        vec!["--durability", "none"],
    ]
    .into_iter()
    .enumerate()
    {
        let mut all = vec!["append", path(&store)];
        all.extend(args);
        let output = run(&all, line.as_bytes());
        assert_eq!(
            output.status.code(),
            Some(0),
            "{all:?}: {}",
            stderr(&output)
        );
        assert_eq!(lsns(&output), [index as u64 + 1]);
    }
}

#[test]
fn verify_log_only_checks_a_raw_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("raw");
    let log = convlog::log::Log::open(&store, LogOptions::default()).unwrap();
    log.append(&[b"not an event".as_slice(), b"nor this"])
        .unwrap();
    drop(log);
    let output = run(&["verify", path(&store)], b"");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("LSN 1 does not decode"),
        "{}",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains("--log-only"),
        "{}",
        stderr(&output)
    );
    let output = run(&["verify", path(&store), "--log-only"], b"");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("events           2"),
        "{}",
        stdout(&output)
    );
}

/// The space an open writer allocates ahead of its frames is not log:
/// `stats` and `verify` count it apart, and "bytes per event" is the
/// frames' (it was the allocation's: about 1 MiB / events). A clean close
/// gives the space back, and the counts agree.
#[test]
fn stats_and_verify_count_space_allocated_ahead_apart_from_frames() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let writer = Store::open(&store, StoreOptions::default()).unwrap();
    for index in 0..4u64 {
        let event = Event::ConversationRecorded(Box::new(ConversationRecorded {
            conversation_id: "ctx_1".to_string(),
            session_id: None,
            created_at: Timestamp::now(),
            entry: ConversationEntry::new("eval-1", index, Role::User, Some("hi".to_string())),
        }));
        writer.append(&[event]).unwrap();
    }
    let file_bytes: u64 = segments(&store)
        .iter()
        .map(|segment| std::fs::metadata(segment).unwrap().len())
        .sum();
    assert!(
        file_bytes >= 64 * 1024,
        "the writer allocated ahead: {file_bytes}"
    );

    let per_event = |printed: &str| -> f64 {
        let line = printed
            .lines()
            .find(|line| line.starts_with("bytes per event"))
            .unwrap_or_else(|| panic!("no bytes per event row: {printed}"));
        line["bytes per event".len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let stats = run(&["stats", path(&store)], b"");
    let printed = stdout(&stats);
    assert_eq!(stats.status.code(), Some(0), "{}", stderr(&stats));
    assert!(
        printed.contains("allocated ahead by the writer, unused"),
        "{printed}"
    );
    let open_per_event = per_event(&printed);
    assert!(open_per_event < 1000.0, "{printed}");

    let verify = run(&["verify", path(&store)], b"");
    let report = stdout(&verify);
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
    // The files' bytes, space allocated ahead included. The writer's
    // background thread may prepare more space meanwhile (up to a few MiB
    // ahead, `docs/format.md` 5.7), so the figure lies between the sizes
    // before and after the run.
    let file_bytes_after: u64 = segments(&store)
        .iter()
        .map(|segment| std::fs::metadata(segment).unwrap().len())
        .sum();
    let reported: u64 = report
        .lines()
        .find_map(|line| line.strip_prefix("bytes "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("no bytes row: {report}"));
    assert!(
        (file_bytes..=file_bytes_after).contains(&reported),
        "{file_bytes}..={file_bytes_after}: {report}"
    );
    assert!(
        report.contains("allocated ahead by the writer, unused"),
        "{report}"
    );

    drop(writer);
    let stats = run(&["stats", path(&store)], b"");
    let printed = stdout(&stats);
    assert!(!printed.contains("allocated ahead"), "{printed}");
    assert_eq!(per_event(&printed), open_per_event, "{printed}");
    let verify = run(&["verify", path(&store)], b"");
    assert!(
        !stdout(&verify).contains("allocated ahead"),
        "{}",
        stdout(&verify)
    );
}
