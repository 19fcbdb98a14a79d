"""Tamper evidence from Python (docs/tamper.md, docs/python.md "Tamper
evidence"): a tamper-evident store written with `Store.open(...,
tamper_key_file=...)`, checkpoints kept outside it, and `convlog.verify`
telling edits of the files (`TamperedError`, with the kind and where) from
accidental damage (`CorruptedError`). The edits are made on the real files,
every checksum and link recomputed (segment_support.py).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import convlog
from conftest import user
from segment_support import Frame, flip_byte, replace_in_event, rewrite, segment_paths

#: Events of the store `signed` makes: one frame each.
EVENTS = 6


@dataclass
class Signed:
    """A tamper-evident store and what is kept outside it."""

    store: Path
    key: Path
    public: Path
    head: Path


def checkpoint_lsn(head: Path) -> int:
    """The LSN a checkpoint file covers (its `lsn N` line)."""
    for line in head.read_text().splitlines():
        if line.startswith("lsn "):
            return int(line.split()[1])
    raise AssertionError(f"{head} has no lsn line")


def new_key(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "outside"
    outside.mkdir(parents=True, exist_ok=True)
    key = outside / "audit.key"
    made = convlog.keygen(key)
    assert made == {
        "key": str(key),
        "encryption": False,
        "public": f"{key}.pub",
        "epochs": [0],
        "epoch": 0,
    }
    assert key.stat().st_mode & 0o777 == 0o600
    return key, Path(made["public"])


def append_questions(store: convlog.Store, first: int, count: int) -> None:
    for index in range(first, first + count):
        store.append([user("trip", f"question {index} about Paris")])


@pytest.fixture
def signed(tmp_path: Path) -> Signed:
    """A tamper-evident store of `EVENTS` one-event frames; closing it signed
    a checkpoint of its end into a file outside it."""
    key, public = new_key(tmp_path)
    head = tmp_path / "outside" / "store.head"
    store_dir = tmp_path / "store"
    with convlog.Store.open(store_dir, tamper_key_file=key, checkpoint_file=head) as store:
        assert store.tamper_evident
        append_questions(store, 0, EVENTS)
    assert checkpoint_lsn(head) == EVENTS
    return Signed(store_dir, key, public, head)


def tampered(signed: Signed, **keys: Any) -> convlog.TamperedError:
    """The TamperedError `verify` raises with the secret key and the head
    checkpoint (or with `keys`)."""
    given = keys or {"tamper_key_file": signed.key, "head": signed.head}
    with pytest.raises(convlog.TamperedError) as caught:
        convlog.verify(signed.store, **given)
    error = caught.value
    assert error.kind == "Tampered"
    assert error.path == str(signed.store)
    assert not isinstance(error, convlog.CorruptedError)
    return error


def test_an_untouched_store_verifies_with_the_key_and_with_the_public_key(signed: Signed) -> None:
    report = convlog.verify(signed.store, tamper_key_file=signed.key, head=signed.head)
    assert report["events"] == EVENTS
    assert report["tamper"] == {
        "keyed": True,
        "frames_authenticated": EVENTS,
        "snapshots_authenticated": 0,
        "epochs": [{"epoch": 0, "first_lsn": 1}],
        "checkpoint_lsn": EVENTS,
    }
    public = convlog.verify(signed.store, public_key_file=signed.public, head=signed.head)
    assert public["tamper"]["keyed"] is False
    assert public["tamper"]["frames_authenticated"] == 0
    assert public["tamper"]["checkpoint_lsn"] == EVENTS
    # Without keys, the ordinary checks only.
    assert convlog.verify(signed.store)["tamper"] is None


def test_changed_content_is_named_with_its_lsn_and_is_not_corruption(signed: Signed) -> None:
    rewrite(signed.store, lambda frames: replace_in_event(frames, 2, b"Paris", b"Parus"))
    # Every checksum holds: the ordinary checks see nothing.
    assert convlog.verify(signed.store)["events"] == EVENTS
    error = tampered(signed)
    assert (error.tamper_kind, error.lsn) == ("ContentChanged", 3)
    assert error.description == "changed content"
    assert Path(error.segment) == segment_paths(signed.store)[0]
    assert "was tampered with: changed content at LSN 3" in str(error)
    # The key alone finds it too; so does the public key with the
    # checkpoint, since the attacker left the (public) digest chain as it
    # was: the events no longer reproduce it.
    assert tampered(signed, tamper_key_file=signed.key).tamper_kind == "ContentChanged"
    error = tampered(signed, public_key_file=signed.public, head=signed.head)
    assert (error.tamper_kind, error.lsn) == ("ContentChanged", 3)


def test_a_truncated_tail_is_caught_by_the_checkpoint_kept_outside(signed: Signed) -> None:
    def cut(frames: list[Frame]) -> None:
        del frames[EVENTS - 2 :]

    rewrite(signed.store, cut)
    # Without the checkpoint a cut tail is a shorter log.
    assert convlog.verify(signed.store, tamper_key_file=signed.key)["events"] == EVENTS - 2
    error = tampered(signed)
    assert (error.tamper_kind, error.lsn) == ("Truncated", EVENTS - 1)
    assert f"events {EVENTS - 1}..={EVENTS} are missing" in error.detail


def test_a_deleted_middle_event_is_named(signed: Signed) -> None:
    def delete(frames: list[Frame]) -> None:
        del frames[2]

    rewrite(signed.store, delete)
    error = tampered(signed)
    assert (error.tamper_kind, error.lsn) == ("Deleted", 3)


def test_reordered_events_are_named(signed: Signed) -> None:
    def swap(frames: list[Frame]) -> None:
        frames[2], frames[3] = frames[3], frames[2]

    rewrite(signed.store, swap)
    error = tampered(signed)
    assert (error.tamper_kind, error.lsn) == ("Reordered", 3)


def test_a_whole_older_copy_put_back_is_caught_by_the_checkpoint(tmp_path: Path) -> None:
    key, public = new_key(tmp_path)
    head = tmp_path / "outside" / "store.head"
    store_dir, old_copy = tmp_path / "store", tmp_path / "old-copy"
    with convlog.Store.open(store_dir, tamper_key_file=key, checkpoint_file=head) as store:
        append_questions(store, 0, 3)
    shutil.copytree(store_dir, old_copy)
    with convlog.Store.open(store_dir, tamper_key_file=key, checkpoint_file=head) as store:
        append_questions(store, 3, 3)
    assert checkpoint_lsn(head) == 6
    shutil.rmtree(store_dir)
    shutil.copytree(old_copy, store_dir)
    # Every frame of the old copy is genuine: the key alone cannot tell.
    assert convlog.verify(store_dir, tamper_key_file=key)["events"] == 3
    signed = Signed(store_dir, key, public, head)
    assert tampered(signed).tamper_kind == "Truncated"
    assert tampered(signed, public_key_file=public, head=head).tamper_kind == "Truncated"


def test_a_forged_checkpoint_is_named(signed: Signed) -> None:
    text = signed.head.read_text().replace(f"lsn {EVENTS}\n", f"lsn {EVENTS - 1}\n")
    signed.head.write_text(text)
    assert tampered(signed).tamper_kind == "ForgedCheckpoint"


def test_accidental_damage_stays_corrupted_not_tampered(signed: Signed) -> None:
    (segment,) = segment_paths(signed.store)
    flip_byte(segment, segment.read_bytes().index(b"question 2 about Paris"))
    for keys in ({}, {"tamper_key_file": signed.key, "head": signed.head}):
        with pytest.raises(convlog.CorruptedError) as caught:
            convlog.verify(signed.store, **keys)
        assert not isinstance(caught.value, convlog.TamperedError)
        assert caught.value.segment == str(segment)
        assert "checksum" in caught.value.reason


def test_checkpoints_on_demand_every_n_events_and_on_close(tmp_path: Path) -> None:
    key, public = new_key(tmp_path)
    head = tmp_path / "outside" / "store.head"
    with convlog.Store.open(
        tmp_path / "store", tamper_key_file=key, checkpoint_file=head, checkpoint_every_events=2
    ) as store:
        append_questions(store, 0, 1)
        assert not head.exists()
        append_questions(store, 1, 1)
        assert checkpoint_lsn(head) == 2  # the interval was crossed
        append_questions(store, 2, 1)
        assert checkpoint_lsn(head) == 2
        checkpoint = store.checkpoint()
        assert checkpoint["lsn"] == 3 and checkpoint["epoch"] == 0
        assert checkpoint["path"] == str(head)
        assert checkpoint["text"] == head.read_text()
        assert len(checkpoint["store_id"]) == 32 and len(checkpoint["digest"]) == 64
        append_questions(store, 3, 1)
    assert checkpoint_lsn(head) == 4  # close signed the last one
    report = convlog.verify(tmp_path / "store", public_key_file=public, head=head)
    assert report["tamper"]["checkpoint_lsn"] == 4


def test_a_rotated_key_tags_new_frames_and_verifies_the_old_ones(signed: Signed) -> None:
    rotated = signed.key.with_name("audit-2.key")
    made = convlog.keygen(rotated, rotate=signed.key)
    assert (made["epochs"], made["epoch"]) == ([0, 1], 1)
    with convlog.Store.open(signed.store, tamper_key_file=rotated) as store:
        append_questions(store, EVENTS, 1)
    report = convlog.verify(signed.store, tamper_key_file=rotated)
    assert report["tamper"]["epochs"] == [
        {"epoch": 0, "first_lsn": 1},
        {"epoch": 1, "first_lsn": EVENTS + 1},
    ]


def test_a_read_only_opener_takes_the_tamper_key(signed: Signed) -> None:
    with convlog.Store.open(signed.store, read_only=True, tamper_key_file=signed.key) as reader:
        assert len(reader.conversation("trip")) == EVENTS
        with pytest.raises(convlog.ReadOnlyError):
            reader.checkpoint()


def test_a_world_readable_key_file_is_refused(signed: Signed) -> None:
    os.chmod(signed.key, 0o644)
    with pytest.raises(convlog.KeyFileError, match="chmod 600") as caught:
        convlog.Store.open(signed.store, tamper_key_file=signed.key)
    assert caught.value.path == str(signed.key)
    assert "group or others may access it" in caught.value.reason
    with pytest.raises(convlog.KeyFileError):
        convlog.verify(signed.store, tamper_key_file=signed.key)
    with pytest.raises(convlog.KeyFileError):
        convlog.keygen(signed.key.with_name("next.key"), rotate=signed.key)
    # Not a key file at all: refused the same way, naming the line.
    signed.public.write_text("not a key\n")
    with pytest.raises(convlog.KeyFileError, match="line 1") as caught:
        convlog.verify(signed.store, public_key_file=signed.public, head=signed.head)
    assert caught.value.path == str(signed.public)


def test_bad_tamper_arguments_are_clear_errors(signed: Signed, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    for arguments, option in (
        ({"checkpoint_file": signed.head}, "checkpoint_file"),
        ({"checkpoint_every_events": 10}, "checkpoint_every_events"),
        ({"tamper_key_file": signed.key, "checkpoint_every_events": 0}, "checkpoint_every_events"),
    ):
        with pytest.raises(convlog.InvalidOptionError) as caught:
            convlog.Store.open(plain, **arguments)
        assert caught.value.option == option
    with pytest.raises(convlog.InvalidOptionError, match="signs no checkpoints") as caught:
        convlog.Store.open(signed.store, read_only=True, tamper_key_file=signed.key, checkpoint_file=signed.head)
    assert caught.value.option == "checkpoint_file"
    with pytest.raises(convlog.InvalidOptionError, match="inside the store directory"):
        convlog.Store.open(signed.store, tamper_key_file=signed.key, checkpoint_file=signed.store / "head")
    with pytest.raises(convlog.InvalidOptionError, match="give head too") as caught:
        convlog.verify(signed.store, public_key_file=signed.public)
    assert caught.value.option == "public_key_file"
    with pytest.raises(convlog.InvalidOptionError) as caught:
        convlog.verify(signed.store, head=signed.head)
    assert caught.value.option == "head"
    with pytest.raises(convlog.InvalidOptionError, match="store URL"):
        convlog.verify("nats://127.0.0.1:4222/audit")
    with convlog.Store.open(plain) as store:
        with pytest.raises(convlog.InvalidOptionError, match="not tamper-evident"):
            store.checkpoint()
        assert not store.tamper_evident


def test_async_store_signs_checkpoints(tmp_path: Path) -> None:
    key, public = new_key(tmp_path)
    head = tmp_path / "outside" / "store.head"

    async def run() -> dict[str, Any]:
        store = await convlog.AsyncStore.open(tmp_path / "store", tamper_key_file=key, checkpoint_file=head)
        async with store:
            assert store.tamper_evident
            await store.append([user("trip", "hello")])
            return await store.checkpoint()

    assert asyncio.run(run())["lsn"] == 1
    assert convlog.verify(tmp_path / "store", public_key_file=public, head=head)["tamper"]["checkpoint_lsn"] == 1


def test_tamper_evidence_is_chosen_when_a_store_is_created(signed: Signed, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    with convlog.Store.open(plain) as store:
        store.append([user("trip", "hello")])
    with pytest.raises(convlog.InvalidOptionError, match="created without tamper evidence"):
        convlog.Store.open(plain, tamper_key_file=signed.key)
    # A tamper-evident store is written only with its key...
    with pytest.raises(convlog.InvalidOptionError, match="only a writer with its key may append"):
        convlog.Store.open(signed.store)
    # ... not with another one, whose tags would not extend the chain.
    other, _ = new_key(tmp_path / "elsewhere")
    with pytest.raises(convlog.TamperedError) as caught:
        convlog.Store.open(signed.store, tamper_key_file=other)
    assert caught.value.tamper_kind == "Forged"
    # It reads without the key (snapshots unchecked: docs/tamper.md).
    with convlog.Store.open(signed.store, read_only=True) as reader:
        assert len(reader.conversation("trip")) == EVENTS
    with pytest.raises(convlog.StoreIOError, match="missing.key"):
        convlog.Store.open(signed.store, tamper_key_file=tmp_path / "missing.key")


def test_on_checkpoint_gets_every_checkpoint_after_the_call_that_signed_it(tmp_path: Path) -> None:
    key, public = new_key(tmp_path)
    head = tmp_path / "outside" / "store.head"
    shipped: list[dict[str, Any]] = []
    store: convlog.Store

    def ship(checkpoint: dict[str, Any]) -> None:
        # Called with no lock of the store held: the store may be used here
        # (closed already for the last checkpoint, the one close() signs).
        checkpoint["entries"] = None if store.closed else len(store.conversation("trip"))
        shipped.append(checkpoint)

    store = convlog.Store.open(
        tmp_path / "store", tamper_key_file=key, checkpoint_file=head, checkpoint_every_events=2, on_checkpoint=ship
    )
    with store:
        append_questions(store, 0, 2)
        assert [(each["lsn"], each["entries"]) for each in shipped] == [(2, 2)]
        assert shipped[0]["text"] == head.read_text() and shipped[0]["path"] == str(head)
        append_questions(store, 2, 1)
        assert store.checkpoint()["lsn"] == 3
        control = store.message_control()
        control.create_context("alice", "ctx")  # event 4: crosses the interval
        assert [each["lsn"] for each in shipped] == [2, 3, 4]
    assert [(each["lsn"], each["entries"]) for each in shipped][2:] == [(4, 3), (4, None)]  # close signs a last one


def test_an_exception_of_on_checkpoint_is_raised_and_the_append_stands(tmp_path: Path) -> None:
    key, public = new_key(tmp_path)

    def refuse(checkpoint: dict[str, Any]) -> None:
        raise RuntimeError(f"cannot ship the checkpoint of LSN {checkpoint['lsn']}")

    store = convlog.Store.open(tmp_path / "store", tamper_key_file=key, checkpoint_every_events=1, on_checkpoint=refuse)
    with pytest.raises(RuntimeError, match="LSN 1"):
        store.append([user("trip", "hello")])
    assert len(store.conversation("trip")) == 1  # stored all the same
    with pytest.raises(RuntimeError, match="LSN 1"):
        store.checkpoint()
    with pytest.raises(RuntimeError, match="LSN 1"):
        store.close()  # the last checkpoint: signed, then refused by the callable
    assert store.closed
    report = convlog.verify(tmp_path / "store", tamper_key_file=key)
    assert report["tamper"]["frames_authenticated"] == 1


def test_on_checkpoint_needs_the_tamper_key_and_a_callable(tmp_path: Path) -> None:
    key, _ = new_key(tmp_path)
    with pytest.raises(convlog.InvalidOptionError) as caught:
        convlog.Store.open(tmp_path / "plain", on_checkpoint=print)
    assert caught.value.option == "on_checkpoint"
    with pytest.raises(TypeError, match="callable"):
        convlog.Store.open(tmp_path / "signed", tamper_key_file=key, on_checkpoint="print")  # type: ignore[arg-type]
