"""Stores on NATS JetStream by URL: `convlog.Store.open("nats://host:port/STORE")`.

Starts one `nats-server` with JetStream on a free loopback port (skipped
without one, unless CONVLOG_REQUIRE_NATS=1, as CI sets).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import convlog
from conftest import user

READY_TIMEOUT = 30.0


def _nats_server() -> str | None:
    found = shutil.which("nats-server")
    if found is None and os.path.isfile("/usr/sbin/nats-server"):
        found = "/usr/sbin/nats-server"
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def nats_port(tmp_path: Path) -> Iterator[int]:
    """A one-node nats-server with JetStream; killed after the test."""
    binary = _nats_server()
    if binary is None:
        if os.environ.get("CONVLOG_REQUIRE_NATS") == "1":
            pytest.fail("CONVLOG_REQUIRE_NATS=1 but no nats-server is installed")
        pytest.skip("no nats-server installed")
    port = _free_port()
    log = tmp_path / "nats.log"
    server = subprocess.Popen(
        [binary, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(tmp_path / "js"), "-l", str(log)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while not (log.exists() and "Server is ready" in log.read_text(errors="replace")):
            assert time.monotonic() < deadline, "nats-server did not start"
            time.sleep(0.05)
        yield port
    finally:
        server.kill()
        server.wait()


@pytest.fixture(autouse=True)
def one_replica(monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-node server holds one replica: new stores are created with one."""
    monkeypatch.setenv("CONVLOG_NATS_REPLICAS", "1")


def test_a_store_opens_by_url_appends_and_reads_back(nats_port: int) -> None:
    url = f"nats://127.0.0.1:{nats_port}/pytest"
    with convlog.Store.open(url) as store:
        assert store.path == url
        assert store.append([user("trip", "Weather in Paris?"), user("trip", "And Rome?")]) == range(1, 3)
        assert store.snapshot() == 3
        store.append([user("trip", "And Oslo?")])
    # Another handle (another host, in effect) opens from the snapshot in
    # the bucket and reads the whole conversation.
    with convlog.Store.open(url, read_only=True) as reader:
        assert reader.read_only
        entries = reader.conversation("trip").entries
        assert [entry["content"] for entry in entries] == ["Weather in Paris?", "And Rome?", "And Oslo?"]
        with pytest.raises(convlog.ReadOnlyError):
            reader.append([user("trip", "no")])


def test_an_unreachable_url_is_a_clear_error() -> None:
    port = _free_port()
    with pytest.raises(convlog.StoreIOError, match=f"127.0.0.1:{port}"):
        convlog.Store.open(f"nats://127.0.0.1:{port}/nobody")


def test_a_bad_store_url_is_a_clear_error() -> None:
    with pytest.raises(convlog.InvalidOptionError, match="store name"):
        convlog.Store.open("nats://127.0.0.1:4222/bad.name")


def test_tail_follows_a_store_on_a_url(nats_port: int) -> None:
    url = f"nats://127.0.0.1:{nats_port}/tailed"
    with convlog.Store.open(url) as writer:
        writer.append([user("trip", "Weather in Paris?")])
        # A follower in another process, in effect: it reads the stream.
        with convlog.Store.open(url, read_only=True) as reader:
            tail = reader.tail(from_lsn=1, conversation_id="trip", idle_timeout=30)
            lsn, event = next(tail)
            assert (lsn, event["entry"]["content"]) == (1, "Weather in Paris?")
            writer.append([user("other", "Hello"), user("trip", "And Rome?")])
            lsn, event = next(tail)  # waits for the writer's append
            assert (lsn, event["entry"]["content"]) == (3, "And Rome?")
            assert tail.next_lsn == 4
        # The writer's own tail starts at the end of the log.
        own = writer.tail(idle_timeout=30)
        assert own.next_lsn == 4
        writer.append([user("trip", "And Oslo?")])
        lsn, event = next(own)
        assert (lsn, event["entry"]["content"]) == (4, "And Oslo?")
        # Nothing more is appended: the tail ends after its idle timeout.
        assert list(writer.tail(idle_timeout=0.2)) == []


def test_keys_on_a_url_are_refused_before_connecting(tmp_path: Path) -> None:
    key = tmp_path / "store.key"
    convlog.keygen(key, encryption=True)
    port = _free_port()  # nobody listens: the refusal comes first
    with pytest.raises(convlog.InvalidOptionError, match="not supported on a JetStream store") as caught:
        convlog.Store.open(f"nats://127.0.0.1:{port}/sealed", key_file=key)
    assert caught.value.option == "key_file"
    tamper_key = tmp_path / "audit.key"
    convlog.keygen(tamper_key)
    with pytest.raises(convlog.InvalidOptionError, match="tamper evidence") as caught:
        convlog.Store.open(f"nats://127.0.0.1:{port}/signed", tamper_key_file=tamper_key)
    assert caught.value.option == "tamper_key_file"
