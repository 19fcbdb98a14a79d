"""Editing a store's segment files as an attacker who knows the format does
(docs/format.md, section 2): frames decoded, changed, and written back with
every LSN, checksum and link recomputed, so nothing accidental shows. What
the attacker does not have is the tamper key: the frames' trailers (the
keyed chain, 2.7) are copied as they are.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: Bytes of a segment header (2.1) and of a frame header (2.2).
SEGMENT_HEADER_BYTES = 56
FRAME_HEADER_BYTES = 32
#: Segment format version of a tamper-evident store, whose frames end in a
#: trailer of this many bytes (2.7).
VERSION_KEYED = 4
TRAILER_BYTES = 64


@dataclass
class Frame:
    """One frame: its events' payloads and its trailer (empty in a plain
    store's segments)."""

    events: list[bytes]
    trailer: bytes


#: An attacker's edit of a segment's frames, in place.
Edit = Callable[[list[Frame]], None]


def segment_paths(store: Path) -> list[Path]:
    return sorted(store.glob("*.seg"))


def read_segment(path: Path) -> tuple[bytes, list[Frame]]:
    """The segment's header and frames (up to the first zero fill or bad
    frame)."""
    data = path.read_bytes()
    header = data[:SEGMENT_HEADER_BYTES]
    keyed = struct.unpack_from("<I", header, 8)[0] == VERSION_KEYED
    frames: list[Frame] = []
    offset = SEGMENT_HEADER_BYTES
    while offset + FRAME_HEADER_BYTES <= len(data):
        crc, body_bytes, _first, _durable, count, _previous = struct.unpack_from("<IIQQII", data, offset)
        end = offset + FRAME_HEADER_BYTES + body_bytes
        if count == 0 or end > len(data) or zlib.crc32(data[offset + 4 : end]) != crc:
            break
        body = data[offset + FRAME_HEADER_BYTES : end]
        events_end = len(body) - (TRAILER_BYTES if keyed else 0)
        events: list[bytes] = []
        position = 0
        for _ in range(count):
            (length,) = struct.unpack_from("<I", body, position)
            events.append(body[position + 4 : position + 4 + length])
            position += 4 + length
        assert position == events_end, "events and trailer do not fill the body"
        frames.append(Frame(events, body[events_end:]))
        offset = end
    return header, frames


def write_segment(path: Path, header: bytes, frames: list[Frame]) -> None:
    """Writes `frames` after `header`, numbered from the header's first LSN,
    each frame's checksum and link to the one before recomputed."""
    lsn = struct.unpack_from("<Q", header, 16)[0]
    chain = struct.unpack_from("<I", header, 52)[0]
    out = bytearray(header)
    for frame in frames:
        body = b"".join(struct.pack("<I", len(event)) + event for event in frame.events) + frame.trailer
        rest = struct.pack("<IQQII", len(body), lsn, lsn, len(frame.events), chain) + body
        chain = zlib.crc32(rest)
        out += struct.pack("<I", chain) + rest
        lsn += len(frame.events)
    path.write_bytes(bytes(out))


def rewrite(store: Path, edit: Edit) -> None:
    """Edits the frames of a one-segment store and writes them back."""
    (segment,) = segment_paths(store)
    header, frames = read_segment(segment)
    edit(frames)
    write_segment(segment, header, frames)


def replace_in_event(frames: list[Frame], index: int, old: bytes, new: bytes) -> None:
    """Replaces `old` by `new` (of the same length) in frame `index`'s event."""
    assert len(old) == len(new)
    event = frames[index].events[0]
    assert old in event, f"{old!r} is not in frame {index}"
    frames[index].events[0] = event.replace(old, new)


def flip_byte(path: Path, offset: int) -> None:
    """Changes one byte in place, checksums left as they are: accidental damage."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
