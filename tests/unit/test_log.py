"""KubeVirt JSON log lines: what `kubectl logs` on a ch-launcher pod shows."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from ch_launcher.kubevirt.log import KubeVirtHandler, log_subcomponent_line, setup_logging

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """Install our handler on a private stream; restore the root logger afterwards."""
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    stream = io.StringIO()
    yield stream
    for h in list(root.handlers):
        if isinstance(h, KubeVirtHandler):
            root.removeHandler(h)
    root.setLevel(saved[0])
    for h in saved[1]:
        if h not in root.handlers:
            root.addHandler(h)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_info_line_has_kubevirts_fields_in_sorted_order(captured: io.StringIO) -> None:
    setup_logging(uid="u-1", name="testvmi", namespace="default", stream=captured)
    call_line = sys._getframe().f_lineno + 1
    logging.getLogger("ch_launcher.manager").info("Domain is in state %s", "Running")
    raw = captured.getvalue().splitlines()
    assert len(raw) == 1
    line = json.loads(raw[0])
    assert list(line) == sorted(line)  # go-kit prints map keys sorted
    assert line["component"] == "ch-launcher"
    assert line["level"] == "info"
    assert line["msg"] == "Domain is in state Running"
    assert line["pos"] == f"test_log.py:{call_line}"
    assert TIMESTAMP.match(str(line["timestamp"]))
    assert (line["uid"], line["name"], line["namespace"], line["kind"]) == (
        "u-1", "testvmi", "default", "VirtualMachineInstance")


def test_name_namespace_and_kind_are_left_out_until_known(captured: io.StringIO) -> None:
    setup_logging(stream=captured)
    logging.getLogger("x").info("starting")
    line = lines(captured)[0]
    assert "name" not in line and "namespace" not in line and "kind" not in line
    assert line["uid"] == ""


def test_levels_use_kubevirts_names(captured: io.StringIO) -> None:
    setup_logging(stream=captured)
    log = logging.getLogger("x")
    log.warning("w")
    log.error("e")
    log.critical("c")
    assert [line["level"] for line in lines(captured)] == ["warning", "error", "fatal"]


def test_exception_becomes_reason_and_stack(captured: io.StringIO) -> None:
    setup_logging(stream=captured)
    try:
        raise RuntimeError("VMM socket vanished")
    except RuntimeError:
        logging.getLogger("x").exception("sync failed")
    line = lines(captured)[0]
    assert line["level"] == "error"
    assert line["reason"] == "VMM socket vanished"
    assert "RuntimeError" in str(line["stack"])
    assert list(line) == sorted(line)


def test_verbosity_filters_info_lines_like_kubevirts_v(captured: io.StringIO) -> None:
    setup_logging(stream=captured, verbosity=2)
    log = logging.getLogger("x")
    log.info("default verbosity 2")
    log.info("chatty", extra={"v": 3})
    log.debug("debug counts as V(4)")
    log.warning("warnings always print", extra={"v": 9})
    assert [line["msg"] for line in lines(captured)] == ["default verbosity 2", "warnings always print"]


def test_high_verbosity_shows_debug_lines(captured: io.StringIO) -> None:
    setup_logging(stream=captured, verbosity=4)
    logging.getLogger("x").debug("debug counts as V(4)")
    assert lines(captured)[0]["msg"] == "debug counts as V(4)"


def test_negative_verbosity_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        setup_logging(verbosity=-1)


def test_second_setup_replaces_the_first_handler(captured: io.StringIO) -> None:
    first = io.StringIO()
    setup_logging(stream=first)
    setup_logging(stream=captured, uid="u-2", name="vm", namespace="ns")
    logging.getLogger("x").info("once")
    assert first.getvalue() == ""
    assert lines(captured)[0]["uid"] == "u-2"


def test_line_about_another_object_carries_its_identity(captured: io.StringIO) -> None:
    setup_logging(stream=captured, uid="u-1", name="vm", namespace="ns")
    logging.getLogger("x").info("event", extra={"object": {"kind": "Pod", "name": "p", "uid": "u-9"}})
    line = lines(captured)[0]
    assert (line["kind"], line["name"], line["uid"]) == ("Pod", "p", "u-9")
    assert "namespace" not in line


def test_vmm_log_lines_carry_a_subcomponent_and_blank_lines_are_dropped(captured: io.StringIO) -> None:
    setup_logging(stream=captured)
    log = logging.getLogger("vmm")
    log_subcomponent_line(log, "cloud-hypervisor", "cloud-hypervisor: 1.2ms: <vmm> INFO:vmm/src/lib.rs\n")
    log_subcomponent_line(log, "cloud-hypervisor", "   \n")
    out = lines(captured)
    assert len(out) == 1
    assert out[0]["subcomponent"] == "cloud-hypervisor"
    assert out[0]["msg"] == "cloud-hypervisor: 1.2ms: <vmm> INFO:vmm/src/lib.rs"
    assert str(out[0]["pos"]).startswith("test_log.py:")


def test_non_ascii_and_quotes_survive_as_valid_json(captured: io.StringIO) -> None:
    setup_logging(stream=captured, name='we"ird')
    logging.getLogger("x").info('naïve "quoted"\nnewline')
    line = lines(captured)[0]
    assert line["msg"] == 'naïve "quoted"\nnewline' and line["name"] == 'we"ird'


def test_a_real_process_writes_json_lines_to_stderr() -> None:
    code = ("import logging; from ch_launcher.kubevirt.log import setup_logging;"
            "setup_logging(uid='u'); logging.getLogger('m').info('hello')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout == ""
    line = json.loads(out.stderr.strip())
    assert (line["msg"], line["component"], line["uid"]) == ("hello", "ch-launcher", "u")


def test_each_module_of_the_domain_manager_logs_under_its_own_name() -> None:
    # A log line's logger is what a reader filters on (and what caplog selects): the module that wrote it.
    import importlib
    import pkgutil

    import ch_launcher.manager

    wrong = {}
    for info in pkgutil.walk_packages(ch_launcher.manager.__path__, "ch_launcher.manager."):
        logger = getattr(importlib.import_module(info.name), "log", None)
        if isinstance(logger, logging.Logger) and logger.name != info.name:
            wrong[info.name] = logger.name
    assert wrong == {}
