"""`hpo export --as python -o train.py` of a trial that ran as N ranks writes, beside the script, the
torchrun command that starts N ranks of it, with the strategy's knobs as the trial ran them; the
command, run, starts N processes that join one group."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from hpo.app.export_as import export_as

KNOBS = {"precision": "fp32", "attention": "eager", "optimizer": "forloop", "grad_checkpointing": False, "compile": False}
DDP = {"processes": 2, "strategy": "ddp", "backend": "auto", "bucket_cap_mb": 4.0, "gradient_as_bucket_view": True}
FSDP = {"processes": 2, "strategy": "fsdp", "backend": "auto", "reshard_after_forward": False}


def trial_with(parallel: dict | None, seen: dict | None = None, precision: str = "fp32") -> optuna.trial.FrozenTrial:
    """A finished trial as hpo records one; `parallel` is its `systems.parallel`, `seen` its `parallel` record."""
    systems = {**KNOBS, "precision": precision}
    if parallel is not None:
        systems["parallel"] = {"collective_timeout_s": 300.0, "port": None, **parallel}
    config = {
        "format": 2,
        "study": {"objectives": ["val_loss"], "directions": ["minimize"], "seed": 0},
        "workload": {"name": "causal_lm", "max_steps": 3, "eval_every": 3},
        "params": {"lr": 1e-3, "batch_size": 8, "weight_decay": 0.0, "warmup_steps": 0, "grad_clip": 1.0},
        "systems": systems,
    }
    attrs = {"config": config, "knobs_observed": {**systems, "compiled_graphs": 0}, "steps_run": 3, "device": "cpu: test"}
    if seen is not None:
        attrs["parallel"] = seen
    trial = optuna.trial.create_trial(state=optuna.trial.TrialState.COMPLETE, value=0.5, user_attrs=attrs)
    trial.number = 7
    return trial


def comment_and_command(path: Path) -> tuple[str, str]:
    lines = path.read_text().splitlines()
    return "\n".join(line for line in lines if line.startswith("# ")), lines[-1]


def test_a_ddp_trial_exports_the_torchrun_command_of_its_ranks_beside_the_script(tmp_path):
    written = export_as(
        trial_with(DDP, {"param_dtypes_seen": ["float32"], "reduce_dtypes_seen": ["float32"]}), "python", tmp_path / "train.py"
    )
    assert written == [tmp_path / "train.py", tmp_path / "train.torchrun.sh"]
    comments, command = comment_and_command(tmp_path / "train.torchrun.sh")
    assert command == 'exec torchrun --standalone --nnodes=1 --nproc_per_node=2 train.py "$@"'
    assert "hpo trial 7 ran as 2 ranks of one torch.distributed group (gloo)" in comments
    assert "DistributedDataParallel(model, bucket_cap_mb=4, gradient_as_bucket_view=True)" in comments
    assert "rows [rank * 4, (rank + 1) * 4) of each global batch of 8" in comments
    assert os.access(tmp_path / "train.torchrun.sh", os.X_OK)


def test_an_fsdp_trial_s_policy_is_the_dtypes_its_wire_carried(tmp_path):
    seen = {"param_dtypes_seen": ["bfloat16"], "reduce_dtypes_seen": ["float32"]}
    export_as(trial_with(FSDP, seen, precision="bf16"), "python", tmp_path / "train.py")
    comments, _ = comment_and_command(tmp_path / "train.torchrun.sh")
    policy = "mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32), reshard_after_forward=False"
    assert f"fully_shard(block, {policy}) for each block" in comments
    assert "the policy is the precision: train() without its autocast region" in comments


def test_an_fsdp_trial_whose_wire_showed_no_dtypes_gets_no_policy_written(tmp_path):
    export_as(
        trial_with(FSDP, {"param_dtypes_seen": [], "reduce_dtypes_seen": []}, precision="bf16"), "python", tmp_path / "train.py"
    )
    comments, _ = comment_and_command(tmp_path / "train.torchrun.sh")
    assert "MixedPrecisionPolicy(" not in comments
    assert "no single parameter and reduce dtype on the wire: its MixedPrecisionPolicy is not known" in comments


def test_a_one_process_trial_exports_the_script_alone(tmp_path):
    assert export_as(trial_with(None), "python", tmp_path / "train.py") == [tmp_path / "train.py"]
    assert not (tmp_path / "train.torchrun.sh").exists()


# Appended to the exported script: each rank joins the group torchrun set up and writes what it saw.
RANK_MAIN = """
if __name__ == "__main__":
    import os, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    ones = torch.ones(1)
    dist.all_reduce(ones)
    with open(f"rank{dist.get_rank()}", "w") as seen:
        seen.write(f"{dist.get_world_size()} {ones.item():g}")
    dist.destroy_process_group()
"""


@pytest.mark.slow
def test_the_exported_command_starts_the_trial_s_ranks_in_one_group(tmp_path):
    script = tmp_path / "train.py"
    (_, command_file) = export_as(trial_with(DDP, {}), "python", script)
    script.write_text(script.read_text() + RANK_MAIN)
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    done = subprocess.run(["sh", str(command_file)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # Two processes, one group of two: each rank's all-reduce summed both ranks' ones.
    assert [(tmp_path / f"rank{r}").read_text() for r in range(2)] == ["2 2", "2 2"]
