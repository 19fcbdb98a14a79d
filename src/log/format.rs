//! The bytes of a segment: the segment header and the record frame.
//!
//! This module is pure: it encodes into and decodes from byte slices and
//! never touches a file. `docs/format.md` specifies the same layout byte by
//! byte; the constants below are the single source of truth in code. Every
//! integer is little-endian.
//!
//! Decoding is input handling: every check returns an error value, nothing
//! here panics on any input (the `frame_decoder` fuzz target holds it to that).

use crate::log::Lsn;

/// Magic bytes at the start of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"CVLOGSEG";
/// The newest segment format version this build writes and reads: version
/// 4, a tamper-evident segment, whose frames each end in a
/// [`FrameTrailer`]. Version 2 ([`FORMAT_VERSION_PLAIN`]) is the same
/// layout without trailers; a store is one or the other from its creation.
pub const FORMAT_VERSION: u32 = FORMAT_VERSION_KEYED;
/// The version of a segment without tamper evidence (frames without trailers).
pub const FORMAT_VERSION_PLAIN: u32 = 2;
/// The version of a tamper-evident segment: every frame ends in a
/// [`FrameTrailer`] of [`FRAME_TRAILER_BYTES`]. Version 3, the same layout
/// with a chain and tags hashed otherwise (written by development builds
/// only, never released), is refused like any other version this build
/// does not read (`docs/format.md`, 11).
pub const FORMAT_VERSION_KEYED: u32 = 4;

/// A store's identity: 16 random bytes chosen when the store is created,
/// carried by every segment header and every snapshot header.
pub type StoreId = [u8; 16];

/// Bytes of a [`StoreId`].
pub const STORE_ID_BYTES: usize = 16;

/// The chain value a store's very first segment links to (it has no
/// predecessor), and a snapshot at LSN 1 carries.
pub const GENESIS_CHAIN: u32 = 0;

/// A store identity as 32 lowercase hex digits.
pub fn store_id_hex(id: &StoreId) -> String {
    id.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A fresh random store identity.
pub fn new_store_id() -> StoreId {
    *uuid::Uuid::new_v4().as_bytes()
}

const SEGMENT_MAGIC_OFFSET: usize = 0;
const SEGMENT_VERSION_OFFSET: usize = SEGMENT_MAGIC_OFFSET + SEGMENT_MAGIC.len();
const SEGMENT_HEADER_BYTES_OFFSET: usize = SEGMENT_VERSION_OFFSET + 4;
const SEGMENT_FIRST_LSN_OFFSET: usize = SEGMENT_HEADER_BYTES_OFFSET + 4;
const SEGMENT_STORE_ID_OFFSET: usize = SEGMENT_FIRST_LSN_OFFSET + 8;
const SEGMENT_PREV_CHAIN_OFFSET: usize = SEGMENT_STORE_ID_OFFSET + STORE_ID_BYTES;
const SEGMENT_SALT_OFFSET: usize = SEGMENT_PREV_CHAIN_OFFSET + 4;
const SEGMENT_RESERVED_OFFSET: usize = SEGMENT_SALT_OFFSET + 4;
const SEGMENT_CRC_OFFSET: usize = SEGMENT_RESERVED_OFFSET + 4;
/// Size of the segment header; the first frame starts right after it.
pub const SEGMENT_HEADER_BYTES: usize = SEGMENT_CRC_OFFSET + 4;
const _: () = assert!(SEGMENT_HEADER_BYTES == 56);

const FRAME_CRC_OFFSET: usize = 0;
const FRAME_BODY_BYTES_OFFSET: usize = FRAME_CRC_OFFSET + 4;
const FRAME_FIRST_LSN_OFFSET: usize = FRAME_BODY_BYTES_OFFSET + 4;
const FRAME_DURABLE_LSN_OFFSET: usize = FRAME_FIRST_LSN_OFFSET + 8;
const FRAME_EVENT_COUNT_OFFSET: usize = FRAME_DURABLE_LSN_OFFSET + 8;
const FRAME_PREVIOUS_CRC_OFFSET: usize = FRAME_EVENT_COUNT_OFFSET + 4;
/// Size of a frame header; the frame body follows it.
pub const FRAME_HEADER_BYTES: usize = FRAME_PREVIOUS_CRC_OFFSET + 4;
const _: () = assert!(FRAME_HEADER_BYTES == 32);
/// Each event in a frame body is prefixed with its length as a `u32`.
pub const EVENT_LENGTH_PREFIX_BYTES: usize = 4;

/// Bytes of the trailer that ends every frame of a tamper-evident
/// (version 4) segment, inside the frame's body, after its events.
pub const FRAME_TRAILER_BYTES: usize = 64;
/// Bytes of a digest of the frame chain (BLAKE3).
pub const CHAIN_DIGEST_BYTES: usize = 32;
/// Bytes of a frame's keyed tag (a BLAKE3 keyed hash, truncated).
pub const FRAME_TAG_BYTES: usize = 16;
const TRAILER_AUTH_LSN_OFFSET: usize = 0;
const TRAILER_EPOCH_OFFSET: usize = TRAILER_AUTH_LSN_OFFSET + 8;
const TRAILER_RESERVED_OFFSET: usize = TRAILER_EPOCH_OFFSET + 4;
const TRAILER_DIGEST_OFFSET: usize = TRAILER_RESERVED_OFFSET + 4;
const TRAILER_TAG_OFFSET: usize = TRAILER_DIGEST_OFFSET + CHAIN_DIGEST_BYTES;
const _: () = assert!(TRAILER_TAG_OFFSET + FRAME_TAG_BYTES == FRAME_TRAILER_BYTES);

/// The trailer of a frame in a tamper-evident segment (`docs/format.md`,
/// 2.7): what the writer computed for the frame with the store's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameTrailer {
    /// The LSN the writer gave the frame's first event (equal to the
    /// frame's `first_lsn` unless someone moved the frame).
    pub auth_lsn: Lsn,
    /// Which key tagged the frame: 0 for the store's first key, one more at
    /// each rotation.
    pub key_epoch: u32,
    /// Written as zero; `verify --key` rejects anything else.
    pub reserved: u32,
    /// The digest chain after this frame: BLAKE3 over the previous digest,
    /// the store identity, the LSN, the event count and the events.
    pub digest: [u8; CHAIN_DIGEST_BYTES],
    /// The keyed tag: BLAKE3 keyed with the epoch's key over the epoch, the
    /// LSN and `digest`, truncated to 16 bytes.
    pub tag: [u8; FRAME_TAG_BYTES],
}

impl FrameTrailer {
    /// The trailer's bytes.
    pub fn encode(&self) -> [u8; FRAME_TRAILER_BYTES] {
        let mut out = [0u8; FRAME_TRAILER_BYTES];
        out[TRAILER_AUTH_LSN_OFFSET..TRAILER_EPOCH_OFFSET]
            .copy_from_slice(&self.auth_lsn.to_le_bytes());
        out[TRAILER_EPOCH_OFFSET..TRAILER_RESERVED_OFFSET]
            .copy_from_slice(&self.key_epoch.to_le_bytes());
        out[TRAILER_RESERVED_OFFSET..TRAILER_DIGEST_OFFSET]
            .copy_from_slice(&self.reserved.to_le_bytes());
        out[TRAILER_DIGEST_OFFSET..TRAILER_TAG_OFFSET].copy_from_slice(&self.digest);
        out[TRAILER_TAG_OFFSET..].copy_from_slice(&self.tag);
        out
    }

    /// Reads a trailer from exactly [`FRAME_TRAILER_BYTES`] bytes.
    pub fn decode(bytes: &[u8]) -> Option<FrameTrailer> {
        if bytes.len() != FRAME_TRAILER_BYTES {
            return None;
        }
        let mut digest = [0u8; CHAIN_DIGEST_BYTES];
        digest.copy_from_slice(&bytes[TRAILER_DIGEST_OFFSET..TRAILER_TAG_OFFSET]);
        let mut tag = [0u8; FRAME_TAG_BYTES];
        tag.copy_from_slice(&bytes[TRAILER_TAG_OFFSET..]);
        Some(FrameTrailer {
            auth_lsn: read_u64(bytes, TRAILER_AUTH_LSN_OFFSET),
            key_epoch: read_u32(bytes, TRAILER_EPOCH_OFFSET),
            reserved: read_u32(bytes, TRAILER_RESERVED_OFFSET),
            digest,
            tag,
        })
    }
}

/// Largest payload of one event, in bytes.
pub const EVENT_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Most events in one atomic batch (one frame).
pub const BATCH_EVENTS_MAX: usize = 65_536;
/// Largest frame body (all events of a batch with their length prefixes).
pub const BATCH_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Smallest allowed segment size (`LogOptions::segment_bytes_max`).
pub const SEGMENT_BYTES_MIN: u64 = 4096;
/// Largest allowed segment size (`LogOptions::segment_bytes_max`).
pub const SEGMENT_BYTES_LIMIT: u64 = 1 << 30;
/// The default segment size: segments roll once they would grow past it.
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;

const _: () = assert!(EVENT_BYTES_MAX + EVENT_LENGTH_PREFIX_BYTES <= BATCH_BYTES_MAX);
const _: () = assert!(BATCH_BYTES_MAX <= u32::MAX as usize);
const _: () = assert!(BATCH_EVENTS_MAX * EVENT_LENGTH_PREFIX_BYTES <= BATCH_BYTES_MAX);

fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(word)
}

fn read_u64(bytes: &[u8], offset: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_le_bytes(word)
}

/// A decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Version 3 ([`FORMAT_VERSION_KEYED`]): every frame carries a trailer.
    pub keyed: bool,
    /// LSN of the first event in the segment.
    pub first_lsn: Lsn,
    /// The identity of the store the segment belongs to.
    pub store_id: StoreId,
    /// The chain value of the log just before `first_lsn`: the checksum of
    /// the previous segment's last frame ([`GENESIS_CHAIN`] for the store's
    /// first segment).
    pub prev_chain: u32,
    /// Random value chosen when the segment file was created.
    pub salt: u32,
    /// The header's checksum: the chain value the first frame links to.
    pub crc: u32,
}

/// Where a new segment sits in its store: the store's identity and the
/// chain value of the log just before the segment's first LSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentLink {
    /// The store's identity.
    pub store_id: StoreId,
    /// Checksum of the frame just before the segment (of the log, across
    /// segments), or [`GENESIS_CHAIN`] for the store's first segment.
    pub prev_chain: u32,
    /// Whether the store is tamper-evident: the segment is written as
    /// version 4 and its frames carry trailers.
    pub keyed: bool,
}

/// Encodes the header of a segment whose first event has LSN `first_lsn`.
///
/// `salt` is random per segment file, so that a segment created again at
/// the same LSN (after salvage) never chains to frames of the old one.
pub fn encode_segment_header(
    first_lsn: Lsn,
    link: SegmentLink,
    salt: u32,
) -> [u8; SEGMENT_HEADER_BYTES] {
    let mut header = [0u8; SEGMENT_HEADER_BYTES];
    header[SEGMENT_MAGIC_OFFSET..SEGMENT_VERSION_OFFSET].copy_from_slice(&SEGMENT_MAGIC);
    header[SEGMENT_VERSION_OFFSET..SEGMENT_HEADER_BYTES_OFFSET].copy_from_slice(
        &if link.keyed {
            FORMAT_VERSION_KEYED
        } else {
            FORMAT_VERSION_PLAIN
        }
        .to_le_bytes(),
    );
    header[SEGMENT_HEADER_BYTES_OFFSET..SEGMENT_FIRST_LSN_OFFSET]
        .copy_from_slice(&(SEGMENT_HEADER_BYTES as u32).to_le_bytes());
    header[SEGMENT_FIRST_LSN_OFFSET..SEGMENT_STORE_ID_OFFSET]
        .copy_from_slice(&first_lsn.to_le_bytes());
    header[SEGMENT_STORE_ID_OFFSET..SEGMENT_PREV_CHAIN_OFFSET].copy_from_slice(&link.store_id);
    header[SEGMENT_PREV_CHAIN_OFFSET..SEGMENT_SALT_OFFSET]
        .copy_from_slice(&link.prev_chain.to_le_bytes());
    header[SEGMENT_SALT_OFFSET..SEGMENT_RESERVED_OFFSET].copy_from_slice(&salt.to_le_bytes());
    // Reserved: written as zero, must read as zero.
    let crc = crc32fast::hash(&header[..SEGMENT_CRC_OFFSET]);
    header[SEGMENT_CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
    header
}

/// Checks a segment header.
pub fn decode_segment_header(bytes: &[u8]) -> Result<SegmentHeader, String> {
    // Magic and version first: a header of another version may have
    // another size.
    if bytes.len() >= SEGMENT_HEADER_BYTES_OFFSET {
        if bytes[SEGMENT_MAGIC_OFFSET..SEGMENT_VERSION_OFFSET] != SEGMENT_MAGIC {
            return Err("bad segment magic (not a convlog segment)".to_string());
        }
        let version = read_u32(bytes, SEGMENT_VERSION_OFFSET);
        if !is_supported_version(version) {
            return Err(format!(
                "segment format version {version} is not supported (this build reads {FORMAT_VERSION_PLAIN} and {FORMAT_VERSION_KEYED})"
            ));
        }
    }
    if bytes.len() < SEGMENT_HEADER_BYTES {
        return Err(format!(
            "segment header is {} bytes, expected {SEGMENT_HEADER_BYTES}",
            bytes.len()
        ));
    }
    let stored_crc = read_u32(bytes, SEGMENT_CRC_OFFSET);
    let actual_crc = crc32fast::hash(&bytes[..SEGMENT_CRC_OFFSET]);
    if stored_crc != actual_crc {
        return Err(format!(
            "segment header checksum mismatch (stored {stored_crc:#010x}, computed {actual_crc:#010x})"
        ));
    }
    let header_bytes = read_u32(bytes, SEGMENT_HEADER_BYTES_OFFSET);
    if header_bytes as usize != SEGMENT_HEADER_BYTES {
        return Err(format!(
            "segment header size {header_bytes} is not {SEGMENT_HEADER_BYTES}"
        ));
    }
    let first_lsn = read_u64(bytes, SEGMENT_FIRST_LSN_OFFSET);
    if first_lsn == 0 {
        return Err("segment first LSN is 0 (LSNs start at 1)".to_string());
    }
    let reserved = read_u32(bytes, SEGMENT_RESERVED_OFFSET);
    if reserved != 0 {
        return Err(format!(
            "segment header reserved field is {reserved:#010x}, not 0"
        ));
    }
    let mut store_id = [0u8; STORE_ID_BYTES];
    store_id.copy_from_slice(&bytes[SEGMENT_STORE_ID_OFFSET..SEGMENT_PREV_CHAIN_OFFSET]);
    Ok(SegmentHeader {
        keyed: read_u32(bytes, SEGMENT_VERSION_OFFSET) == FORMAT_VERSION_KEYED,
        first_lsn,
        store_id,
        prev_chain: read_u32(bytes, SEGMENT_PREV_CHAIN_OFFSET),
        salt: read_u32(bytes, SEGMENT_SALT_OFFSET),
        crc: stored_crc,
    })
}

/// The format version of a segment whose magic is intact and whose version
/// is not this build's: such a file is from another convlog version, not
/// damage, and must never be salvaged away.
pub fn foreign_segment_version(bytes: &[u8]) -> Option<u32> {
    if bytes.len() < SEGMENT_HEADER_BYTES_OFFSET
        || bytes[SEGMENT_MAGIC_OFFSET..SEGMENT_VERSION_OFFSET] != SEGMENT_MAGIC
    {
        return None;
    }
    Some(read_u32(bytes, SEGMENT_VERSION_OFFSET)).filter(|&version| !is_supported_version(version))
}

/// The segment versions this build reads: 2 (plain) and 4 (keyed).
fn is_supported_version(version: u32) -> bool {
    version == FORMAT_VERSION_PLAIN || version == FORMAT_VERSION_KEYED
}

/// Number of bytes a frame holding `payloads` occupies on disk.
pub fn frame_bytes<P: AsRef<[u8]>>(payloads: &[P]) -> usize {
    FRAME_HEADER_BYTES
        + payloads
            .iter()
            .map(|payload| EVENT_LENGTH_PREFIX_BYTES + payload.as_ref().len())
            .sum::<usize>()
}

/// Appends one frame holding `payloads` (LSNs `first_lsn..`) to `out`.
///
/// `durable_lsn` is the writer's durability watermark when the frame was
/// written: every LSN below it had been fsynced. Recovery uses it to tell a
/// torn unsynced tail from damage to acknowledged records.
///
/// `previous_crc` is the checksum of the frame before it in the segment (the
/// segment header's for the first frame): the chain that keeps stale frames
/// of earlier writes from being read as new ones. Returns this frame's
/// checksum, the next frame's `previous_crc`.
///
/// The caller has checked the limits (`check_batch`).
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub fn encode_frame<P: AsRef<[u8]>>(
    out: &mut Vec<u8>,
    first_lsn: Lsn,
    durable_lsn: Lsn,
    previous_crc: u32,
    payloads: &[P],
) -> u32 {
    encode_frame_with_trailer(out, first_lsn, durable_lsn, previous_crc, payloads, None)
}

/// [`encode_frame`] for a tamper-evident segment: the frame's body ends in
/// `trailer` (its [`FRAME_TRAILER_BYTES`] count in `body_bytes` and are
/// covered by the frame's `crc`). The caller has checked the limits with
/// room for the trailer.
pub fn encode_frame_with_trailer<P: AsRef<[u8]>>(
    out: &mut Vec<u8>,
    first_lsn: Lsn,
    durable_lsn: Lsn,
    previous_crc: u32,
    payloads: &[P],
    trailer: Option<&FrameTrailer>,
) -> u32 {
    let start = out.len();
    let trailer_bytes = if trailer.is_some() {
        FRAME_TRAILER_BYTES
    } else {
        0
    };
    let body_bytes = frame_bytes(payloads) - FRAME_HEADER_BYTES + trailer_bytes;
    debug_assert!(body_bytes <= BATCH_BYTES_MAX);
    debug_assert!(!payloads.is_empty() && payloads.len() <= BATCH_EVENTS_MAX);
    out.reserve(FRAME_HEADER_BYTES + body_bytes);
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&(body_bytes as u32).to_le_bytes());
    out.extend_from_slice(&first_lsn.to_le_bytes());
    out.extend_from_slice(&durable_lsn.to_le_bytes());
    out.extend_from_slice(&(payloads.len() as u32).to_le_bytes());
    out.extend_from_slice(&previous_crc.to_le_bytes());
    for payload in payloads {
        let payload = payload.as_ref();
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(payload);
    }
    if let Some(trailer) = trailer {
        out.extend_from_slice(&trailer.encode());
    }
    let crc = crc32fast::hash(&out[start + FRAME_BODY_BYTES_OFFSET..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    crc
}

/// A checked frame, borrowed from the bytes it was decoded from.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// LSN of the first event in the frame.
    pub first_lsn: Lsn,
    /// The writer's durability watermark when this frame was written.
    pub durable_lsn: Lsn,
    /// Number of events in the frame (at least 1).
    pub event_count: u32,
    /// Checksum of the frame before this one (or of the segment header).
    pub previous_crc: u32,
    /// This frame's checksum.
    pub crc: u32,
    /// The frame body: `event_count` length-prefixed payloads (without the
    /// trailer of a tamper-evident frame).
    pub body: &'a [u8],
    /// The trailer's bytes: [`FRAME_TRAILER_BYTES`] in a tamper-evident
    /// frame, empty otherwise.
    pub trailer_bytes: &'a [u8],
}

impl<'a> Frame<'a> {
    /// Bytes the whole frame occupies, header included.
    pub fn size_bytes(&self) -> usize {
        FRAME_HEADER_BYTES + self.body.len() + self.trailer_bytes.len()
    }

    /// The trailer of a tamper-evident frame.
    pub fn trailer(&self) -> Option<FrameTrailer> {
        FrameTrailer::decode(self.trailer_bytes)
    }

    /// LSN one past the last event of the frame.
    pub fn end_lsn(&self) -> Lsn {
        self.first_lsn + u64::from(self.event_count)
    }

    /// The payloads of the frame, in LSN order.
    pub fn events(&self) -> FrameEvents<'a> {
        FrameEvents { rest: self.body }
    }
}

/// Iterator over the payloads of a checked frame.
#[derive(Debug, Clone)]
pub struct FrameEvents<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for FrameEvents<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.len() < EVENT_LENGTH_PREFIX_BYTES {
            return None;
        }
        let length = read_u32(self.rest, 0) as usize;
        let payload = self
            .rest
            .get(EVENT_LENGTH_PREFIX_BYTES..EVENT_LENGTH_PREFIX_BYTES + length)?;
        self.rest = &self.rest[EVENT_LENGTH_PREFIX_BYTES + length..];
        Some(payload)
    }
}

/// What was found at an offset where a frame should start.
#[derive(Debug, Clone, Copy)]
pub enum FrameDecode<'a> {
    /// A whole frame whose checksum and structure are valid.
    Complete(Frame<'a>),
    /// The bytes end before the frame does (`needed` bytes in all would be required,
    /// or the header itself is cut short).
    Incomplete {
        /// Bytes the frame claims to need, when its header could be read.
        needed: Option<usize>,
    },
    /// The bytes cannot be a frame written by convlog.
    Invalid(&'static str),
}

/// Checks the header fields that can be checked without the body.
///
/// Returns the body length on success.
fn check_frame_header(header: &[u8]) -> Result<usize, &'static str> {
    let body_bytes = read_u32(header, FRAME_BODY_BYTES_OFFSET) as usize;
    let event_count = read_u32(header, FRAME_EVENT_COUNT_OFFSET) as usize;
    if event_count == 0 {
        return Err("frame holds no events (zero fill or garbage)");
    }
    if event_count > BATCH_EVENTS_MAX {
        return Err("frame event count exceeds BATCH_EVENTS_MAX");
    }
    if body_bytes > BATCH_BYTES_MAX {
        return Err("frame body length exceeds BATCH_BYTES_MAX");
    }
    if body_bytes < event_count * EVENT_LENGTH_PREFIX_BYTES {
        return Err("frame body too short for its event count");
    }
    if read_u64(header, FRAME_FIRST_LSN_OFFSET) == 0 {
        return Err("frame first LSN is 0");
    }
    Ok(body_bytes)
}

/// Decodes the frame at the start of `bytes`.
pub fn decode_frame(bytes: &[u8]) -> FrameDecode<'_> {
    if bytes.len() < FRAME_HEADER_BYTES {
        return FrameDecode::Incomplete { needed: None };
    }
    let body_bytes = match check_frame_header(&bytes[..FRAME_HEADER_BYTES]) {
        Ok(body_bytes) => body_bytes,
        Err(reason) => return FrameDecode::Invalid(reason),
    };
    let frame_bytes = FRAME_HEADER_BYTES + body_bytes;
    if bytes.len() < frame_bytes {
        return FrameDecode::Incomplete {
            needed: Some(frame_bytes),
        };
    }
    let stored_crc = read_u32(bytes, FRAME_CRC_OFFSET);
    if crc32fast::hash(&bytes[FRAME_BODY_BYTES_OFFSET..frame_bytes]) != stored_crc {
        return FrameDecode::Invalid("frame checksum mismatch");
    }
    let event_count = read_u32(bytes, FRAME_EVENT_COUNT_OFFSET);
    let body = &bytes[FRAME_HEADER_BYTES..frame_bytes];
    let Some(events_bytes) = events_bytes(body, event_count as usize) else {
        return FrameDecode::Invalid("frame body does not split into its event count");
    };
    let (body, trailer_bytes) = body.split_at(events_bytes);
    FrameDecode::Complete(Frame {
        first_lsn: read_u64(bytes, FRAME_FIRST_LSN_OFFSET),
        durable_lsn: read_u64(bytes, FRAME_DURABLE_LSN_OFFSET),
        event_count,
        previous_crc: read_u32(bytes, FRAME_PREVIOUS_CRC_OFFSET),
        crc: stored_crc,
        body,
        trailer_bytes,
    })
}

/// Reads only the frame header: the body length it announces, if plausible.
///
/// Used by readers that fetch a frame from a file in two reads.
pub fn frame_length_from_header(header: &[u8]) -> Result<usize, &'static str> {
    if header.len() < FRAME_HEADER_BYTES {
        return Err("frame header cut short");
    }
    check_frame_header(&header[..FRAME_HEADER_BYTES]).map(|body| FRAME_HEADER_BYTES + body)
}

fn events_bytes(body: &[u8], event_count: usize) -> Option<usize> {
    let mut rest = body;
    for _ in 0..event_count {
        if rest.len() < EVENT_LENGTH_PREFIX_BYTES {
            return None;
        }
        let length = read_u32(rest, 0) as usize;
        if length > EVENT_BYTES_MAX || rest.len() - EVENT_LENGTH_PREFIX_BYTES < length {
            return None;
        }
        rest = &rest[EVENT_LENGTH_PREFIX_BYTES + length..];
    }
    // Nothing left over, or exactly a trailer (whether the segment's frames
    // carry one is checked by the scan, which knows the segment's version).
    (rest.is_empty() || rest.len() == FRAME_TRAILER_BYTES).then_some(body.len() - rest.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_header_round_trips_and_rejects_every_bit_flip() {
        let link = SegmentLink {
            store_id: [7; STORE_ID_BYTES],
            prev_chain: 0x1234_5678,
            keyed: false,
        };
        let header = encode_segment_header(42, link, 0xdead_beef);
        let decoded = decode_segment_header(&header).unwrap();
        assert_eq!((decoded.first_lsn, decoded.salt), (42, 0xdead_beef));
        assert_eq!(
            (decoded.store_id, decoded.prev_chain),
            ([7; 16], 0x1234_5678)
        );
        for bit in 0..SEGMENT_HEADER_BYTES * 8 {
            let mut damaged = header;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(
                decode_segment_header(&damaged).is_err(),
                "bit {bit} flip accepted"
            );
        }
    }

    #[test]
    fn frame_round_trips() {
        let mut out = Vec::new();
        let payloads: [&[u8]; 3] = [b"one", b"", b"three"];
        let crc = encode_frame(&mut out, 7, 5, 99, &payloads);
        assert_eq!(out.len(), frame_bytes(&payloads));
        let FrameDecode::Complete(frame) = decode_frame(&out) else {
            panic!("frame did not decode");
        };
        assert_eq!(frame.first_lsn, 7);
        assert_eq!(frame.durable_lsn, 5);
        assert_eq!((frame.previous_crc, frame.crc), (99, crc));
        assert_eq!(frame.end_lsn(), 10);
        assert_eq!(frame.size_bytes(), out.len());
        assert_eq!(frame.events().collect::<Vec<_>>(), payloads.to_vec());
    }

    #[test]
    fn a_keyed_header_and_a_frame_with_a_trailer_round_trip() {
        let link = SegmentLink {
            store_id: [3; STORE_ID_BYTES],
            prev_chain: 0,
            keyed: true,
        };
        let header = decode_segment_header(&encode_segment_header(1, link, 5)).unwrap();
        assert!(header.keyed);
        let trailer = FrameTrailer {
            auth_lsn: 7,
            key_epoch: 2,
            reserved: 0,
            digest: [9; CHAIN_DIGEST_BYTES],
            tag: [4; FRAME_TAG_BYTES],
        };
        let mut out = Vec::new();
        let payloads: [&[u8]; 2] = [b"one", b""];
        encode_frame_with_trailer(&mut out, 7, 7, 1, &payloads, Some(&trailer));
        assert_eq!(out.len(), frame_bytes(&payloads) + FRAME_TRAILER_BYTES);
        let FrameDecode::Complete(frame) = decode_frame(&out) else {
            panic!("frame did not decode");
        };
        assert_eq!(frame.events().collect::<Vec<_>>(), payloads.to_vec());
        assert_eq!(frame.trailer(), Some(trailer));
        assert_eq!(frame.size_bytes(), out.len());
        for bit in 0..out.len() * 8 {
            let mut damaged = out.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(
                !matches!(decode_frame(&damaged), FrameDecode::Complete(_)),
                "bit {bit} flip accepted"
            );
        }
    }

    #[test]
    fn every_bit_flip_in_a_frame_is_detected() {
        let mut out = Vec::new();
        encode_frame(&mut out, 1, 1, 0, &[b"hello".as_slice(), b"world"]);
        for bit in 0..out.len() * 8 {
            let mut damaged = out.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(
                !matches!(decode_frame(&damaged), FrameDecode::Complete(_)),
                "bit {bit} flip accepted"
            );
        }
    }

    #[test]
    fn every_proper_prefix_of_a_frame_is_incomplete_or_invalid() {
        let mut out = Vec::new();
        encode_frame(&mut out, 3, 1, 0, &[b"payload".as_slice()]);
        for cut in 0..out.len() {
            assert!(
                !matches!(decode_frame(&out[..cut]), FrameDecode::Complete(_)),
                "prefix of {cut} bytes accepted"
            );
        }
    }

    #[test]
    fn zero_fill_is_invalid() {
        let zeros = [0u8; 64];
        assert!(matches!(decode_frame(&zeros), FrameDecode::Invalid(_)));
    }
}
