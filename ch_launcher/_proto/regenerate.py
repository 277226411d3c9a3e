#!/usr/bin/env python3
"""Regenerate the Python code for the contract's .proto files in this directory.

    python ch_launcher/_proto/regenerate.py           # rewrite the generated files
    python ch_launcher/_proto/regenerate.py --check   # exit 1 if they are stale

Runs `grpc_tools.protoc` with this directory as the only include root, so every .proto is
compiled under its bare file name, then rewrites the generated `import x_pb2 as y` lines to
package-relative `from . import x_pb2 as y` (protoc writes top-level imports, which would only
work with this directory on sys.path). The type stubs (`*_pb2.pyi`, `*_pb2_grpc.pyi`) come from
mypy-protobuf's protoc plugins, which type the gRPC stubs and servicers too (protoc's own
`--pyi_out` covers the messages only), with `grpc.aio` stubs for an `aio` channel.

`--check` generates into a temporary directory and compares with the committed files. Lines that
only record the generator's own version (protobuf's runtime-version guard, grpc's
GRPC_GENERATED_VERSION) are compared with the version numbers blanked: a newer grpcio-tools on
another machine is not staleness, a changed .proto is. Exit status: 0 fresh, 1 stale (the
differing files are listed), 2 protoc failed.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import shutil
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent

# `import kubevirt_cmd_v1_pb2 as kubevirt__cmd__v1__pb2` -> `from . import ... as ...`
_TOP_LEVEL_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)
# Lines whose content depends on the generator's version, not on the .proto.
_VERSION_LINES = [
    re.compile(r"^(# Protobuf Python Version:).*$", re.MULTILINE),
    re.compile(r"^(GRPC_GENERATED_VERSION = ).*$", re.MULTILINE),
    re.compile(r"^(\s+)\d+,\s*$", re.MULTILINE),  # major/minor/patch args of ValidateProtobufRuntimeVersion
]


def proto_files() -> list[str]:
    return sorted(p.name for p in HERE.glob("*.proto"))


def _plugin(name: str) -> str:
    """The mypy-protobuf plugin `protoc-gen-<name>`: beside this interpreter (a venv's bin), else on PATH."""
    beside = pathlib.Path(sys.executable).parent / f"protoc-gen-{name}"
    found = str(beside) if beside.exists() else shutil.which(f"protoc-gen-{name}")
    if found is None:
        raise RuntimeError(f"protoc-gen-{name} not found: install mypy-protobuf (the test extra)")
    return found


def generate(out_dir: pathlib.Path) -> list[pathlib.Path]:
    """Compile every .proto here into `out_dir`; return the generated files (imports rewritten)."""
    from grpc_tools import protoc  # test-time dependency (grpcio-tools)

    well_known = pathlib.Path(protoc.__file__).parent / "_proto"
    plugins = [f"--plugin=protoc-gen-{name}={_plugin(name)}" for name in ("mypy", "mypy_grpc")]
    argv = ["protoc", f"-I{HERE}", f"-I{well_known}", *plugins, f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}", f"--mypy_out=quiet:{out_dir}", f"--mypy_grpc_out=quiet:{out_dir}",
            *proto_files()]
    if protoc.main(argv) != 0:
        raise RuntimeError(f"protoc failed on {proto_files()} (see messages above)")
    generated = sorted(p for p in out_dir.iterdir() if p.suffix in (".py", ".pyi"))
    for path in generated:
        text = _TOP_LEVEL_IMPORT.sub(r"from . import \1 as \2", path.read_text())
        path.write_text(text)
    return generated


def _normalised(text: str) -> str:
    for pattern in _VERSION_LINES:
        text = pattern.sub(r"\1<version>", text)
    return text


def stale_files() -> list[str]:
    """Names of generated files that differ from (or are missing beside) what protoc makes now."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(pathlib.Path(tmp))
        stale = []
        for path in fresh:
            committed = HERE / path.name
            if not committed.exists() or _normalised(committed.read_text()) != _normalised(path.read_text()):
                stale.append(path.name)
        return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale generated files")
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = stale_files()
            for name in stale:
                print(f"stale: {name} (run: python ch_launcher/_proto/regenerate.py)")
            print(f"{len(stale)} stale generated file(s)")
            return 1 if stale else 0
        with tempfile.TemporaryDirectory() as tmp:
            for path in generate(pathlib.Path(tmp)):
                (HERE / path.name).write_text(path.read_text())
                print(f"wrote {path.name}")
        return 0
    except RuntimeError as err:
        print(f"error: {err}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
