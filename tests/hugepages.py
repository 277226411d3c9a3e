"""The machine's 2 MiB hugepages, for the stories that need some: surplus pages handed out on demand
(`surplus_hugepages`, the pod sandbox's NUMA stories) or a pool taken up front (`hugepage_pool`,
a node whose kubelet offers `hugepages-2Mi`). Both are machine-wide settings (`vm.*hugepages`), so
every story that changes one holds an exclusive lock on HUGEPAGES_LOCK while it needs it (also
across pytest-xdist workers and concurrent runs of the suite), and puts the setting back afterwards
unless someone changed it meanwhile. Needs root; a setting that cannot be written fails the story
with the reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import pathlib
import tempfile
from collections.abc import Iterator

import pytest

HUGEPAGES_LOCK = pathlib.Path(tempfile.gettempdir()) / "kubevirt-ch-tests-hugepages.lock"
NR_HUGEPAGES = pathlib.Path("/proc/sys/vm/nr_hugepages")
NR_OVERCOMMIT_HUGEPAGES = pathlib.Path("/proc/sys/vm/nr_overcommit_hugepages")
COMPACT_MEMORY = pathlib.Path("/proc/sys/vm/compact_memory")
COMPACTIONS = 3
PAGE = 2 << 20


@contextlib.contextmanager
def hugepages_locked() -> Iterator[None]:
    """The exclusive lock every story changing the machine's hugepages holds."""
    with open(HUGEPAGES_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def meminfo(field: str) -> int:
    """A count of /proc/meminfo (`HugePages_Free`, `HugePages_Total`, ...)."""
    for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0])
    raise KeyError(f"/proc/meminfo has no {field}")


def _write(setting: pathlib.Path, value: int, what: str) -> None:
    try:
        setting.write_text(str(value))
    except OSError as e:
        pytest.fail(f"cannot {what} ({e.strerror}): these stories need root")


@contextlib.contextmanager
def surplus_hugepages(pages: int) -> Iterator[None]:
    """Let the kernel hand out up to `pages` 2 MiB pages on demand (nr_overcommit_hugepages), as a
    node with hugepages for its pods has them; `pages` 0 changes nothing."""
    if pages == 0:
        yield
        return
    with hugepages_locked():
        before = int(NR_OVERCOMMIT_HUGEPAGES.read_text())
        wanted = max(before, pages)
        _write(NR_OVERCOMMIT_HUGEPAGES, wanted, "allow surplus hugepages")
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                if int(NR_OVERCOMMIT_HUGEPAGES.read_text()) == wanted:
                    NR_OVERCOMMIT_HUGEPAGES.write_text(str(before))


@contextlib.contextmanager
def hugepage_pool(pages: int) -> Iterator[None]:
    """`pages` more 2 MiB pages in the machine's pool (nr_hugepages), all free, while the block
    runs: what a kubelet started meanwhile offers as `hugepages-2Mi`. The kernel allocates what
    contiguous memory it finds (under load a busy machine gave 26 of 32): it compacts memory and
    asks again, up to COMPACTIONS times, and fails the story if it still cannot give them all;
    the pool goes back to its size before afterwards (pages still in use then stay as surplus
    until freed)."""
    with hugepages_locked():
        before = int(NR_HUGEPAGES.read_text())
        wanted = before + pages
        _write(NR_HUGEPAGES, wanted, "raise the hugepage pool")
        got = int(NR_HUGEPAGES.read_text())
        for _ in range(COMPACTIONS):  # the kernel gives what contiguous memory it finds: compact it, ask again
            if got >= wanted:
                break
            with contextlib.suppress(OSError):
                COMPACT_MEMORY.write_text("1")
            _write(NR_HUGEPAGES, wanted, "raise the hugepage pool")
            got = int(NR_HUGEPAGES.read_text())
        try:
            if got < wanted or meminfo("HugePages_Free") < pages:
                pytest.fail(f"the kernel gave {got - before} of {pages} hugepages asked for "
                            f"(HugePages_Free {meminfo('HugePages_Free')})")
            yield
        finally:
            with contextlib.suppress(OSError):
                if int(NR_HUGEPAGES.read_text()) in (wanted, got):
                    NR_HUGEPAGES.write_text(str(before))
