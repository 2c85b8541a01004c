"""How well a model's rounding floor predicts its real low-precision error: the numbers behind the
probe's bound (docs/failures.md, "Probe bounds").

For each model of the zoo and each sample count, the reference's plain fp32 step, the same step
with every value rounded to bf16's or fp16's mantissa (`hpo.verify.probing.rounding_floor`),
and the real autocast step of the trial precision (eager attention, for-loop AdamW), all from the
same weights on the same samples; fp16's real step backs its loss scale off as the probe does.
Writes benchmarks/results/rounding-floors-<host kind>.json and prints a markdown table.

    PYTHONPATH=. .venv/bin/python -m benchmarks.rounding_floors --models resnet,convnext,llama,bert,causal_lm
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from benchmarks.results import result_path, run_meta
from examples.zoo.models import ZOO
from hpo.config.trial import Knobs, TrainingConfig
from hpo.engine import AssembledModel
from hpo.hardware import seed_everything
from hpo.verify.fault import REFERENCE_KNOBS
from hpo.verify.probing import backed_off, loss_and_grads, relative_errors, rounding_floor
from hpo.workloads.catalog import create_workload

PRECISIONS = ("bf16", "fp16")


def measure(name: str, samples: int) -> dict:
    zoo = ZOO[name]
    workload = create_workload(zoo.workload, zoo.options)
    training = TrainingConfig(batch_size=samples)
    workload.bind_training(training.params())
    cpu = torch.device("cpu")
    batch = next(workload.train_batches(samples, 0))
    seed_everything(0)
    reference = AssembledModel(workload, REFERENCE_KNOBS, training, cpu)
    initial = {k: v.clone() for k, v in reference.model.state_dict().items()}
    row = {"model": name, "family": zoo.family, "samples": samples}
    for precision in PRECISIONS:
        reference.model.load_state_dict(initial)
        for p in reference.model.parameters():
            p.grad = None
        loss, grads = loss_and_grads(reference, reference.move(batch))
        reference.model.load_state_dict(initial)
        floor = rounding_floor(reference, reference.move(batch), precision)
        trial = AssembledModel(workload, Knobs(precision=precision, attention="eager", optimizer="forloop"), training, cpu)
        trial.model.load_state_dict(initial)
        moved = trial.move(batch)
        real = relative_errors(*backed_off(trial, moved, *loss_and_grads(trial, moved)), loss, grads)
        row[precision] = {"floor": vars(floor), "real": vars(real), "ratio": real.grad / floor.grad if floor.grad else None}
    return row


def table(rows: list[dict]) -> str:
    head = "| model | samples | bf16 floor | bf16 real | fp16 floor | fp16 real |\n| --- | --- | --- | --- | --- | --- |\n"
    cells = lambda r, p: f"{r[p]['floor']['grad']:.3g} | {r[p]['real']['grad']:.3g}"
    return head + "".join(f"| {r['model']} | {r['samples']} | {cells(r, 'bf16')} | {cells(r, 'fp16')} |\n" for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet,convnext,llama,bert,vit,causal_lm,timeseries")
    parser.add_argument("--samples", default="4,16")
    args = parser.parse_args(argv)
    rows = [measure(m, int(n)) for m in args.models.split(",") for n in args.samples.split(",")]
    path = result_path("rounding-floors")
    path.write_text(json.dumps({**run_meta(sys.argv), "rows": rows}, indent=1) + "\n")
    print(table(rows))
    print(
        f"gradient error, real over floor: {min(r[p]['ratio'] for r in rows for p in PRECISIONS if r[p]['ratio']):.2f}"
        f" to {max(r[p]['ratio'] for r in rows for p in PRECISIONS if r[p]['ratio']):.2f}; wrote {path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
