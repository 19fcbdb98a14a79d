//! The appends of `POST /contexts/{id}/events`, gathered: one thread
//! appends the batches of the requests waiting for it, each as its own
//! atomic batch of the store, makes them all durable with one commit
//! ([`Store::append_batches`]: one durable write of the group) and only
//! then answers them. A group of requests so costs one commit and at most
//! one wake-up of the appending thread, instead of one blocking-pool task
//! per request, each parked in the store's group commit and woken by it
//! (docs/performance.md, "Gathered appends").
//!
//! Each request keeps a frame of its own (a context's events are not
//! spread over frames shared with other contexts, so reading a context
//! later reads only its own frames), its atomicity and its error (a bad
//! event fails that request alone). Nothing is acknowledged before it is
//! durable: when the commit fails, every request of the group not durable
//! by then gets the error (the writer is poisoned).

use std::ops::Range;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

use axum::http::StatusCode;
use convlog::log::Lsn;
use convlog::model::Event;
use convlog::Store;
use tokio::sync::oneshot;

use crate::error::ApiError;

/// The most events of waiting requests appended before one sync answers
/// them (a request with more goes alone): bounds the wait of the group's
/// first request.
pub const GATHERED_EVENTS_MAX: usize = 4_096;

/// The answer to one request.
type Answer = Result<Range<Lsn>, ApiError>;

/// A request's batch, and where its answer goes.
struct Job {
    events: Vec<Event>,
    reply: oneshot::Sender<Answer>,
}

/// What the thread's queue carries.
enum Message {
    Job(Job),
    /// Finish the jobs queued before this one, then end.
    Stop,
}

/// The handle the handlers append through; the thread ends at
/// [`Appender::shut_down`], or when the handle is dropped (with the
/// server's state).
pub struct Appender {
    queue: mpsc::Sender<Message>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Appender {
    /// Starts the appending thread for `store`. The thread holds the store
    /// weakly between groups, so it never keeps a stopped server's store
    /// (and its lock) open.
    pub fn start(store: &Arc<Store>) -> std::io::Result<Appender> {
        let (queue, jobs) = mpsc::channel();
        let store = Arc::downgrade(store);
        let thread = std::thread::Builder::new()
            .name("convlog-appender".to_string())
            .spawn(move || run(&store, &jobs))?;
        Ok(Appender {
            queue,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Appends and answers what was queued before this call, then ends the
    /// thread and waits for it (blocking): afterwards the thread holds no
    /// reference to the store, so a stopped server releases the store's
    /// lock when it drops its own. Requests queued later are answered 503.
    pub fn shut_down(&self) {
        let _ = self.queue.send(Message::Stop);
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }

    /// Appends `events` (one request's batch) as one atomic batch; resolves
    /// to their LSNs once they are durable, or to the error that kept them
    /// out of the store.
    pub async fn append(&self, events: Vec<Event>) -> Answer {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Message::Job(Job { events, reply }))
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// The answer when the thread is gone (the server stops): the job was
/// dropped before it was appended.
fn stopped() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "the server is stopping: the events were not appended",
    )
}

/// The thread: takes every job queued (up to the limit), appends them,
/// syncs, answers each; until the queue's senders are gone.
fn run(store: &Weak<Store>, jobs: &mpsc::Receiver<Message>) {
    let mut carried: Option<Job> = None;
    let mut stopping = false;
    while !stopping {
        let first = match carried.take() {
            Some(job) => job,
            None => match jobs.recv() {
                Ok(Message::Job(job)) => job,
                Ok(Message::Stop) | Err(mpsc::RecvError) => return,
            },
        };
        let mut events = first.events.len();
        let mut group = vec![first];
        while let Ok(message) = jobs.try_recv() {
            let Message::Job(job) = message else {
                stopping = true;
                break;
            };
            if events + job.events.len() > GATHERED_EVENTS_MAX {
                carried = Some(job);
                break;
            }
            events += job.events.len();
            group.push(job);
        }
        let Some(store) = store.upgrade() else {
            // The server is gone: its requests' answers are dropped too.
            return;
        };
        append_group(&store, group);
        // `store` is dropped here, before the next wait: between groups the
        // thread holds the store only weakly.
    }
    // Stopping: a job carried over the limit is still answered.
    if let (Some(job), Some(store)) = (carried, store.upgrade()) {
        append_group(&store, vec![job]);
    }
}

/// Appends each batch of the group on its own and makes them durable with
/// one commit ([`Store::append_batches`]), then answers each request.
fn append_group(store: &Store, group: Vec<Job>) {
    let batches: Vec<&[Event]> = group.iter().map(|job| job.events.as_slice()).collect();
    let results = store.append_batches(&batches);
    drop(batches);
    for (job, result) in group.into_iter().zip(results) {
        // Durable when acknowledged; a batch that failed (its own error,
        // or the commit's, which poisons the writer) left nothing stored.
        let _ = job.reply.send(result.map_err(ApiError::from));
    }
}

#[cfg(test)]
mod tests {
    use convlog::model::ConversationEntry;
    use convlog::StoreOptions;

    use super::*;

    fn job(events: Vec<Event>) -> (Job, oneshot::Receiver<Answer>) {
        let (reply, answer) = oneshot::channel();
        (Job { events, reply }, answer)
    }

    fn entry(context: &str, sequence: u64, content: &str) -> Event {
        ConversationEntry::user("eval-1", sequence, content).recorded_in(context)
    }

    fn contents(store: &Store, context: &str) -> Vec<String> {
        store
            .conversation(context)
            .unwrap()
            .entries()
            .map(|entry| entry.content.clone().unwrap_or_default())
            .collect()
    }

    /// The content recorded at `lsn` in `context`.
    fn at(store: &Store, context: &str, lsn: Lsn) -> Option<String> {
        let slice = store.conversation(context).unwrap();
        let recorded = slice.recorded_iter().find(|recorded| recorded.lsn == lsn);
        recorded.and_then(|recorded| recorded.entry.content.clone())
    }

    #[test]
    fn a_group_is_durable_before_it_is_answered_and_each_request_is_a_batch_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let (a, mut answer_a) = job(vec![entry("a", 0, "a0"), entry("a", 1, "a1")]);
        let (b, mut answer_b) = job(vec![entry("b", 0, "b0")]);
        let (c, mut answer_c) = job(vec![entry("a", 2, "a2"), entry("c", 0, "c0")]);
        let before = store.log().writer_stats();
        append_group(&store, vec![a, b, c]);
        let a = answer_a.try_recv().unwrap().unwrap();
        let b = answer_b.try_recv().unwrap().unwrap();
        let c = answer_c.try_recv().unwrap().unwrap();
        assert_eq!((a.clone(), b.clone(), c.clone()), (1..3, 3..4, 4..6));
        // Durable when answered, with one commit for the group: one durable
        // write (no write per request, no separate fdatasync).
        assert_eq!(store.log().durable_lsn(), 6);
        let after = store.log().writer_stats();
        assert_eq!(after.syncs, before.syncs + 1);
        assert_eq!(after.writes, before.writes + 1);
        // A frame per request, each event at its LSN.
        let records: Vec<_> = store
            .log()
            .iter_from(1)
            .collect::<convlog::Result<_>>()
            .unwrap();
        let frames: Vec<_> = records.iter().map(|record| record.position).collect();
        assert_eq!(frames[0], frames[1]);
        assert_ne!(frames[1], frames[2]);
        assert_ne!(frames[2], frames[3]);
        assert_eq!(frames[3], frames[4]);
        assert_eq!(at(&store, "a", a.start).as_deref(), Some("a0"));
        assert_eq!(at(&store, "a", a.end - 1).as_deref(), Some("a1"));
        assert_eq!(at(&store, "b", b.start).as_deref(), Some("b0"));
        assert_eq!(at(&store, "a", c.start).as_deref(), Some("a2"));
        assert_eq!(at(&store, "c", c.end - 1).as_deref(), Some("c0"));
        assert_eq!(contents(&store, "a"), ["a0", "a1", "a2"]);
    }

    #[test]
    fn a_bad_batch_in_a_group_fails_alone_and_the_others_are_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let (a, mut answer_a) = job(vec![entry("a", 0, "a0")]);
        // An empty evaluation id: the store refuses the event.
        let bad = ConversationEntry::user("", 0, "bad").recorded_in("b");
        let (b, mut answer_b) = job(vec![entry("b", 0, "b0"), bad]);
        let (c, mut answer_c) = job(vec![entry("c", 0, "c0")]);
        append_group(&store, vec![a, b, c]);
        assert!(answer_a.try_recv().unwrap().is_ok());
        let refused = answer_b.try_recv().unwrap().unwrap_err();
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        // The index is the request's own event's.
        assert!(refused.message.contains("event 1"), "{}", refused.message);
        assert!(answer_c.try_recv().unwrap().is_ok());
        assert_eq!(contents(&store, "a"), ["a0"]);
        assert!(store.conversation("b").is_err() || contents(&store, "b").is_empty());
        assert_eq!(contents(&store, "c"), ["c0"]);
    }

    #[test]
    fn the_queue_is_taken_up_to_the_limit_per_sync() {
        let (queue, jobs) = mpsc::channel();
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), StoreOptions::default()).unwrap());
        let syncs = store.log().writer_stats().syncs;
        // Three jobs: the first two fill a group, the third goes in the next.
        let sizes = [GATHERED_EVENTS_MAX / 2, GATHERED_EVENTS_MAX / 2, 1];
        let mut answers = Vec::new();
        let mut sequence = 0;
        for size in sizes {
            let events = (0..size)
                .map(|_| {
                    sequence += 1;
                    entry("a", sequence, "x")
                })
                .collect();
            let (job, answer) = job(events);
            queue.send(Message::Job(job)).unwrap();
            answers.push(answer);
        }
        drop(queue);
        run(&Arc::downgrade(&store), &jobs);
        for answer in &mut answers {
            answer.try_recv().unwrap().unwrap();
        }
        assert_eq!(store.log().writer_stats().syncs, syncs + 2);
    }

    /// After `shut_down` the thread is gone and holds no reference to the
    /// store (the server's stop releases the store's lock with its own;
    /// before, the thread could still hold the store for a moment after it
    /// had answered, and a store reopened at once found it locked); a
    /// request queued afterwards is answered "stopping", not left waiting.
    #[test]
    fn after_shut_down_the_thread_holds_no_store_and_later_requests_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), StoreOptions::default()).unwrap());
        let appender = Appender::start(&store).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for round in 0..20 {
            let lsns = runtime
                .block_on(appender.append(vec![entry("a", round, "x")]))
                .unwrap();
            assert_eq!(lsns, round + 1..round + 2);
        }
        appender.shut_down();
        assert_eq!(Arc::strong_count(&store), 1, "the thread holds the store");
        assert!(appender.thread.lock().unwrap().is_none());
        let refused = runtime
            .block_on(appender.append(vec![entry("a", 20, "late")]))
            .unwrap_err();
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
        drop(appender);
        let store = Arc::into_inner(store).expect("the only reference");
        drop(store);
        // The lock is free: the store opens again.
        let reopened = Store::open(dir.path(), StoreOptions::default()).unwrap();
        assert_eq!(contents(&reopened, "a").len(), 20);
    }
}
