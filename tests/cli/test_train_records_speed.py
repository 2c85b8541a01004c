"""`hpo train` trains the config it is given: a `slow` verdict spares a study's budget, and a
retrain has no budget to spare. It records the speed against the reference and refuses only what
cannot run. On a busy host, an exported EfficientNet was refused `slow: at least 5.1x` by one
`hpo train` and trained by the identical next one."""

from __future__ import annotations

import json

from conftest import slow_foreach_adamw
from space_files import write_space

from hpo.app.cli import main
from hpo.errors import ExitCode

CONFIG = {
    "format": 2,
    "study": {"objectives": ["val_loss"], "directions": ["minimize"], "seed": 0, "skip_slow": True, "slow_ratio": 2.0},
    "workload": {"name": "toy_workloads:Toy", "max_steps": 4, "eval_every": 4},
    "params": {"lr": 3.0e-3, "batch_size": 16},
    "systems": {"precision": "fp32", "attention": "eager", "optimizer": "foreach", "device": "cpu"},
}


def test_hpo_train_trains_a_slow_config_and_records_its_slowdown(tmp_path, capsys, monkeypatch):
    """Fault: foreach AdamW sleeps 200 ms a step, far over 2x the toy's reference step."""
    slow_foreach_adamw(monkeypatch, 0.2)
    code = main(["train", str(write_space(tmp_path / "config.yaml", CONFIG)), "--format", "json"])
    out, _ = capsys.readouterr()
    record = json.loads(out)
    assert code == ExitCode.OK, record
    assert record["verdict"] == "ok" and record["user_attrs"]["steps_run"] == 4, record["verdict"]
    assert record["user_attrs"]["slowdown"] > 2.0
