"""One result file per benchmark and host kind: the host kind comes from the CPU flags (or the GPU),
and a benchmark measured again writes the same name."""

from __future__ import annotations

import json

import pytest

from benchmarks import results
from benchmarks.host import CPU_FLAGS, host_kind

NONE = dict.fromkeys(CPU_FLAGS, False)


@pytest.mark.parametrize(
    ("flags", "kind"),
    [
        (NONE | {"avx2": True}, "cpu-avx2"),
        (NONE | {"avx2": True, "avx512f": True}, "cpu-avx512"),
        (NONE | {"avx2": True, "avx512f": True, "avx512_bf16": True}, "cpu-avx512bf16"),
        (NONE | {"avx2": True, "avx512f": True, "avx512_bf16": True, "amx_bf16": True}, "cpu-amx"),
        (NONE, "cpu"),
    ],
)
def test_the_host_kind_is_the_fastest_bf16_path_the_flags_name(flags, kind):
    assert host_kind(flags) == kind


def test_a_gpu_run_is_named_by_its_device_whatever_the_cpu():
    assert host_kind(NONE | {"avx2": True}, "NVIDIA H100 80GB HBM3") == "cuda-nvidia-h100-80gb-hbm3"


def test_the_result_path_is_fixed_for_a_host_and_the_meta_names_the_run(monkeypatch, tmp_path):
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    monkeypatch.setattr(results, "cpu_info", lambda: {"cpu_flags": NONE | {"avx2": True, "avx512f": True}})
    first = results.result_path("vs-hf-causal_lm-short")
    assert first == tmp_path / "vs-hf-causal_lm-short-cpu-avx512.json"
    assert results.result_path("vs-hf-causal_lm-short") == first  # measured again: replaced, not a new file
    meta = results.run_meta(["scripts/bench-avoid", "--seeds", "1"])
    assert meta["command"].endswith("scripts/bench-avoid --seeds 1")
    assert meta["commit"] and meta["date"] and set(meta["cpu_flags"]) == set(CPU_FLAGS)
    json.dumps(meta)


def test_a_child_process_finds_the_benchmarks_from_any_folder(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", "import benchmarks.host, sys; print(benchmarks.host.__file__)"],
        cwd=tmp_path,
        env=results.child_env(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(results.REPO / "benchmarks" / "host.py")


def test_without_git_a_result_has_no_commit_or_the_one_it_was_sent_at(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no git (a GPU machine may lack it)
    monkeypatch.delenv(results.COMMIT_ENV, raising=False)
    assert results.run_meta(["scripts/bench-vs-bare"])["commit"] is None
    monkeypatch.setenv(results.COMMIT_ENV, "abc1234")
    assert results.run_meta(["scripts/bench-vs-bare"])["commit"] == "abc1234"
