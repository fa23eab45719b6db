"""prover.store_files: whole-or-nothing writes, temporary files readers never see."""

from __future__ import annotations

import os
import time

import pytest

from prover import store_files


def test_a_write_replaces_the_file_whole_and_leaves_no_temporary_file(tmp_path):
    dest = tmp_path / "a.json"
    dest.write_bytes(b"old")
    store_files.write_atomic(dest, b"new contents")
    assert dest.read_bytes() == b"new contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    dest = tmp_path / "a.json"
    dest.write_bytes(b"old")
    with pytest.raises(TypeError):
        store_files.write_atomic(dest, "not bytes")  # type: ignore[arg-type]
    assert dest.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_a_directory_removed_meanwhile_is_made_again(tmp_path):
    dest = tmp_path / "ab" / "a.json"  # as if another process removed the emptied `ab/`
    store_files.write_atomic(dest, b"x")
    assert dest.read_bytes() == b"x"


def test_temporary_files_are_never_listed_and_only_stale_ones_are_removed(tmp_path):
    dest = tmp_path / "a.json"
    store_files.write_atomic(dest, b"x")
    young, stale = store_files.temp_name(dest), store_files.temp_name(dest)
    assert young != stale and store_files.is_temp(young.name)
    assert not young.name.endswith(".json")  # a record glob never matches one
    young.write_bytes(b"half a rec")
    stale.write_bytes(b"half a rec")
    old = time.time() - store_files.STALE_TEMP_S - 1
    os.utime(stale, (old, old))
    assert [p for _, p in store_files.mtimes(tmp_path, ".json")] == [dest]
    assert store_files.remove_stale_temps(tmp_path) == 1
    assert young.exists() and not stale.exists()
    assert store_files.mtimes(tmp_path / "missing", ".json") == []
    assert store_files.remove_stale_temps(tmp_path / "missing") == 0
