"""virt-probe's command line (ch_launcher/probe.py) as virt-controller renders it into the pod's
probes and as pflag reads it (kubevirt cmd/virt-probe@d923fdb815cd)."""

from __future__ import annotations

import pytest

from ch_launcher import probe


def test_an_exec_probe_keeps_the_guest_commands_arguments_after_the_double_dash() -> None:
    flags, args = probe.parse(["--domainName", "ns_vm", "--timeoutSeconds", "30", "--command", "cat", "--",
                               "/proc/uptime", "--not-a-flag"])
    assert (flags["domainName"], flags["timeoutSeconds"], flags["command"], flags["guestAgentPing"]) == (
        "ns_vm", 30, "cat", False)
    assert args == ["/proc/uptime", "--not-a-flag"]


def test_a_ping_probe_and_pflags_other_spellings() -> None:
    flags, args = probe.parse(["--domainName=ns_vm", "--timeoutSeconds=1", "--guestAgentPing", "-v", "4", "extra"])
    assert (flags["domainName"], flags["timeoutSeconds"], flags["guestAgentPing"], flags["v"]) == ("ns_vm", 1, True, 4)
    assert args == ["extra"]  # pflag intersperses positional arguments


@pytest.mark.parametrize(("argv", "message"), [
    (["--nope"], "unknown flag: --nope"),
    (["--timeoutSeconds", "soon"], "invalid argument 'soon'"),
    (["--domainName"], "flag needs an argument"),
])
def test_a_bad_command_line_exits_2_naming_the_flag(argv: list[str], message: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert probe.run(argv) == 2
    assert message in capsys.readouterr().err
