"""`kubectl get --watch` kept running beside a story: every state an object passed through, as a
user watching it would have seen it, and when (`NodeCluster.watch`)."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Sequence
from typing import IO, Any


class Watch:
    """Lines of a running `kubectl get ... --watch --no-headers -o custom-columns=...` (argv),
    each split into its columns, kept in `rows` as they come, and the `time.monotonic()` each
    was read at in `times`. Lines kubectl prints to stderr (a dropped watch) are kept in
    `errors`. `close()` ends kubectl and its readers."""

    def __init__(self, argv: Sequence[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.rows: list[list[str]] = []
        self.times: list[float] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.rows, True), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, self.errors, False), daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read(self, pipe: IO[str], into: list[Any], split: bool) -> None:
        for line in pipe:
            with self._lock:
                into.append(line.split() if split else line.rstrip("\n"))
                if split:
                    self.times.append(time.monotonic())

    def seen(self, column: int = 1, key: str | None = None) -> list[str]:
        """Column `column` of every row so far (of the rows whose first column is `key`, if given)."""
        with self._lock:
            return [row[column] for row in self.rows if len(row) > column and (key is None or row[0] == key)]

    def timed_rows(self) -> list[tuple[list[str], float]]:
        """Every row so far with the `time.monotonic()` it was read at."""
        with self._lock:
            return list(zip(self.rows, self.times, strict=True))

    def first(self, value: str, column: int = 1) -> dict[str, float]:
        """When each object (first column) was first seen with `value` in `column`."""
        found: dict[str, float] = {}
        with self._lock:
            for row, at in zip(self.rows, self.times, strict=True):
                if len(row) > column and row[column] == value:
                    found.setdefault(row[0], at)
        return found

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        for reader in self._readers:
            reader.join(10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
