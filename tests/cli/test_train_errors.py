"""`hpo train` on a trial that fails outside any verdict (here: a batch larger than the workload's
dataset) ends as a study's trial would, with its `error:` verdict and traceback and exit 1, not as
hpo's internal error (exit 70, "please report"), which is what it said until the memory benchmark
ran png_images at batch 128 on 32 images."""

from __future__ import annotations

from space_files import write_space

from hpo.app.cli import main
from hpo.errors import ExitCode

CONFIG = {
    "format": 2,
    "study": {"objectives": ["val_loss"], "directions": ["minimize"], "seed": 0, "skip_slow": False},
    "workload": {"name": "png_images", "max_steps": 2, "eval_every": 2, "images": 32, "size": 32, "crop": 28, "width": 8},
    "params": {"lr": 1.0e-3, "batch_size": 128},
    "systems": {"precision": "fp32", "device": "cpu"},
}


def test_a_failing_trial_is_its_error_verdict_with_the_traceback_and_exit_1(tmp_path, capsys):
    code = main(["train", str(write_space(tmp_path / "config.yaml", CONFIG))])
    out, err = capsys.readouterr()
    assert code == ExitCode.NO_TRIAL_TRAINED
    assert out.startswith(
        "verdict: error: ValueError: the workload's dataset yields no full batch of 128 samples (it has 32; a partial "
        "batch is dropped): lower params.batch_size"
    )
    assert "Traceback" in err and "dataset_batches.py" in err and "internal error" not in err
