"""Atomic writes: concurrent writers never interleave, and a failed write leaves the old file whole
and no temporary file behind."""

from __future__ import annotations

import os
import threading

import pytest

from hpo.files import write_atomic


def test_concurrent_writers_never_interleave_and_readers_see_whole_files(tmp_path):
    path = tmp_path / "figures.json"
    texts = {c: c * 2_000_000 for c in "ab"}  # 2 MB each: many write() calls, interleaved if unprotected
    write_atomic(path, texts["a"])
    seen, stop = set(), threading.Event()

    def write(text: str) -> None:
        for _ in range(10):
            write_atomic(path, text)

    def read() -> None:
        while not stop.is_set():
            seen.add(path.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(text,)) for text in texts.values()]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    reader.join()
    assert seen <= set(texts.values()) and path.read_text() in texts.values()
    assert os.listdir(tmp_path) == ["figures.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "report.html"
    write_atomic(path, "old")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(path, "new text, then a lone surrogate: \udcff")  # fails halfway through the write
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["report.html"]


def test_the_file_gets_the_mode_a_plain_write_would(tmp_path):
    write_atomic(tmp_path / "a.yaml", "x")
    (tmp_path / "b.yaml").write_text("x")
    assert (tmp_path / "a.yaml").stat().st_mode == (tmp_path / "b.yaml").stat().st_mode
