"""Read back what a Hugging Face Trainer, a Lightning Trainer or a plain loop ran, with hpo's own
evidence code: profiler ops, matmul dtypes at the dispatcher, recomputed layers."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from hpo.evidence.capture import ops_seen
from hpo.evidence.dispatch import MatmulDtypeRecorder
from hpo.evidence.observe import StepEvidence, observed_knobs
from hpo.knobs.recompute import RecomputeCounter
from hpo.workloads.hf_common import checkpoint_layers


def observe(run) -> dict:
    """Knobs observed from the step(s) `run()` performs, with hpo's own evidence code."""
    ev = StepEvidence()
    recorder = MatmulDtypeRecorder()
    with profile(activities=[ProfilerActivity.CPU]) as prof, recorder:
        optimizer = run()
    ev.profiler_ops, ev.optimizer_ops = ops_seen(prof, inside="Optimizer.step#")
    ev.matmul_dtypes, ev.attention_dtypes = recorder.dtypes, recorder.attention_dtypes
    ev.optimizer_module = type(optimizer).__module__
    return observed_knobs(ev)


def count_recomputation(model) -> RecomputeCounter:
    """Count the forwards of the layers' inner modules, in forward and again inside backward. The
    inner modules: transformers 5 checkpoints a layer inside its class's own forward, around the
    original one, so a wrapper on the layer itself would not see the recomputation."""
    counter = RecomputeCounter()
    for layer in checkpoint_layers(model):
        first = next(iter(layer.children()))
        first.register_forward_pre_hook(lambda module, args: counter.record())
    return counter


def pinned(w):
    """What NOTES.txt tells the user to wrap training in when the trial ran a pinned SDPA kernel."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from hpo.knobs.systems import KNOBS

    kernel = KNOBS["attention"].sdpa_kernel(w.knobs["attention"])
    return sdpa_kernel(getattr(SDPBackend, kernel)) if kernel else contextlib.nullcontext()


def examples(workload) -> list[dict]:
    batch = workload.batch("train", torch.arange(len(workload.data["train"]["labels"])))
    return [{k: v[i] for k, v in batch.items()} for i in range(len(batch["labels"]))]


def run_hf_trainer(folder: Path, workload, output_dir: Path, winner, steps: int = 1):
    """(observed knobs, recomputation counter, TrainingArguments): the user's own Trainer built
    from an `export --as hf` folder, run for `steps` on the workload's training texts."""
    from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments

    training_args = json.loads((folder / "training_args.json").read_text())
    model_kwargs = json.loads((folder / "model_kwargs.json").read_text())
    args = TrainingArguments(**{**training_args, "output_dir": str(output_dir), "max_steps": steps})
    n_labels = len(workload.data["labels"])
    model = AutoModelForSequenceClassification.from_pretrained(
        workload.options.model_name_or_path, num_labels=n_labels, **model_kwargs
    )
    trainer = Trainer(model=model, args=args, train_dataset=examples(workload))
    recompute = count_recomputation(model)

    def run():
        with pinned(winner):
            trainer.train()
        return getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # under accelerate's wrapper

    return observe(run), recompute, args
