"""png_images: PNGs written once into a cache folder, decoded and augmented per sample in the
loader, the same batches with or without workers, and a search space that validates."""

from __future__ import annotations

import pytest

from hpo.config.space import load_space
from hpo.config.trial import LoaderSettings
from hpo.engine._loader import trial_loader
from hpo.engine._loader_stream import batch_checksum
from hpo.workloads.dataset_batches import epochs
from hpo.workloads.png_images import PngImages, write_images

SMALL = dict(images=16, size=16, crop=12, width=4)


def small(tmp_path, **overrides) -> PngImages:
    return PngImages(PngImages.Options(**{**SMALL, "cache_dir": str(tmp_path), **overrides}))


def test_pngs_are_written_once_and_read_from_the_cache(tmp_path):
    workload = small(tmp_path)
    assert len(workload.train_paths) == 16 and len(workload.val_paths) == 4
    stamps = {p: p.stat().st_mtime_ns for p in workload.folder.glob("*.png")}
    assert write_images(workload.options) == workload.folder
    assert {p: p.stat().st_mtime_ns for p in workload.folder.glob("*.png")} == stamps


def test_samples_are_cropped_and_augmented_by_seed_and_index(tmp_path):
    dataset = small(tmp_path).train_dataset(seed=0)
    sample = dataset[3]
    assert sample["pixels"].shape == (3, 12, 12) and sample["pixels"].min() >= 0 and sample["pixels"].max() <= 1
    assert (dataset[3]["pixels"] == sample["pixels"]).all()
    other = small(tmp_path).train_dataset(seed=1)
    assert any(not (other[i]["pixels"] == dataset[i]["pixels"]).all() for i in range(8))


def test_a_worker_decodes_the_same_batches(tmp_path):
    workload = small(tmp_path)

    def sums(settings):
        batches = epochs(trial_loader(workload, settings, 4, seed=0))
        return [batch_checksum(next(batches)[0]) for _ in range(3)]

    assert sums(LoaderSettings(num_workers=1)) == sums(LoaderSettings())


def test_model_trains_and_evaluates(tmp_path):
    import torch

    workload = small(tmp_path)
    model = workload.build_model("sdpa")
    batch = next(workload.train_batches(4, seed=0))
    workload.training_loss(model, batch).backward()
    with torch.inference_mode():
        metrics = workload.evaluate(model, lambda b: b)
    assert set(metrics) == {"val_accuracy", "val_loss"}


def test_options_are_checked():
    with pytest.raises(ValueError, match="crop <= size"):
        PngImages.Options(size=16, crop=32)


def test_search_space_validates():
    space = load_space("search_spaces/png_images.yaml")
    assert space.loader["num_workers"] == [0, 1, 2]
