"""Reading cloud-hypervisor's log for a failure that it ended like a poweroff (ch.vmmlog)."""

from __future__ import annotations

from ch_launcher.ch.vmmlog import failure_in, failure_in_file

# v53.0 with the tiny guest's `~e`, as written with RUST_BACKTRACE set (abridged)...
WITH_BACKTRACE = """\
cloud-hypervisor:   0.082932s: <vmm> INFO:event_monitor/src/lib.rs:113 -- Event: source = vm event = booted
cloud-hypervisor:   0.175683s: <vcpu0> ERROR:vmm/src/cpu.rs:1460 -- VCPU generated error: VcpuRun(Failed to run vcpu

Caused by:
    Unexpected exit reason on vcpu run: InternalError

Stack backtrace:
   0: <unknown>
   4: start_thread
             at ./nptl/pthread_create.c:442:8)
cloud-hypervisor:   0.376655s: <vmm> INFO:vmm/src/lib.rs:2080 -- VM exit event
cloud-hypervisor:   0.377825s: <vmm> INFO:event_monitor/src/lib.rs:113 -- Event: source = vmm event = shutdown
cloud-hypervisor:   0.378089s: <main> INFO:cloud-hypervisor/src/main.rs:962 -- Cloud Hypervisor exited successfully
"""
# ... and without (the launcher removes RUST_BACKTRACE from the VMM's environment).
WITHOUT_BACKTRACE = """\
cloud-hypervisor:   0.175683s: <vcpu0> ERROR:vmm/src/cpu.rs:1460 -- VCPU generated error: VcpuRun(Failed to run vcpu

Caused by:
    Unexpected exit reason on vcpu run: InternalError)
cloud-hypervisor:   0.376655s: <vmm> INFO:vmm/src/lib.rs:2080 -- VM exit event
"""
EXPECTED = "VCPU generated error: VcpuRun(Failed to run vcpu: Unexpected exit reason on vcpu run: InternalError)"


def test_a_vcpu_error_is_one_line_with_its_cause_and_without_the_backtrace():
    assert failure_in(WITH_BACKTRACE) == EXPECTED
    assert failure_in(WITHOUT_BACKTRACE) == EXPECTED


def test_a_panicked_thread_is_a_failure():
    line = ("cloud-hypervisor:   3.1s: <_disk0_q0> ERROR:virtio-devices/src/thread_helper.rs:53 -- _disk0_q0 thread "
            "panicked\n")
    assert failure_in(line) == "_disk0_q0 thread panicked"
    assert failure_in("cloud-hypervisor: 1.0s: <vcpu0> ERROR:vmm/src/cpu.rs:1478 -- vCPU thread panicked\n") == \
        "vCPU thread panicked"


def test_orderly_stops_and_a_triple_fault_are_no_failure():
    poweroff = """\
cloud-hypervisor:   0.2s: <vcpu0> INFO:devices/src/acpi.rs:80 -- ACPI Shutdown signalled
cloud-hypervisor:   0.2s: <vmm> INFO:vmm/src/lib.rs:2096 -- VM guest exit event
cloud-hypervisor:   0.3s: <main> INFO:cloud-hypervisor/src/main.rs:962 -- Cloud Hypervisor exited successfully
"""
    reset = "cloud-hypervisor:   0.2s: <vcpu0> ERROR:hypervisor/src/kvm/mod.rs:2531 -- Guest likely triple-faulted\n"
    assert failure_in(poweroff) is None
    assert failure_in(reset) is None
    assert failure_in("") is None


def test_any_log_format_is_read_by_the_message():
    assert failure_in("E vcpu0 VCPU generated error: VcpuRun(boom)\n") == "E vcpu0 VCPU generated error: VcpuRun(boom)"


def test_an_unreadable_log_reports_no_failure(tmp_path):
    assert failure_in_file(str(tmp_path / "missing.log")) is None
    log = tmp_path / "ch.log"
    log.write_text(WITHOUT_BACKTRACE)
    assert failure_in_file(str(log)) == EXPECTED
