"""`hpo export --as hf|lightning|python`: the winning trial in the terms of the tool that will run it.

Every output is built from the knobs the trial OBSERVED (`knobs_observed`), never from those it
asked for: a trial whose evidence is missing for any knob is refused, and a knob the tool cannot
express is said in a comment line, never dropped. Hyperparameters come from the trial's config.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import optuna

from hpo.errors import UserInputError
from hpo.knobs.registry import ATTENTION_SPECS, KNOB_NAMES, PRECISION_SPECS

__all__ = ["FORMATS", "Winner", "export_as", "hf_arguments", "lightning_arguments", "python_snippet", "winner_of"]

FORMATS = ("hf", "lightning", "python")
# hpo attention value -> transformers attn_implementation (SDPA kernels are pinned around the step).
HF_ATTN = {"eager": "eager", "flash_attn": "flash_attention_2", **{n: "sdpa" for n in ATTENTION_SPECS if n.startswith("sdpa")}}


@dataclasses.dataclass(frozen=True)
class Winner:
    """What a trial ran: observed knobs, its hyperparameters and where it ran."""

    number: int
    precision: str
    attention: str
    optimizer: str
    grad_checkpointing: bool
    compile: str | bool  # False, or the inductor mode the observed compiled graphs ran
    compile_backend: str
    lr: float
    batch_size: int
    weight_decay: float
    warmup_steps: int
    grad_clip: float
    max_steps: int
    seed: int
    device: str
    workload: dict[str, Any]

    @property
    def on_cpu(self) -> bool:
        return self.device.startswith("cpu")

    @property
    def sdpa_kernel(self) -> str | None:
        spec = ATTENTION_SPECS.get(self.attention)
        return spec.sdpa_kernel if spec is not None else None


def winner_of(trial: optuna.trial.FrozenTrial) -> Winner:
    """The trial's observed knobs and hyperparameters; one line when its evidence is missing."""
    attrs = trial.user_attrs
    observed, config = attrs.get("knobs_observed") or {}, attrs.get("config") or {}
    missing = [k for k in KNOB_NAMES if observed.get(k) is None]
    if not config or missing:
        raise UserInputError(
            f"trial {trial.number}: no evidence for {missing or 'its config'} (knobs_observed: {observed or None}); "
            f"hpo exports only what a trial was seen to run: pick a trial that trained (--trial N)"
        )
    if "+" in str(observed["attention"]) or str(observed["precision"]).startswith("mixed"):
        raise UserInputError(
            f"trial {trial.number}: it ran more than one kernel or dtype ({observed}); no single setting reproduces it"
        )
    if observed["attention"] not in HF_ATTN:
        raise UserInputError(
            f"trial {trial.number}: attention={observed['attention']} has no attn_implementation in transformers "
            f"(hpo registers its own kernel for it); known: {sorted(HF_ATTN)}"
        )
    params, systems = config.get("params", {}), config.get("systems", {})
    return Winner(
        number=trial.number,
        precision=observed["precision"],
        attention=observed["attention"],
        optimizer=observed["optimizer"],
        grad_checkpointing=bool(observed["grad_checkpointing"]),
        compile=(systems.get("compile") or "default") if observed["compile"] else False,
        compile_backend=systems.get("compile_backend", "inductor"),
        lr=float(params["lr"]),
        batch_size=int(params["batch_size"]),
        weight_decay=float(params.get("weight_decay", 0.0)),
        warmup_steps=int(params.get("warmup_steps", 0)),
        grad_clip=float(params.get("grad_clip", 1.0)),
        max_steps=int(attrs.get("steps_run") or config["workload"]["max_steps"]),
        seed=int(config.get("study", {}).get("seed", 0)),
        device=str(attrs.get("device", "cpu")),
        workload=dict(config.get("workload", {})),
    )


def _hf_optim(w: Winner) -> str:
    """transformers' `optim` string for the optimizer path that ran, looked up in its OptimizerNames."""
    import transformers
    from transformers.training_args import OptimizerNames

    # adamw_torch is torch's default AdamW path: the for-loop on CPU, foreach on CUDA. transformers 4
    # named apex's FusedAdam adamw_apex_fused; transformers 5 dropped it.
    table = {"fused": "adamw_torch_fused", "apex": "adamw_apex_fused", ("forloop" if w.on_cpu else "foreach"): "adamw_torch"}
    name = table.get(w.optimizer)
    if name is None or name not in {o.value for o in OptimizerNames}:
        why = f"no {name!r} in" if name else "no `optim` string for it in"
        raise UserInputError(
            f"trial {w.number}: optimizer={w.optimizer} on {w.device}: transformers {transformers.__version__} has {why} "
            f"its OptimizerNames; export --as python or --as lightning instead"
        )
    return name


def hf_arguments(w: Winner) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(TrainingArguments kwargs, from_pretrained model kwargs, comment lines)."""
    args: dict[str, Any] = {
        "output_dir": "hpo-trial-output",
        "bf16": w.precision == "bf16",
        "fp16": w.precision == "fp16",
        "optim": _hf_optim(w),
        "gradient_checkpointing": w.grad_checkpointing,
        "torch_compile": bool(w.compile),
        "learning_rate": w.lr,
        "per_device_train_batch_size": w.batch_size,
        "weight_decay": w.weight_decay,
        "max_grad_norm": w.grad_clip,
        "lr_scheduler_type": "constant_with_warmup",
        "warmup_steps": w.warmup_steps,
        "max_steps": w.max_steps,
        "seed": w.seed,
        "use_cpu": w.on_cpu,
        "report_to": "none",
    }
    if w.grad_checkpointing:
        args["gradient_checkpointing_kwargs"] = {"use_reentrant": False}  # hpo's checkpointing is non-reentrant
    _current_names(args)
    if w.compile:
        args.update(torch_compile_backend=w.compile_backend, torch_compile_mode=w.compile)
    model = {"attn_implementation": HF_ATTN[w.attention]}
    notes = [f"# hpo trial {w.number}, knobs as observed: {_knobs_line(w)}"]
    if w.sdpa_kernel:
        notes.append(
            f"# attention={w.attention}: the Trainer cannot pin an SDPA kernel; run trainer.train() inside "
            f"torch.nn.attention.sdpa_kernel(SDPBackend.{w.sdpa_kernel})"
        )
    notes.append("# torch_dtype/dtype: not set; the trial kept float32 weights under autocast")
    notes.append("# weight_decay: the Trainer exempts biases and LayerNorm weights; hpo decayed every parameter")
    return args, model, notes


def _current_names(args: dict[str, Any]) -> None:
    """transformers 5.24 renamed gradient_checkpointing* to activation_checkpointing*: the names the
    installed TrainingArguments declares are written, so it takes them without a FutureWarning."""
    import dataclasses as dc

    from transformers import TrainingArguments

    fields = {f.name for f in dc.fields(TrainingArguments)}
    for old in ("gradient_checkpointing", "gradient_checkpointing_kwargs"):
        new = old.replace("gradient_", "activation_")
        if old in args and new in fields:
            args[new] = args.pop(old)


def lightning_arguments(w: Winner) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(lightning.Trainer kwargs, torch.optim.AdamW kwargs, comment lines)."""
    trainer = {
        "precision": PRECISION_SPECS[w.precision].lightning,
        "max_steps": w.max_steps,
        "gradient_clip_val": w.grad_clip,
        "accelerator": "cpu" if w.on_cpu else "gpu",
        "devices": 1,
    }
    optimizer = {"lr": w.lr, "weight_decay": w.weight_decay, "foreach": w.optimizer == "foreach", "fused": w.optimizer == "fused"}
    notes = [
        f"# hpo trial {w.number}, knobs as observed: {_knobs_line(w)}",
        "# optimizer: torch.optim.AdamW(params, **optimizer_kwargs)",
    ]
    if w.optimizer == "fused" and w.precision != "fp32":
        del trainer["gradient_clip_val"]  # Lightning refuses it for a fused optimizer under mixed precision
        notes.append(
            f"# grad_clip={w.grad_clip}: Lightning's gradient_clip_val refuses a fused optimizer under mixed precision; "
            f"clip in on_before_optimizer_step: torch.nn.utils.clip_grad_norm_(module.parameters(), {w.grad_clip})"
        )
    notes.append(
        f"# attention={w.attention}: Lightning has no attention setting; build the model with attn_implementation={HF_ATTN[w.attention]!r}"
    )
    if w.sdpa_kernel:
        notes.append(
            f"# Lightning cannot pin an SDPA kernel: wrap trainer.fit() in torch.nn.attention.sdpa_kernel(SDPBackend.{w.sdpa_kernel})"
        )
    if w.grad_checkpointing:
        notes.append(
            "# grad_checkpointing: Lightning has no flag; call model.gradient_checkpointing_enable({'use_reentrant': False}) in configure_model"
        )
    if w.compile:
        notes.append(
            f"# compile: Lightning has no flag; torch.compile(model, backend={w.compile_backend!r}, mode={w.compile!r}) before fit"
        )
    if w.warmup_steps:
        notes.append(f"# warmup: a LambdaLR of min(1, (step + 1) / {w.warmup_steps}) in configure_optimizers")
    return trainer, optimizer, notes


def python_snippet(w: Winner) -> str:
    """A plain PyTorch loop with the trial's knobs: `train(model, batches, loss_fn)`."""
    dtype = {"fp32": None, "bf16": "torch.bfloat16", "fp16": "torch.float16"}[w.precision]
    device = "cpu" if w.on_cpu else "cuda"
    flags = {"forloop": "foreach=False, fused=False", "foreach": "foreach=True", "fused": "fused=True"}.get(w.optimizer)
    if flags is None:
        raise UserInputError(f"trial {w.number}: optimizer={w.optimizer} is not a torch.optim.AdamW path")
    kernel = f"SDPBackend.{w.sdpa_kernel}" if w.sdpa_kernel else None
    lines = [
        f"# hpo trial {w.number}, knobs as observed: {_knobs_line(w)}",
        "import contextlib",
        "import torch",
        "from torch.nn.attention import SDPBackend, sdpa_kernel",
        "",
        "",
        "def train(model, batches, loss_fn):",
        f'    """{w.max_steps} steps; `batches` yields inputs, `loss_fn(model, batch)` returns the loss."""',
        f"    torch.manual_seed({w.seed})",
        f"    # attention: load a transformers model with attn_implementation={HF_ATTN[w.attention]!r}",
    ]
    if w.grad_checkpointing:
        lines.append("    model.gradient_checkpointing_enable({'use_reentrant': False})  # a transformers model")
    lines.append(f"    optimizer = torch.optim.AdamW(model.parameters(), lr={w.lr!r}, weight_decay={w.weight_decay!r}, {flags})")
    lines.append(
        f"    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / {max(w.warmup_steps, 1)}))"
    )
    lines.append(f"    scaler = torch.amp.GradScaler({device!r})" if w.precision == "fp16" else "    scaler = None")
    forward = f"torch.compile(model, backend={w.compile_backend!r}, mode={w.compile!r})" if w.compile else "model"
    lines.append(f"    forward = {forward}")
    autocast = f"torch.autocast({device!r}, dtype={dtype})" if dtype else "contextlib.nullcontext()"
    pin = f"sdpa_kernel({kernel})" if kernel else "contextlib.nullcontext()"
    lines += [
        "    model.train()",
        f"    for _, batch in zip(range({w.max_steps}), batches):",
        f"        with {pin}, {autocast}:",
        "            loss = loss_fn(forward, batch)",
        "        (scaler.scale(loss) if scaler else loss).backward()",
        "        if scaler:",
        "            scaler.unscale_(optimizer)",
        f"        torch.nn.utils.clip_grad_norm_(model.parameters(), {w.grad_clip!r})",
        "        scaler.step(optimizer) if scaler else optimizer.step()",
        "        if scaler:",
        "            scaler.update()",
        "        optimizer.zero_grad(set_to_none=True)",
        "        scheduler.step()",
        "    return model",
        "",
    ]
    return "\n".join(lines)


def _knobs_line(w: Winner) -> str:
    return ", ".join(f"{k}={getattr(w, k)}" for k in KNOB_NAMES)


def export_as(trial: optuna.trial.FrozenTrial, fmt: str, output: Path | None) -> list[Path] | str:
    """Write the trial in `fmt`'s terms to the folder `output` (the snippet: to the file, or
    returned for printing when no output is given)."""
    if fmt not in FORMATS:
        raise UserInputError(f"--as must be one of {list(FORMATS)}, but got {fmt!r}")
    w = winner_of(trial)
    if fmt == "python":
        snippet = python_snippet(w)
        if output is None:
            return snippet
        output.write_text(snippet)
        return [output]
    if output is None:
        raise UserInputError(f"--as {fmt} needs -o DIR: the folder to write its files to")
    if output.exists() and not output.is_dir():
        raise UserInputError(f"-o {output}: with --as {fmt} the output is a folder, and this is a file")
    first, second, notes = hf_arguments(w) if fmt == "hf" else lightning_arguments(w)
    names = ("training_args.json", "model_kwargs.json") if fmt == "hf" else ("trainer_kwargs.json", "optimizer_kwargs.json")
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in zip(names, (first, second)):
        (output / name).write_text(json.dumps(content, indent=2) + "\n")
        written.append(output / name)
    (output / "NOTES.txt").write_text("\n".join(notes) + "\n")
    return [*written, output / "NOTES.txt"]
