"""RotatingLog rolls the serial log over as virtlogd does (ch_launcher/serial_log.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ch_launcher.serial_log import MAX_SIZE, RotatingLog


def contents(path: Path) -> list[bytes]:
    """The log's files, oldest first, as long as they exist."""
    names = [Path(f"{path}.{i}") for i in range(5, -1, -1)] + [path]
    return [p.read_bytes() for p in names if p.exists()]


def written(path: Path, *chunks: bytes, max_size: int = 10, backups: int = 3) -> list[bytes]:
    log = RotatingLog(str(path), max_size=max_size, backups=backups)
    log.open()
    for chunk in chunks:
        log.write(chunk)
    log.close()
    return contents(path)


def test_virtlogds_defaults():
    assert (MAX_SIZE, RotatingLog("x").backups) == (2 * 1024 * 1024, 3)


def test_a_file_fills_to_the_limit_then_rolls_over(tmp_path: Path):
    assert written(tmp_path / "log", b"abcdefghij", b"klm") == [b"abcdefghij", b"klm"]


def test_a_line_is_not_split_when_its_newline_is_near_the_limit(tmp_path: Path):
    assert written(tmp_path / "log", b"ab\ncdefghijk\n") == [b"ab\n", b"cdefghijk\n"]
    assert written(tmp_path / "other", b"abcdefghij\n") == [b"abcdefghij", b"\n"]  # exactly full: cut at the limit


def test_only_the_newest_backups_are_kept(tmp_path: Path):
    chunks = [bytes([65 + i]) * 10 for i in range(6)]
    assert written(tmp_path / "log", *chunks) == chunks[-4:]  # LOG.2, LOG.1, LOG.0, LOG
    assert not (tmp_path / "log.3").exists()


def test_without_backups_the_full_file_is_dropped(tmp_path: Path):
    assert written(tmp_path / "log", b"a" * 25, backups=0) == [b"a" * 5]


def test_an_existing_file_is_continued_and_one_already_too_big_is_rolled_over_first(tmp_path: Path):
    (tmp_path / "log").write_bytes(b"1234")
    assert written(tmp_path / "log", b"567890ab") == [b"1234567890", b"ab"]
    (tmp_path / "big").write_bytes(b"x" * 12)
    assert written(tmp_path / "big", b"y") == [b"x" * 12, b"y"]


def test_a_write_before_open_raises(tmp_path: Path):
    with pytest.raises(OSError, match="not open"):
        RotatingLog(str(tmp_path / "log")).write(b"x")
