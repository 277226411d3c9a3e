"""The command server's pieces that need no process: budgets, options, decoding, refusals."""

from __future__ import annotations

import asyncio

import pytest

from ch_launcher._proto import kubevirt_cmd_v1_pb2 as pb
from ch_launcher.manager import CommandFailed
from ch_launcher.server import COMMANDS, INVALID_VMI, NOT_SERVED, CmdServicer, budget, decode_vmi, launcher_options


class _Context:
    def __init__(self, remaining):
        self.remaining = remaining

    def time_remaining(self):
        return self.remaining


def test_the_budget_leaves_a_margin_inside_the_callers_deadline():
    assert 0 < budget(_Context(20.0), 20.0) < 20.0
    assert 0 < budget(_Context(5.0), 5.0) < 5.0
    assert budget(_Context(3.0), 20.0) < 3.0


def test_without_a_client_deadline_the_contracts_deadline_applies():
    assert budget(_Context(None), 20.0) == budget(_Context(20.0), 20.0)


def test_an_expired_deadline_still_gives_a_tiny_positive_budget():
    assert budget(_Context(0.0), 20.0) > 0


def test_every_cmd_rpc_is_either_implemented_or_refused_with_a_reason():
    service = pb.DESCRIPTOR.services_by_name["Cmd"]
    implemented = set(COMMANDS) | {"Ping", "GetDomain", "GetDomainStats", "GetDomainDirtyRateStats",
                                   "GetFilesystems", "GetGuestInfo",
                                   "GetUsers", "GetQemuVersion", "SignalTargetPodCleanup",
                                   "SyncVirtualMachineCPUs", "SyncVirtualMachineMemory", "MigrateVirtualMachine",
                                   "CancelVirtualMachineMigration", "SyncMigrationTarget",
                                   "FinalizeVirtualMachineMigration", "FreezeVirtualMachine",
                                   "UnfreezeVirtualMachine", "Exec", "GuestPing"}
    names = {m.name for m in service.methods}
    assert names == implemented | set(NOT_SERVED)
    assert not implemented & set(NOT_SERVED)


@pytest.mark.parametrize("rpc", sorted(NOT_SERVED))
def test_a_refused_rpc_answers_in_band_naming_itself_and_why(rpc):
    servicer = CmdServicer(manager=None)  # refusals never touch the manager
    reply = asyncio.run(getattr(servicer, rpc)(None, None))
    response = reply if isinstance(reply, pb.Response) else reply.response
    assert response.success is False
    assert response.message.startswith(f"{rpc} is not supported by the Cloud Hypervisor backend: ")
    assert len(response.message) > len(rpc) + 50


def test_options_become_launcher_options():
    options = pb.VirtualMachineOptions(
        VirtualMachineSMBios=pb.SMBios(manufacturer="KubeVirt", product="None", family="KubeVirt"),
        PreallocatedVolumes=["disk0"], interfaceDomainAttachment={"default": "tap"},
        clusterConfig=pb.ClusterConfig(SerialConsoleLogDisabled=True, FreePageReportingDisabled=True))
    lo = launcher_options(options)
    assert lo.smbios.manufacturer == "KubeVirt" and lo.smbios.family == "KubeVirt"
    assert lo.preallocated_volumes == ("disk0",)
    assert dict(lo.interface_domain_attachment) == {"default": "tap"}
    assert lo.serial_console_log_disabled and lo.free_page_reporting_disabled


@pytest.mark.parametrize("payload", [b"", b"null", b"{", b"[1]", b'{"metadata": "x"}'])
def test_an_undecodable_vmi_gives_the_go_launchers_message(payload):
    with pytest.raises(CommandFailed) as e:
        decode_vmi(payload)
    assert str(e.value) == INVALID_VMI


def test_a_vmi_with_unknown_fields_decodes():
    vmi = decode_vmi(b'{"metadata": {"name": "a", "uid": "u"}, "spec": {"futureField": 1}, "status": {}}')
    assert vmi.metadata.name == "a"


@pytest.mark.parametrize(("state", "expected"), [
    ("running", ("LibvirtError(Code=86, Domain=10, Message='Guest agent is not responding: QEMU guest agent is "
                 "not connected')")),
    ("paused", "LibvirtError(Code=55, Domain=10, Message='Requested operation is not valid: domain is not running')"),
    ("down", "LibvirtError(Code=55, Domain=20, Message='Requested operation is not valid: domain is not running')"),
    ("undefined", ("LibvirtError(Code=42, Domain=10, Message='Domain not found: no domain with matching name "
                   "'default_testvmi'')")),
])
def test_freeze_and_unfreeze_answer_as_virt_launcher_does_without_a_connected_agent(state, expected):
    from ch_launcher.lifecycle import VmState
    from ch_launcher.manager.view import no_guest_agent

    assert no_guest_agent(VmState(state), "default_testvmi") == expected
