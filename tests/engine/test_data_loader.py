"""hpo builds a dataset workload's DataLoader from the searched settings, checks its first batches
against the same seed without workers, records what delivered them, and refuses what cannot apply."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from hpo.config.resolve import build_config
from hpo.config.space import parse_space
from hpo.config.trial import Knobs, LoaderSettings
from hpo.engine._loader import trial_loader
from hpo.engine._loader_stream import batch_checksum
from hpo.knobs.systems import TRIAL_KNOBS
from hpo.trial import execute
from hpo.verify.stored import MemoryVerdicts
from hpo.workloads.catalog import create_workload
from hpo.workloads.dataset_batches import epochs

KNOBS = Knobs(precision="fp32", attention="eager", optimizer="forloop")


def _config(workload: str = "loader_workloads:DatasetToy", max_steps: int = 6, **systems):
    space = parse_space(
        {
            "study": {"name": "loader", "pruner": {"name": "none"}, "n_trials": 1, "skip_slow": False},
            "workload": {"name": workload, "max_steps": max_steps, "eval_every": max_steps, "n_blocks": 1},
            "params": {"lr": 3e-3, "batch_size": 8},
            "systems": {"precision": "fp32", "attention": "eager", "optimizer": "forloop", "device": "cpu", **systems},
        },
        source="test",
    )
    return build_config(space, {"lr": 3e-3, "batch_size": 8}, KNOBS)


def _sums(settings: LoaderSettings, seed: int, count: int = 4) -> list[str]:
    workload = create_workload("loader_workloads:DatasetToy", {"n_blocks": 1})
    batches = epochs(trial_loader(workload, settings, 8, seed))
    return [batch_checksum(next(batches)[0]) for _ in range(count)]


def test_the_batch_order_is_a_function_of_the_seed_alone():
    with_workers = _sums(LoaderSettings(num_workers=2), seed=3)
    assert with_workers == _sums(LoaderSettings(), seed=3)
    assert with_workers != _sums(LoaderSettings(), seed=4)


def test_persistent_workers_shuffle_later_epochs_as_no_workers_do():
    """With one batch an epoch, the loader check's batches come from epochs 1-4. Persistent workers
    keep one iterator for every epoch; when the shuffle shared the loader's generator with the
    workers' base seed, which each new iterator draws, their epoch 2 on differed from no workers'
    and the check refused them (`mismatch: loader ... batch 1 differs`)."""
    workload = create_workload("loader_workloads:OneBatchToy", {"n_blocks": 1})

    def sums(settings: LoaderSettings) -> list[str]:
        batches = epochs(trial_loader(workload, settings, 8, 3))
        return [batch_checksum(next(batches)[0]) for _ in range(4)]

    assert sums(LoaderSettings(num_workers=2, persistent_workers=True)) == sums(LoaderSettings())
    assert len(set(sums(LoaderSettings()))) > 1  # the epochs really are shuffled apart


def test_a_trial_with_workers_records_the_workers_that_delivered_its_batches():
    outcome = execute(_config(num_workers=2, persistent_workers=True), MemoryVerdicts())
    assert outcome.ok, outcome.verdict
    observed = outcome.attrs["loader_observed"]
    assert observed["workers"] == 2 and not observed["main_process"]
    assert observed["batches_checked"] == 4
    assert outcome.attrs["loader_requested"]["num_workers"] == 2
    assert 0 <= outcome.attrs["data_wait_share"] <= 1


def test_without_workers_the_trial_process_makes_the_batches():
    outcome = execute(_config(), MemoryVerdicts())
    assert outcome.ok, outcome.verdict
    observed = outcome.attrs["loader_observed"]
    assert observed["workers"] == 0 and observed["main_process"] and observed["batches_checked"] == 0


def test_pin_memory_on_a_cpu_trial_is_recorded_as_not_observed():
    outcome = execute(_config(pin_memory=True), MemoryVerdicts())
    assert outcome.ok, outcome.verdict
    assert outcome.attrs["loader_requested"]["pin_memory"] is True
    assert outcome.attrs["loader_observed"]["pinned"] is None


def test_loader_settings_on_a_workload_that_hands_batches_are_refused():
    outcome = execute(_config("toy_workloads:Toy", num_workers=2), MemoryVerdicts())
    assert str(outcome.verdict).startswith("incompatible: num_workers=2: workload Toy hands hpo batches")
    assert outcome.verdict.implicates == (("num_workers", 2),)


def test_worker_only_settings_without_workers_are_refused():
    outcome = execute(_config(persistent_workers=True), MemoryVerdicts())
    assert str(outcome.verdict).startswith("incompatible: persistent_workers=True needs loader workers, got num_workers=0")


def test_dali_is_refused_where_it_cannot_run():
    """A CPU trial: refused for the device where DALI is installed, for the package where not."""
    outcome = execute(_config(loader="dali"), MemoryVerdicts())
    why = "needs a CUDA device" if importlib.util.find_spec("nvidia.dali") else "needs NVIDIA DALI"
    assert str(outcome.verdict).startswith(f"incompatible: loader=dali {why}"), outcome.verdict


def test_a_dataset_that_cannot_reach_a_worker_is_refused_with_its_cause():
    outcome = execute(_config("loader_workloads:UnpicklableToy", num_workers=1), MemoryVerdicts())
    verdict = str(outcome.verdict)
    assert verdict.startswith("incompatible: loader num_workers=1"), verdict
    assert "workers failed: TypeError" in verdict and "pickle" in verdict


def test_workers_that_reorder_samples_are_a_loader_mismatch():
    outcome = execute(_config("loader_workloads:ShardedBySampleToy", num_workers=2), MemoryVerdicts())
    assert str(outcome.verdict).startswith("mismatch: loader num_workers=2"), outcome.verdict
    assert "batch 0 differs" in str(outcome.verdict) and "its content differs" in str(outcome.verdict)


def test_an_iterable_dataset_that_forgets_to_shard_is_a_loader_mismatch():
    """Each of two workers yields every sample: batch 0 is right (worker 0's), batch 1 repeats it."""
    outcome = execute(_config("loader_workloads:UnshardedToy", num_workers=2), MemoryVerdicts())
    assert str(outcome.verdict).startswith("mismatch: loader num_workers=2"), outcome.verdict
    assert "batch 1 differs" in str(outcome.verdict) and "its content differs" in str(outcome.verdict)


def test_augmentation_from_each_workers_own_rng_passes_the_loader_check():
    """The torchvision habit: a random flip drawn from torch's global RNG, which torch seeds apart in
    each worker. The batches' content differs from num_workers=0's; their samples do not."""
    workload = create_workload("loader_workloads:GlobalRngAugmentedToy", {"n_blocks": 1})

    def sums(settings: LoaderSettings) -> list[str]:
        batches = epochs(trial_loader(workload, settings, 8, 3))
        return [batch_checksum(next(batches)[0]) for _ in range(4)]

    assert sums(LoaderSettings(num_workers=2)) != sums(LoaderSettings())  # the pixels differ by worker seed
    outcome = execute(_config("loader_workloads:GlobalRngAugmentedToy", num_workers=2), MemoryVerdicts())
    assert outcome.ok, outcome.verdict
    observed = outcome.attrs["loader_observed"]
    assert observed["batches_checked"] == 4 and observed["checked_by"] == "indices" and observed["workers"] == 2


@pytest.mark.parametrize("in_order", [True, False])
def test_a_loader_that_hands_batches_over_out_of_order_is_a_loader_mismatch(in_order, tmp_path, monkeypatch):
    """Worker 0 makes its first batch after worker 1's. In order (torch's default) the loader waits
    for it; handed over as they come, worker 1's batch arrives first, and its samples say so."""
    from loader_workloads import WorkerZeroLateToy

    import hpo.engine._loader as loader

    real = loader.seeded_loader
    monkeypatch.setattr(WorkerZeroLateToy, "flags", str(tmp_path))
    monkeypatch.setattr(
        loader, "seeded_loader", lambda *a, **kw: real(*a, **kw, in_order=in_order) if kw.get("num_workers") else real(*a, **kw)
    )
    outcome = execute(_config("loader_workloads:WorkerZeroLateToy", num_workers=2), MemoryVerdicts())
    if in_order:
        assert outcome.ok, outcome.verdict
        return
    verdict = str(outcome.verdict)
    assert verdict.startswith("mismatch: loader num_workers=2"), verdict
    assert "batch 0 differs" in verdict and "it holds samples [" in verdict


def test_workers_and_torch_threads_share_a_cpu_trials_cores():
    seen = []
    original = torch.set_num_threads
    try:
        torch.set_num_threads = lambda n: (seen.append(n), original(n))[1]
        outcome = execute(_config(num_workers=1), MemoryVerdicts())
    finally:
        torch.set_num_threads = original
    split = outcome.attrs["loader_observed"]["core_split"]
    assert split["workers"] == 1 and split["compute_threads"] == max(1, split["cores"] - 1)
    assert split["compute_threads"] in seen


def test_dali_is_not_proposed_where_it_cannot_run_before_the_first_trial():
    from hpo.verify.machine import check_values, nothing_left

    space = parse_space(
        {"workload": {"name": "loader_workloads:DatasetToy"}, "systems": {"loader": ["torch", "dali"], "device": "cpu"}},
        source="test",
    )
    check = check_values(space.checked_systems, torch.device("cpu"))
    why = check.value_why("loader", "dali")
    assert ("CUDA-only" in why) if importlib.util.find_spec("nvidia.dali") else why.startswith("loader=dali needs NVIDIA DALI"), (
        why
    )
    assert check.value_why("loader", "torch") is None
    assert not nothing_left(space.checked_systems, check.parts())


def test_searched_loader_settings_are_suggested_exported_and_leave_old_studies_unchanged():
    import optuna

    from hpo.config.resolve import fixed_config
    from hpo.study import suggest_config

    space = parse_space(
        {"workload": {"name": "loader_workloads:DatasetToy"}, "systems": {"num_workers": [0, 2], "pin_memory": True}}, "t"
    )
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
    config = suggest_config(trial, space)
    assert trial.params == {"num_workers": config.loader.num_workers} and config.loader.pin_memory
    assert fixed_config(parse_space(config.to_dict(), "export")).loader == config.loader
    old = parse_space({"workload": {"name": "loader_workloads:DatasetToy"}}, "old")
    assert set(old.fingerprint()["systems"]) == set(TRIAL_KNOBS)
    assert "num_workers" not in old.raw.get("systems", {}) and "pin_memory" not in fixed_config(old).to_dict()["systems"]


def test_a_workload_with_neither_batches_nor_a_dataset_says_which_it_lacks():
    from hpo.workloads.base import Workload, WorkloadOptions

    class Neither(Workload):
        def build_model(self, attention):
            return torch.nn.Linear(2, 2)

        def training_loss(self, model, batch):
            return model(batch["x"]).sum()

        def evaluate(self, model, move):
            return {}

    with pytest.raises(TypeError, match="Neither must define train_batches.*or train_dataset.*defines neither"):
        Neither(WorkloadOptions()).train_batches(4, 0)
