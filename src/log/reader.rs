//! Reading the log: forward iteration from any LSN, across segments, and
//! following a log while a writer (in this or another process) appends.
//!
//! Sealed segments are read through a read-only memory map. The active
//! (last) segment is read with positioned reads, never mapped: a writer that
//! recovers from a crash may shrink it, and a map of it could then fault.
//!
//! A reader never yields a record from a frame that is incomplete or fails
//! its checksum. In the active segment of a directory reader (another
//! process's log) such a frame is the end of what has been written *so far*;
//! anywhere else it is corruption, reported with segment and offset.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use crate::error::{Error, Result};
use crate::log::format::{self, FrameDecode, FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::log::Lsn;
use crate::log::{recovery, segment};
use crate::storage::{FileSystem, SealedFile, SharedBytes, Storage, StorageFile};

/// Where a record's frame starts: the segment (by first LSN) and byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Position {
    /// First LSN of the segment holding the frame.
    pub segment: Lsn,
    /// Byte offset of the frame in that segment.
    pub offset: u64,
}

/// One event read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The event's LSN.
    pub lsn: Lsn,
    /// Where the frame (atomic batch) holding the event starts.
    pub position: Position,
    /// The bytes that were appended.
    pub payload: Vec<u8>,
}

struct SealedSegment {
    first_lsn: Lsn,
    path: PathBuf,
    bytes: OnceLock<SharedBytes>,
}

impl std::fmt::Debug for SealedSegment {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SealedSegment")
            .field("first_lsn", &self.first_lsn)
            .field("path", &self.path)
            .field("mapped", &self.bytes.get().is_some())
            .finish()
    }
}

impl SealedSegment {
    fn new(first_lsn: Lsn, path: PathBuf) -> Arc<SealedSegment> {
        Arc::new(SealedSegment {
            first_lsn,
            path,
            bytes: OnceLock::new(),
        })
    }

    fn bytes(&self, storage: &dyn Storage) -> Result<&[u8]> {
        if self.bytes.get().is_none() {
            let mapped = storage
                .read_immutable(&self.path, SealedFile::assert_sealed())
                .map_err(Error::io("map sealed segment", &self.path))?;
            let _ = self.bytes.set(mapped);
        }
        let bytes = self.bytes.get().expect("set above");
        Ok((**bytes).as_ref())
    }
}

#[derive(Debug, Clone)]
struct ActiveSegment {
    first_lsn: Lsn,
    path: PathBuf,
    file: Arc<dyn StorageFile>,
    /// Bytes known to hold complete frames; `None` when unknown (another
    /// process writes the segment).
    limit: Option<u64>,
}

#[derive(Debug, Clone)]
enum SegmentRef {
    Sealed(Arc<SealedSegment>),
    Active(ActiveSegment),
}

impl SegmentRef {
    fn first_lsn(&self) -> Lsn {
        match self {
            SegmentRef::Sealed(sealed) => sealed.first_lsn,
            SegmentRef::Active(active) => active.first_lsn,
        }
    }

    fn path(&self) -> &Path {
        match self {
            SegmentRef::Sealed(sealed) => &sealed.path,
            SegmentRef::Active(active) => &active.path,
        }
    }
}

#[derive(Debug)]
struct ViewState {
    sealed: Vec<Arc<SealedSegment>>,
    active: ActiveSegment,
    visible_next_lsn: Lsn,
}

/// The writer's segments as readers in the same process see them.
#[derive(Debug)]
pub(crate) struct SharedView {
    storage: Arc<dyn Storage>,
    state: RwLock<ViewState>,
    generation: Mutex<u64>,
    published: Condvar,
}

impl SharedView {
    pub(crate) fn new(
        storage: Arc<dyn Storage>,
        sealed: Vec<(Lsn, PathBuf)>,
        active_first_lsn: Lsn,
        active_path: PathBuf,
        active_file: Arc<dyn StorageFile>,
        visible_bytes: u64,
        visible_next_lsn: Lsn,
    ) -> SharedView {
        SharedView {
            storage,
            state: RwLock::new(ViewState {
                sealed: sealed
                    .into_iter()
                    .map(|(first_lsn, path)| SealedSegment::new(first_lsn, path))
                    .collect(),
                active: ActiveSegment {
                    first_lsn: active_first_lsn,
                    path: active_path,
                    file: active_file,
                    limit: Some(visible_bytes),
                },
                visible_next_lsn,
            }),
            generation: Mutex::new(0),
            published: Condvar::new(),
        }
    }

    /// Makes `bytes` of the active segment (up to `next_lsn`) visible.
    pub(crate) fn publish_active(&self, bytes: u64, next_lsn: Lsn) {
        {
            let mut state = self.state.write();
            state.active.limit = Some(bytes);
            state.visible_next_lsn = next_lsn;
        }
        self.bump();
    }

    /// Seals the active segment and makes `path` the new, empty active one.
    pub(crate) fn seal_and_start(
        &self,
        sealed_path: PathBuf,
        first_lsn: Lsn,
        path: PathBuf,
        file: Arc<dyn StorageFile>,
    ) {
        {
            let mut state = self.state.write();
            let sealed_first_lsn = state.active.first_lsn;
            state
                .sealed
                .push(SealedSegment::new(sealed_first_lsn, sealed_path));
            state.active = ActiveSegment {
                first_lsn,
                path,
                file,
                limit: Some(SEGMENT_HEADER_BYTES as u64),
            };
        }
        self.bump();
    }

    fn bump(&self) {
        *self.generation.lock() += 1;
        self.published.notify_all();
    }

    fn layout(&self) -> Vec<SegmentRef> {
        let state = self.state.read();
        let mut layout: Vec<SegmentRef> = state
            .sealed
            .iter()
            .cloned()
            .map(SegmentRef::Sealed)
            .collect();
        layout.push(SegmentRef::Active(state.active.clone()));
        layout
    }

    /// Removes sealed segments whose events all precede `lsn` from the view
    /// (the last segment is never removed); returns their paths.
    pub(crate) fn take_sealed_before(&self, lsn: Lsn) -> Vec<PathBuf> {
        let mut state = self.state.write();
        let mut removable = 0;
        for index in 0..state.sealed.len() {
            let next_first_lsn = state
                .sealed
                .get(index + 1)
                .map_or(state.active.first_lsn, |next| next.first_lsn);
            if next_first_lsn <= lsn {
                removable = index + 1;
            } else {
                break;
            }
        }
        state
            .sealed
            .drain(..removable)
            .map(|segment| segment.path.clone())
            .collect()
    }

    pub(crate) fn first_lsn(&self) -> Lsn {
        let state = self.state.read();
        state
            .sealed
            .first()
            .map_or(state.active.first_lsn, |first| first.first_lsn)
    }

    /// The segment starting at `first_lsn`, without copying the whole list.
    fn segment(&self, first_lsn: Lsn) -> Option<SegmentRef> {
        let state = self.state.read();
        if state.active.first_lsn == first_lsn {
            return Some(SegmentRef::Active(state.active.clone()));
        }
        state
            .sealed
            .binary_search_by_key(&first_lsn, |segment| segment.first_lsn)
            .ok()
            .map(|index| SegmentRef::Sealed(Arc::clone(&state.sealed[index])))
    }

    pub(crate) fn visible_next_lsn(&self) -> Lsn {
        self.state.read().visible_next_lsn
    }

    fn wait_for_publish(&self, seen: u64, deadline: Instant) -> u64 {
        let mut generation = self.generation.lock();
        if *generation == seen {
            self.published.wait_until(&mut generation, deadline);
        }
        *generation
    }

    fn generation(&self) -> u64 {
        *self.generation.lock()
    }
}

/// Segments of a store read from its directory (another process writes it).
#[derive(Debug)]
struct DirectorySource {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    sealed: HashMap<Lsn, Arc<SealedSegment>>,
    open: HashMap<Lsn, Arc<dyn StorageFile>>,
}

impl DirectorySource {
    fn layout(&mut self) -> Result<Vec<SegmentRef>> {
        let segments = segment::list(self.storage.as_ref(), &self.dir)?.segments;
        let mut layout = Vec::with_capacity(segments.len());
        for (index, file) in segments.iter().enumerate() {
            if index + 1 < segments.len() {
                let sealed = self
                    .sealed
                    .entry(file.first_lsn)
                    .or_insert_with(|| SealedSegment::new(file.first_lsn, file.path.clone()));
                layout.push(SegmentRef::Sealed(Arc::clone(sealed)));
            } else {
                let handle = match self.open.get(&file.first_lsn) {
                    Some(handle) => Arc::clone(handle),
                    None => {
                        let handle: Arc<dyn StorageFile> = Arc::from(
                            self.storage
                                .open_read(&file.path)
                                .map_err(Error::io("open segment", &file.path))?,
                        );
                        self.open.insert(file.first_lsn, Arc::clone(&handle));
                        handle
                    }
                };
                layout.push(SegmentRef::Active(ActiveSegment {
                    first_lsn: file.first_lsn,
                    path: file.path.clone(),
                    file: handle,
                    limit: None,
                }));
            }
        }
        let known: std::collections::HashSet<Lsn> =
            segments.iter().map(|file| file.first_lsn).collect();
        self.sealed.retain(|lsn, _| known.contains(lsn));
        self.open.retain(|lsn, _| known.contains(lsn));
        Ok(layout)
    }
}

#[derive(Debug, Clone)]
enum Source {
    Writer(Arc<SharedView>),
    Directory(Arc<Mutex<DirectorySource>>),
}

impl Source {
    fn layout(&self) -> Result<Vec<SegmentRef>> {
        match self {
            Source::Writer(view) => Ok(view.layout()),
            Source::Directory(directory) => directory.lock().layout(),
        }
    }

    fn storage(&self) -> Arc<dyn Storage> {
        match self {
            Source::Writer(view) => Arc::clone(&view.storage),
            Source::Directory(directory) => Arc::clone(&directory.lock().storage),
        }
    }
}

/// Options of a read-only opener.
#[derive(Debug, Clone)]
pub struct ReaderOptions {
    /// Stop quietly at the first damage instead of returning
    /// `Error::Corrupted`: everything before the damage stays readable.
    pub salvage: bool,
    /// The storage to read through (the real file system by default).
    pub storage: Arc<dyn Storage>,
}

impl Default for ReaderOptions {
    fn default() -> ReaderOptions {
        ReaderOptions {
            salvage: false,
            storage: Arc::new(FileSystem),
        }
    }
}

/// A read-only view of a log. Takes no lock: any number of readers, in any
/// process, may read and follow a log while its one writer appends.
#[derive(Debug, Clone)]
pub struct LogReader {
    source: Source,
    salvage: bool,
}

impl LogReader {
    /// Opens the store at `dir` for reading.
    pub fn open(dir: impl AsRef<Path>) -> Result<LogReader> {
        LogReader::open_with(dir, ReaderOptions::default())
    }

    /// Opens the store at `dir` for reading with `options`.
    pub fn open_with(dir: impl AsRef<Path>, options: ReaderOptions) -> Result<LogReader> {
        let dir = dir.as_ref().to_path_buf();
        if segment::list(options.storage.as_ref(), &dir)?
            .segments
            .is_empty()
        {
            return Err(Error::NotAStore { path: dir });
        }
        Ok(LogReader {
            source: Source::Directory(Arc::new(Mutex::new(DirectorySource {
                dir,
                storage: options.storage,
                sealed: HashMap::new(),
                open: HashMap::new(),
            }))),
            salvage: options.salvage,
        })
    }

    pub(crate) fn for_writer(view: Arc<SharedView>) -> LogReader {
        LogReader {
            source: Source::Writer(view),
            salvage: false,
        }
    }

    /// Reads the frame (atomic batch) that starts at `position`, checking its
    /// checksum, and returns its events. Used by indexes: a position comes
    /// from [`Record::position`] or `Log::append_batch_positioned`.
    pub fn read_frame(&self, position: Position) -> Result<Vec<Record>> {
        let found = match &self.source {
            Source::Writer(view) => view.segment(position.segment),
            Source::Directory(_) => self
                .source
                .layout()?
                .into_iter()
                .find(|segment| segment.first_lsn() == position.segment),
        };
        let segment = found.as_ref().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "no segment starting at LSN {} in the log (removed by compaction?)",
                position.segment
            ))
        })?;
        let storage = self.source.storage();
        let damaged = |reason: String| Error::Corrupted {
            segment: segment.path().to_path_buf(),
            offset: position.offset,
            reason,
        };
        let owned;
        let bytes: &[u8] = match segment {
            SegmentRef::Sealed(sealed) => {
                let bytes = sealed.bytes(storage.as_ref())?;
                bytes
                    .get(position.offset as usize..)
                    .ok_or_else(|| damaged("position past the end of the segment".into()))?
            }
            SegmentRef::Active(active) => {
                // One read covers most frames; a larger one needs a second.
                let mut frame = vec![0u8; SMALL_FRAME_BYTES];
                let read = active
                    .file
                    .read_at(&mut frame, position.offset)
                    .map_err(Error::io("read segment", &active.path))?;
                frame.truncate(read);
                let length = format::frame_length_from_header(&frame)
                    .map_err(|reason| damaged(reason.into()))?;
                if length > frame.len() {
                    frame.resize(length, 0);
                    let read = active
                        .file
                        .read_at(&mut frame, position.offset)
                        .map_err(Error::io("read segment", &active.path))?;
                    frame.truncate(read);
                }
                owned = frame;
                &owned
            }
        };
        match format::decode_frame(bytes) {
            FrameDecode::Complete(frame) => Ok((frame.first_lsn..)
                .zip(frame.events())
                .map(|(lsn, payload)| Record {
                    lsn,
                    position,
                    payload: payload.to_vec(),
                })
                .collect()),
            FrameDecode::Incomplete { .. } => Err(damaged("frame cut short".into())),
            FrameDecode::Invalid(reason) => Err(damaged(reason.into())),
        }
    }

    /// Iterates over every event from the start of the log.
    pub fn iter(&self) -> LogIter {
        self.iter_from(1)
    }

    /// Iterates over events with LSN `lsn` and above.
    ///
    /// The iterator is not fused: after it returns `None` (the end of what
    /// has been written so far), calling `next` again returns events that a
    /// writer appended meanwhile. [`LogIter::wait_next`] blocks for them.
    pub fn iter_from(&self, lsn: Lsn) -> LogIter {
        LogIter {
            storage: self.source.storage(),
            source: self.source.clone(),
            salvage: self.salvage,
            next_lsn: lsn,
            cursor: None,
            layout: Vec::new(),
            buffered: VecDeque::new(),
            stopped: false,
            read_ahead: ReadAhead::default(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Cursor {
    /// Index of the segment in the iterator's current layout.
    segment: usize,
    /// First LSN of that segment (finds it again in a refreshed layout).
    segment_lsn: Lsn,
    offset: u64,
    lsn: Lsn,
    /// Checksum the next frame must link to; `None` until the segment
    /// header has been read.
    chain_crc: Option<u32>,
}

/// What reading at a cursor found.
enum Step {
    /// A frame was read and its events at or past `next_lsn` buffered.
    Frame,
    /// No frame here yet (end of the segment, or of what is written so far).
    End,
    /// Corruption at this offset.
    Damaged(u64, String),
}

/// Forward iterator over the events of a log; see [`LogReader::iter_from`].
pub struct LogIter {
    source: Source,
    storage: Arc<dyn Storage>,
    salvage: bool,
    next_lsn: Lsn,
    cursor: Option<Cursor>,
    layout: Vec<SegmentRef>,
    buffered: VecDeque<Record>,
    stopped: bool,
    read_ahead: ReadAhead,
}

/// Bytes of the active segment read ahead of the cursor, so scanning it
/// costs one positioned read per `READ_AHEAD_BYTES`, not two per frame.
/// Only bytes below the writer's published end are ever cached: they are
/// complete frames that no longer change.
#[derive(Debug, Default)]
struct ReadAhead {
    segment: Lsn,
    offset: u64,
    bytes: Vec<u8>,
}

/// What a positioned frame read fetches in its first read.
const SMALL_FRAME_BYTES: usize = 8 * 1024;

/// How much of the active segment one read fetches ahead.
const READ_AHEAD_BYTES: usize = 1 << 20;

impl std::fmt::Debug for LogIter {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("LogIter")
            .field("next_lsn", &self.next_lsn)
            .field("cursor", &self.cursor)
            .finish_non_exhaustive()
    }
}

impl LogIter {
    /// The LSN of the next event this iterator will return.
    pub fn next_lsn(&self) -> Lsn {
        self.buffered
            .front()
            .map_or(self.next_lsn, |record| record.lsn)
    }

    /// Returns the next event, waiting up to `timeout` for a writer to
    /// append one. `None` when none arrived in time.
    pub fn wait_next(&mut self, timeout: Duration) -> Option<Result<Record>> {
        let deadline = Instant::now() + timeout;
        loop {
            let generation = match &self.source {
                Source::Writer(view) => Some(view.generation()),
                Source::Directory(_) => None,
            };
            if let Some(item) = self.next() {
                return Some(item);
            }
            if self.stopped || Instant::now() >= deadline {
                return None;
            }
            match (&self.source, generation) {
                (Source::Writer(view), Some(seen)) => {
                    view.wait_for_publish(seen, deadline);
                }
                _ => std::thread::sleep(Duration::from_millis(2).min(deadline - Instant::now())),
            }
        }
    }

    fn fill(&mut self) -> Result<bool> {
        let mut refreshed = false;
        if self.layout.is_empty() {
            self.layout = self.source.layout()?;
            refreshed = true;
        }
        loop {
            let Some(mut cursor) = self.cursor else {
                self.cursor = Some(self.start_cursor());
                continue;
            };
            match self.step(&mut cursor)? {
                Step::Frame => {
                    self.cursor = Some(cursor);
                    if !self.buffered.is_empty() {
                        return Ok(true);
                    }
                }
                Step::Damaged(offset, reason) => {
                    return self.damaged(cursor.segment, offset, reason)
                }
                Step::End => {
                    if cursor.segment + 1 < self.layout.len() {
                        // Every segment before the last one of a layout is sealed.
                        let next = &self.layout[cursor.segment + 1];
                        if next.first_lsn() != cursor.lsn {
                            let reason = format!(
                                "segment ends before LSN {} but the next segment starts at LSN {}",
                                cursor.lsn,
                                next.first_lsn()
                            );
                            return self.damaged(cursor.segment, cursor.offset, reason);
                        }
                        self.cursor = Some(Cursor {
                            segment: cursor.segment + 1,
                            segment_lsn: next.first_lsn(),
                            offset: SEGMENT_HEADER_BYTES as u64,
                            lsn: next.first_lsn(),
                            chain_crc: None,
                        });
                        continue;
                    }
                    if refreshed {
                        return Ok(false);
                    }
                    self.layout = self.source.layout()?;
                    refreshed = true;
                    // Find the cursor's segment again; if it is gone (removed
                    // by compaction or salvage), start over from `next_lsn`.
                    self.cursor = self
                        .layout
                        .iter()
                        .position(|segment| segment.first_lsn() == cursor.segment_lsn)
                        .map(|segment| Cursor { segment, ..cursor });
                }
            }
        }
    }

    fn start_cursor(&self) -> Cursor {
        let index = self
            .layout
            .iter()
            .rposition(|segment| segment.first_lsn() <= self.next_lsn)
            .unwrap_or(0);
        Cursor {
            segment: index,
            segment_lsn: self.layout[index].first_lsn(),
            offset: SEGMENT_HEADER_BYTES as u64,
            lsn: self.layout[index].first_lsn(),
            chain_crc: None,
        }
    }

    fn damaged(&mut self, segment: usize, offset: u64, reason: String) -> Result<bool> {
        self.stopped = true;
        if self.salvage {
            return Ok(false);
        }
        Err(Error::Corrupted {
            segment: self.layout[segment].path().to_path_buf(),
            offset,
            reason,
        })
    }

    fn step(&mut self, cursor: &mut Cursor) -> Result<Step> {
        let segment = self.layout[cursor.segment].clone();
        match segment {
            SegmentRef::Sealed(sealed) => {
                let bytes = sealed.bytes(self.storage.as_ref())?;
                if cursor.chain_crc.is_none() {
                    match format::decode_segment_header(bytes) {
                        Ok(header) => cursor.chain_crc = Some(header.crc),
                        Err(reason) => return Ok(Step::Damaged(0, reason)),
                    }
                }
                let Some(rest) = bytes.get(cursor.offset as usize..) else {
                    return Ok(Step::Damaged(
                        cursor.offset,
                        "offset past the end of the segment".into(),
                    ));
                };
                if rest.is_empty() {
                    return Ok(Step::End);
                }
                Ok(self.take_frame(rest, cursor))
            }
            SegmentRef::Active(active) => self.step_active(&active, cursor),
        }
    }

    fn step_active(&mut self, active: &ActiveSegment, cursor: &mut Cursor) -> Result<Step> {
        let path = &active.path;
        if let Some(limit) = active.limit {
            if cursor.offset >= limit {
                return Ok(Step::End);
            }
        }
        if cursor.chain_crc.is_none() {
            let mut segment_header = [0u8; SEGMENT_HEADER_BYTES];
            let read = active
                .file
                .read_at(&mut segment_header, 0)
                .map_err(Error::io("read segment header", path))?;
            match format::decode_segment_header(&segment_header[..read]) {
                Ok(header) => cursor.chain_crc = Some(header.crc),
                Err(reason) => return Ok(Step::Damaged(0, reason)),
            }
        }
        if let Some(limit) = active.limit {
            return self.step_active_buffered(active, cursor, limit);
        }
        let mut header = [0u8; FRAME_HEADER_BYTES];
        let read = active
            .file
            .read_at(&mut header, cursor.offset)
            .map_err(Error::io("read segment", path))?;
        // Another process is writing: an incomplete or failing frame at the
        // end may simply not be finished yet. If it is really damaged, it is
        // reported once its segment is sealed.
        if read < FRAME_HEADER_BYTES {
            return Ok(Step::End);
        }
        let Ok(frame_bytes) = format::frame_length_from_header(&header) else {
            return Ok(Step::End);
        };
        let mut frame = vec![0u8; frame_bytes];
        let read = active
            .file
            .read_at(&mut frame, cursor.offset)
            .map_err(Error::io("read segment", path))?;
        if read < frame_bytes {
            return Ok(Step::End);
        }
        match self.take_frame(&frame, cursor) {
            Step::Damaged(..) => Ok(Step::End),
            step => Ok(step),
        }
    }

    /// Reads the frame at the cursor of this process's own active segment,
    /// whose complete frames end at `limit`, through the read-ahead buffer.
    fn step_active_buffered(
        &mut self,
        active: &ActiveSegment,
        cursor: &mut Cursor,
        limit: u64,
    ) -> Result<Step> {
        let mut window = std::mem::take(&mut self.read_ahead);
        let step = (|| {
            let header = match window_bytes(
                &mut window,
                active,
                cursor.offset,
                FRAME_HEADER_BYTES,
                limit,
            )? {
                Some(bytes) => bytes,
                None => {
                    return Ok(Step::Damaged(
                        cursor.offset,
                        "frame header runs past the written end".into(),
                    ))
                }
            };
            let frame_bytes = match format::frame_length_from_header(header) {
                Ok(length) => length,
                Err(reason) => return Ok(Step::Damaged(cursor.offset, reason.to_string())),
            };
            match window_bytes(&mut window, active, cursor.offset, frame_bytes, limit)? {
                Some(frame) => Ok(self.take_frame(frame, cursor)),
                None => Ok(Step::Damaged(
                    cursor.offset,
                    "frame runs past the written end".into(),
                )),
            }
        })();
        self.read_ahead = window;
        step
    }

    /// Decodes the frame at the start of `bytes` and buffers its events.
    fn take_frame(&mut self, bytes: &[u8], cursor: &mut Cursor) -> Step {
        let frame = match format::decode_frame(bytes) {
            FrameDecode::Complete(frame) => frame,
            FrameDecode::Incomplete { .. } => {
                return Step::Damaged(cursor.offset, "frame cut short".to_string())
            }
            FrameDecode::Invalid(reason) => {
                return Step::Damaged(cursor.offset, reason.to_string())
            }
        };
        let chain_crc = cursor.chain_crc.expect("the segment header was read first");
        if let Err(reason) = recovery::frame_follows(&frame, cursor.lsn, chain_crc) {
            return Step::Damaged(cursor.offset, reason);
        }
        let position = Position {
            segment: self.layout[cursor.segment].first_lsn(),
            offset: cursor.offset,
        };
        for (lsn, payload) in (frame.first_lsn..).zip(frame.events()) {
            if lsn >= self.next_lsn {
                self.buffered.push_back(Record {
                    lsn,
                    position,
                    payload: payload.to_vec(),
                });
            }
        }
        if let Some(last) = self.buffered.back() {
            self.next_lsn = last.lsn + 1;
        }
        cursor.offset += frame.size_bytes() as u64;
        cursor.lsn = frame.end_lsn();
        cursor.chain_crc = Some(frame.crc);
        Step::Frame
    }
}

/// `length` bytes of the active segment at `offset`, all below `limit`, from
/// the read-ahead window (refilled as needed). `None` if they run past `limit`.
fn window_bytes<'a>(
    window: &'a mut ReadAhead,
    active: &ActiveSegment,
    offset: u64,
    length: usize,
    limit: u64,
) -> Result<Option<&'a [u8]>> {
    let end = offset + length as u64;
    if end > limit {
        return Ok(None);
    }
    let covered = window.segment == active.first_lsn
        && offset >= window.offset
        && end <= window.offset + window.bytes.len() as u64;
    if !covered {
        let fill = (length.max(READ_AHEAD_BYTES) as u64).min(limit - offset) as usize;
        window.bytes.resize(fill, 0);
        let read = active
            .file
            .read_at(&mut window.bytes, offset)
            .map_err(Error::io("read segment", &active.path))?;
        window.bytes.truncate(read);
        window.segment = active.first_lsn;
        window.offset = offset;
        if read < length {
            return Ok(None);
        }
    }
    let start = (offset - window.offset) as usize;
    Ok(Some(&window.bytes[start..start + length]))
}

impl Iterator for LogIter {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        if let Some(record) = self.buffered.pop_front() {
            return Some(Ok(record));
        }
        if self.stopped {
            return None;
        }
        match self.fill() {
            Ok(true) => self.buffered.pop_front().map(Ok),
            Ok(false) => None,
            Err(error) => Some(Err(error)),
        }
    }
}
