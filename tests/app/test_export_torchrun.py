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


def trial_with(
    parallel: dict | None, seen: dict | None = None, precision: str = "fp32", **compiled: str
) -> optuna.trial.FrozenTrial:
    """A finished trial as hpo records one; `parallel` is its `systems.parallel`, `seen` its `parallel`
    record; `compiled`: its `compile` and `compile_backend`, when it compiled."""
    systems = {**KNOBS, "precision": precision, **compiled}
    if parallel is not None:
        systems["parallel"] = {"collective_timeout_s": 300.0, "port": None, **parallel}
    config = {
        "format": 2,
        "study": {"objectives": ["val_loss"], "directions": ["minimize"], "seed": 0},
        "workload": {"name": "causal_lm", "max_steps": 3, "eval_every": 3},
        "params": {"lr": 1e-3, "batch_size": 8, "weight_decay": 0.0, "warmup_steps": 0, "grad_clip": 1.0},
        "systems": systems,
    }
    observed = {**systems, "compile": bool(systems["compile"]), "compiled_graphs": int(bool(systems["compile"]))}
    attrs = {"config": config, "knobs_observed": observed, "steps_run": 3, "device": "cpu: test"}
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
    assert "the policy is the precision: train() enters no autocast region" in comments


def test_an_fsdp_trial_whose_wire_showed_no_dtypes_gets_no_policy_written(tmp_path):
    export_as(
        trial_with(FSDP, {"param_dtypes_seen": [], "reduce_dtypes_seen": []}, precision="bf16"), "python", tmp_path / "train.py"
    )
    comments, _ = comment_and_command(tmp_path / "train.torchrun.sh")
    assert "MixedPrecisionPolicy(" not in comments
    assert "no single parameter and reduce dtype on the wire: its MixedPrecisionPolicy is not known" in comments


@pytest.mark.parametrize(
    ("parallel", "ran", "not_ran"),
    [
        (FSDP, ["scaler = ShardedGradScaler(device='cpu')", "    block.forward = torch.compile(block.forward, "], ["autocast("]),
        (DDP, ["scaler = torch.amp.GradScaler('cpu')", "forward = torch.compile(model, ", "torch.autocast('cpu'"], ["Sharded"]),
    ],
)
def test_train_scales_autocasts_and_compiles_as_the_strategy_s_ranks_did(tmp_path, parallel, ran, not_ran):
    seen = {"param_dtypes_seen": ["float16"], "reduce_dtypes_seen": ["float32"]}
    export_as(trial_with(parallel, seen, "fp16", compile="default", compile_backend="eager"), "python", tmp_path / "train.py")
    script = (tmp_path / "train.py").read_text()
    assert all(line in script for line in ran), script
    assert not any(line in script for line in not_ran), script


def test_a_one_process_trial_exports_the_script_alone(tmp_path):
    assert export_as(trial_with(None), "python", tmp_path / "train.py") == [tmp_path / "train.py"]
    assert not (tmp_path / "train.torchrun.sh").exists()


def _run(command_file: Path) -> subprocess.CompletedProcess:
    """The exported command file run in its folder, with this Python's torchrun on the PATH."""
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    return subprocess.run(
        ["sh", str(command_file)], cwd=command_file.parent, env=env, capture_output=True, text=True, timeout=300
    )


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
    done = _run(command_file)
    assert done.returncode == 0, done.stderr[-2000:]
    # Two processes, one group of two: each rank's all-reduce summed both ranks' ones.
    assert [(tmp_path / f"rank{r}").read_text() for r in range(2)] == ["2 2", "2 2"]


# Appended to an exported FSDP2 fp16 script: each rank shards a model as the command file says, with
# a block whose first row's gradient overflows fp16 on every step (row 0: on rank 0's shard alone),
# trains, and writes what ran: optimizer steps, all_reduce calls (ShardedGradScaler's inf flag; the
# DTensor reductions go through functional collectives), graphs its compile backend received, and
# whether the loss was computed under autocast.
FSDP_RANK_MAIN = """
class Spike(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(2, 8))

    def forward(self, x):
        return x + 1e4 * self.weight[0].sum()  # d(mean loss)/d(weight[0]) = 1e4, times the loss scale


if __name__ == "__main__":
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.optim.optimizer import register_optimizer_step_post_hook

    dist.init_process_group("gloo")
    seen = {"steps": 0, "all_reduce": 0, "graphs": 0, "autocast": set()}
    count = lambda key: seen.__setitem__(key, seen[key] + 1)
    torch._dynamo.register_backend(lambda gm, inputs: count("graphs") or gm.forward, name="counted")
    register_optimizer_step_post_hook(lambda *_: count("steps"))
    all_reduce = dist.all_reduce
    dist.all_reduce = lambda *args, **kwargs: count("all_reduce") or all_reduce(*args, **kwargs)

    def loss_fn(forward, x):
        seen["autocast"].add(torch.is_autocast_enabled("cpu"))
        return forward(x).float().mean()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), Spike(), torch.nn.Linear(8, 1))
    policy = MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)
    for block in model[:2]:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    train(model, iter(lambda: torch.randn(4, 8), None), loss_fn)
    with open(f"rank{dist.get_rank()}", "w") as out:
        out.write(f"{seen}")
    dist.destroy_process_group()
"""


@pytest.mark.slow
def test_an_exported_fsdp_fp16_compiled_trial_runs_as_its_ranks_did(tmp_path):
    seen = {"param_dtypes_seen": ["float16"], "reduce_dtypes_seen": ["float32"]}
    script = tmp_path / "train.py"
    (_, command_file) = export_as(trial_with(FSDP, seen, "fp16", compile="default", compile_backend="counted"), "python", script)
    script.write_text(script.read_text() + FSDP_RANK_MAIN)
    done = _run(command_file)
    assert done.returncode == 0, done.stderr[-2000:]
    # As the trial's ranks ran: the sharded scaler all-reduced its inf flag at each of the 3 steps,
    # and both ranks skipped them all (rank 0's overflow, agreed); each sharded block compiled its
    # forward (2 graphs; the root none); the policy's fp16 parameters, no autocast region.
    ran = {"steps": 0, "all_reduce": 3, "graphs": 2, "autocast": {False}}
    assert [(tmp_path / f"rank{r}").read_text() for r in range(2)] == [str(ran)] * 2
