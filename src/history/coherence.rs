//! Tool call / result pairing, and where a history can be cut without
//! breaking it.
//!
//! Pairing, in list order: an assistant entry opens each of its calls; a
//! tool entry answers the most recent open call with its `tool_call_id`,
//! which closes it. A tool entry that finds no open call is an *orphan
//! result*; a call still open at the end is an *unanswered call*. A list is
//! *coherent* when it has neither.
//!
//! A *cut* at position `p` keeps the system entries before `p` and every
//! entry from `p` on. It is *coherent* when no kept result answers a call
//! before `p`: then the cut adds no orphan result, and, since results come
//! after their calls, every kept call keeps the results the input had.

use std::collections::HashMap;
use std::fmt;

use crate::model::{ConversationEntry, Role};

/// One break of the pairing rules.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Incoherence {
    /// A tool result with no open call to answer (none before it, or its
    /// call was already answered).
    OrphanResult {
        /// Position of the tool entry.
        index: usize,
        /// The call id it names.
        call_id: String,
    },
    /// A tool call that no later result answers.
    UnansweredCall {
        /// Position of the assistant entry.
        index: usize,
        /// The call id.
        call_id: String,
    },
}

impl Incoherence {
    /// The call id concerned.
    pub fn call_id(&self) -> &str {
        match self {
            Incoherence::OrphanResult { call_id, .. }
            | Incoherence::UnansweredCall { call_id, .. } => call_id,
        }
    }
}

impl fmt::Display for Incoherence {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Incoherence::OrphanResult { index, call_id } => write!(
                formatter,
                "entry {index}: tool result for {call_id:?} answers no earlier open call"
            ),
            Incoherence::UnansweredCall { index, call_id } => write!(
                formatter,
                "entry {index}: tool call {call_id:?} has no later result"
            ),
        }
    }
}

/// How the calls and results of a list pair up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pairing {
    /// `(assistant index, result index)` of every answered call, in the
    /// order the results appear.
    pub pairs: Vec<(usize, usize)>,
    /// Every break of the rules, in list order (orphans where they occur,
    /// unanswered calls where they were made).
    pub incoherences: Vec<Incoherence>,
}

/// Pairs the calls and results of `entries` (see the module docs).
pub fn pair(entries: &[ConversationEntry]) -> Pairing {
    // call id -> stack of (assistant index, call position) still open.
    let mut open: HashMap<&str, Vec<(usize, usize)>> = HashMap::new();
    let mut answered: Vec<Vec<bool>> = entries
        .iter()
        .map(|entry| vec![false; entry.tool_calls.len()])
        .collect();
    let mut pairing = Pairing::default();
    let mut orphans = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        if entry.role == Role::Tool {
            let call_id = entry.tool_call_id.as_deref().unwrap_or("");
            match open.get_mut(call_id).and_then(Vec::pop) {
                Some((call_index, position)) => {
                    answered[call_index][position] = true;
                    pairing.pairs.push((call_index, index));
                }
                None => orphans.push(Incoherence::OrphanResult {
                    index,
                    call_id: call_id.to_string(),
                }),
            }
        } else {
            for (position, call) in entry.tool_calls.iter().enumerate() {
                open.entry(call.call_id.as_str())
                    .or_default()
                    .push((index, position));
            }
        }
    }
    let unanswered = entries.iter().enumerate().flat_map(|(index, entry)| {
        let answered = &answered[index];
        entry
            .tool_calls
            .iter()
            .enumerate()
            .filter(move |(position, _)| !answered[*position])
            .map(move |(_, call)| Incoherence::UnansweredCall {
                index,
                call_id: call.call_id.clone(),
            })
    });
    let mut incoherences: Vec<Incoherence> = orphans.into_iter().chain(unanswered).collect();
    incoherences.sort_by_key(|incoherence| match incoherence {
        Incoherence::OrphanResult { index, .. } | Incoherence::UnansweredCall { index, .. } => {
            *index
        }
    });
    pairing.incoherences = incoherences;
    pairing
}

/// Every break of the pairing rules in `entries`, in list order.
pub fn incoherences(entries: &[ConversationEntry]) -> Vec<Incoherence> {
    pair(entries).incoherences
}

/// Whether `entries` has no orphan result and no unanswered call.
pub fn is_coherent(entries: &[ConversationEntry]) -> bool {
    incoherences(entries).is_empty()
}

/// For every position `p` in `0..=entries.len()`, whether a cut at `p` is
/// coherent (see the module docs). Positions 0 and `len` always are.
pub fn coherent_cuts(entries: &[ConversationEntry]) -> Vec<bool> {
    // A pair (call at k, result at j) forbids every cut in k+1..=j.
    let mut depth = vec![0i64; entries.len() + 2];
    for (call, result) in pair(entries).pairs {
        depth[call + 1] += 1;
        depth[result + 1] -= 1;
    }
    let mut open = 0;
    depth[..=entries.len()]
        .iter()
        .map(|change| {
            open += change;
            open == 0
        })
        .collect()
}

/// The entries a cut at `cut` keeps: the system entries before it, then
/// everything from it on.
pub(crate) fn cut_at(entries: &[ConversationEntry], cut: usize) -> Vec<ConversationEntry> {
    entries[..cut]
        .iter()
        .filter(|entry| entry.role == Role::System)
        .chain(&entries[cut..])
        .cloned()
        .collect()
}

/// The first coherent cut at or after `from`.
pub(crate) fn first_coherent_cut(cuts: &[bool], from: usize) -> usize {
    (from..cuts.len())
        .find(|&position| cuts[position])
        .unwrap_or(cuts.len() - 1)
}
