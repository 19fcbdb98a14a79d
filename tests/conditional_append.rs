//! Conditional appends (`Store::append_with` with `AppendOptions::expect`): append only if a conversation
//! (or the store) is still at the version the caller read; otherwise
//! `Error::Conflict` naming both versions, and nothing appended. The check
//! and the append are atomic against every other append of the store.
//!
//! The interleavings are forced with a storage that stops one thread at a
//! chosen file operation until the test lets it go, not with timing: each
//! test passes whatever the scheduling. Where a test shows that a second
//! appender is held back, it gives it a bounded time to (wrongly) get
//! through before letting the first go on; the outcome it asserts is the
//! only one a correct store allows, however long that wait is.

mod common;

use std::io;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use convlog::control::{context_created_event, ContextsReducer, ControlMessage};
use convlog::control::{MessageControl, Principal};
use convlog::model::{ConversationEntry, Event, Role, ToolCall, ToolStatus};
use convlog::storage::StorageFile;
use convlog::store::{AppendOptions, Expect, Store, StoreBuilder, StoreOptions};
use convlog::Error;

/// How long a test gives an appender that must be held back to get
/// through anyway before it lets the other thread go on. Passing never
/// depends on it.
const HELD_BACK_WAIT: Duration = Duration::from_millis(500);

fn said(conversation: &str, sequence: u64, text: &str) -> Event {
    ConversationEntry::new("eval", sequence, Role::User, Some(text.into()))
        .recorded_in(conversation)
}

fn conflict(result: convlog::Result<std::ops::Range<u64>>) -> (Option<String>, u64, u64) {
    match result {
        Err(Error::Conflict {
            conversation_id,
            expected,
            actual,
            ..
        }) => (conversation_id, expected, actual),
        other => panic!("expected a conflict, got {other:?}"),
    }
}

#[test]
fn a_stale_conversation_version_is_a_conflict_naming_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    // No event yet: version 0.
    store
        .append_with(
            &[said("c", 0, "first")],
            AppendOptions::new().expect(Expect::conversation("c", 0)),
        )
        .unwrap();
    store.append(&[said("other", 0, "elsewhere")]).unwrap();
    let read = store.conversation("c").unwrap();
    assert_eq!(read.last_lsn(), 1);
    // Another conversation's append does not move this one.
    assert_eq!(
        store
            .append_with(
                &[said("c", 1, "second")],
                AppendOptions::new().expect(Expect::conversation("c", 1))
            )
            .unwrap(),
        3..4
    );
    let error = store
        .append_with(
            &[said("c", 2, "late")],
            AppendOptions::new().expect(Expect::conversation("c", 1)),
        )
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("conversation \"c\" is at version 3, not the expected 1"),
        "{text}"
    );
    assert_eq!(
        conflict(Err(error)),
        (Some("c".to_string()), 1, 3),
        "both versions named"
    );
    assert_eq!(store.log().next_lsn(), 4, "nothing appended on a conflict");
    assert_eq!(store.conversation("c").unwrap().len(), 2);
    // Expecting a conversation to be new when it is not.
    assert_eq!(
        conflict(store.append_with(
            &[said("c", 2, "x")],
            AppendOptions::new().expect(Expect::conversation("c", 0))
        )),
        (Some("c".to_string()), 0, 3)
    );
}

#[test]
fn the_store_version_is_its_next_lsn() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let next = store.log().next_lsn();
    store
        .append_with(
            &[said("a", 0, "one")],
            AppendOptions::new().expect(Expect::store(next)),
        )
        .unwrap();
    store.append(&[said("b", 0, "two")]).unwrap();
    assert_eq!(
        conflict(store.append_with(
            &[said("a", 1, "three")],
            AppendOptions::new().expect(Expect::store(next + 1))
        )),
        (None, 2, 3)
    );
    assert_eq!(store.log().next_lsn(), 3);
}

#[test]
fn custom_events_do_not_move_the_version_and_snapshots_keep_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        // A custom event carrying the conversation id is not folded into
        // the slice: the version the caller reads stays 0.
        store
            .append(&[context_created_event("c", Some("alice"), false)])
            .unwrap();
        let read = store.conversation("c").unwrap();
        assert_eq!(read.last_lsn(), 0);
        store
            .append_with(
                &[said("c", 0, "hello")],
                AppendOptions::new().expect(Expect::conversation("c", 0)),
            )
            .unwrap();
        store
            .append(&[context_created_event("c", Some("bob"), false)])
            .unwrap();
        assert_eq!(store.conversation("c").unwrap().last_lsn(), 2);
        store.snapshot().unwrap();
    }
    // After a reopen the version comes from the snapshot's slice alone.
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert!(store.open_report().snapshot.is_some());
    assert_eq!(
        conflict(store.append_with(
            &[said("c", 1, "x")],
            AppendOptions::new().expect(Expect::conversation("c", 1))
        )),
        (Some("c".to_string()), 1, 2)
    );
    store
        .append_with(
            &[said("c", 1, "again")],
            AppendOptions::new().expect(Expect::conversation("c", 2)),
        )
        .unwrap();
}

#[test]
fn a_read_only_store_refuses_conditional_appends() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), StoreOptions::default()).unwrap();
    writer.append(&[said("c", 0, "hello")]).unwrap();
    let reader = Store::open_read_only(dir.path(), StoreOptions::default()).unwrap();
    assert!(matches!(
        reader.append_with(
            &[said("c", 1, "x")],
            AppendOptions::new().expect(Expect::conversation("c", 1))
        ),
        Err(Error::ReadOnly {
            operation: "append",
            ..
        })
    ));
}

/// Threads racing on one conversation, conditional and unconditional: every
/// conditional append that succeeded directly follows the event it expected
/// (no event of the conversation between), and every conflict named the
/// version then current.
#[test]
fn racing_appenders_never_slip_between_a_check_and_its_append() {
    const CONDITIONAL_THREADS: usize = 4;
    const UNCONDITIONAL_THREADS: usize = 2;
    const APPENDS_PER_THREAD: usize = 25;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreOptions::default()).unwrap());
    store.append(&[said("c", 0, "start")]).unwrap();
    let barrier = Arc::new(std::sync::Barrier::new(
        CONDITIONAL_THREADS + UNCONDITIONAL_THREADS,
    ));
    let mut threads = Vec::new();
    for thread in 0..CONDITIONAL_THREADS {
        let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
        threads.push(std::thread::spawn(move || {
            barrier.wait();
            let mut won = Vec::new();
            while won.len() < APPENDS_PER_THREAD {
                let version = store.conversation("c").unwrap().last_lsn();
                // The text carries the version it expects.
                let event = said("c", 0, &format!("after {version} by {thread}"));
                match store.append_with(
                    &[event],
                    AppendOptions::new().expect(Expect::conversation("c", version)),
                ) {
                    Ok(lsns) => won.push((lsns.start, version)),
                    Err(Error::Conflict {
                        expected, actual, ..
                    }) => {
                        assert_eq!(expected, version);
                        assert!(actual > version, "versions only grow");
                    }
                    Err(other) => panic!("{other}"),
                }
            }
            won
        }));
    }
    for _ in 0..UNCONDITIONAL_THREADS {
        let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
        threads.push(std::thread::spawn(move || {
            barrier.wait();
            for index in 0..APPENDS_PER_THREAD {
                store
                    .append(&[said("c", 0, &format!("plain {index}"))])
                    .unwrap();
            }
            Vec::new()
        }));
    }
    let won: Vec<(u64, u64)> = threads
        .into_iter()
        .flat_map(|thread| thread.join().unwrap())
        .collect();
    assert_eq!(won.len(), CONDITIONAL_THREADS * APPENDS_PER_THREAD);
    // Every event of the store is of conversation "c", one per frame.
    for (lsn, expected) in won {
        assert_eq!(
            expected,
            lsn - 1,
            "the conditional append at LSN {lsn} expected version {expected}: another event came between"
        );
    }
}

/// A storage that stops the first thread to perform the armed operation on
/// a segment file until the test releases it.
#[derive(Debug, Default)]
struct Pause {
    state: Mutex<PauseState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct PauseState {
    armed: Option<Operation>,
    paused: bool,
    released: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    Read,
    Write,
}

impl Pause {
    fn arm(&self, operation: Operation) {
        *self.state.lock().unwrap() = PauseState {
            armed: Some(operation),
            ..PauseState::default()
        };
    }

    fn at(&self, operation: Operation) {
        let mut state = self.state.lock().unwrap();
        if state.armed != Some(operation) {
            return;
        }
        state.armed = None;
        state.paused = true;
        self.changed.notify_all();
        while !state.released {
            state = self.changed.wait(state).unwrap();
        }
    }

    fn wait_until_paused(&self) {
        let mut state = self.state.lock().unwrap();
        while !state.paused {
            state = self.changed.wait(state).unwrap();
        }
    }

    fn release(&self) {
        self.state.lock().unwrap().released = true;
        self.changed.notify_all();
    }
}

#[derive(Debug)]
struct PausingStorage {
    pause: Arc<Pause>,
}

#[derive(Debug)]
struct PausingFile {
    inner: Box<dyn StorageFile>,
    pause: Arc<Pause>,
}

impl StorageFile for PausingFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.pause.at(Operation::Write);
        self.inner.write_all_at(buf, offset)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.pause.at(Operation::Read);
        self.inner.read_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn size_bytes(&self) -> io::Result<u64> {
        self.inner.size_bytes()
    }
}

impl common::FsHooks for PausingStorage {
    fn wrap_written(&self, inner: Box<dyn StorageFile>) -> Box<dyn StorageFile> {
        Box::new(PausingFile {
            inner,
            pause: Arc::clone(&self.pause),
        })
    }
}

fn pausing_options(pause: &Arc<Pause>) -> StoreOptions {
    StoreOptions::new().storage(Arc::new(common::Hooked(PausingStorage {
        pause: Arc::clone(pause),
    })))
}

/// A conditional append stopped in its check (reading the conversation's
/// frame) holds back an unconditional append to the same conversation: the
/// checked version is still the one it appends after.
#[test]
fn an_unconditional_append_waits_for_a_conditional_check_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    let pause = Arc::new(Pause::default());
    let store = Arc::new(Store::open(dir.path(), pausing_options(&pause)).unwrap());
    store.append(&[said("c", 0, "start")]).unwrap();
    pause.arm(Operation::Read);
    let conditional = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            store.append_with(
                &[said("c", 1, "checked")],
                AppendOptions::new().expect(Expect::conversation("c", 1)),
            )
        })
    };
    pause.wait_until_paused();
    let (done, finished) = mpsc::channel();
    let plain = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            let result = store.append(&[said("c", 2, "plain")]);
            done.send(()).unwrap();
            result
        })
    };
    // A correct store holds the plain append back until the check is done.
    let _ = finished.recv_timeout(HELD_BACK_WAIT);
    pause.release();
    assert_eq!(conditional.join().unwrap().unwrap(), 2..3);
    assert_eq!(plain.join().unwrap().unwrap(), 3..4);
}

/// An unconditional append stopped while its frame is written (its LSN
/// assigned, not yet indexed) is seen by a conditional append that comes
/// meanwhile: the conditional one conflicts.
#[test]
fn a_conditional_append_sees_an_append_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let pause = Arc::new(Pause::default());
    let store = Arc::new(Store::open(dir.path(), pausing_options(&pause)).unwrap());
    store.append(&[said("c", 0, "start")]).unwrap();
    pause.arm(Operation::Write);
    let plain = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || store.append(&[said("c", 1, "plain")]))
    };
    pause.wait_until_paused();
    let (done, finished) = mpsc::channel();
    let conditional = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            let result = store.append_with(
                &[said("c", 2, "checked")],
                AppendOptions::new().expect(Expect::conversation("c", 1)),
            );
            done.send(()).unwrap();
            result
        })
    };
    let _ = finished.recv_timeout(HELD_BACK_WAIT);
    pause.release();
    assert_eq!(plain.join().unwrap().unwrap(), 2..3);
    assert_eq!(
        conflict(conditional.join().unwrap()),
        (Some("c".to_string()), 1, 2)
    );
    assert_eq!(store.conversation("c").unwrap().len(), 2);
}

/// Two message controls on one store: the first reads the conversation to
/// validate a tool response, and is stopped there; the second answers the
/// same call meanwhile. The first must not answer it again: its append
/// conflicts, it validates again and refuses.
#[test]
fn two_message_controls_never_answer_one_call_twice() {
    let dir = tempfile::tempdir().unwrap();
    let pause = Arc::new(Pause::default());
    let store = Arc::new(
        StoreBuilder::new(dir.path())
            .options(pausing_options(&pause))
            .reducer(ContextsReducer)
            .open()
            .unwrap(),
    );
    let first = Arc::new(MessageControl::new(Arc::clone(&store)));
    let second = MessageControl::new(Arc::clone(&store));
    let alice = Principal::user("alice");
    first.create_context(&alice, "ctx", false).unwrap();
    // The host records an assistant entry with an open call.
    let mut call = ConversationEntry::new("eval", 0, Role::Assistant, None);
    call.tool_calls = vec![ToolCall {
        call_id: "call_1".into(),
        name: "weather".into(),
        arguments: "{}".into(),
        status: ToolStatus::Pending,
        started_at: None,
        ended_at: None,
        error: None,
    }];
    store.append(&[call.recorded_in("ctx")]).unwrap();

    pause.arm(Operation::Read);
    let racing = {
        let (first, alice) = (Arc::clone(&first), alice.clone());
        std::thread::spawn(move || {
            first.add_messages(
                &alice,
                "ctx",
                &[ControlMessage::tool_response("call_1", "sunny (first)")],
            )
        })
    };
    pause.wait_until_paused();
    second
        .add_messages(
            &alice,
            "ctx",
            &[ControlMessage::tool_response("call_1", "sunny (second)")],
        )
        .unwrap();
    pause.release();
    let error = racing.join().unwrap().unwrap_err();
    assert!(
        matches!(&error, Error::ResponsesWithoutCalls { call_ids } if call_ids == &["call_1".to_string()]),
        "{error}"
    );
    let slice = store.conversation("ctx").unwrap();
    let answers: Vec<_> = slice
        .entries()
        .filter(|entry| entry.tool_call_id.as_deref() == Some("call_1"))
        .map(|entry| entry.content.clone())
        .collect();
    assert_eq!(answers, vec![Some("sunny (second)".to_string())]);
}
