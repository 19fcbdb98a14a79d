//! The appends of `POST /contexts/{id}/events`, gathered: one thread writes
//! the batches of the requests that arrived together as one atomic batch of
//! the store, so a group of requests costs one `Store::append` (one frame,
//! one durable commit) and wakes the appending thread at most once, instead
//! of one blocking-pool task per request, each parked in the group commit
//! and woken by it (docs/performance.md, "Gathered appends").
//!
//! Each request is still atomic (its events are contiguous in the frame,
//! and a frame is stored whole or not at all) and answered only once the
//! frame is durable: the append uses the store's durability, like every
//! other append of the server. When the gathered append fails, the thread
//! appends each request's batch on its own, so an error (a bad event, an
//! erased context) is the failing request's alone and the others are
//! stored as if they had come one at a time.

use std::ops::Range;
use std::sync::mpsc;
use std::sync::{Arc, Weak};

use axum::http::StatusCode;
use convlog::log::Lsn;
use convlog::model::Event;
use convlog::Store;
use tokio::sync::oneshot;

use crate::error::ApiError;

/// The most events one gathered append takes from the queue (a request
/// with more goes alone): well under the log's `BATCH_EVENTS_MAX`.
pub const GATHERED_EVENTS_MAX: usize = 4_096;
/// The most bytes of events' JSON text one gathered append takes from the
/// queue (a request with more goes alone). The stored form of an event is
/// not larger than its JSON form by more than a few bytes, so this stays
/// well under the log's `BATCH_BYTES_MAX` (64 MiB).
pub const GATHERED_TEXT_BYTES_MAX: usize = 8 * 1024 * 1024;

/// A request's batch, and where its answer goes.
struct Job {
    events: Vec<Event>,
    text_bytes: usize,
    reply: oneshot::Sender<convlog::Result<Range<Lsn>>>,
}

/// The handle the handlers append through; the thread ends when it is
/// dropped (with the server's state).
pub struct Appender {
    queue: mpsc::Sender<Job>,
}

impl Appender {
    /// Starts the appending thread for `store`. The thread holds the store
    /// weakly, so it never keeps a stopped server's store (and its lock)
    /// open.
    pub fn start(store: &Arc<Store>) -> std::io::Result<Appender> {
        let (queue, jobs) = mpsc::channel();
        let store = Arc::downgrade(store);
        std::thread::Builder::new()
            .name("convlog-appender".to_string())
            .spawn(move || run(&store, &jobs))?;
        Ok(Appender { queue })
    }

    /// Appends `events` (one request's batch; `text_bytes` the length of its
    /// JSON text) as one atomic batch; resolves to their LSNs once they are
    /// durable, or to the error that kept them out of the store.
    pub async fn append(
        &self,
        events: Vec<Event>,
        text_bytes: usize,
    ) -> Result<Range<Lsn>, ApiError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Job {
                events,
                text_bytes,
                reply,
            })
            .map_err(|_| stopped())?;
        Ok(answer.await.map_err(|_| stopped())??)
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

/// The thread: takes every job queued (up to the limits), appends them as
/// one batch, answers each; until the queue's senders are gone.
fn run(store: &Weak<Store>, jobs: &mpsc::Receiver<Job>) {
    let mut carried: Option<Job> = None;
    loop {
        let first = match carried.take() {
            Some(job) => job,
            None => match jobs.recv() {
                Ok(job) => job,
                Err(mpsc::RecvError) => return,
            },
        };
        let mut events = first.events.len();
        let mut text_bytes = first.text_bytes;
        let mut group = vec![first];
        while let Ok(job) = jobs.try_recv() {
            if events + job.events.len() > GATHERED_EVENTS_MAX
                || text_bytes + job.text_bytes > GATHERED_TEXT_BYTES_MAX
            {
                carried = Some(job);
                break;
            }
            events += job.events.len();
            text_bytes += job.text_bytes;
            group.push(job);
        }
        let Some(store) = store.upgrade() else {
            // The server is gone: its requests' answers are dropped too.
            return;
        };
        append_group(&store, group);
    }
}

/// Appends the group's batches as one, and answers each request with its
/// own part of the LSNs; on an error, appends each batch on its own.
fn append_group(store: &Store, group: Vec<Job>) {
    if group.len() == 1 {
        let job = group.into_iter().next().expect("one job");
        let _ = job.reply.send(store.append(&job.events));
        return;
    }
    let mut all = Vec::with_capacity(group.iter().map(|job| job.events.len()).sum());
    let mut answers = Vec::with_capacity(group.len());
    for job in group {
        answers.push((job.events.len(), job.reply));
        all.extend(job.events);
    }
    match store.append(&all) {
        Ok(lsns) => {
            let mut start = lsns.start;
            for (len, reply) in answers {
                let end = start + len as Lsn;
                let _ = reply.send(Ok(start..end));
                start = end;
            }
            debug_assert_eq!(start, lsns.end);
        }
        Err(_) => {
            // Nothing was stored: each request's batch alone says whose
            // error it is (and the others are stored).
            let mut start = 0;
            for (len, reply) in answers {
                let _ = reply.send(store.append(&all[start..start + len]));
                start += len;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use convlog::model::ConversationEntry;
    use convlog::StoreOptions;

    use super::*;

    fn job(events: Vec<Event>) -> (Job, oneshot::Receiver<convlog::Result<Range<Lsn>>>) {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            events,
            text_bytes: 0,
            reply,
        };
        (job, answer)
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

    #[test]
    fn a_gathered_group_is_one_batch_and_each_request_gets_its_own_lsns() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let (a, mut answer_a) = job(vec![entry("a", 0, "a0"), entry("a", 1, "a1")]);
        let (b, mut answer_b) = job(vec![entry("b", 0, "b0")]);
        let (c, mut answer_c) = job(vec![entry("a", 2, "a2"), entry("c", 0, "c0")]);
        append_group(&store, vec![a, b, c]);
        let a = answer_a.try_recv().unwrap().unwrap();
        let b = answer_b.try_recv().unwrap().unwrap();
        let c = answer_c.try_recv().unwrap().unwrap();
        assert_eq!((a.clone(), b.clone(), c.clone()), (1..3, 3..4, 4..6));
        // One frame holds the three requests' events, each at its LSNs.
        let records: Vec<_> = store
            .log()
            .iter_from(1)
            .collect::<convlog::Result<_>>()
            .unwrap();
        assert_eq!(records.len(), 5);
        assert!(records.iter().all(|r| r.position == records[0].position));
        let at = |context: &str, lsn: Lsn| {
            let slice = store.conversation(context).unwrap();
            let recorded = slice.recorded_iter().find(|recorded| recorded.lsn == lsn);
            recorded.and_then(|recorded| recorded.entry.content.clone())
        };
        assert_eq!(at("a", a.start).as_deref(), Some("a0"));
        assert_eq!(at("a", a.end - 1).as_deref(), Some("a1"));
        assert_eq!(at("b", b.start).as_deref(), Some("b0"));
        assert_eq!(at("a", c.start).as_deref(), Some("a2"));
        assert_eq!(at("c", c.end - 1).as_deref(), Some("c0"));
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
        match answer_b.try_recv().unwrap() {
            // The index is the request's own, not the group's.
            Err(convlog::Error::InvalidEvent { index, .. }) => assert_eq!(index, 1),
            other => panic!("expected the request's invalid event, got {other:?}"),
        }
        assert!(answer_c.try_recv().unwrap().is_ok());
        assert_eq!(contents(&store, "a"), ["a0"]);
        assert!(store.conversation("b").is_err() || contents(&store, "b").is_empty());
        assert_eq!(contents(&store, "c"), ["c0"]);
    }

    #[test]
    fn the_queue_is_taken_up_to_the_limits() {
        let (queue, jobs) = mpsc::channel();
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), StoreOptions::default()).unwrap());
        let mut answers = Vec::new();
        // Three jobs whose text together is over the limit: the first two
        // go together, the third in a group of its own.
        for (n, bytes) in [
            (0, GATHERED_TEXT_BYTES_MAX / 2),
            (1, GATHERED_TEXT_BYTES_MAX / 2),
            (2, 1),
        ] {
            let (mut job, answer) = job(vec![entry("a", n, &format!("a{n}"))]);
            job.text_bytes = bytes;
            queue.send(job).unwrap();
            answers.push(answer);
        }
        drop(queue);
        run(&Arc::downgrade(&store), &jobs);
        let lsns: Vec<_> = answers
            .iter_mut()
            .map(|answer| answer.try_recv().unwrap().unwrap())
            .collect();
        assert_eq!(lsns, [1..2, 2..3, 3..4]);
        let records: Vec<_> = store
            .log()
            .iter_from(1)
            .collect::<convlog::Result<_>>()
            .unwrap();
        assert_eq!(records[0].position, records[1].position);
        assert_ne!(records[1].position, records[2].position);
    }
}
