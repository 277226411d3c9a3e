"""The committed .proto files and their generated code: wire-compatible with KubeVirt, and fresh."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REFERENCE, REPO, require_shared

PROTO_DIR = REPO / "ch_launcher" / "_proto"


def test_generated_code_matches_the_proto_files():
    result = subprocess.run([sys.executable, str(PROTO_DIR / "regenerate.py"), "--check"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, f"generated code is stale:\n{result.stdout}{result.stderr}"
    assert "0 stale generated file(s)" in result.stdout


def test_proto_files_are_wire_compatible_with_the_kubevirt_contract():
    checker = require_shared(REFERENCE / "check_contract.py")
    result = subprocess.run([sys.executable, str(checker), str(PROTO_DIR)],
                            capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last == "contract: 36/36 Cmd methods, 0 mismatches", result.stdout


def test_generated_modules_import_as_a_package_and_expose_the_wire_paths():
    from ch_launcher._proto import (
        kubevirt_cmd_info_pb2_grpc,
        kubevirt_cmd_v1_pb2,
        kubevirt_cmd_v1_pb2_grpc,
        kubevirt_notify_v1_pb2_grpc,
    )

    service = kubevirt_cmd_v1_pb2.DESCRIPTOR.services_by_name["Cmd"]
    assert len(service.methods) == 36
    assert service.full_name == "kubevirt.cmd.v1.Cmd"
    assert hasattr(kubevirt_cmd_v1_pb2_grpc, "CmdServicer")
    assert hasattr(kubevirt_cmd_info_pb2_grpc, "CmdInfoServicer")
    assert hasattr(kubevirt_notify_v1_pb2_grpc, "NotifyStub")
    notify = kubevirt_notify_v1_pb2_grpc.kubevirt__notify__v1__pb2.DESCRIPTOR.services_by_name["Notify"]
    assert [m.name for m in notify.methods] == ["HandleDomainEvent", "HandleK8sEvent"]


def test_a_stale_generated_file_is_detected(tmp_path, monkeypatch):
    sys.path.insert(0, str(PROTO_DIR))
    try:
        import regenerate
    finally:
        sys.path.remove(str(PROTO_DIR))
    # Copy the protos and their generated code, then change one .proto: the check must say so.
    for p in PROTO_DIR.iterdir():
        if p.suffix in (".proto", ".py", ".pyi"):
            (tmp_path / p.name).write_bytes(p.read_bytes())
    proto = tmp_path / "kubevirt_notify_v1.proto"
    proto.write_text(proto.read_text().replace("string message = 2;", "string message = 2;\n  bool extra = 3;"))
    monkeypatch.setattr(regenerate, "HERE", tmp_path)
    assert regenerate.stale_files() == ["kubevirt_notify_v1_pb2.py", "kubevirt_notify_v1_pb2.pyi"]
