"""`systems.parallel` in a search space: searched like a knob, carried to the trial's config, and
written back by an export; and the hash every rank checks its config against."""

from __future__ import annotations

import pytest
from parallel_ranks import two_rank_config

from hpo.config import parallel_checks
from hpo.config.parallel_checks import visible_cuda_devices
from hpo.config.resolve import fixed_config, representative_config, searched_keys
from hpo.config.space import parse_space
from hpo.config.trial import ParallelSettings
from hpo.errors import UserInputError
from hpo.parallel.agreement import config_hash, differences


@pytest.fixture(autouse=True)
def gpus_not_counted(monkeypatch):
    """The file's own rules, whatever GPUs the host shows (a test that counts them sets them)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(parallel_checks, "NVIDIA_GPUS", "/nonexistent/nvidia/gpus")


def space(parallel) -> dict:
    return {"workload": {"name": "causal_lm"}, "systems": {"parallel": parallel}}


def test_strategy_and_its_knobs_are_searched_like_the_other_knobs():
    parsed = parse_space(space({"processes": 2, "strategy": ["ddp", "fsdp"], "bucket_cap_mb": [1, 25]}), "s.yaml")
    assert searched_keys(parsed) == {
        "systems.parallel.strategy": ["ddp", "fsdp"],
        "systems.parallel.bucket_cap_mb": [1.0, 25.0],
    }
    assert representative_config(parsed).parallel == ParallelSettings(processes=2, strategy="ddp", bucket_cap_mb=1.0)


def test_a_space_without_parallel_runs_one_process():
    assert fixed_config(parse_space({"workload": {"name": "causal_lm"}}, "s.yaml")).parallel is None


def test_an_exported_parallel_config_reads_back_the_same():
    config = two_rank_config("fsdp", reshard_after_forward=False)
    assert fixed_config(parse_space(config.to_dict(), "export.yaml")) == config


@pytest.mark.parametrize(
    ("parallel", "message"),
    [
        ({"processes": 0}, "systems.parallel.processes: Input should be greater than or equal to 1"),
        ({"strategy": "zero3"}, "systems.parallel.strategy"),
        ({"strategy": []}, "a searched knob needs at least one value"),
    ],
)
def test_an_impossible_parallel_key_is_refused_naming_it(parallel, message):
    with pytest.raises(UserInputError, match=message):
        parse_space(space(parallel), "s.yaml")


def test_the_config_hash_sees_a_changed_learning_rate_and_names_it():
    ours, theirs = two_rank_config().to_dict(), two_rank_config().to_dict()
    assert config_hash(ours) == config_hash(theirs)
    theirs["params"]["lr"] = 2e-3
    assert config_hash(ours) != config_hash(theirs)
    assert differences(theirs, ours) == ["params.lr 0.002 against rank 0's 0.001"]


@pytest.mark.parametrize(
    ("systems", "params", "workload", "message"),
    [
        (
            {"device": "cpu", "parallel": {"processes": 2, "backend": "nccl"}},
            {},
            {},
            "s.yaml: systems.parallel.backend: nccl runs collectives on CUDA devices, got systems.device cpu; "
            "use backend gloo (or auto)",
        ),
        (
            {"parallel": {"processes": 2}},
            {"batch_size": [8, 12, 15]},
            {},
            "s.yaml: params.batch_size: the global batch must divide over systems.parallel.processes 2, got 15; "
            "use multiples of 2 (a range: low and step multiples of it, not log)",
        ),
        (
            {"parallel": {"processes": 2}},
            {"batch_size": {"low": 8, "high": 32}},
            {},
            "s.yaml: params.batch_size: the global batch must divide over systems.parallel.processes 2, got 8;",
        ),
        (
            {"parallel": {"processes": 2}},
            {},
            {"budget_s": 6},
            "s.yaml: workload.budget_s: 6.0 is not supported with systems.parallel yet; remove it or run one process",
        ),
        (
            {"parallel": {"processes": 2}},
            {"batch_size": {"auto": {"max": 4, "multiple_of": 3}}},
            {},
            "s.yaml: params.batch_size: auto's max 4 is below the smallest global batch that is a multiple of "
            "multiple_of 3 and splits over systems.parallel.processes 2, 6; raise max to 6 or more",
        ),
    ],
)
def test_hpo_validate_refuses_what_the_ranks_cannot_run_in_one_line(systems, params, workload, message):
    raw = {"workload": {"name": "causal_lm", **workload}, "params": params, "systems": systems}
    with pytest.raises(UserInputError) as caught:
        parse_space(raw, "s.yaml")
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("processes", "multiple_of", "smallest"), [(2, 1, 2), (2, 3, 6), (2, 8, 8), (4, 6, 12)])
def test_batch_size_auto_is_accepted_with_ranks_and_starts_at_the_smallest_global_batch_that_splits(
    processes, multiple_of, smallest
):
    """`max` and `multiple_of` bound the global batch, which also splits over the ranks: until the
    ranks choose, the trial's batch (the probe's) is the least common multiple of the two."""
    raw = {
        "study": {"memory_limit_gb": 2},
        "workload": {"name": "causal_lm"},
        "params": {"batch_size": {"auto": {"max": 64, "multiple_of": multiple_of}}},
        "systems": {"device": "cpu", "parallel": {"processes": processes}},
    }
    config = fixed_config(parse_space(raw, "s.yaml"))
    assert config.batch_auto is not None and config.batch_auto.max == 64
    assert config.training.batch_size == smallest


def test_more_ranks_than_visible_gpus_is_refused(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    raw = {"workload": {"name": "causal_lm"}, "systems": {"device": "cuda", "parallel": {"processes": 2}}}
    with pytest.raises(UserInputError, match=r"processes: 2 ranks need as many GPUs, CUDA_VISIBLE_DEVICES shows 1;"):
        parse_space(raw, "s.yaml")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert parse_space(raw, "s.yaml").parallel["processes"] == [2]


@pytest.mark.parametrize(("listed", "shown"), [("0,1,2", 3), ("3, 1", 2), ("0,-1,1", 1), ("", 0), ("-1", 0)])
def test_the_gpus_counted_are_those_cuda_reads_from_cuda_visible_devices(monkeypatch, listed, shown):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", listed)
    assert visible_cuda_devices() == shown


def test_without_cuda_visible_devices_the_gpus_are_counted_from_nvidia_s_driver(monkeypatch, tmp_path):
    """The driver lists one folder per GPU, named by its PCI address, under /proc/driver/nvidia/gpus."""
    for address in ("0000:17:00.0", "0000:65:00.0", "0000:ca:00.0", "0000:e3:00.0"):
        (tmp_path / address).mkdir()
    monkeypatch.setattr(parallel_checks, "NVIDIA_GPUS", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    raw = {"workload": {"name": "causal_lm"}, "systems": {"parallel": {"processes": 3}}}
    with pytest.raises(UserInputError, match=r"3 does not divide the 4 the NVIDIA driver shows \(1 would sit idle\)"):
        parse_space(raw, "s.yaml")
    raw["systems"]["parallel"]["processes"] = 2
    assert parse_space(raw, "s.yaml").parallel["processes"] == [2]
    monkeypatch.setattr(parallel_checks, "NVIDIA_GPUS", str(tmp_path / "absent"))  # no driver: nothing to count
    raw["systems"]["parallel"]["processes"] = 3
    assert parse_space(raw, "s.yaml").parallel["processes"] == [3]
