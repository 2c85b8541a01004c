"""The Hugging Face side of `scripts/bench-vs-hf`: `Trainer.hyperparameter_search` with the optuna
backend on one of the tasks of `benchmarks.vs_hf_task`, timed per trial. It runs as its own process,
so its start-up counts, and writes what it measured as JSON:

    python -m benchmarks.vs_hf_trainer --task text_classification --steps 10 --trials 4 --n-eval 256 --work-dir DIR --out hf.json

Per trial: Optuna's start and end times, the time in `model_init`, the training loop (callback
`on_train_begin` to `on_train_end`), each optimizer step (one `on_step_end` to the next, so the
batch fetch counts, as in hpo's step time) and `evaluate`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import optuna
import torch
from torch import nn
from transformers import AutoModelForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

from benchmarks.vs_hf_task import WORKLOADS, SearchTask
from hpo.workloads.catalog import create_workload
from hpo.workloads.chat_corpus import load_data, model_path

__all__ = ["main", "run_search"]


class TensorDataset(torch.utils.data.Dataset):
    """Rows of a dict of tensors as the dicts the Trainer's default collator stacks (no `datasets`)."""

    def __init__(self, batch: dict[str, torch.Tensor]):
        self.batch = batch

    def __len__(self) -> int:
        return len(next(iter(self.batch.values())))

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {key: value[i] for key, value in self.batch.items()}


class TrialClock(TrainerCallback):
    """Seconds per trial, keyed by the Optuna trial number that `model_init` receives."""

    def __init__(self) -> None:
        self.trials: dict[int, dict] = {}
        self.current: dict = {}
        self.study: optuna.Study | None = None
        self.setup_model_init_s = 0.0  # the Trainer's constructor calls model_init once, with no trial

    def start_trial(self, trial: optuna.Trial | None, init_s: float) -> None:
        if trial is None:
            self.setup_model_init_s += init_s
            return
        self.study = trial.study  # hyperparameter_search keeps its study to itself: read the times here
        self.current = self.trials[trial.number] = {"model_init_s": init_s, "step_ends": []}

    def on_train_begin(self, args, state, control, **kwargs):
        self.current["train_begin"] = time.perf_counter()

    def on_step_begin(self, args, state, control, **kwargs):
        self.current.setdefault("first_step_begin", time.perf_counter())

    def on_step_end(self, args, state, control, **kwargs):
        self.current["step_ends"].append(time.perf_counter())

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "train_samples_per_second" in logs:
            self.current["hf_train_samples_per_second"] = logs["train_samples_per_second"]

    def on_train_end(self, args, state, control, **kwargs):
        self.current["train_loop_s"] = time.perf_counter() - self.current["train_begin"]


class TimedTrainer(Trainer):
    """The stock Trainer, with `evaluate` timed (no callback fires before evaluation starts)."""

    clock: TrialClock

    def evaluate(self, *args, **kwargs):
        start = time.perf_counter()
        metrics = super().evaluate(*args, **kwargs)
        self.clock.current["eval_s"] = time.perf_counter() - start
        return metrics


class CausalLMForTrainer(nn.Module):
    """hpo's GPT as the Trainer trains any custom module: `forward` returns {"loss": ...} (the
    workload's own loss), and its `return_loss=True` makes the Trainer evaluate the loss without labels."""

    def __init__(self, workload):
        super().__init__()
        self.workload, self.gpt = workload, workload.build_model("sdpa")

    def forward(self, tokens: torch.Tensor, return_loss: bool = True) -> dict[str, torch.Tensor]:
        return {"loss": self.workload.training_loss(self.gpt, {"tokens": tokens})}


def _text_classification(task: SearchTask, clock: TrialClock):
    """(model_init, train dataset, eval dataset) on load_data's tensors, the model from the checkpoint."""
    options = task.options()
    data = load_data(options["max_length"], None, task.n_eval)

    def model_init(trial):
        start = time.perf_counter()
        model = AutoModelForSequenceClassification.from_pretrained(
            model_path(),
            local_files_only=True,
            attn_implementation="sdpa",
            num_labels=len(data.topics),
            hidden_dropout_prob=options["dropout"],
            attention_probs_dropout_prob=options["attention_dropout"],  # as hpo's workload sets it
        )
        clock.start_trial(trial, time.perf_counter() - start)
        if model.config._attn_implementation != "sdpa":  # the comparison is void if it fell back to eager
            raise RuntimeError(f"asked transformers for sdpa attention, got {model.config._attn_implementation!r}")
        return model

    return model_init, TensorDataset(data.train), TensorDataset(data.eval)


def _causal_lm(task: SearchTask, clock: TrialClock):
    """(model_init, train dataset, eval dataset): the windows hpo's trials draw (steps x batch of
    them, one epoch), and the validation windows hpo's `evaluate` scores."""
    workload = create_workload("causal_lm", task.options())
    batches = workload.train_batches(task.batch_size, task.seed)
    train = torch.cat([next(batches)["tokens"] for _ in range(task.steps)])

    def model_init(trial):
        start = time.perf_counter()
        model = CausalLMForTrainer(workload)
        clock.start_trial(trial, time.perf_counter() - start)
        return model

    return model_init, TensorDataset({"tokens": train}), TensorDataset({"tokens": workload.eval_windows()})


SIDES = {"text_classification": _text_classification, "causal_lm": _causal_lm}


def _arguments(task: SearchTask, work_dir: Path) -> TrainingArguments:
    return TrainingArguments(
        output_dir=str(work_dir / "trainer"),
        max_steps=task.steps,
        per_device_train_batch_size=task.batch_size,
        per_device_eval_batch_size=task.spec.eval_batch_size,
        weight_decay=task.weight_decay,
        # hpo: linear warmup, then a constant rate (hpo.engine._assembly), the same schedule.
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=task.spec.warmup_steps,
        optim="adamw_torch_fused",
        eval_strategy="no",  # hyperparameter_search evaluates once after training when nothing did
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=task.seed,
    )


def run_search(task: SearchTask, work_dir: Path, timeout: float | None = None) -> dict:
    """Run the search; return the setup times, the best run and one dict per trial. `timeout`
    (seconds, Optuna's own `study.optimize(timeout=...)`, which hyperparameter_search passes on):
    no trial starts after it."""
    start = time.perf_counter()
    clock = TrialClock()
    model_init, train, evaluation = SIDES[task.workload](task, clock)
    data_s = time.perf_counter() - start
    trainer = TimedTrainer(
        model_init=model_init,
        args=_arguments(task, work_dir),
        train_dataset=train,
        eval_dataset=evaluation,
        callbacks=[clock],
    )
    trainer.clock = clock
    trainer_init_s = time.perf_counter() - start - data_s
    search_start = time.time()
    best = trainer.hyperparameter_search(
        hp_space=lambda trial: {"learning_rate": trial.suggest_float("learning_rate", *task.spec.lr, log=True)},
        compute_objective=lambda metrics: metrics["eval_loss"],
        n_trials=task.trials,
        direction="minimize",
        backend="optuna",
        sampler=optuna.samplers.TPESampler(seed=task.seed),
        **({} if timeout is None else {"timeout": timeout}),
    )
    return {
        "data_s": data_s,
        "trainer_init_s": trainer_init_s,
        "setup_model_init_s": clock.setup_model_init_s,
        "search_start": search_start,
        "search_s": time.time() - search_start,
        "best": {"trial": int(best.run_id), "objective": best.objective, "params": best.hyperparameters},
        "trials": [_trial_row(trial, clock.trials.get(trial.number, {}), task) for trial in clock.study.trials],
    }


def _trial_row(trial: optuna.trial.FrozenTrial, timed: dict, task: SearchTask) -> dict:
    ends = timed.get("step_ends", [])
    steps_s = [b - a for a, b in zip([timed.get("first_step_begin", math.nan), *ends], ends)]
    steady = steps_s[1:] or steps_s  # the first step warms up allocations, as hpo leaves it out
    return {
        "number": trial.number,
        "state": trial.state.name,
        "objective": trial.value,
        "lr": trial.params.get("learning_rate"),
        "start": trial.datetime_start.timestamp(),
        "complete": trial.datetime_complete.timestamp() if trial.datetime_complete else None,
        "steps": len(steps_s),
        "step_s": steps_s,
        "median_step_s": statistics.median(steady) if steady else None,
        "samples_per_s": task.batch_size / statistics.median(steady) if steady else None,
        **{key: timed.get(key) for key in ("model_init_s", "train_loop_s", "eval_s", "hf_train_samples_per_second")},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(WORKLOADS), default="text_classification")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--trials", type=int, required=True)
    parser.add_argument("--n-eval", type=int, default=SearchTask.n_eval)
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=float, help="seconds after which no trial starts")
    parser.add_argument("--seed", type=int, default=SearchTask.seed)
    args = parser.parse_args(argv)
    task = SearchTask(workload=args.task, steps=args.steps, trials=args.trials, n_eval=args.n_eval, seed=args.seed)
    args.out.write_text(json.dumps(run_search(task, args.work_dir, args.timeout), indent=1) + "\n")


if __name__ == "__main__":
    main()
