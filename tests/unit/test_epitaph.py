"""The launcher's epitaph (ch_launcher/epitaph.py): the domain record keeps, while a VM runs here,
the Domain virt-handler should get should the launcher die (its own, Shutoff/Crashed), and none
otherwise; the monitor's side delivers it through virt-handler's Notify server (a real grpc.aio
server: tests/framework/virt_handler.NotifyRecorder)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from ch_launcher.convert import LauncherEnv, translate
from ch_launcher.epitaph import REASON, EpitaphFile, deliver, path_in
from ch_launcher.kubevirt.domain import Reason
from ch_launcher.kubevirt.vmi import parse_vmi
from ch_launcher.lifecycle import VmState
from ch_launcher.manager.record import DomainRecord
from tests.framework import NotifyRecorder
from tests.framework.managers import RecordingSink, short_layout
from tests.unit.convert.vmibuild import vmi as make_vmi


def _record(tmp_path: Path) -> tuple[DomainRecord, Path]:
    path = Path(path_in(str(tmp_path)))
    record = DomainRecord(RecordingSink(), EpitaphFile(str(path)))
    vmi = parse_vmi(make_vmi({}))
    record.set_plan(translate(vmi, LauncherEnv()))
    record.refresh(vmi)
    return record, path


def _status(path: Path) -> tuple[str, str] | None:
    if not path.exists():
        return None
    domain = json.loads(path.read_text())
    return domain["Status"]["Status"], domain["Status"]["Reason"]


def test_while_the_vm_runs_here_the_epitaph_is_its_domain_crashed_and_none_once_it_is_down(tmp_path: Path) -> None:
    async def story() -> None:
        record, path = _record(tmp_path)
        assert _status(path) is None  # nothing runs yet
        record.set_state(VmState.RUNNING, force=True)
        assert _status(path) == ("Shutoff", "Crashed")
        epitaph = json.loads(path.read_text())
        current = json.loads(record.domain_json)
        assert epitaph["Spec"] == current["Spec"] and epitaph["ObjectMeta"] == current["ObjectMeta"]
        record.user_paused = True
        record.set_state(VmState.PAUSED)
        assert _status(path) == ("Shutoff", "Crashed")
        record.set_state(VmState.DOWN, down=Reason.SHUTDOWN)
        assert _status(path) is None
        record.set_state(VmState.RUNNING, force=True)
        record.forget()
        assert _status(path) is None
        assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporary file left behind

    asyncio.run(story())


def test_a_vm_arriving_or_leaving_by_migration_leaves_no_epitaph_until_it_runs_here(tmp_path: Path) -> None:
    async def story() -> None:
        record, path = _record(tmp_path)
        record.migration_paused = True  # the target: receiving the VM
        record.set_state(VmState.PAUSED, force=True)
        assert _status(path) is None
        record.migration_paused = False  # it arrived and runs here
        record.set_state(VmState.RUNNING, force=True)
        assert _status(path) == ("Shutoff", "Crashed")
        record.set_state(VmState.UNDEFINED, publish=False)  # withdrawn quietly (a forget follows)
        assert _status(path) is None

    asyncio.run(story())


def test_an_epitaph_that_cannot_be_written_is_logged_and_the_events_still_go(tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    async def story() -> None:
        sink = RecordingSink()
        record = DomainRecord(sink, EpitaphFile(str(tmp_path / "absent" / "epitaph.json")))
        vmi = parse_vmi(make_vmi({}))
        record.set_plan(translate(vmi, LauncherEnv()))
        record.refresh(vmi)
        record.set_state(VmState.RUNNING, force=True)
        assert [kind for _, kind in sink.domains] == ["ADDED"]
        assert "cannot write the launcher's epitaph" in caplog.text

    asyncio.run(story())


def test_the_monitor_delivers_a_warning_then_the_epitaph_to_virt_handler() -> None:
    """The warning first: on a real node virt-handler fails and cleans up the VMI as soon as it has
    the epitaph, and a warning sent after it never showed on the VMI."""
    warnings_before_the_epitaph: list[int] = []

    async def story() -> None:
        with short_layout() as layout:
            recorder = await NotifyRecorder(
                layout.notify_socket, on_event=lambda _: warnings_before_the_epitaph.append(len(recorder.k8s_events)),
            ).start()
            try:
                path = layout.private_dir / "epitaph.json"
                assert await asyncio.to_thread(deliver, str(path), str(layout.notify_socket), namespace="ns",
                                               name="vm", uid="u-1", how="(pid 7) was killed by signal 9") is None
                assert recorder.events == [] and recorder.k8s_events == []  # no VM ran: nothing to say
                domain = {"Status": {"Status": "Shutoff", "Reason": "Crashed"}, "ObjectMeta": {"name": "vm"}}
                path.write_text(json.dumps(domain))
                said = await asyncio.to_thread(deliver, str(path), str(layout.notify_socket), namespace="ns",
                                               name="vm", uid="u-1", how="(pid 7) was killed by signal 9")
                assert said == "told virt-handler that the VM is gone (Shutoff/Crashed)"
                assert [(e.event_type, e.domain) for e in recorder.events] == [("MODIFIED", domain)]
                assert warnings_before_the_epitaph == [1]
                (event,) = recorder.k8s_events
                assert (event["type"], event["reason"], event["involvedObject"]["uid"]) == ("Warning", REASON, "u-1")
                assert event["message"] == ("ch-launcher (pid 7) was killed by signal 9 while the VM was running; "
                                            "the VM is gone")
                recorder.answer_success = False
                said = await asyncio.to_thread(deliver, str(path), str(layout.notify_socket), namespace="ns",
                                               name="vm", uid="u-1", how="exited with status 1")
                assert said == "virt-handler refused the VM's end: refused by the test"
            finally:
                await recorder.stop()
            said = await asyncio.to_thread(deliver, str(path), str(layout.notify_socket), namespace="ns", name="vm",
                                           uid="u-1", how="exited with status 1", timeout=2)
            assert said is not None and said.startswith("could not tell virt-handler that the VM is gone: ")

    asyncio.run(story())
