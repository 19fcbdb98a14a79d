//! Reading the log: forward iteration from any LSN, across segments, and
//! following a log while a writer (in this or another process) appends.
//!
//! Sealed segments are read through a read-only memory map. The active
//! (last) segment is read with positioned reads, never mapped: a writer that
//! recovers from a crash may shrink it, and a map of it could then fault.
//!
//! A reader never yields a record from a frame that is incomplete or fails
//! its checksum, and never ends quietly before the writer's durable end:
//! - in a sealed segment (any but the last), such a frame is corruption,
//!   reported with segment and offset (`Error::Corrupted`);
//! - in the writer's own active segment (`Log::reader`), so is one below the
//!   end the writer published;
//! - in the last segment of a directory reader (another process writes, or
//!   wrote, it), such a frame is the end of what has been written *so far*
//!   unless a later valid frame proves it had been written and fsynced, the
//!   evidence recovery uses (`recovery::later_frame_proves_durable`). The
//!   frame is then read again (a write in progress when it was first read
//!   has returned by then) before it is reported as corruption.
//!
//! Compaction may delete segments while a reader reads them. A reader keeps
//! what it holds: a directory reader maps the sealed segments it will read
//! when it lists them and keeps the last segment open, and deleting a
//! segment through the writer first maps it for the readers that hold it.
//! Events it can no longer reach are reported as `Error::Compacted` (which
//! LSNs are gone), never skipped and never a raw I/O error.

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

/// What [`LogReader::visit_frames`] calls with each event: the frame's
/// position, the event's LSN and its payload (borrowed).
pub type FrameVisitor<'a> = dyn FnMut(Position, Lsn, &[u8]) -> Result<()> + 'a;

/// A frame's place and chain value, without its events: where a replay
/// can start after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameSummary {
    /// Where the frame starts.
    pub(crate) position: Position,
    /// One past its last LSN.
    pub(crate) end_lsn: Lsn,
    /// Its checksum: the chain value the next frame links to.
    pub(crate) crc: u32,
    /// Its size in bytes.
    pub(crate) size_bytes: u64,
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

impl Record {
    /// The event a [`Store`](crate::Store) appended as this record's payload;
    /// [`Error::UndecodableEvent`] (with the LSN) for bytes that are not one.
    pub fn event(&self) -> Result<crate::model::Event> {
        crate::codec::decode_event_at(self.lsn, &self.payload)
    }
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

    /// The segment's bytes, mapped on first use. `NotFound` when the file
    /// was deleted (by compaction) before it was ever mapped.
    fn bytes(&self, storage: &dyn Storage) -> std::io::Result<&[u8]> {
        if self.bytes.get().is_none() {
            let mapped = storage.read_immutable(&self.path, SealedFile::assert_sealed())?;
            let _ = self.bytes.set(mapped);
        }
        let bytes = self.bytes.get().expect("set above");
        Ok((**bytes).as_ref())
    }
}

fn is_not_found(error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::NotFound
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
    /// (the last segment is never removed); returns their first LSNs and
    /// paths, oldest first.
    ///
    /// A segment that an iterator already holds in its layout is mapped
    /// first, so the iterator keeps reading it after the file is deleted.
    pub(crate) fn take_sealed_before(&self, lsn: Lsn) -> Vec<(Lsn, PathBuf)> {
        let taken: Vec<Arc<SealedSegment>> = {
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
            state.sealed.drain(..removable).collect()
        };
        // Out of the view, a segment can gain no new holders: one held
        // elsewhere is in an iterator's layout.
        for segment in &taken {
            if Arc::strong_count(segment) > 1 {
                if let Err(error) = segment.bytes(self.storage.as_ref()) {
                    tracing::warn!(
                        segment = %segment.path.display(),
                        error = %error,
                        "could not map a segment a reader holds before compaction deletes it; the reader will report the gap"
                    );
                }
            }
        }
        taken
            .into_iter()
            .map(|segment| (segment.first_lsn, segment.path.clone()))
            .collect()
    }

    /// Puts back at the front of the view the oldest segments
    /// `take_sealed_before` took, when their files could not be removed:
    /// they are still on disk, and a later compaction must remove them
    /// before any newer segment.
    pub(crate) fn restore_sealed(&self, segments: &[(Lsn, PathBuf)]) {
        if segments.is_empty() {
            return;
        }
        {
            let mut state = self.state.write();
            let restored = segments
                .iter()
                .map(|(first_lsn, path)| SealedSegment::new(*first_lsn, path.clone()));
            state.sealed.splice(0..0, restored);
        }
        self.bump();
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
    /// The last segment of the latest listing, kept open (with its path).
    open: HashMap<Lsn, (PathBuf, Arc<dyn StorageFile>)>,
}

/// How often a directory reader lists the segments again when its last
/// segment vanished between listing and opening it (the writer rolled and
/// compaction deleted it meanwhile).
const LISTING_ATTEMPTS_MAX: usize = 8;

impl DirectorySource {
    /// The segment starting at `first_lsn` if an earlier listing found it,
    /// without listing the directory again. A frame once written never
    /// changes, so reading it through what was found then is reading it
    /// now; a sealed segment deleted since (and not mapped yet) reports
    /// `NotFound` when it is mapped, which the caller turns into
    /// `Error::Compacted`.
    fn known(&self, first_lsn: Lsn) -> Option<SegmentRef> {
        if let Some(sealed) = self.sealed.get(&first_lsn) {
            return Some(SegmentRef::Sealed(Arc::clone(sealed)));
        }
        self.open.get(&first_lsn).map(|(path, handle)| {
            SegmentRef::Active(ActiveSegment {
                first_lsn,
                path: path.clone(),
                file: Arc::clone(handle),
                limit: None,
            })
        })
    }

    /// The segments in the directory now. Sealed segments that may hold
    /// events at or after `map_from` are mapped at once, so that compaction
    /// deleting them later does not take them from the reader; the last
    /// segment is kept open. Segments deleted between listing and mapping
    /// are left out with every segment before them (compaction deletes
    /// oldest first): the layout then starts later, and the iterator
    /// reports what it needed from them as `Error::Compacted`.
    fn layout(&mut self, map_from: Option<Lsn>) -> Result<Vec<SegmentRef>> {
        let mut attempt = 1;
        loop {
            match self.try_layout(map_from)? {
                Ok(layout) => return Ok(layout),
                Err((_, path, error)) if is_not_found(&error) && attempt < LISTING_ATTEMPTS_MAX => {
                    tracing::debug!(segment = %path.display(), "last segment vanished while listing; listing again");
                    attempt += 1;
                }
                Err((operation, path, error)) => return Err(Error::io(operation, path)(error)),
            }
        }
    }

    /// One listing; the inner error is a segment that could not be opened
    /// or mapped.
    #[allow(clippy::type_complexity)]
    fn try_layout(
        &mut self,
        map_from: Option<Lsn>,
    ) -> Result<Result<Vec<SegmentRef>, (&'static str, PathBuf, std::io::Error)>> {
        let segments = segment::list(self.storage.as_ref(), &self.dir)?.segments;
        let mut layout = Vec::with_capacity(segments.len());
        for (index, file) in segments.iter().enumerate() {
            if let Some(next) = segments.get(index + 1) {
                let sealed = Arc::clone(
                    self.sealed
                        .entry(file.first_lsn)
                        .or_insert_with(|| SealedSegment::new(file.first_lsn, file.path.clone())),
                );
                if map_from.is_some_and(|from| next.first_lsn > from) {
                    match sealed.bytes(self.storage.as_ref()) {
                        Ok(_) => {}
                        Err(error) if is_not_found(&error) => {
                            layout.clear();
                            continue;
                        }
                        Err(error) => {
                            return Ok(Err(("map sealed segment", file.path.clone(), error)))
                        }
                    }
                }
                layout.push(SegmentRef::Sealed(sealed));
            } else {
                let handle = match self.open.get(&file.first_lsn) {
                    Some((_, handle)) => Arc::clone(handle),
                    None => {
                        let handle: Arc<dyn StorageFile> = match self.storage.open_read(&file.path)
                        {
                            Ok(handle) => Arc::from(handle),
                            Err(error) => {
                                return Ok(Err(("open segment", file.path.clone(), error)))
                            }
                        };
                        self.open
                            .insert(file.first_lsn, (file.path.clone(), Arc::clone(&handle)));
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
        Ok(Ok(layout))
    }
}

#[derive(Debug, Clone)]
enum Source {
    Writer(Arc<SharedView>),
    Directory(Arc<Mutex<DirectorySource>>),
}

impl Source {
    /// The segments now; see [`DirectorySource::layout`] for `map_from`.
    fn layout(&self, map_from: Option<Lsn>) -> Result<Vec<SegmentRef>> {
        match self {
            Source::Writer(view) => Ok(view.layout()),
            Source::Directory(directory) => directory.lock().layout(map_from),
        }
    }

    /// The store directory.
    fn dir(&self) -> PathBuf {
        match self {
            Source::Writer(view) => {
                let state = view.state.read();
                state
                    .active
                    .path
                    .parent()
                    .map_or_else(PathBuf::new, Path::to_path_buf)
            }
            Source::Directory(directory) => directory.lock().dir.clone(),
        }
    }

    /// The error for events from `first_missing` on that compaction deleted
    /// before they were read: names the first LSN the log holds after them.
    fn compacted(&self, first_missing: Lsn) -> Error {
        let later = self.layout(None).ok().and_then(|layout| {
            layout
                .iter()
                .map(SegmentRef::first_lsn)
                .find(|&first_lsn| first_lsn > first_missing)
        });
        Error::Compacted {
            store: self.dir(),
            first_missing,
            next_present: later.unwrap_or(first_missing + 1),
        }
    }

    fn storage(&self) -> Arc<dyn Storage> {
        match self {
            Source::Writer(view) => Arc::clone(&view.storage),
            Source::Directory(directory) => Arc::clone(&directory.lock().storage),
        }
    }
}

/// Options of a read-only opener: a builder ([`ReaderOptions::new`], one
/// setter per field, named as the field; the fields stay public for
/// reading), so a new option never breaks a host.
#[derive(Debug, Clone)]
#[non_exhaustive]
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

impl ReaderOptions {
    /// The defaults: no salvage, the real file system.
    pub fn new() -> ReaderOptions {
        ReaderOptions::default()
    }

    /// Sets whether reading stops quietly at the first damage instead of
    /// returning `Error::Corrupted`.
    pub fn salvage(mut self, salvage: bool) -> ReaderOptions {
        self.salvage = salvage;
        self
    }

    /// Sets the storage to read through.
    pub fn storage(mut self, storage: Arc<dyn Storage>) -> ReaderOptions {
        self.storage = storage;
        self
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

    /// The segment holding `position`, or why there is none: compacted
    /// away, or never there.
    fn segment_at(&self, position: Position) -> Result<SegmentRef> {
        let found = match &self.source {
            Source::Writer(view) => view.segment(position.segment),
            // A reader that found the segment before reads it without
            // listing the directory again (a store reads frame by frame).
            Source::Directory(directory) => {
                // (The lock is released before `layout` takes it again.)
                let known = directory.lock().known(position.segment);
                match known {
                    Some(known) => Some(known),
                    None => self
                        .source
                        .layout(None)?
                        .into_iter()
                        .find(|segment| segment.first_lsn() == position.segment),
                }
            }
        };
        if let Some(segment) = found {
            return Ok(segment);
        }
        let first_lsn = self
            .source
            .layout(None)?
            .first()
            .map_or(position.segment, SegmentRef::first_lsn);
        if position.segment < first_lsn {
            return Err(self.source.compacted(position.segment));
        }
        Err(Error::PositionNotFound {
            store: self.source.dir(),
            segment: position.segment,
            offset: position.offset,
        })
    }

    /// Reads the frames (atomic batches) that start at `positions`, checking
    /// each one's checksum, and calls `visit` with every event of each, in
    /// the order of `positions` and, within a frame, in LSN order: the
    /// frame's position, the event's LSN and its payload, borrowed.
    ///
    /// What [`LogReader::read_frame`] does for one frame, for many, at less
    /// cost per frame: the segment is looked up once per run of positions
    /// in it; a sealed segment's frames are read from its map without
    /// copying; frames of the active segment that lie near each other (in
    /// increasing positions, as an index lists them) come in one
    /// positioned read. The first error ends the read: frames visited
    /// before it stay visited.
    pub fn visit_frames(&self, positions: &[Position], visit: &mut FrameVisitor<'_>) -> Result<()> {
        let storage = self.source.storage();
        let mut start = 0;
        while start < positions.len() {
            let first = positions[start];
            let end = start
                + positions[start..]
                    .iter()
                    .take_while(|position| position.segment == first.segment)
                    .count();
            let run = &positions[start..end];
            start = end;
            let segment = self.segment_at(first)?;
            match &segment {
                SegmentRef::Sealed(sealed) => {
                    let bytes = match sealed.bytes(storage.as_ref()) {
                        Ok(bytes) => bytes,
                        Err(error) if is_not_found(&error) => {
                            return Err(self.source.compacted(first.segment))
                        }
                        Err(error) => {
                            return Err(Error::io("map sealed segment", &sealed.path)(error))
                        }
                    };
                    for &position in run {
                        let frame = bytes.get(position.offset as usize..).ok_or_else(|| {
                            frame_damaged(
                                &segment,
                                position,
                                "position past the end of the segment".into(),
                            )
                        })?;
                        visit_frame(&segment, position, frame, visit)?;
                    }
                }
                SegmentRef::Active(active) => {
                    // The scratch buffer is taken for the call (a `visit`
                    // that reads frames itself gets a fresh one).
                    let mut window =
                        FRAME_SCRATCH.with(|scratch| std::mem::take(&mut *scratch.borrow_mut()));
                    let result = visit_active_frames(&segment, active, run, &mut window, visit);
                    if window.capacity() <= FRAME_SCRATCH_KEPT_BYTES {
                        FRAME_SCRATCH.with(|scratch| *scratch.borrow_mut() = window);
                    }
                    result?;
                }
            }
        }
        Ok(())
    }

    /// The frame at byte `offset` of the segment holding LSN `lsn`,
    /// checked (checksum, completeness), summarised: what a snapshot's
    /// replay position names (`offset` of the frame ending just before the
    /// snapshot's LSN, in the segment holding LSN `lsn` = that LSN - 1).
    pub(crate) fn frame_in_segment_of(&self, lsn: Lsn, offset: u64) -> Result<FrameSummary> {
        let layout = self.source.layout(None)?;
        let segment = layout
            .iter()
            .rev()
            .find(|segment| segment.first_lsn() <= lsn)
            .ok_or_else(|| self.source.compacted(lsn))?;
        let position = Position {
            segment: segment.first_lsn(),
            offset,
        };
        let summarise = |bytes: &[u8]| match format::decode_frame(bytes) {
            FrameDecode::Complete(frame) => Ok(FrameSummary {
                position,
                end_lsn: frame.end_lsn(),
                crc: frame.crc,
                size_bytes: frame.size_bytes() as u64,
            }),
            FrameDecode::Incomplete { .. } => {
                Err(frame_damaged(segment, position, "frame cut short".into()))
            }
            FrameDecode::Invalid(reason) => Err(frame_damaged(segment, position, reason.into())),
        };
        match segment {
            SegmentRef::Sealed(sealed) => {
                let bytes = sealed
                    .bytes(self.source.storage().as_ref())
                    .map_err(Error::io("map sealed segment", &sealed.path))?;
                summarise(bytes.get(offset as usize..).ok_or_else(|| {
                    frame_damaged(
                        segment,
                        position,
                        "position past the end of the segment".into(),
                    )
                })?)
            }
            SegmentRef::Active(active) => {
                let read = |length: usize| -> Result<Vec<u8>> {
                    let mut bytes = vec![0u8; length];
                    let read = active
                        .file
                        .read_at(&mut bytes, offset)
                        .map_err(Error::io("read segment", &active.path))?;
                    bytes.truncate(read);
                    Ok(bytes)
                };
                let header = read(FRAME_HEADER_BYTES)?;
                let length = format::frame_length_from_header(&header)
                    .map_err(|reason| frame_damaged(segment, position, reason.into()))?;
                summarise(&read(length)?)
            }
        }
    }

    /// Iterates over the events after the frame `after` (which
    /// [`LogReader::frame_in_segment_of`] found), starting there instead of
    /// at the start of its segment; the frames that follow must link to it.
    /// Where its segment is gone, from `after.end_lsn` as
    /// [`LogReader::iter_from`] does.
    pub(crate) fn iter_after(&self, after: FrameSummary) -> LogIter {
        self.iter_from_after(after.end_lsn, after)
    }

    /// Iterates over events with LSN `lsn` and above, reading from just
    /// after the frame `after` (which must end at or before `lsn`, and
    /// which [`LogReader::frame_in_segment_of`] found) instead of from the
    /// start of the segment holding `lsn`.
    pub(crate) fn iter_from_after(&self, lsn: Lsn, after: FrameSummary) -> LogIter {
        let mut iter = self.iter_from(lsn);
        iter.start_after = Some(after);
        iter
    }

    /// Reads the frame (atomic batch) that starts at `position`, checking its
    /// checksum, and returns its events. Used by indexes: a position comes
    /// from [`Record::position`] or `Log::append_positioned`.
    pub fn read_frame(&self, position: Position) -> Result<Vec<Record>> {
        let segment = self.segment_at(position)?;
        let segment = &segment;
        let storage = self.source.storage();
        let damaged = |reason: String| Error::Corrupted {
            segment: segment.path().to_path_buf(),
            offset: position.offset,
            reason,
        };
        let decode = |bytes: &[u8]| match format::decode_frame(bytes) {
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
        };
        match segment {
            SegmentRef::Sealed(sealed) => {
                let bytes = match sealed.bytes(storage.as_ref()) {
                    Ok(bytes) => bytes,
                    Err(error) if is_not_found(&error) => {
                        return Err(self.source.compacted(position.segment))
                    }
                    Err(error) => return Err(Error::io("map sealed segment", &sealed.path)(error)),
                };
                decode(
                    bytes
                        .get(position.offset as usize..)
                        .ok_or_else(|| damaged("position past the end of the segment".into()))?,
                )
            }
            SegmentRef::Active(active) => FRAME_SCRATCH.with(|scratch| {
                // The frame is read into this thread's scratch buffer,
                // reused from read to read: a fresh zeroed buffer per frame
                // cost more than the read itself. Records copy what they
                // keep, so nothing borrows the buffer after this.
                let mut scratch = scratch.borrow_mut();
                let read_into = |scratch: &mut Vec<u8>, want: usize| -> Result<usize> {
                    if scratch.len() < want {
                        scratch.resize(want, 0);
                    }
                    active
                        .file
                        .read_at(&mut scratch[..want], position.offset)
                        .map_err(Error::io("read segment", &active.path))
                };
                // One read covers most frames; a larger one needs a second.
                let mut read = read_into(&mut scratch, SMALL_FRAME_BYTES)?;
                let length = format::frame_length_from_header(&scratch[..read])
                    .map_err(|reason| damaged(reason.into()))?;
                if length > read {
                    read = read_into(&mut scratch, length)?;
                }
                let records = decode(&scratch[..read]);
                if scratch.len() > FRAME_SCRATCH_KEPT_BYTES {
                    // A rare huge frame: do not keep its buffer for good.
                    *scratch = Vec::new();
                }
                records
            }),
        }
    }

    /// Iterates over every event the log holds, from its first LSN (1, or
    /// where compaction left it when the iterator starts).
    pub fn iter(&self) -> LogIter {
        let mut iter = self.iter_from(1);
        iter.from_log_start = true;
        iter
    }

    /// Iterates over events with LSN `lsn` and above.
    ///
    /// The iterator is not fused: after it returns `None` (the end of what
    /// has been written so far), calling `next` again returns events that a
    /// writer appended meanwhile. [`LogIter::wait_next`] blocks for them.
    ///
    /// Fails with `Error::Corrupted` at a frame that fails its checks before
    /// the writer's durable end (see the module documentation), and with
    /// `Error::Compacted` when events it must return next are no longer in
    /// the log: `lsn` lies before the log's first LSN, or compaction deleted
    /// segments before the iterator reached them. Either error ends it.
    pub fn iter_from(&self, lsn: Lsn) -> LogIter {
        LogIter {
            storage: self.source.storage(),
            source: self.source.clone(),
            salvage: self.salvage,
            next_lsn: lsn,
            from_log_start: false,
            removed_segment: None,
            start_after: None,
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
    /// Until the iterator starts: begin wherever the log begins.
    from_log_start: bool,
    /// First LSN of a segment the iterator reads through the handle it
    /// holds after compaction deleted its file: whatever follows it up to
    /// the next segment still in the directory is gone.
    removed_segment: Option<Lsn>,
    /// A checked frame to start after, instead of the start of the
    /// segment holding `next_lsn` ([`LogReader::iter_after`]).
    start_after: Option<FrameSummary>,
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

/// The largest scratch buffer a thread keeps between frame reads of the
/// active segment (see [`LogReader::read_frame`]); a larger frame's buffer
/// is freed after its read.
const FRAME_SCRATCH_KEPT_BYTES: usize = 1 << 20;

thread_local! {
    /// Where [`LogReader::read_frame`] reads frames of the active segment.
    static FRAME_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

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
            self.layout = self.source.layout(Some(self.next_lsn))?;
            refreshed = true;
        }
        loop {
            let Some(mut cursor) = self.cursor else {
                self.cursor = Some(self.start_cursor()?);
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
                        if next.first_lsn() > cursor.lsn
                            && self.removed_segment == Some(cursor.segment_lsn)
                        {
                            // The segments after the one held were deleted too.
                            self.stopped = true;
                            return Err(Error::Compacted {
                                store: self.source.dir(),
                                first_missing: cursor.lsn,
                                next_present: next.first_lsn(),
                            });
                        }
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
                    let previous = std::mem::replace(
                        &mut self.layout,
                        self.source.layout(Some(self.next_lsn))?,
                    );
                    refreshed = true;
                    // Find the cursor's segment again.
                    if let Some(segment) = self
                        .layout
                        .iter()
                        .position(|segment| segment.first_lsn() == cursor.segment_lsn)
                    {
                        self.cursor = Some(Cursor { segment, ..cursor });
                        continue;
                    }
                    // It is gone from the directory: the writer sealed it and
                    // compaction deleted it. Read the rest of it through the
                    // handle this iterator holds; it is sealed now (later
                    // segments exist), so it is read to its end.
                    let held = match &previous[cursor.segment] {
                        SegmentRef::Active(active) => SegmentRef::Active(ActiveSegment {
                            limit: None,
                            ..active.clone()
                        }),
                        sealed => sealed.clone(),
                    };
                    let later: Vec<SegmentRef> = std::mem::take(&mut self.layout)
                        .into_iter()
                        .filter(|segment| segment.first_lsn() > cursor.segment_lsn)
                        .collect();
                    self.layout = std::iter::once(held).chain(later).collect();
                    self.removed_segment = Some(cursor.segment_lsn);
                    self.cursor = Some(Cursor {
                        segment: 0,
                        ..cursor
                    });
                }
            }
        }
    }

    /// Where reading starts: the segment holding `next_lsn`. Fails when the
    /// log now starts after it (compaction deleted what it asked for),
    /// unless the iterator reads from wherever the log starts.
    fn start_cursor(&mut self) -> Result<Cursor> {
        let Some(first_lsn) = self.layout.first().map(SegmentRef::first_lsn) else {
            // Every segment file is gone from the directory.
            self.stopped = true;
            return Err(Error::NotAStore {
                path: self.source.dir(),
            });
        };
        if self.next_lsn < first_lsn {
            if !self.from_log_start {
                self.stopped = true;
                return Err(Error::Compacted {
                    store: self.source.dir(),
                    first_missing: self.next_lsn,
                    next_present: first_lsn,
                });
            }
            self.next_lsn = first_lsn;
        }
        self.from_log_start = false;
        if let Some(after) = self.start_after.take() {
            let found = self
                .layout
                .iter()
                .position(|segment| segment.first_lsn() == after.position.segment);
            if let Some(index) = found.filter(|_| self.next_lsn >= after.end_lsn) {
                return Ok(Cursor {
                    segment: index,
                    segment_lsn: after.position.segment,
                    offset: after.position.offset + after.size_bytes,
                    lsn: after.end_lsn,
                    chain_crc: Some(after.crc),
                });
            }
        }
        let index = self
            .layout
            .iter()
            .rposition(|segment| segment.first_lsn() <= self.next_lsn)
            .unwrap_or(0);
        Ok(Cursor {
            segment: index,
            segment_lsn: self.layout[index].first_lsn(),
            offset: SEGMENT_HEADER_BYTES as u64,
            lsn: self.layout[index].first_lsn(),
            chain_crc: None,
        })
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
        // Every segment before the last one of a layout is sealed.
        let sealed_segment = cursor.segment + 1 < self.layout.len();
        match segment {
            SegmentRef::Sealed(sealed) => {
                let bytes = match sealed.bytes(self.storage.as_ref()) {
                    Ok(bytes) => bytes,
                    Err(error) if is_not_found(&error) => {
                        // Deleted before this iterator could map it.
                        self.stopped = true;
                        return Err(self.source.compacted(self.next_lsn));
                    }
                    Err(error) => return Err(Error::io("map sealed segment", &sealed.path)(error)),
                };
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
            SegmentRef::Active(active) => self.step_active(&active, cursor, sealed_segment),
        }
    }

    /// Reads the frame at the cursor of a segment read through its file
    /// handle: the last segment, or (`sealed`) one that compaction deleted
    /// after this iterator opened it.
    fn step_active(
        &mut self,
        active: &ActiveSegment,
        cursor: &mut Cursor,
        sealed: bool,
    ) -> Result<Step> {
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
        let reason = match self.read_frame_at(active, cursor)? {
            Ok(step) => return Ok(step),
            Err(reason) if sealed => return Ok(Step::Damaged(cursor.offset, reason)),
            Err(reason) => reason,
        };
        // Another process writes this segment (or did until it stopped): a
        // frame that is incomplete or fails its checks may be one it is
        // writing now, or a torn tail that its next open cuts. Neither is
        // the case if a later valid frame proves it had been fsynced.
        if !self.later_frame_proves_durable(active, cursor)? {
            return Ok(Step::End);
        }
        // The writer writes a frame only after the write of the one before
        // it returned: read it again, in case it was being written the first
        // time.
        match self.read_frame_at(active, cursor)? {
            Ok(Step::Frame) => Ok(Step::Frame),
            Ok(_) => Ok(Step::Damaged(cursor.offset, reason)),
            Err(reason) => Ok(Step::Damaged(cursor.offset, reason)),
        }
    }

    /// Reads and takes the frame at the cursor with positioned reads:
    /// `Ok(Frame)`, `Ok(End)` when nothing follows the cursor, `Err(reason)`
    /// when the bytes there are not a valid next frame.
    fn read_frame_at(
        &mut self,
        active: &ActiveSegment,
        cursor: &mut Cursor,
    ) -> Result<Result<Step, String>> {
        let path = &active.path;
        let mut header = [0u8; FRAME_HEADER_BYTES];
        let read = active
            .file
            .read_at(&mut header, cursor.offset)
            .map_err(Error::io("read segment", path))?;
        if read == 0 {
            return Ok(Ok(Step::End));
        }
        if read < FRAME_HEADER_BYTES {
            return Ok(Err("frame header cut short".to_string()));
        }
        let frame_bytes = match format::frame_length_from_header(&header) {
            Ok(length) => length,
            Err(reason) => return Ok(Err(reason.to_string())),
        };
        let mut frame = vec![0u8; frame_bytes];
        let read = active
            .file
            .read_at(&mut frame, cursor.offset)
            .map_err(Error::io("read segment", path))?;
        if read < frame_bytes {
            return Ok(Err(format!(
                "frame of {frame_bytes} bytes cut short at {read} bytes"
            )));
        }
        Ok(match self.take_frame(&frame, cursor) {
            Step::Damaged(_, reason) => Err(reason),
            step => Ok(step),
        })
    }

    /// Whether a valid frame after the cursor carries a durability
    /// watermark above the cursor's LSN: then the frame at the cursor had
    /// been written and fsynced before it (recovery's evidence).
    fn later_frame_proves_durable(
        &mut self,
        active: &ActiveSegment,
        cursor: &Cursor,
    ) -> Result<bool> {
        let path = &active.path;
        let size = active
            .file
            .size_bytes()
            .map_err(Error::io("stat segment", path))?;
        let from = cursor.offset + 1;
        if size <= from {
            return Ok(false);
        }
        let mut rest = vec![0u8; (size - from) as usize];
        let read = active
            .file
            .read_at(&mut rest, from)
            .map_err(Error::io("read segment", path))?;
        rest.truncate(read);
        Ok(recovery::later_frame_proves_durable(&rest, 0, cursor.lsn))
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

/// The error for a frame at `position` that does not check out.
fn frame_damaged(segment: &SegmentRef, position: Position, reason: String) -> Error {
    Error::Corrupted {
        segment: segment.path().to_path_buf(),
        offset: position.offset,
        reason,
    }
}

/// Decodes the frame at the start of `bytes` (at `position`) and visits its
/// events.
fn visit_frame(
    segment: &SegmentRef,
    position: Position,
    bytes: &[u8],
    visit: &mut FrameVisitor<'_>,
) -> Result<()> {
    match format::decode_frame(bytes) {
        FrameDecode::Complete(frame) => {
            for (lsn, payload) in (frame.first_lsn..).zip(frame.events()) {
                visit(position, lsn, payload)?;
            }
            Ok(())
        }
        FrameDecode::Incomplete { .. } => {
            Err(frame_damaged(segment, position, "frame cut short".into()))
        }
        FrameDecode::Invalid(reason) => Err(frame_damaged(segment, position, reason.into())),
    }
}

/// What a batched read of the active segment fetches per frame before it
/// knows the frame's length: most frames are smaller, and copying more
/// than a frame costs more than the rare second read of a larger one.
const FIRST_READ_BYTES: u64 = 4 * 1024;

/// Most bytes between the end of what one positioned read of the active
/// segment covers and the next frame wanted for that read to cover it too:
/// copying this much costs about what a second read would.
const COALESCE_GAP_BYTES: u64 = 4 * 1024;

/// Most bytes one coalesced read of the active segment fetches (a single
/// frame larger than this is read whole all the same).
const COALESCED_READ_BYTES_MAX: u64 = 256 * 1024;

/// Visits the frames at `run` (positions in one segment read through its
/// file handle), reading frames near each other in one positioned read
/// into `window`.
fn visit_active_frames(
    segment: &SegmentRef,
    active: &ActiveSegment,
    run: &[Position],
    window: &mut Vec<u8>,
    visit: &mut FrameVisitor<'_>,
) -> Result<()> {
    // `window[..filled]` holds the segment's bytes from `window_offset`.
    let mut window_offset = 0u64;
    let mut filled = 0usize;
    let fill = |window: &mut Vec<u8>, offset: u64, length: u64| -> Result<usize> {
        let length = length as usize;
        if window.len() < length {
            window.resize(length, 0);
        }
        active
            .file
            .read_at(&mut window[..length], offset)
            .map_err(Error::io("read segment", &active.path))
    };
    for (index, &position) in run.iter().enumerate() {
        let covers = |from: u64, filled: usize, length: u64| {
            position.offset >= from && position.offset + length <= from + filled as u64
        };
        if !covers(window_offset, filled, FRAME_HEADER_BYTES as u64) {
            // Read from here through the later frames that lie close by.
            let mut end = position.offset + FIRST_READ_BYTES;
            for later in &run[index + 1..] {
                let later_end = later.offset + FIRST_READ_BYTES;
                if later.offset < position.offset
                    || later.offset > end + COALESCE_GAP_BYTES
                    || later_end - position.offset > COALESCED_READ_BYTES_MAX
                {
                    break;
                }
                end = end.max(later_end);
            }
            filled = fill(window, position.offset, end - position.offset)?;
            window_offset = position.offset;
        }
        let start = (position.offset - window_offset) as usize;
        let length = format::frame_length_from_header(&window[start..filled])
            .map_err(|reason| frame_damaged(segment, position, reason.into()))?;
        if !covers(window_offset, filled, length as u64) {
            // The frame starts in the window and runs past it: read the rest.
            let end = (position.offset + length as u64 - window_offset) as usize;
            if window.len() < end {
                window.resize(end, 0);
            }
            filled += active
                .file
                .read_at(&mut window[filled..end], window_offset + filled as u64)
                .map_err(Error::io("read segment", &active.path))?;
        }
        let start = (position.offset - window_offset) as usize;
        visit_frame(segment, position, &window[start..filled], visit)?;
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use std::io;
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::{LogReader, ReaderOptions};
    use crate::log::{Durability, Log, LogOptions};
    use crate::storage::{FileSystem, LockGuard, SealedFile, SharedBytes, Storage, StorageFile};

    /// The real file system, except that the first read of one byte of one
    /// file returns it changed: what a reader sees of a frame whose write is
    /// in progress.
    #[derive(Debug)]
    struct FirstReadTorn {
        path: std::path::PathBuf,
        offset: u64,
        torn: Arc<AtomicBool>,
    }

    #[derive(Debug)]
    struct TornFile {
        inner: Box<dyn StorageFile>,
        offset: Option<u64>,
        torn: Arc<AtomicBool>,
    }

    impl StorageFile for TornFile {
        fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            self.inner.write_all_at(buf, offset)
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            let read = self.inner.read_at(buf, offset)?;
            if let Some(torn) = self.offset {
                if (offset..offset + read as u64).contains(&torn)
                    && !self.torn.swap(true, Ordering::SeqCst)
                {
                    buf[(torn - offset) as usize] ^= 0xff;
                }
            }
            Ok(read)
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

    // SAFETY: every method delegates to `FileSystem` with the same path;
    // only one read of the active segment is altered.
    #[allow(unsafe_code)]
    unsafe impl Storage for FirstReadTorn {
        fn create_dir_all(&self, path: &Path) -> io::Result<()> {
            FileSystem.create_dir_all(path)
        }
        fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
            FileSystem.list_dir(path)
        }
        fn exists(&self, path: &Path) -> bool {
            FileSystem.exists(path)
        }
        fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
            FileSystem.create(path)
        }
        fn open_write(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
            FileSystem.open_write(path)
        }
        fn open_read(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
            Ok(Box::new(TornFile {
                inner: FileSystem.open_read(path)?,
                offset: (path == self.path).then_some(self.offset),
                torn: Arc::clone(&self.torn),
            }))
        }
        fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
            FileSystem.rename(from, to)
        }
        fn remove_file(&self, path: &Path) -> io::Result<()> {
            FileSystem.remove_file(path)
        }
        fn sync_dir(&self, path: &Path) -> io::Result<()> {
            FileSystem.sync_dir(path)
        }
        fn read_immutable(&self, path: &Path, sealed: SealedFile) -> io::Result<SharedBytes> {
            FileSystem.read_immutable(path, sealed)
        }
        fn try_lock(&self, path: &Path) -> io::Result<LockGuard> {
            FileSystem.try_lock(path)
        }
    }

    #[test]
    fn a_frame_that_looked_torn_is_read_again_before_it_is_called_corrupted() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        for index in 0..20u32 {
            log.append_with(&[index.to_le_bytes().repeat(8)], Durability::Sync)
                .unwrap();
        }
        drop(log);
        let records: Vec<_> = LogReader::open(dir.path())
            .unwrap()
            .iter()
            .collect::<crate::Result<_>>()
            .unwrap();
        // The last byte of the tenth frame reads wrong the first time only;
        // later frames prove the tenth was durable.
        let path = dir.path().join(crate::log::segment::segment_file_name(
            records[9].position.segment,
        ));
        let storage = FirstReadTorn {
            path,
            offset: records[10].position.offset - 1,
            torn: Arc::new(AtomicBool::new(false)),
        };
        let torn = Arc::clone(&storage.torn);
        let reader = LogReader::open_with(
            dir.path(),
            ReaderOptions {
                storage: Arc::new(storage),
                ..ReaderOptions::default()
            },
        )
        .unwrap();
        let again: Vec<_> = reader.iter().collect::<crate::Result<_>>().unwrap();
        assert!(torn.load(Ordering::SeqCst), "the torn read happened");
        assert_eq!(again, records);
    }

    /// Frames of varied sizes (some past the first read's size, some
    /// tiny), several per segment, with `segment_bytes_max` small enough
    /// that the log has sealed segments and an active one.
    fn varied_log(dir: &Path) -> (Log, Vec<super::Position>) {
        let log = Log::open(dir, LogOptions::default().segment_bytes_max(64 * 1024)).unwrap();
        let mut positions = Vec::new();
        for index in 0..120usize {
            let size = match index % 7 {
                0 => 20_000,
                1 => 9_000,
                2 => 3,
                _ => 100 + index * 13,
            };
            let payloads: Vec<Vec<u8>> = (0..1 + index % 3)
                .map(|event| vec![(index + event) as u8; size])
                .collect();
            let (_, position) = log.append_positioned(&payloads, Durability::None).unwrap();
            positions.push(position);
        }
        // Several frames in the active segment, whatever the last roll.
        while positions
            .iter()
            .rev()
            .take_while(|position| position.segment == positions.last().unwrap().segment)
            .count()
            < 6
        {
            let (_, position) = log
                .append_positioned(&[vec![7u8; 200]], Durability::None)
                .unwrap();
            positions.push(position);
        }
        (log, positions)
    }

    /// (position, LSN, payload) of every event of the frames at `positions`,
    /// read frame by frame.
    fn one_by_one(
        reader: &LogReader,
        positions: &[super::Position],
    ) -> Vec<(super::Position, u64, Vec<u8>)> {
        positions
            .iter()
            .flat_map(|&position| reader.read_frame(position).unwrap())
            .map(|record| (record.position, record.lsn, record.payload))
            .collect()
    }

    fn visited(
        reader: &LogReader,
        positions: &[super::Position],
    ) -> crate::Result<Vec<(super::Position, u64, Vec<u8>)>> {
        let mut seen = Vec::new();
        reader.visit_frames(positions, &mut |position, lsn, payload| {
            seen.push((position, lsn, payload.to_vec()));
            Ok(())
        })?;
        Ok(seen)
    }

    #[test]
    fn visiting_frames_gives_what_reading_each_frame_gives() {
        let dir = tempfile::tempdir().unwrap();
        let (log, positions) = varied_log(dir.path());
        let segments: std::collections::BTreeSet<u64> =
            positions.iter().map(|position| position.segment).collect();
        assert!(segments.len() > 3, "sealed segments and an active one");
        let active = *segments.iter().next_back().unwrap();
        assert!(
            positions
                .iter()
                .filter(|position| position.segment == active)
                .count()
                > 3
        );
        // A conversation's frames: all of them, every third (interleaved
        // with others'), adjacent pairs, across a segment boundary, and
        // only the active segment's; both from the writer and from a
        // directory reader.
        let every_third: Vec<_> = positions.iter().copied().step_by(3).collect();
        let pairs: Vec<_> = positions
            .chunks(5)
            .flat_map(|chunk| chunk.iter().take(2).copied())
            .collect();
        let boundary = positions
            .windows(2)
            .position(|pair| pair[0].segment != pair[1].segment)
            .unwrap();
        let across: Vec<_> = positions[boundary.saturating_sub(2)..boundary + 3].to_vec();
        let in_active: Vec<_> = positions
            .iter()
            .copied()
            .filter(|position| position.segment == active)
            .collect();
        let directory = LogReader::open(dir.path()).unwrap();
        for reader in [log.reader(), directory] {
            for wanted in [&positions, &every_third, &pairs, &across, &in_active] {
                let expected = one_by_one(&reader, wanted);
                assert!(!expected.is_empty());
                assert_eq!(visited(&reader, wanted).unwrap(), expected);
            }
        }
    }

    #[test]
    fn visiting_the_active_segment_while_the_writer_appends_sees_the_frames_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(Log::open(dir.path(), LogOptions::default()).unwrap());
        let mut positions = Vec::new();
        for index in 0..200u32 {
            let (_, position) = log
                .append_positioned(
                    &[index.to_le_bytes().repeat(1 + (index as usize * 37) % 3000)],
                    Durability::None,
                )
                .unwrap();
            positions.push(position);
        }
        let reader = log.reader();
        let expected = one_by_one(&reader, &positions);
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (log, stop) = (Arc::clone(&log), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut appended = 0u32;
                while !stop.load(Ordering::SeqCst) || appended < 100 {
                    log.append_with(
                        &[vec![0xAB; 1 + (appended as usize % 5000)]],
                        Durability::None,
                    )
                    .unwrap();
                    appended += 1;
                }
            })
        };
        for _ in 0..50 {
            assert_eq!(visited(&reader, &positions).unwrap(), expected);
        }
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap();
        assert_eq!(visited(&reader, &positions).unwrap(), expected);
    }

    #[test]
    fn a_damaged_frame_among_those_visited_is_reported_with_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        let mut positions = Vec::new();
        for index in 0..10u8 {
            let (_, position) = log
                .append_positioned(&[vec![index; 300]], Durability::Sync)
                .unwrap();
            positions.push(position);
        }
        let path = dir
            .path()
            .join(crate::log::segment::segment_file_name(positions[4].segment));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[positions[4].offset as usize + 100] ^= 0x40;
        std::fs::write(&path, bytes).unwrap();
        match visited(&log.reader(), &positions) {
            Err(crate::Error::Corrupted { offset, .. }) => assert_eq!(offset, positions[4].offset),
            other => panic!("expected the damaged frame to be reported, got {other:?}"),
        }
    }
}
