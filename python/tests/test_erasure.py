"""Encryption at rest and erasure from Python (docs/erasure.md, docs/python.md
"Encryption at rest and erasure"): a store opened with `key_file` seals
every conversation with a key of its own; `Store.erase` destroys one
conversation's key, after which every read of it raises `ErasedError`, while
the log still verifies and the other conversations read as before.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

import convlog
from conftest import user
from segment_support import read_segment, segment_paths, write_segment


@pytest.fixture
def key(tmp_path: Path) -> Path:
    """A store key file, outside the store directory."""
    path = tmp_path / "keys" / "store.key"
    path.parent.mkdir()
    assert convlog.keygen(path, encryption=True) == {"key": str(path), "encryption": True}
    assert path.stat().st_mode & 0o777 == 0o600
    return path


def record(store: convlog.Store) -> None:
    store.append([user("alice", "I live at 12 Rue de Rivoli"), user("bob", "Weather in Oslo?")])
    store.append([user("alice", "My card ends in 4242")])


def segment_bytes(store_path: Path) -> bytes:
    return b"".join(path.read_bytes() for path in segment_paths(store_path))


def test_content_is_sealed_at_rest_and_reads_back_whole(store_path: Path, key: Path) -> None:
    with convlog.Store.open(store_path, key_file=key) as store:
        assert store.encrypted
        record(store)
        assert [entry["content"] for entry in store.conversation("alice").entries] == [
            "I live at 12 Rue de Rivoli",
            "My card ends in 4242",
        ]
        # Raw reads give the events as appended, not their sealed form,
        # after the store's own record of the conversation's key.
        events = [event for _, event in store.events(conversation_id="alice")]
        assert [event["type"] for event in events] == ["custom"] + ["conversation_recorded"] * 2
        assert events[0]["kind"] == "convlog.key_made"
        assert [event["entry"]["content"] for event in events[1:]] == [
            "I live at 12 Rue de Rivoli",
            "My card ends in 4242",
        ]
        lsn = next(
            lsn
            for lsn, event in store.events()
            if event.get("conversation_id") == "bob" and event["type"] == "conversation_recorded"
        )
        assert store.event(lsn)["entry"]["content"] == "Weather in Oslo?"
    on_disk = segment_bytes(store_path)
    assert b"Rue de Rivoli" not in on_disk and b"Oslo" not in on_disk
    assert b"Rue de Rivoli" not in b"".join(path.read_bytes() for path in store_path.iterdir() if path.is_file())


def test_an_erased_conversation_raises_erased_and_the_rest_still_reads(store_path: Path, key: Path) -> None:
    with convlog.Store.open(store_path, key_file=key) as store:
        record(store)
        erased = store.erase("alice", "ticket 4711")
        assert erased["conversation_id"] == "alice" and erased["by"] == "ticket 4711"
        assert erased["erased_before"] is False and isinstance(erased["lsn"], int)
        assert isinstance(erased["at"], str)
        with pytest.raises(convlog.ErasedError) as caught:
            store.conversation("alice")
        assert caught.value.conversation_id == "alice" and caught.value.kind == "Erased"
        assert not isinstance(caught.value, KeyError)
        assert "was erased" in str(caught.value)
        for read in (
            lambda: store.resume("alice"),
            lambda: store.render("alice", "openai"),
            lambda: store.events(conversation_id="alice"),
            lambda: store.tail(conversation_id="alice"),
            lambda: store.append([user("alice", "again")]),
        ):
            with pytest.raises(convlog.ErasedError):
                read()
        assert store.conversation_ids() == ["bob"]
        assert store.erased_conversations() == ["alice"]
        assert store.is_erased("alice") and not store.is_erased("bob")
        assert store.conversation("bob").entries[0]["content"] == "Weather in Oslo?"
        # The whole log still reads: the erased conversation's events as
        # stored (sealed), and the erasure itself as an event.
        events = list(store.events())
        sealed = [event for _, event in events if event.get("conversation_id") == "alice"]
        assert {event["kind"] for event in sealed if event["type"] == "custom"} >= {
            "convlog.sealed",
            "convlog.erased",
        }
        first_sealed = next(lsn for lsn, event in events if event.get("kind") == "convlog.sealed")
        with pytest.raises(convlog.ErasedError):
            store.event(first_sealed)
        again = store.erase("alice", "ticket 4712")
        assert again["erased_before"] is True and again["lsn"] is None
    # After a reopen it stays erased; the log verifies, with and without the key.
    with convlog.Store.open(store_path, key_file=key) as store:
        with pytest.raises(convlog.ErasedError):
            store.conversation("alice")
    report = convlog.verify(store_path, key_file=key)
    assert report["encryption"]["erased_conversations"] == ["alice"]
    assert report["encryption"]["sealed_events"] == 1  # bob's
    assert report["encryption"]["erased_events"] == 2
    assert convlog.verify(store_path)["encryption"] is None


def test_a_read_only_follower_with_the_key_tails_opened_events(store_path: Path, key: Path) -> None:
    with convlog.Store.open(store_path, key_file=key) as writer:
        record(writer)
        with convlog.Store.open(store_path, read_only=True, key_file=key) as reader:
            tail = reader.tail(from_lsn=1, conversation_id="bob", idle_timeout=30)
            assert next(tail)[1]["kind"] == "convlog.key_made"
            lsn, event = next(tail)
            assert event["entry"]["content"] == "Weather in Oslo?"
            writer.append([user("bob", "And tomorrow?")])
            lsn, event = next(tail)
            assert event["entry"]["content"] == "And tomorrow?"


def test_a_sealed_event_changed_on_disk_does_not_open(store_path: Path, key: Path) -> None:
    with convlog.Store.open(store_path, key_file=key) as store:
        record(store)
    (segment,) = segment_paths(store_path)
    header, frames = read_segment(segment)
    # The last frame holds alice's second event, sealed: change its last
    # byte (the AEAD tag's) and recompute every checksum.
    event = frames[-1].events[-1]
    frames[-1].events[-1] = event[:-1] + bytes([event[-1] ^ 0x01])
    write_segment(segment, header, frames)
    last_lsn = convlog.verify(store_path)["next_lsn"] - 1  # the checksums hold
    with pytest.raises(convlog.UndecodableEventError) as caught:
        convlog.verify(store_path, key_file=key)
    assert caught.value.lsn == last_lsn


def test_key_errors_are_clear(store_path: Path, key: Path, tmp_path: Path) -> None:
    with convlog.Store.open(store_path, key_file=key) as store:
        record(store)
    with pytest.raises(convlog.EncryptionError, match="store key") as caught:
        convlog.Store.open(store_path)
    assert caught.value.path == str(store_path)
    with pytest.raises(convlog.EncryptionError):
        convlog.Store.open(store_path, read_only=True)
    other = tmp_path / "keys" / "other.key"
    convlog.keygen(other, encryption=True)
    with pytest.raises(convlog.EncryptionError, match="not this store's key"):
        convlog.Store.open(store_path, key_file=other)
    os.chmod(key, 0o644)
    with pytest.raises(convlog.KeyFileError, match="chmod 600") as key_error:
        convlog.Store.open(store_path, key_file=key)
    assert key_error.value.path == str(key)
    assert "group or others may read it" in key_error.value.reason
    with pytest.raises(convlog.KeyFileError):
        convlog.verify(store_path, key_file=key)
    with pytest.raises(ValueError, match="no public key"):
        convlog.keygen(tmp_path / "keys" / "x.key", encryption=True, public=tmp_path / "x.pub")


def test_erase_refuses_what_it_cannot_do(store_path: Path, key: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    with convlog.Store.open(plain) as store:
        store.append([user("alice", "hi")])
        assert not store.encrypted
        with pytest.raises(convlog.EncryptionError, match="without a store key"):
            store.erase("alice", "ticket 1")
    with pytest.raises(convlog.EncryptionError, match="not encrypted"):
        convlog.verify(plain, key_file=key)
    with convlog.Store.open(store_path, key_file=key) as store:
        record(store)
        with pytest.raises(convlog.ConversationNotFoundError):
            store.erase("carol", "ticket 2")
        with pytest.raises(convlog.LimitExceededError) as caught:
            store.erase("alice", "x" * 257)
        assert caught.value.constant == "ERASE_BY_CHARS_MAX"
        assert not store.is_erased("alice")
        with convlog.Store.open(store_path, read_only=True, key_file=key) as reader:
            with pytest.raises(convlog.ReadOnlyError):
                reader.erase("alice", "ticket 3")


def test_async_store_erases(store_path: Path, key: Path) -> None:
    async def run() -> list[str]:
        store = await convlog.AsyncStore.open(store_path, key_file=key)
        async with store:
            assert store.encrypted
            await store.append([user("alice", "hi"), user("bob", "hello")])
            await store.erase("alice", "ticket 4711")
            assert await store.is_erased("alice")
            with pytest.raises(convlog.ErasedError):
                await store.conversation("alice")
            return await store.erased_conversations()

    assert asyncio.run(run()) == ["alice"]
