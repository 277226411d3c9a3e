"""The event-monitor stream of a VMM read through the launcher's FIFO reader and parser."""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Callable

import pytest

from ch_launcher.ch.api import ChApiError
from ch_launcher.ch.events import EventStreamParser
from tests.contract.harness import FAKE, Vmm


def test_vmm_start_is_the_first_event_and_timestamps_grow(vmm: Vmm) -> None:
    vmm.client.create(vmm.config())
    vmm.client.boot()
    vmm.events.wait_for("vm:booted", after_mark=False)
    seen = vmm.events.seen
    assert seen[0].name == "vmm:starting"
    stamps = [e.timestamp for e in seen]
    assert stamps == sorted(stamps)
    assert all(0 <= t < 60 for t in stamps)  # seconds since the VMM started, not wall-clock


def test_stream_read_in_tiny_slices_gives_the_same_events(vmm: Vmm) -> None:
    vmm.client.create(vmm.config())
    vmm.client.boot()
    vmm.client.pause()
    vmm.client.resume()
    vmm.client.shutdown()
    deadline = time.monotonic() + 5
    raw = b""
    while time.monotonic() < deadline and raw.count(b'"shutdown"') < 1:
        select.select([vmm.fifo.read_fd], [], [], 0.1)
        raw += vmm.fifo.read_available()
    whole = [e.name for e in EventStreamParser().feed(raw)]
    parser = EventStreamParser()
    sliced = []
    for i in range(0, len(raw), 7):
        sliced += [e.name for e in parser.feed(raw[i : i + 7])]
    assert sliced == whole
    lifecycle = [n for n in whole if n.startswith("vm")]
    assert lifecycle == [
        "vmm:starting", "vm:booting", "vm:booted", "vm:pausing", "vm:paused",
        "vm:resuming", "vm:resumed", "vm:shutdown",
    ]  # fmt: skip
    assert parser.skipped == 0


def test_events_are_pretty_printed_objects_separated_by_blank_lines(start: Callable[..., Vmm]) -> None:
    vmm = start(FAKE)
    vmm.client.create(vmm.config())
    vmm.client.boot()
    raw, deadline = b"", time.monotonic() + 10
    while len(pieces := [p for p in raw.decode().split("\n\n") if p.strip()]) < 3 and time.monotonic() < deadline:
        select.select([vmm.fifo.read_fd], [], [], 0.1)  # until vmm:starting, vm:booting and vm:booted are in
        raw += vmm.fifo.read_available()
    assert len(pieces) >= 3, raw
    for piece in pieces:
        assert piece.startswith("{\n  \"timestamp\": {\n")
        obj = json.loads(piece)
        assert list(obj) == ["timestamp", "source", "event", "properties"]
        assert set(obj["timestamp"]) == {"secs", "nanos"}


def test_devices_report_activation_with_their_ids(start: Callable[..., Vmm]) -> None:
    vmm = start(FAKE)
    disk = os.path.join(vmm.dir, "root.img")
    with open(disk, "wb") as f:
        f.truncate(1 << 20)
    vmm.client.create(vmm.config(disks=[{"id": "rootdisk", "path": disk, "image_type": "Raw"}]))
    vmm.client.boot()
    event = vmm.events.wait_for("virtio-device:activated")
    ids = {e.properties["id"] for e in vmm.events.seen if e.name == "virtio-device:activated" and e.properties}
    assert event.properties is not None
    assert "rootdisk" in ids


def test_a_failed_boot_leaves_booting_without_booted(start: Callable[..., Vmm]) -> None:
    vmm = start(FAKE)
    vmm.client.create({"cpus": {"boot_vcpus": 2, "max_vcpus": 1}, "payload": FAKE.payload(vmm.dir)})
    vmm.events.set_mark()
    with pytest.raises(ChApiError):  # the error itself is tested in test_boot_checks.py
        vmm.client.boot()
    assert vmm.events.since_mark() == ["vm:booting"]


def test_event_fifo_never_blocks_the_vmm_when_it_is_not_read(start: Callable[..., Vmm]) -> None:
    # CH writes non-blocking and drops events when the pipe is full; it must keep serving.
    vmm = start(FAKE, no_shutdown=True)
    vmm.client.create(vmm.config())
    for _ in range(400):
        vmm.client.boot()
        vmm.client.shutdown()
    assert vmm.client.info().state == "Created"
