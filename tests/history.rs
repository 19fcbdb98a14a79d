//! History managers: each manager's rule and edge cases, recording
//! curation, and a property test that every curated output of random
//! histories stays coherent and renders cleanly for every provider.

use std::collections::HashMap;

use convlog::history::coherence::{self, Incoherence};
use convlog::history::{
    curate_and_record_with, curate_conversation, curate_conversation_with, curated_event_with,
    parse_curation, ApproximateTokens, Composed, CurationContext, CurationScope, HistoryManager,
    Passthrough, SlidingWindow, SummaryPlaceholder, TokenBudget, TokenEstimator, ToolPruning,
    ToolResultTruncator, DEFAULT_TRUNCATION_SUFFIX,
};
use convlog::log::LogReader;
use convlog::model::{ConversationEntry, Event, Role, Timestamp, ToolCall, ToolStatus};
use convlog::provider::{self, Provider, RenderOptions};
use convlog::store::{Store, StoreOptions};
use proptest::prelude::*;

// ---------------------------------------------------------------- builders

/// Builds a history in one evaluation, numbering entries as it goes.
#[derive(Default)]
struct History(Vec<ConversationEntry>);

impl History {
    fn push(mut self, role: Role, content: Option<&str>) -> History {
        let sequence = self.0.len() as u64;
        let mut entry = ConversationEntry::new("e1", sequence, role, content.map(str::to_string));
        entry.created_at = Timestamp(1_000 + sequence as i64);
        self.0.push(entry);
        self
    }

    fn system(self, text: &str) -> History {
        self.push(Role::System, Some(text))
    }

    fn user(self, text: &str) -> History {
        self.push(Role::User, Some(text))
    }

    fn ai(self, text: &str) -> History {
        self.push(Role::Assistant, Some(text))
    }

    fn calls(self, ids: &[&str]) -> History {
        let mut history = self.push(Role::Assistant, None);
        history.0.last_mut().unwrap().tool_calls = ids.iter().map(|id| call(id)).collect();
        history
    }

    fn result(self, id: &str, text: &str) -> History {
        let mut history = self.push(Role::Tool, Some(text));
        let entry = history.0.last_mut().unwrap();
        entry.tool_call_id = Some(id.to_string());
        entry.tool_name = Some("search".to_string());
        history
    }

    fn build(self) -> Vec<ConversationEntry> {
        self.0
    }
}

fn call(id: &str) -> ToolCall {
    ToolCall {
        call_id: id.to_string(),
        name: "search".to_string(),
        arguments: format!("{{\"q\":\"{id}\"}}"),
        status: ToolStatus::Completed,
        started_at: None,
        ended_at: None,
        error: None,
    }
}

/// A compact picture of a list: `S:text`, `U:text`, `A:text`, `A[a,b]`,
/// `T:a=text`.
fn shape(entries: &[ConversationEntry]) -> Vec<String> {
    entries
        .iter()
        .map(|entry| {
            let content = entry.content.clone().unwrap_or_default();
            match entry.role {
                Role::System => format!("S:{content}"),
                Role::User => format!("U:{content}"),
                Role::Assistant if !entry.tool_calls.is_empty() => {
                    let ids: Vec<&str> = entry
                        .tool_calls
                        .iter()
                        .map(|call| call.call_id.as_str())
                        .collect();
                    format!("A[{}]", ids.join(","))
                }
                Role::Assistant => format!("A:{content}"),
                Role::Tool => format!("T:{}={content}", entry.tool_call_id.clone().unwrap()),
            }
        })
        .collect()
}

fn curate(manager: &dyn HistoryManager, entries: &[ConversationEntry]) -> Vec<ConversationEntry> {
    manager.curate(entries, &CurationContext::new())
}

/// One token per entry: makes budget arithmetic obvious.
struct OnePerEntry;

impl TokenEstimator for OnePerEntry {
    fn estimate(&self, _entry: &ConversationEntry) -> u64 {
        1
    }
}

/// Tokens = content characters: makes pruning arithmetic obvious.
struct CharsOfContent;

impl TokenEstimator for CharsOfContent {
    fn estimate(&self, entry: &ConversationEntry) -> u64 {
        entry
            .content
            .as_deref()
            .map_or(0, |text| text.chars().count()) as u64
    }
}

/// A history with a two-call batch in the middle.
fn batch_history() -> Vec<ConversationEntry> {
    History::default()
        .system("sys")
        .user("q1")
        .ai("a1")
        .user("q2")
        .calls(&["c1", "c2"])
        .result("c1", "r1")
        .result("c2", "r2")
        .ai("a2")
        .build()
}

fn every_manager() -> Vec<Box<dyn HistoryManager>> {
    vec![
        Box::new(Passthrough),
        Box::new(SlidingWindow::new(3)),
        Box::new(SlidingWindow::new(0)),
        Box::new(ToolResultTruncator::new(5)),
        Box::new(Composed::new()),
        Box::new(
            Composed::new()
                .then(ToolResultTruncator::new(5))
                .then(SlidingWindow::new(2)),
        ),
        Box::new(TokenBudget::new(20)),
        Box::new(TokenBudget::new(0)),
        Box::new(ToolPruning::new(5).keep_recent(0)),
        Box::new(SummaryPlaceholder::new(10, "summary")),
    ]
}

// ---------------------------------------------------------------- every manager

#[test]
fn every_manager_returns_nothing_for_an_empty_history() {
    for manager in every_manager() {
        assert!(curate(&*manager, &[]).is_empty(), "{}", manager.strategy());
    }
}

#[test]
fn every_manager_keeps_the_system_entry_and_is_deterministic() {
    let history = batch_history();
    let before = history.clone();
    for manager in every_manager() {
        let curated = curate(&*manager, &history);
        assert_eq!(
            curated[0].message_id,
            history[0].message_id,
            "{}",
            manager.strategy()
        );
        assert_eq!(curated[0], history[0], "{}", manager.strategy());
        assert!(coherence::is_coherent(&curated), "{}", manager.strategy());
        assert_eq!(
            curated,
            curate(&*manager, &history),
            "{}",
            manager.strategy()
        );
    }
    assert_eq!(history, before, "the input is never changed");
}

#[test]
fn passthrough_returns_the_history_unchanged() {
    let history = batch_history();
    assert_eq!(curate(&Passthrough, &history), history);
    assert_eq!(Passthrough.strategy(), "passthrough");
}

// ---------------------------------------------------------------- sliding window

#[test]
fn sliding_window_keeps_the_system_entry_and_the_last_messages() {
    let history = History::default()
        .system("sys")
        .user("q1")
        .ai("a1")
        .user("q2")
        .ai("a2")
        .build();
    assert_eq!(
        shape(&curate(&SlidingWindow::new(2), &history)),
        ["S:sys", "U:q2", "A:a2"]
    );
    assert_eq!(
        curate(&SlidingWindow::new(4), &history),
        history,
        "exactly fits"
    );
    assert_eq!(curate(&SlidingWindow::new(40), &history), history);
    assert_eq!(SlidingWindow::new(2).strategy(), "sliding_window(2)");
}

#[test]
fn sliding_window_without_a_system_message() {
    let history = History::default().user("q1").ai("a1").user("q2").build();
    assert_eq!(shape(&curate(&SlidingWindow::new(1), &history)), ["U:q2"]);
    assert_eq!(
        shape(&curate(&SlidingWindow::new(0), &history)),
        Vec::<String>::new()
    );
}

#[test]
fn a_window_of_zero_keeps_only_system_entries() {
    let history = batch_history();
    assert_eq!(shape(&curate(&SlidingWindow::new(0), &history)), ["S:sys"]);
    let only_system = History::default().system("sys").build();
    assert_eq!(curate(&SlidingWindow::new(0), &only_system), only_system);
}

#[test]
fn a_window_that_would_split_a_tool_batch_starts_after_it() {
    let history = batch_history();
    // The last 2 and last 3 start inside the batch (at r2, at r1): the
    // window moves past the batch and keeps fewer.
    for window in [2, 3] {
        assert_eq!(
            shape(&curate(&SlidingWindow::new(window), &history)),
            ["S:sys", "A:a2"],
            "window {window}"
        );
    }
    // The last 4 start at the batch's assistant entry: the batch is whole.
    assert_eq!(
        shape(&curate(&SlidingWindow::new(4), &history)),
        ["S:sys", "A[c1,c2]", "T:c1=r1", "T:c2=r2", "A:a2"]
    );
    // A history that ends inside a batch (results still arriving).
    let ending_in_batch = History::default()
        .system("sys")
        .user("q")
        .calls(&["c1", "c2"])
        .result("c1", "r1")
        .result("c2", "r2")
        .build();
    assert_eq!(
        shape(&curate(&SlidingWindow::new(1), &ending_in_batch)),
        ["S:sys"]
    );
    assert_eq!(
        shape(&curate(&SlidingWindow::new(2), &ending_in_batch)),
        ["S:sys"]
    );
    assert_eq!(
        shape(&curate(&SlidingWindow::new(3), &ending_in_batch)),
        ["S:sys", "A[c1,c2]", "T:c1=r1", "T:c2=r2"]
    );
}

#[test]
fn a_window_keeps_results_that_arrive_after_other_messages() {
    // The result of c1 arrives after a user message: the batch spans it.
    let history = History::default()
        .system("sys")
        .calls(&["c1"])
        .user("meanwhile")
        .result("c1", "late")
        .ai("done")
        .build();
    assert_eq!(
        shape(&curate(&SlidingWindow::new(3), &history)),
        ["S:sys", "A:done"]
    );
    assert_eq!(
        shape(&curate(&SlidingWindow::new(4), &history)),
        ["S:sys", "A[c1]", "U:meanwhile", "T:c1=late", "A:done"]
    );
}

#[test]
fn system_entries_inside_the_history_are_kept_and_not_counted() {
    let history = History::default()
        .system("sys")
        .user("q1")
        .system("steer")
        .ai("a1")
        .user("q2")
        .build();
    assert_eq!(
        shape(&curate(&SlidingWindow::new(1), &history)),
        ["S:sys", "S:steer", "U:q2"]
    );
    assert_eq!(
        shape(&curate(&SlidingWindow::new(2), &history)),
        ["S:sys", "S:steer", "A:a1", "U:q2"]
    );
}

// ---------------------------------------------------------------- truncation

#[test]
fn tool_results_are_truncated_to_the_maximum_with_the_suffix() {
    let long = "x".repeat(100);
    let history = History::default()
        .system(&long)
        .user(&long)
        .calls(&["c1", "c2"])
        .result("c1", &long)
        .result("c2", "short")
        .build();
    let curated = curate(&ToolResultTruncator::new(30), &history);
    let truncated = curated[3].content.as_deref().unwrap();
    assert_eq!(truncated.chars().count(), 30);
    assert!(truncated.ends_with(DEFAULT_TRUNCATION_SUFFIX));
    assert_eq!(
        truncated,
        format!(
            "{}{DEFAULT_TRUNCATION_SUFFIX}",
            "x".repeat(30 - DEFAULT_TRUNCATION_SUFFIX.len())
        )
    );
    assert_eq!(curated[4], history[4], "a short result is unchanged");
    assert_eq!(
        curated[..3],
        history[..3],
        "only tool results are truncated"
    );
    assert_eq!(curated[3].tool_call_id, history[3].tool_call_id);
    assert_eq!(curated[3].message_id, history[3].message_id);
    assert_eq!(
        ToolResultTruncator::new(30).strategy(),
        "tool_result_truncator(30)"
    );
}

#[test]
fn truncation_counts_characters_and_handles_long_suffixes() {
    let history = History::default()
        .calls(&["c"])
        .result("c", "ééééééééé")
        .build();
    let exact = curate(&ToolResultTruncator::new(9), &history);
    assert_eq!(exact, history, "9 characters fit a maximum of 9 (18 bytes)");
    let custom = curate(&ToolResultTruncator::new(5).with_suffix("…"), &history);
    assert_eq!(custom[1].content.as_deref(), Some("éééé…"));
    let longer_suffix = curate(&ToolResultTruncator::new(3).with_suffix("[cut]"), &history);
    assert_eq!(longer_suffix[1].content.as_deref(), Some("[cu"));
    let zero = curate(&ToolResultTruncator::new(0), &history);
    assert_eq!(zero[1].content.as_deref(), Some(""));
}

// ---------------------------------------------------------------- composition

#[test]
fn composition_applies_managers_in_order() {
    let history = History::default()
        .system("sys")
        .user("question")
        .calls(&["c1"])
        .result("c1", "a very long tool output indeed")
        .ai("answer")
        .build();
    let truncate = || ToolResultTruncator::new(4).with_suffix("");
    let budget = || TokenBudget::with_estimator(13, CharsOfContent);
    // Truncating first makes the batch cheap enough to keep.
    let truncate_then_budget = Composed::new().then(truncate()).then(budget());
    assert_eq!(
        shape(&curate(&truncate_then_budget, &history)),
        ["S:sys", "A[c1]", "T:c1=a ve", "A:answer"]
    );
    // Budgeting first sees the long output and drops the batch.
    let budget_then_truncate = Composed::new().then(budget()).then(truncate());
    assert_eq!(
        shape(&curate(&budget_then_truncate, &history)),
        ["S:sys", "A:answer"]
    );
    assert_eq!(
        truncate_then_budget.strategy(),
        "composed(tool_result_truncator(4), token_budget(13))"
    );
    assert_eq!(Composed::new().strategy(), "composed()");
    assert_eq!(curate(&Composed::new(), &history), history);
}

// ---------------------------------------------------------------- token budget

#[test]
fn the_default_estimator_counts_bytes_and_overheads() {
    let estimator = ApproximateTokens::default();
    let text = History::default().user("abcdefghi").build();
    assert_eq!(
        estimator.estimate(&text[0]),
        3 + 4,
        "9 bytes = 3 tokens, plus 4"
    );
    let empty = History::default().push(Role::Assistant, None).build();
    assert_eq!(estimator.estimate(&empty[0]), 4);
    let calls = History::default().calls(&["c1"]).build();
    // "c1" + "search" + {"q":"c1"} = 2 + 6 + 10 = 18 bytes = 5 tokens.
    assert_eq!(estimator.estimate(&calls[0]), 5 + 4 + 8);
}

#[test]
fn a_token_budget_keeps_the_newest_messages_that_fit() {
    let history = batch_history(); // 8 entries, 1 token each with OnePerEntry
    let budget = |tokens| TokenBudget::with_estimator(tokens, OnePerEntry);
    assert_eq!(curate(&budget(8), &history), history, "exactly fits");
    assert_eq!(curate(&budget(100), &history), history);
    assert_eq!(
        shape(&curate(&budget(7), &history)),
        ["S:sys", "A:a1", "U:q2", "A[c1,c2]", "T:c1=r1", "T:c2=r2", "A:a2"]
    );
    assert_eq!(
        shape(&curate(&budget(5), &history)),
        ["S:sys", "A[c1,c2]", "T:c1=r1", "T:c2=r2", "A:a2"]
    );
    // 4 or 3 tokens would split the batch: it goes whole.
    for tokens in [2, 3, 4] {
        assert_eq!(
            shape(&curate(&budget(tokens), &history)),
            ["S:sys", "A:a2"],
            "{tokens}"
        );
    }
    assert_eq!(TokenBudget::new(100).strategy(), "token_budget(100)");
}

#[test]
fn the_system_message_always_counts_and_is_never_dropped() {
    let history = batch_history();
    let budget = |tokens| TokenBudget::with_estimator(tokens, OnePerEntry);
    assert_eq!(
        shape(&curate(&budget(1), &history)),
        ["S:sys"],
        "the system entry uses it all"
    );
    assert_eq!(
        shape(&curate(&budget(0), &history)),
        ["S:sys"],
        "over budget, still kept"
    );
    let no_system = History::default().user("q").ai("a").build();
    assert!(curate(&budget(0), &no_system).is_empty());
    assert_eq!(shape(&curate(&budget(1), &no_system)), ["A:a"]);
}

#[test]
fn a_token_budget_keeps_a_contiguous_suffix() {
    // The newest message is too big; an older small one is not kept in its place.
    let history = History::default()
        .system("s")
        .user("tiny")
        .ai(&"big ".repeat(50))
        .build();
    let curated = curate(&TokenBudget::with_estimator(10, CharsOfContent), &history);
    assert_eq!(shape(&curated), ["S:s"]);
}

// ---------------------------------------------------------------- compaction

#[test]
fn tool_pruning_shortens_the_oldest_outputs_first() {
    let history = History::default()
        .system("s")
        .calls(&["c1"])
        .result("c1", &"1".repeat(40))
        .calls(&["c2"])
        .result("c2", &"2".repeat(40))
        .calls(&["c3"])
        .result("c3", &"3".repeat(40))
        .build();
    let pruning = |limit| {
        ToolPruning::with_estimator(limit, CharsOfContent)
            .keep_recent(1)
            .placeholder("[pruned]")
    };
    // 121 characters in all; under the limit nothing changes.
    assert_eq!(curate(&pruning(121), &history), history);
    // Pruning c1 (40 -> 8) is enough for 100.
    let once = curate(&pruning(100), &history);
    assert_eq!(once[2].content.as_deref(), Some("[pruned]"));
    assert_eq!(once[4], history[4]);
    // A limit nothing reaches prunes all but the newest result, then stops.
    let all = curate(&pruning(0), &history);
    assert_eq!(all[2].content.as_deref(), Some("[pruned]"));
    assert_eq!(all[4].content.as_deref(), Some("[pruned]"));
    assert_eq!(
        all[6], history[6],
        "keep_recent(1) protects the newest result"
    );
    assert_eq!(all.len(), history.len(), "pairing untouched: results stay");
    assert!(coherence::is_coherent(&all));
    assert_eq!(
        ToolPruning::new(10).strategy(),
        "tool_pruning(10, keep_recent=2)"
    );
}

#[test]
fn a_summary_replaces_the_oldest_part_when_over_the_limit() {
    let history = batch_history();
    let summary = |limit| {
        SummaryPlaceholder::with_entry(
            limit,
            ConversationEntry::new("sum", 0, Role::User, Some("SUMMARY".into())),
            OnePerEntry,
        )
        .unwrap()
    };
    assert_eq!(curate(&summary(8), &history), history, "under the limit");
    // 7 tokens: system + summary + the 5 newest.
    assert_eq!(
        shape(&curate(&summary(7), &history)),
        [
            "S:sys",
            "U:SUMMARY",
            "U:q2",
            "A[c1,c2]",
            "T:c1=r1",
            "T:c2=r2",
            "A:a2"
        ]
    );
    assert_eq!(
        shape(&curate(&summary(6), &history)),
        [
            "S:sys",
            "U:SUMMARY",
            "A[c1,c2]",
            "T:c1=r1",
            "T:c2=r2",
            "A:a2"
        ]
    );
    // 5 and 4 tokens would keep 3 and 2 newest, inside the batch: the
    // summary stands for the whole batch too.
    for limit in [3, 4, 5] {
        assert_eq!(
            shape(&curate(&summary(limit), &history)),
            ["S:sys", "U:SUMMARY", "A:a2"],
            "limit {limit}"
        );
    }
    assert_eq!(
        shape(&curate(&summary(0), &history)),
        ["S:sys", "U:SUMMARY"],
        "nothing fits: everything but the system is replaced"
    );
    let replaced = summary(3).replaced(&history);
    assert_eq!(replaced.len(), 6);
    assert_eq!(replaced[0].content.as_deref(), Some("q1"));
    let only_system = History::default().system("sys").build();
    assert_eq!(curate(&summary(0), &only_system), only_system);
    assert_eq!(summary(3).strategy(), "summary_placeholder(3)");
}

#[test]
fn the_default_summary_is_a_system_entry_and_tool_summaries_are_refused() {
    let manager = SummaryPlaceholder::new(0, "Earlier: the user asked about Paris.");
    assert_eq!(manager.summary().role, Role::System);
    let curated = curate(&manager, &batch_history());
    assert_eq!(
        shape(&curated),
        ["S:sys", "S:Earlier: the user asked about Paris."]
    );
    let mut tool = ConversationEntry::new("e", 0, Role::Tool, Some("x".into()));
    tool.tool_call_id = Some("c".into());
    assert!(SummaryPlaceholder::with_entry(0, tool, ApproximateTokens::default()).is_err());
}

#[test]
fn pruning_then_summary_is_seed_three_compaction() {
    let history = History::default()
        .system("s")
        .user("q")
        .calls(&["c1"])
        .result("c1", &"x".repeat(60))
        .ai("a")
        .user("q2")
        .ai("a2")
        .build();
    let compaction = Composed::new()
        .then(
            ToolPruning::with_estimator(20, CharsOfContent)
                .keep_recent(0)
                .placeholder("-"),
        )
        .then(
            SummaryPlaceholder::with_entry(
                6,
                ConversationEntry::new("sum", 0, Role::System, Some("S".into())),
                CharsOfContent,
            )
            .unwrap(),
        );
    assert_eq!(
        shape(&curate(&compaction, &history)),
        ["S:s", "S:S", "U:q2", "A:a2"]
    );
}

// ---------------------------------------------------------------- recording

#[test]
fn curation_is_recorded_and_the_full_history_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let history = batch_history();
    store
        .append(
            &history
                .iter()
                .cloned()
                .map(|entry| entry.recorded_in("c"))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let curation = curate_conversation(&store, "c", &SlidingWindow::new(1)).unwrap();
    assert_eq!(shape(&curation.entries), ["S:sys", "A:a2"]);
    assert_eq!(curation.original_count, 8);
    assert_eq!(curation.strategy, "sliding_window(1)");

    let slice = store.conversation("c").unwrap();
    assert_eq!(slice.len(), 8, "the store keeps everything");
    let (lsn, curated) = &slice.curations()[0];
    assert_eq!(*lsn, curation.lsn);
    assert_eq!(
        (
            curated.strategy.as_str(),
            curated.original_count,
            curated.curated_count
        ),
        ("sliding_window(1)", 8, 2)
    );
    drop(store);
    let last = LogReader::open(dir.path())
        .unwrap()
        .iter()
        .last()
        .unwrap()
        .unwrap();
    let event = convlog::codec::decode_event(&last.payload).unwrap();
    assert!(matches!(event, Event::HistoryCurated(_)));
}

#[test]
fn curation_records_the_prompt_name_and_session_id_of_its_scope() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let history = batch_history();
    store
        .append(
            &history
                .iter()
                .cloned()
                .map(|entry| entry.recorded_in("c"))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let scope = CurationScope::new()
        .prompt_name("travel/planner")
        .session_id("sess-42");
    curate_and_record_with(&store, "c", &history, &SlidingWindow::new(1), &scope).unwrap();
    curate_conversation_with(&store, "c", &SlidingWindow::new(2), &CurationScope::new()).unwrap();
    let scopes = |store: &Store| -> Vec<(Option<String>, Option<String>)> {
        store
            .conversation("c")
            .unwrap()
            .curations()
            .iter()
            .map(|(_, curated)| (curated.prompt_name.clone(), curated.session_id.clone()))
            .collect()
    };
    let expected = vec![
        (Some("travel/planner".into()), Some("sess-42".into())),
        (None, None),
    ];
    assert_eq!(scopes(&store), expected);
    // Through a snapshot and a reopen, and through the log alone.
    store.snapshot().unwrap();
    drop(store);
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert!(store.open_report().snapshot.is_some());
    assert_eq!(scopes(&store), expected);
    drop(store);
    let events: Vec<Event> = LogReader::open(dir.path())
        .unwrap()
        .iter()
        .map(|record| convlog::codec::decode_event(&record.unwrap().payload).unwrap())
        .filter(|event| matches!(event, Event::HistoryCurated(_)))
        .collect();
    let Event::HistoryCurated(first) = &events[0] else {
        unreachable!()
    };
    assert_eq!(first.prompt_name.as_deref(), Some("travel/planner"));
    assert_eq!(first.session_id.as_deref(), Some("sess-42"));
    // An overlong prompt name is cut like a strategy; an empty session id
    // is refused at append, naming the field.
    let event = curated_event_with(
        "c",
        "s",
        1,
        1,
        Timestamp(0),
        &CurationScope::new().prompt_name("é".repeat(2000)),
    );
    assert!(event.validate().is_ok());
    let event = curated_event_with(
        "c",
        "s",
        1,
        1,
        Timestamp(0),
        &CurationScope::new().session_id(""),
    );
    assert_eq!(event.validate().unwrap_err().field, "session_id");
}

/// A store whose snapshot was written as format version 2 (before the
/// curation fields) still opens from it: version 2 is read.
#[test]
fn a_version_2_snapshot_is_still_used() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    store
        .append(
            &batch_history()
                .into_iter()
                .map(|entry| entry.recorded_in("c"))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let before = store.conversation("c").unwrap();
    let info = store.snapshot().unwrap();
    drop(store);
    // Without curations, the version 2 and 4 layouts are the same bytes:
    // the file differs in its version field, the last-frame offset
    // (reserved, 0, in version 2) and the header checksum.
    let mut bytes = std::fs::read(&info.path).unwrap();
    assert_eq!(bytes[8..12], 4u32.to_le_bytes());
    bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
    bytes[44..48].copy_from_slice(&0u32.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..68]);
    bytes[68..72].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&info.path, &bytes).unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert!(
        store.open_report().skipped_snapshots.is_empty(),
        "{:?}",
        store.open_report().skipped_snapshots
    );
    assert_eq!(store.open_report().snapshot, Some((info.path, info.lsn)));
    assert_eq!(store.conversation("c").unwrap(), before);
}

#[test]
fn overlong_strategy_labels_are_cut_to_fit() {
    let event = convlog::history::curated_event("c", &"é".repeat(2000), 3, 1, Timestamp(0));
    let Event::HistoryCurated(curated) = &event else {
        panic!("a history_curated event")
    };
    assert!(curated.strategy.len() <= convlog::model::LABEL_BYTES_MAX);
    assert!(event.validate().is_ok());
}

#[test]
fn curation_specs_parse_in_order() {
    let manager = parse_curation("window=50,truncate=1000,budget=100000").unwrap();
    assert_eq!(
        manager.strategy(),
        "composed(sliding_window(50), tool_result_truncator(1000), token_budget(100000))"
    );
    assert_eq!(parse_curation("").unwrap().len(), 0);
    assert_eq!(
        parse_curation(" prune = 10 ").unwrap().strategy(),
        "composed(tool_pruning(10, keep_recent=2))"
    );
    let refused = |text: &str| match parse_curation(text) {
        Err(convlog::Error::InvalidCuration { item, reason }) => (item, reason),
        other => panic!("{text:?}: expected InvalidCuration, got {other:?}"),
    };
    let (item, reason) = refused("window");
    assert_eq!(item, "window");
    assert!(reason.contains("key=value"), "{reason}");
    let (item, reason) = refused("truncate=5, window=-1");
    assert_eq!(item, "window=-1");
    assert!(reason.contains("non-negative"), "{reason}");
    assert!(refused("size=3").1.contains("unknown curation key"));
}

// ---------------------------------------------------------------- coherence

#[test]
fn incoherences_are_found_in_both_directions() {
    let history = History::default()
        .result("early", "orphan")
        .calls(&["a", "b"])
        .result("a", "ok")
        .result("a", "twice")
        .build();
    assert_eq!(
        coherence::incoherences(&history),
        [
            Incoherence::OrphanResult {
                index: 0,
                call_id: "early".into()
            },
            Incoherence::UnansweredCall {
                index: 1,
                call_id: "b".into()
            },
            Incoherence::OrphanResult {
                index: 3,
                call_id: "a".into()
            },
        ]
    );
    assert!(!coherence::is_coherent(&history));
    assert!(coherence::is_coherent(&batch_history()));
    let cuts = coherence::coherent_cuts(&batch_history());
    assert_eq!(
        cuts,
        [true, true, true, true, true, false, false, true, true]
    );
}

// ---------------------------------------------------------------- property

#[derive(Debug, Clone)]
enum Unit {
    User(String),
    Assistant(String),
    System(String),
    /// Optional text, then the calls' result texts.
    Batch(Option<String>, Vec<String>),
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z ]{1,12}",
        "[a-zé€ ]{1,80}",
        (1usize..400).prop_map(|length| "w".repeat(length)),
    ]
}

fn unit() -> impl Strategy<Value = Unit> {
    prop_oneof![
        3 => text().prop_map(Unit::User),
        3 => text().prop_map(Unit::Assistant),
        1 => text().prop_map(Unit::System),
        3 => (proptest::option::of(text()), proptest::collection::vec(text(), 1..4))
            .prop_map(|(text, results)| Unit::Batch(text, results)),
    ]
}

/// A coherent history: an optional system prompt, a user message, then units.
fn coherent_history() -> impl Strategy<Value = Vec<ConversationEntry>> {
    (
        proptest::option::of(text()),
        text(),
        proptest::collection::vec(unit(), 0..14),
    )
        .prop_map(|(system, first, units)| {
            let mut history = History::default();
            if let Some(system) = system {
                history = history.system(&system);
            }
            history = history.user(&first);
            let mut next_call = 0;
            for unit in units {
                history = match unit {
                    Unit::User(text) => history.user(&text),
                    Unit::Assistant(text) => history.ai(&text),
                    Unit::System(text) => history.system(&text),
                    Unit::Batch(text, results) => {
                        let ids: Vec<String> = results
                            .iter()
                            .map(|_| {
                                next_call += 1;
                                format!("call_{next_call}")
                            })
                            .collect();
                        let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
                        let mut batch = history.calls(&id_refs);
                        batch.0.last_mut().unwrap().content = text;
                        for (id, result) in ids.iter().zip(&results) {
                            batch = batch.result(id, result);
                        }
                        batch
                    }
                };
            }
            history.build()
        })
}

#[derive(Debug, Clone)]
enum Leaf {
    Window(usize),
    Truncate(usize),
    Budget(u64),
    Prune(u64, usize),
    Summary(u64),
}

fn leaf() -> impl Strategy<Value = Leaf> {
    prop_oneof![
        (0usize..10).prop_map(Leaf::Window),
        (0usize..60).prop_map(Leaf::Truncate),
        (0u64..600).prop_map(Leaf::Budget),
        (0u64..600, 0usize..3).prop_map(|(limit, keep)| Leaf::Prune(limit, keep)),
        (0u64..600).prop_map(Leaf::Summary),
    ]
}

fn build_leaf(leaf: &Leaf) -> Box<dyn HistoryManager> {
    match *leaf {
        Leaf::Window(window) => Box::new(SlidingWindow::new(window)),
        Leaf::Truncate(length) => Box::new(ToolResultTruncator::new(length)),
        Leaf::Budget(budget) => Box::new(TokenBudget::new(budget)),
        Leaf::Prune(limit, keep) => Box::new(ToolPruning::new(limit).keep_recent(keep)),
        Leaf::Summary(limit) => {
            Box::new(SummaryPlaceholder::new(limit, "summary of earlier turns"))
        }
    }
}

fn build_manager(leaves: &[Leaf]) -> Box<dyn HistoryManager> {
    if leaves.len() == 1 {
        return build_leaf(&leaves[0]);
    }
    Box::new(leaves.iter().fold(Composed::new(), |composed, leaf| {
        composed.then_boxed(build_leaf(leaf))
    }))
}

/// The call ids of each kind of incoherence, with multiplicity.
fn incoherence_counts(entries: &[ConversationEntry]) -> HashMap<(bool, String), usize> {
    let mut counts = HashMap::new();
    for incoherence in coherence::incoherences(entries) {
        let orphan = matches!(incoherence, Incoherence::OrphanResult { .. });
        *counts
            .entry((orphan, incoherence.call_id().to_string()))
            .or_default() += 1;
    }
    counts
}

/// Every entry of `curated` that is not a summary comes from `input`, in
/// order; only tool results' content may differ; every system entry of the
/// input is there unchanged.
fn assert_derived(input: &[ConversationEntry], curated: &[ConversationEntry]) {
    let positions: HashMap<_, _> = input
        .iter()
        .enumerate()
        .map(|(position, entry)| (entry.message_id, position))
        .collect();
    let mut last = None;
    for entry in curated {
        if entry.metadata.contains_key("convlog.summary") {
            continue;
        }
        let position = positions[&entry.message_id];
        assert!(last < Some(position), "entries keep their order");
        last = Some(position);
        let original = &input[position];
        if original.role == Role::Tool {
            assert_eq!(
                ConversationEntry {
                    content: None,
                    ..entry.clone()
                },
                ConversationEntry {
                    content: None,
                    ..original.clone()
                }
            );
        } else {
            assert_eq!(entry, original, "only tool outputs are shortened");
        }
    }
    for system in input.iter().filter(|entry| entry.role == Role::System) {
        assert!(
            curated.contains(system),
            "system entry {:?} kept",
            system.content
        );
    }
}

/// Each assistant entry with calls is directly followed by their results.
fn assert_batches_adjacent(entries: &[ConversationEntry]) {
    for (index, entry) in entries.iter().enumerate() {
        for (offset, call) in entry.tool_calls.iter().enumerate() {
            let result = &entries[index + 1 + offset];
            assert_eq!(result.tool_call_id.as_deref(), Some(call.call_id.as_str()));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn curated_coherent_histories_stay_coherent_and_render_for_every_provider(
        history in coherent_history(),
        leaves in proptest::collection::vec(leaf(), 1..4),
    ) {
        let manager = build_manager(&leaves);
        let before = history.clone();
        let curated = curate(&*manager, &history);
        prop_assert_eq!(&history, &before);
        prop_assert!(coherence::is_coherent(&history));
        prop_assert!(
            coherence::is_coherent(&curated),
            "{}: {:?}", manager.strategy(), coherence::incoherences(&curated)
        );
        assert_derived(&history, &curated);
        assert_batches_adjacent(&curated);
        prop_assert_eq!(&curated, &curate(&*manager, &history), "deterministic");
        for provider in Provider::ALL {
            let request = provider::render(provider, &curated, &RenderOptions::default())
                .map_err(|error| TestCaseError::fail(format!("{provider}: {error}")))?;
            prop_assert!(request.unfinished_calls.is_empty(), "{}: {:?}", provider, request.unfinished_calls);
            prop_assert!(request.skipped_results.is_empty(), "{}: {:?}", provider, request.skipped_results);
            if let Err(error) = provider::rules::check(provider, &request) {
                return Err(TestCaseError::fail(format!(
                    "{} output breaks {provider}'s rules: {error}\n{:?}",
                    manager.strategy(),
                    shape(&curated)
                )));
            }
        }
    }

    #[test]
    fn curation_never_adds_an_incoherence(
        history in coherent_history(),
        swaps in proptest::collection::vec((0usize..64, 0usize..64), 0..4),
        removals in proptest::collection::vec(0usize..64, 0..3),
        leaves in proptest::collection::vec(leaf(), 1..4),
    ) {
        // Break the history: move and remove random entries.
        let mut broken = history;
        for (from, to) in swaps {
            let length = broken.len();
            broken.swap(from % length, to % length);
        }
        for removal in removals {
            if !broken.is_empty() {
                let length = broken.len();
                broken.remove(removal % length);
            }
        }
        let manager = build_manager(&leaves);
        let curated = curate(&*manager, &broken);
        let before = incoherence_counts(&broken);
        for (key, count) in incoherence_counts(&curated) {
            prop_assert!(
                before.get(&key).copied().unwrap_or(0) >= count,
                "{} added {:?}", manager.strategy(), key
            );
        }
        assert_derived(&broken, &curated);
    }
}
