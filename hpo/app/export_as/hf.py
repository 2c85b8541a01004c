"""`--as hf`: TrainingArguments and from_pretrained kwargs for the trial, in the installed
transformers' own names."""

from __future__ import annotations

from typing import Any

from hpo.app.export_as.winner import HF_ATTN, Winner, attention_note, checkpointing_note, knobs_line
from hpo.deps import require_extra
from hpo.errors import UserInputError
from hpo.knobs.registry import PRECISION_SPECS

__all__ = ["hf_arguments"]


def _hf_optim(w: Winner) -> str:
    """transformers' `optim` string for the optimizer path that ran, looked up in its OptimizerNames."""
    require_extra("export --as hf", ["transformers"])
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
        **{spec.trainer_flag: spec.name == w.precision for spec in PRECISION_SPECS.values() if spec.trainer_flag},
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
    notes = [f"# hpo trial {w.number}, knobs as observed: {knobs_line(w)}"]
    model = {"attn_implementation": HF_ATTN[w.attention]} if w.transformers_model else {}
    if not w.transformers_model:
        notes.append(attention_note(w))
    if w.grad_checkpointing and w.transformers_model is False:
        # The Trainer's flag calls gradient_checkpointing_enable, which only a transformers model has.
        args["gradient_checkpointing"] = False
        del args["gradient_checkpointing_kwargs"]
        notes.append(checkpointing_note(w))
    _current_names(args)
    if w.compile:
        args.update(torch_compile_backend=w.compile_backend, torch_compile_mode=w.compile)
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
