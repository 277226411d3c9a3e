"""EventStreamParser and the event FIFO."""

from __future__ import annotations

import itertools
import json
import logging
import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ch_launcher.ch.events import Event, EventStreamParser, open_event_fifo


def pretty(source: str, event: str, properties: dict[str, str] | None = None, secs: int = 0, nanos: int = 0) -> bytes:
    obj = {"timestamp": {"secs": secs, "nanos": nanos}, "source": source, "event": event, "properties": properties}
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n\n").encode()


STREAM = (
    pretty("vmm", "starting", nanos=500)
    + pretty("vm", "booting", secs=1)
    + pretty("vm", "booted", secs=1, nanos=250_000_000)
    + pretty("virtio-device", "activated", {"id": "_disk0"}, secs=2)
    + pretty("guest", "panic", {"event": "panic"}, secs=3)
)
NAMES = ["vmm:starting", "vm:booting", "vm:booted", "virtio-device:activated", "guest:panic"]


def test_whole_stream_gives_typed_events() -> None:
    events = EventStreamParser().feed(STREAM)
    assert [e.name for e in events] == NAMES
    assert events[2] == Event(source="vm", event="booted", properties=None, timestamp=1.25)
    assert events[3].properties == {"id": "_disk0"}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_of_the_stream_gives_the_same_events(cuts: list[int]) -> None:
    parser = EventStreamParser()
    bounds = [0, *sorted(cuts), len(STREAM)]
    events = []
    for a, b in itertools.pairwise(bounds):
        events += parser.feed(STREAM[a:b])
    assert [e.name for e in events] == NAMES
    assert parser.skipped == 0


def test_an_event_is_returned_before_its_blank_line_arrives() -> None:
    parser = EventStreamParser()
    data = pretty("vm", "shutdown")
    assert [e.name for e in parser.feed(data[:-2])] == ["vm:shutdown"]
    assert parser.feed(data[-2:]) == []
    assert [e.name for e in parser.feed(pretty("vmm", "shutdown"))] == ["vmm:shutdown"]


def test_a_malformed_object_is_skipped_with_a_warning_and_the_stream_resynchronises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    parser = EventStreamParser()
    bad = b'{\n  "timestamp": {\n    "secs": 0,\n  "source": \n\n'
    with caplog.at_level(logging.WARNING):
        events = parser.feed(pretty("vm", "booting") + bad + pretty("vm", "booted"))
    assert [e.name for e in events] == ["vm:booting", "vm:booted"]
    assert parser.skipped == 1
    assert "malformed" in caplog.text


def test_objects_that_are_not_events_are_skipped() -> None:
    parser = EventStreamParser()
    events = parser.feed(b'[1, 2]\n\n{"source": 3, "event": "x"}\n\n' + pretty("vm", "paused"))
    assert [e.name for e in events] == ["vm:paused"]
    assert parser.skipped == 2


def test_compact_objects_on_one_piece_are_all_decoded() -> None:
    line = b'{"timestamp":{"secs":0,"nanos":1},"source":"vm","event":"a","properties":null}'
    events = EventStreamParser().feed(line + b"\n" + line.replace(b'"a"', b'"b"') + b"\n\n")
    assert [e.event for e in events] == ["a", "b"]


COMPACT = b"".join(
    b'{"timestamp":{"secs":0,"nanos":%d},"source":"%s","event":"%s","properties":null}\n'
    % (i, *name.encode().split(b":"))
    for i, name in enumerate(NAMES))


def test_a_compact_event_is_returned_while_the_next_one_is_still_being_written() -> None:
    # A writer of one-line JSON without blank lines: the first event must not wait for the
    # second to complete (nor be lost with it if the writer dies in the middle of it).
    parser = EventStreamParser()
    first_end = COMPACT.index(b"\n") + 1
    assert [e.name for e in parser.feed(COMPACT[:first_end + 20])] == [NAMES[0]]
    assert [e.name for e in parser.feed(COMPACT[first_end + 20:])] == NAMES[1:]
    assert parser.skipped == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(COMPACT)), max_size=12))
def test_any_split_of_a_compact_stream_gives_the_same_events(cuts: list[int]) -> None:
    parser = EventStreamParser()
    bounds = [0, *sorted(cuts), len(COMPACT)]
    events = []
    for a, b in itertools.pairwise(bounds):
        events += parser.feed(COMPACT[a:b])
    assert [e.name for e in events] == NAMES
    assert parser.skipped == 0


def test_a_multibyte_character_split_across_reads_survives() -> None:
    data = pretty("vm", "device-removed", {"id": "disque-été"})
    cut = data.index("é".encode()) + 1
    parser = EventStreamParser()
    events = parser.feed(data[:cut]) + parser.feed(data[cut:])
    assert events[0].properties == {"id": "disque-été"}


def test_garbage_without_blank_lines_is_dropped_beyond_the_limit() -> None:
    parser = EventStreamParser()
    assert parser.feed(b"x" * (1 << 20) + b"x") == []
    assert parser.skipped == 1
    assert [e.name for e in parser.feed(b"\n\n" + pretty("vm", "booted"))] == ["vm:booted"]


def test_fifo_is_created_and_reads_without_blocking(tmp_path) -> None:
    path = str(tmp_path / "events")
    fifo = open_event_fifo(path)
    try:
        assert stat.S_ISFIFO(os.stat(path).st_mode)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert fifo.read_available() == b""  # nothing yet, no writer but us: no EOF, no block
        writer = os.open(path, os.O_WRONLY)  # what CH does: opens it for writing
        os.write(writer, pretty("vm", "booted"))
        os.close(writer)  # the writer goes away: the read end still does not report EOF
        assert [e.name for e in EventStreamParser().feed(fifo.read_available())] == ["vm:booted"]
        assert fifo.read_available() == b""
    finally:
        fifo.close()
    fifo.close()  # idempotent
    with pytest.raises(OSError):
        fifo.read_available()


def test_fifo_replaces_a_stale_regular_file_and_refuses_a_directory(tmp_path) -> None:
    stale = tmp_path / "events"
    stale.write_text("old events")
    with open_event_fifo(str(stale)) as fifo:
        assert stat.S_ISFIFO(os.stat(fifo.path).st_mode)
    (tmp_path / "dir").mkdir()
    with pytest.raises(OSError, match="is not a FIFO"):
        open_event_fifo(str(tmp_path / "dir"))


def test_existing_fifo_is_reused(tmp_path) -> None:
    path = str(tmp_path / "events")
    os.mkfifo(path, 0o600)
    with open_event_fifo(path) as fifo:
        assert fifo.fileno() == fifo.read_fd >= 0
