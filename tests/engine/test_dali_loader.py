"""`systems.loader: dali`: a workload's dataset through NVIDIA DALI's pipeline. On CUDA only (refused
elsewhere, and without the package, before the first trial); the pipeline itself also runs on a
CPU (`device_id=None`), the one difference being where DALI leaves the batch, which is how these
tests prove its order, its batches and its workers without a GPU."""

from __future__ import annotations

import os

import pytest
import torch

from hpo import deps
from hpo.config.trial import LoaderSettings
from hpo.engine import check_settings
from hpo.engine._dali_loader import dali_batches
from hpo.engine._loader_stream import BatchStream, batch_checksum
from hpo.errors import KnobUnavailable, TrialRejected
from hpo.workloads.catalog import create_workload
from hpo.workloads.dataset_batches import epochs, seeded_loader

pytest.importorskip("nvidia.dali")  # the `dali` extra; scripts/test installs it

CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)  # CUDA: only its type is read here
BATCH = 8


def _workload(name: str = "loader_workloads:DatasetToy"):
    return create_workload(name, {"n_blocks": 1})


def _torch_sums(dataset, count: int, seed: int = 3, collate=None) -> list[str]:
    batches = epochs(seeded_loader(dataset, collate or _workload().collate_function(), BATCH, seed))
    return [batch_checksum(next(batches)) for _ in range(count)]


@pytest.mark.parametrize("workers", [0, 2])
def test_dali_gives_the_seeded_loaders_batches_epoch_after_epoch(workers):
    dataset = _workload().train_dataset(3)
    count = 2 * len(dataset) // BATCH + 1  # into a third epoch: each reshuffled as the DataLoader does
    source = dali_batches(dataset, BATCH, 3, workers, CPU)
    got, pids = [], set()
    for _ in range(count):
        batch, made_by = next(source)
        got.append(batch_checksum(batch))
        pids |= made_by
    assert got == _torch_sums(dataset, count)
    assert len(set(got)) == count  # not one batch over and over
    if workers:
        assert len(pids) == workers and os.getpid() not in pids  # DALI's own worker processes read the samples
    else:
        assert pids == {os.getpid()}


def test_another_seed_gives_another_order():
    dataset = _workload().train_dataset(3)
    batch, _ = next(dali_batches(dataset, BATCH, 4, 0, CPU))
    assert batch_checksum(batch) != _torch_sums(dataset, 1)[0]


def test_batches_dali_stacks_otherwise_than_the_workloads_collate_are_a_loader_mismatch():
    """DALI stacks samples; a collate that does more (here: it flips the labels) gives other batches,
    and the loader check refuses them as it refuses workers that reorder."""
    dataset = _workload().train_dataset(3)

    def flipping(samples):
        batch = torch.utils.data.default_collate(samples)
        return {**batch, "labels": 1 - batch["labels"]}

    stream = BatchStream(
        dali_batches(dataset, BATCH, 3, 0, CPU), True, _torch_sums(dataset, 2, collate=flipping), CPU, "loader=dali"
    )
    with pytest.raises(TrialRejected, match="mismatch: loader loader=dali: batch 0 differs"):
        stream.next_batch()


def test_a_stream_from_dali_records_its_workers_and_where_the_batches_arrived():
    dataset = _workload().train_dataset(3)
    stream = BatchStream(dali_batches(dataset, BATCH, 3, 2, CPU), True, _torch_sums(dataset, 4), CPU, "loader=dali", 2)
    for _ in range(4):
        stream.next_batch()
    observed = stream.observed()
    # Which of the 2 workers fills DALI's queue is the scheduler's call: beside a test worker on 2
    # busy cores one worker delivered all 4 batches. Every batch came from a worker, none from here.
    assert 1 <= observed["workers"] <= 2 and not observed["main_process"] and observed["batches_checked"] == 4
    assert observed["delivered_on"] == ["cpu"] and observed["pinned"] is None


def test_dali_is_refused_off_cuda_on_batch_workloads_and_with_dataloader_only_knobs():
    workload = _workload()
    with pytest.raises(KnobUnavailable, match="loader=dali needs a CUDA device, the trial runs on cpu"):
        check_settings(workload, LoaderSettings(loader="dali"), CPU)
    with pytest.raises(KnobUnavailable, match="gives no dataset"):
        check_settings(_workload("toy_workloads:Toy"), LoaderSettings(loader="dali"), CUDA)
    with pytest.raises(KnobUnavailable, match="pin_memory=True is torch DataLoader's; loader=dali takes num_workers only"):
        check_settings(workload, LoaderSettings(loader="dali", num_workers=2, pin_memory=True), CUDA)
    check_settings(workload, LoaderSettings(loader="dali", num_workers=2), CUDA)  # what it takes: no error


def test_without_the_package_dali_is_refused_with_the_install_line(monkeypatch):
    def missing():
        raise KnobUnavailable("loader=dali needs NVIDIA DALI: pip install 'hpo[dali]'", [("loader", "dali")])

    monkeypatch.setattr(deps, "nvidia_dali", missing)
    with pytest.raises(KnobUnavailable, match="needs NVIDIA DALI"):
        check_settings(_workload(), LoaderSettings(loader="dali"), CUDA)
