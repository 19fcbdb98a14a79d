//! What the model is shown: built from the store, never a dangling call.

#[cfg(test)]
use std::collections::HashSet;

use convlog::conversation::CallResults;
use convlog::model::{ConversationEntry, Role};
use convlog::ConversationSlice;

/// What the model is shown of a conversation during one evaluation, kept
/// between its steps.
///
/// The view is this evaluation's system entries, then the non-system
/// entries of the evaluations that started before it (log order), then
/// this evaluation's non-system entries, each part without dangling calls
/// ([`answered_only`]). A result answers only a call of its own evaluation,
/// so that filter can run on each evaluation's entries apart, and the part
/// before this evaluation's own entries does not change while the
/// evaluation runs (one runner per conversation): it is built once, at the
/// first model call, and each later step only replaces the evaluation's own
/// entries at its end. A step costs the evaluation's own entries, not the
/// conversation's length.
///
/// A runner that keeps the conversation between runs keeps the view too
/// ([`ModelView::into_earlier`]): the next evaluation's view is its system
/// entries, then what the last one showed after its own system entries,
/// then the last evaluation's entries since; no run re-reads the history.
#[derive(Debug, Default)]
pub(super) struct ModelView {
    /// The view as last built.
    entries: Vec<ConversationEntry>,
    /// How many of `entries` come before this evaluation's own non-system
    /// entries; `None` before the first build.
    prefix_len: Option<usize>,
    /// How many of `entries` are this evaluation's system entries (at the
    /// front).
    own_system: usize,
    /// The part of the view between this evaluation's system entries and
    /// its own entries, carried over from the previous evaluation; used by
    /// the first build.
    earlier: Option<Earlier>,
}

/// What an evaluation leaves the next one of its conversation to show
/// before its own entries (after its system entries): what it showed there
/// itself, then its own non-system entries as the slice holds them, taken
/// when the next evaluation first builds its view (not when this one ends:
/// a runner keeps many conversations, and most are never run again).
#[derive(Debug)]
pub(super) struct Earlier {
    entries: Vec<ConversationEntry>,
    /// The evaluation whose own entries follow `entries`.
    then: String,
}

impl ModelView {
    /// A view whose part before the evaluation's own entries (after its
    /// system entries) is `earlier`, from [`ModelView::into_earlier`] of
    /// the evaluation before it, the slice unchanged but for this
    /// evaluation's own entries.
    pub(super) fn with_earlier(earlier: Earlier) -> ModelView {
        ModelView {
            earlier: Some(earlier),
            ..ModelView::default()
        }
    }

    /// What the next evaluation of the conversation would show before its
    /// own entries (after its system entries), when this evaluation
    /// (`evaluation_id`, the latest) has ended; `None` if this view was
    /// never built.
    pub(super) fn into_earlier(mut self, evaluation_id: &str) -> Option<Earlier> {
        let prefix_len = self.prefix_len?;
        self.entries.truncate(prefix_len);
        self.entries.drain(..self.own_system);
        Some(Earlier {
            entries: self.entries,
            then: evaluation_id.to_string(),
        })
    }

    /// The view of `evaluation_id` as `slice` holds it now.
    pub(super) fn update(
        &mut self,
        slice: &ConversationSlice,
        evaluation_id: &str,
    ) -> &[ConversationEntry] {
        let prefix_len = match self.prefix_len {
            Some(len) => len,
            None => {
                self.entries = system_entries(slice, evaluation_id);
                self.own_system = self.entries.len();
                match self.earlier.take() {
                    Some(earlier) => {
                        self.entries.extend(earlier.entries);
                        self.entries.extend(own_entries(slice, &earlier.then));
                    }
                    None => self.entries.extend(earlier_entries(slice, evaluation_id)),
                }
                *self.prefix_len.insert(self.entries.len())
            }
        };
        // The evaluation's own entries, as `own_entries` shows them; an
        // entry the view already holds as shown (most of them: a step adds
        // one or two) is compared, not copied again.
        let own = own_of(slice, evaluation_id);
        let mut at = prefix_len;
        for shown in shown_of(&own) {
            match shown {
                Shown::As(entry) => match self.entries.get_mut(at) {
                    Some(held) if held == entry => {}
                    Some(held) => held.clone_from(entry),
                    None => self.entries.push(entry.clone()),
                },
                Shown::Trimmed(entry) => match self.entries.get_mut(at) {
                    Some(held) => *held = *entry,
                    None => self.entries.push(*entry),
                },
            }
            at += 1;
        }
        self.entries.truncate(at);
        &self.entries
    }
}

/// The evaluation's system entries.
fn system_entries(slice: &ConversationSlice, evaluation_id: &str) -> Vec<ConversationEntry> {
    slice
        .evaluation(evaluation_id)
        .into_iter()
        .filter(|entry| entry.role == Role::System)
        .cloned()
        .collect()
}

/// The evaluation's non-system entries, without dangling calls.
fn own_entries(slice: &ConversationSlice, evaluation_id: &str) -> Vec<ConversationEntry> {
    answered_only_of(&own_of(slice, evaluation_id))
}

/// The evaluation's non-system entries, as the slice holds them.
fn own_of<'s>(slice: &'s ConversationSlice, evaluation_id: &str) -> Vec<&'s ConversationEntry> {
    slice
        .evaluation(evaluation_id)
        .into_iter()
        .filter(|entry| entry.role != Role::System)
        .collect()
}

/// The non-system entries of the evaluations that started before this one
/// (log order), without dangling calls. The slice orders entries by their
/// evaluation's first appearance: those evaluations hold exactly the
/// entries before this evaluation's first one (all of them, when it has
/// none yet).
fn earlier_entries(slice: &ConversationSlice, evaluation_id: &str) -> Vec<ConversationEntry> {
    let entries: Vec<&ConversationEntry> = slice
        .entries()
        .take_while(|entry| entry.evaluation_id != evaluation_id)
        .filter(|entry| entry.role != Role::System)
        .collect();
    answered_only_of(&entries)
}

/// The former [`earlier_entries`] (a set of the earlier evaluations),
/// kept as the reference the new one is checked against.
#[cfg(test)]
fn earlier_entries_reference(
    slice: &ConversationSlice,
    evaluation_id: &str,
) -> Vec<ConversationEntry> {
    let earlier: HashSet<&str> = slice
        .evaluations()
        .iter()
        .map(String::as_str)
        .take_while(|evaluation| *evaluation != evaluation_id)
        .collect();
    let entries: Vec<&ConversationEntry> = slice
        .entries()
        .filter(|entry| {
            entry.role != Role::System && earlier.contains(entry.evaluation_id.as_str())
        })
        .collect();
    answered_only_of(&entries)
}

/// This evaluation's system entries, then the non-system entries of the
/// evaluations that started before it (log order), then this evaluation's
/// non-system entries; see [`answered_only`]. The whole view built at once
/// (what [`ModelView::update`] keeps up to date step by step).
#[cfg(test)]
pub(super) fn model_view(slice: &ConversationSlice, evaluation_id: &str) -> Vec<ConversationEntry> {
    let mut view = system_entries(slice, evaluation_id);
    let earlier = earlier_entries(slice, evaluation_id);
    assert_eq!(earlier, earlier_entries_reference(slice, evaluation_id));
    view.extend(earlier);
    view.extend(own_entries(slice, evaluation_id));
    view
}

/// `entries` without a dangling call: a call no result entry answers is
/// taken out of its assistant entry (an assistant entry left with no text,
/// reasoning or call is dropped), and a tool entry that does not answer a
/// call still shown (an orphan, or a duplicate answer) is dropped.
pub(super) fn answered_only(entries: Vec<ConversationEntry>) -> Vec<ConversationEntry> {
    let entries: Vec<&ConversationEntry> = entries.iter().collect();
    answered_only_of(&entries)
}

/// [`answered_only`] of borrowed entries: only what is shown is cloned.
/// A call is kept when a result answers it ([`CallResults::answer_at`],
/// keyed by evaluation and call id), and a tool entry when it is the
/// answer of a call held by an assistant entry of the list.
fn answered_only_of(entries: &[&ConversationEntry]) -> Vec<ConversationEntry> {
    shown_of(entries)
        .into_iter()
        .map(|shown| match shown {
            Shown::As(entry) => entry.clone(),
            Shown::Trimmed(entry) => *entry,
        })
        .collect()
}

/// How [`answered_only_of`] shows one entry.
enum Shown<'e> {
    /// As it is.
    As(&'e ConversationEntry),
    /// A copy holding only its answered calls (rare: boxed).
    Trimmed(Box<ConversationEntry>),
}

/// What [`answered_only_of`] shows of `entries`, in order, without copying
/// an entry shown as it is.
fn shown_of<'e>(entries: &[&'e ConversationEntry]) -> Vec<Shown<'e>> {
    let results = CallResults::new(entries.iter().copied());
    let mut answering = vec![false; entries.len()];
    for entry in entries.iter().filter(|entry| entry.role == Role::Assistant) {
        for call in &entry.tool_calls {
            if let Some((position, _)) = results.answer_at(&entry.evaluation_id, &call.call_id) {
                answering[position] = true;
            }
        }
    }
    let mut shown = Vec::with_capacity(entries.len());
    for (&entry, answering) in entries.iter().zip(answering) {
        match entry.role {
            Role::Tool if !answering => {}
            Role::Assistant => {
                let answered = |call: &&convlog::model::ToolCall| {
                    results
                        .answer_at(&entry.evaluation_id, &call.call_id)
                        .is_some()
                };
                let empty = !entry.tool_calls.iter().any(|call| answered(&call))
                    && entry.reasoning.is_none()
                    && entry.content.as_deref().is_none_or(str::is_empty);
                if empty {
                    continue;
                }
                if entry.tool_calls.iter().all(|call| answered(&call)) {
                    shown.push(Shown::As(entry));
                } else {
                    let mut entry = Box::new(entry.clone());
                    entry.tool_calls.retain(|call| answered(&call));
                    shown.push(Shown::Trimmed(entry));
                }
            }
            _ => shown.push(Shown::As(entry)),
        }
    }
    shown
}

/// The former [`answered_only`], kept as the reference the new one is
/// checked against.
#[cfg(test)]
fn answered_only_reference(entries: Vec<ConversationEntry>) -> Vec<ConversationEntry> {
    let answering: HashSet<uuid::Uuid> = {
        let results = CallResults::new(&entries);
        entries
            .iter()
            .filter(|entry| entry.role == Role::Assistant)
            .flat_map(|entry| {
                entry.tool_calls.iter().filter_map(|call| {
                    results
                        .answer(&entry.evaluation_id, &call.call_id)
                        .map(|result| result.message_id)
                })
            })
            .collect()
    };
    let answered: HashSet<(String, String)> = entries
        .iter()
        .filter(|entry| answering.contains(&entry.message_id))
        .filter_map(|entry| {
            let call_id = entry.tool_call_id.clone()?;
            Some((entry.evaluation_id.clone(), call_id))
        })
        .collect();
    entries
        .into_iter()
        .filter_map(|mut entry| match entry.role {
            Role::Tool => answering.contains(&entry.message_id).then_some(entry),
            Role::Assistant => {
                let evaluation_id = entry.evaluation_id.clone();
                entry.tool_calls.retain(|call| {
                    answered.contains(&(evaluation_id.clone(), call.call_id.clone()))
                });
                let empty = entry.tool_calls.is_empty()
                    && entry.reasoning.is_none()
                    && entry.content.as_deref().is_none_or(str::is_empty);
                (!empty).then_some(entry)
            }
            _ => Some(entry),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use convlog::model::{ConversationEntry, Event, ToolCall};
    use convlog::resume::ResumeState;
    use convlog::ConversationSlice;

    use super::{answered_only, answered_only_reference, model_view, ModelView};
    use convlog::resume::EvaluationState;

    const CONVERSATION: &str = "c";

    /// Events of two earlier evaluations (one with a call never answered,
    /// one answered twice and one orphan result), then the steps of the
    /// evaluation being run, one at a time.
    fn earlier() -> Vec<Event> {
        let calls = [
            ToolCall::new("a1", "lookup", "{}"),
            ToolCall::new("a2", "lookup", "{}"),
        ];
        vec![
            ConversationEntry::system("ev-a", 0, "sys a").recorded_in(CONVERSATION),
            ConversationEntry::user("ev-a", 1, "question a").recorded_in(CONVERSATION),
            ConversationEntry::assistant_calling("ev-a", 2, calls)
                .with_turn(1)
                .recorded_in(CONVERSATION),
            ConversationEntry::tool_result("ev-a", 3, "a1", "lookup", "one")
                .with_turn(1)
                .recorded_in(CONVERSATION),
            ConversationEntry::tool_result("ev-a", 4, "a1", "lookup", "one again")
                .with_turn(1)
                .recorded_in(CONVERSATION),
            ConversationEntry::tool_result("ev-a", 5, "zz", "lookup", "orphan")
                .with_turn(1)
                .recorded_in(CONVERSATION),
            ConversationEntry::system("ev-b", 0, "sys b").recorded_in(CONVERSATION),
            ConversationEntry::user("ev-b", 1, "question b").recorded_in(CONVERSATION),
            ConversationEntry::assistant("ev-b", 2, "answer b")
                .with_turn(1)
                .recorded_in(CONVERSATION),
        ]
    }

    fn own_steps() -> Vec<Event> {
        let calls = [
            ToolCall::new("c1", "lookup", "{}"),
            ToolCall::new("c2", "lookup", "{}"),
        ];
        vec![
            ConversationEntry::system("ev-c", 0, "sys c").recorded_in(CONVERSATION),
            ConversationEntry::user("ev-c", 1, "question c").recorded_in(CONVERSATION),
            ConversationEntry::assistant_calling("ev-c", 2, calls)
                .with_turn(1)
                .recorded_in(CONVERSATION),
            Event::tool_status(CONVERSATION, "ev-c", "c1", convlog::ToolStatus::Running),
            ConversationEntry::tool_result("ev-c", 3, "c1", "lookup", "c one")
                .with_turn(1)
                .recorded_in(CONVERSATION),
            ConversationEntry::tool_error("ev-c", 4, "c2", "lookup", "c two failed")
                .with_turn(1)
                .recorded_in(CONVERSATION),
            ConversationEntry::assistant("ev-c", 5, "answer c")
                .with_turn(2)
                .recorded_in(CONVERSATION),
        ]
    }

    /// The borrowed filter keeps exactly what the former one kept, on
    /// every prefix of a history with unanswered, twice answered, orphan,
    /// early and cross-evaluation results.
    #[test]
    fn answered_only_matches_the_former_filter_on_every_prefix() {
        let mut events = earlier();
        events.extend(own_steps());
        let mut extra = ConversationEntry::tool_result("ev-c", 9, "a2", "lookup", "other ev");
        extra.turn = 1;
        events.push(extra.recorded_in(CONVERSATION));
        let early = ConversationEntry::tool_result("ev-e", 1, "e1", "lookup", "before its call");
        events.push(early.recorded_in(CONVERSATION));
        let mut caller = ConversationEntry::assistant_calling(
            "ev-e",
            2,
            [
                ToolCall::new("e1", "lookup", "{}"),
                ToolCall::new("e2", "lookup", "{}"),
            ],
        );
        caller.content = Some(String::new());
        events.push(caller.recorded_in(CONVERSATION));
        let entries: Vec<ConversationEntry> = events
            .iter()
            .filter_map(|event| match event {
                Event::ConversationRecorded(recorded) => Some(recorded.entry.clone()),
                _ => None,
            })
            .collect();
        for end in 0..=entries.len() {
            let prefix = entries[..end].to_vec();
            assert_eq!(
                answered_only(prefix.clone()),
                answered_only_reference(prefix),
                "prefix of {end}"
            );
        }
    }

    /// The view kept step by step equals the view built whole at every
    /// step, and the borrowed step state says what `ResumeState` says.
    #[test]
    fn the_kept_view_and_step_state_match_a_fresh_build_at_every_step() {
        let mut slice = ConversationSlice::new(CONVERSATION);
        let mut lsn = 0;
        for event in earlier() {
            lsn += 1;
            slice.apply(&event, lsn);
        }
        let mut kept = ModelView::default();
        let mut checked = 0;
        for event in own_steps() {
            lsn += 1;
            slice.apply(&event, lsn);
            let whole = model_view(&slice, "ev-c");
            assert_eq!(
                kept.update(&slice, "ev-c"),
                whole.as_slice(),
                "at LSN {lsn}"
            );
            // The earlier evaluations' dangling call, duplicate and orphan
            // are left out; the view never ends with an unanswered call.
            assert!(whole
                .iter()
                .all(|entry| entry.content.as_deref() != Some("orphan")
                    && entry.content.as_deref() != Some("one again")));

            let resume = ResumeState::from_slice(&slice, "ev-c");
            let step = EvaluationState::of(&slice, "ev-c");
            let unfinished: Vec<(&str, uuid::Uuid)> = step
                .unfinished
                .iter()
                .map(|(assistant, call)| (call.call_id.as_str(), assistant.message_id))
                .collect();
            let expected: Vec<(&str, uuid::Uuid)> = resume
                .unfinished_calls
                .iter()
                .map(|call| (call.call.call_id.as_str(), call.assistant_message_id))
                .collect();
            assert_eq!(unfinished, expected, "at LSN {lsn}");
            assert_eq!(step.finished, resume.finished, "at LSN {lsn}");
            assert_eq!(step.turn, resume.turn, "at LSN {lsn}");
            assert_eq!(step.next_turn(), resume.next_turn, "at LSN {lsn}");
            assert_eq!(step.next_sequence, resume.next_sequence, "at LSN {lsn}");
            let entries: Vec<&ConversationEntry> = resume.entries.iter().collect();
            assert_eq!(step.entries, entries, "at LSN {lsn}");
            checked += 1;
        }
        assert_eq!(checked, own_steps().len());
        let last = kept.update(&slice, "ev-c").to_vec();
        let contents: Vec<Option<&str>> = last.iter().map(|e| e.content.as_deref()).collect();
        assert_eq!(
            contents,
            [
                Some("sys c"),
                Some("question a"),
                None,
                Some("one"),
                Some("question b"),
                Some("answer b"),
                Some("question c"),
                None,
                Some("c one"),
                Some("c two failed"),
                Some("answer c"),
            ]
        );
        // ev-a's assistant entry keeps only its answered call.
        assert_eq!(last[2].tool_calls.len(), 1);
        assert_eq!(last[2].tool_calls[0].call_id, "a1");

        // The next evaluation starts from what this one showed.
        let earlier = kept.into_earlier("ev-c").expect("built");
        let mut next = ModelView::with_earlier(earlier);
        for event in [
            ConversationEntry::system("ev-d", 0, "sys d").recorded_in(CONVERSATION),
            ConversationEntry::user("ev-d", 1, "question d").recorded_in(CONVERSATION),
        ] {
            lsn += 1;
            slice.apply(&event, lsn);
        }
        let whole = model_view(&slice, "ev-d");
        assert_eq!(next.update(&slice, "ev-d"), whole.as_slice());
        assert_eq!(
            whole.len(),
            last.len() + 1,
            "ev-c's system entry out, ev-d's two in"
        );
        // An evaluation with no entry yet (a generation's new one) is shown
        // every earlier entry.
        assert_eq!(
            model_view(&slice, "ev-new").len(),
            whole.len() - 1,
            "all but ev-d's system entry"
        );
        // A view never built carries nothing over.
        assert!(ModelView::default().into_earlier("ev-d").is_none());
    }
}
