"""`--as python`: a plain PyTorch training loop with the trial's knobs."""

from __future__ import annotations

from hpo.app.export_as.winner import HF_ATTN, Winner, attention_note, checkpointing_note, knobs_line
from hpo.errors import UserInputError
from hpo.knobs.registry import PRECISION_SPECS

__all__ = ["python_snippet"]


def python_snippet(w: Winner) -> str:
    """A plain PyTorch loop with the trial's knobs: `train(model, batches, loss_fn)`."""
    precision = PRECISION_SPECS[w.precision]
    dtype = f"torch.{precision.dtype}" if precision.autocast else None
    device = "cpu" if w.on_cpu else "cuda"
    flags = {"forloop": "foreach=False, fused=False", "foreach": "foreach=True", "fused": "fused=True"}.get(w.optimizer)
    if flags is None:
        raise UserInputError(f"trial {w.number}: optimizer={w.optimizer} is not a torch.optim.AdamW path")
    kernel = f"SDPBackend.{w.sdpa_kernel}" if w.sdpa_kernel else None
    lines = [
        f"# hpo trial {w.number}, knobs as observed: {knobs_line(w)}",
        "import contextlib",
        "import torch",
        "from torch.nn.attention import SDPBackend, sdpa_kernel",
        "",
        "",
        "def train(model, batches, loss_fn):",
        f'    """{w.max_steps} steps; `batches` yields inputs, `loss_fn(model, batch)` returns the loss."""',
        f"    torch.manual_seed({w.seed})",
    ]
    if w.transformers_model:
        lines.append(f"    # attention: load the model with attn_implementation={HF_ATTN[w.attention]!r}")
        if w.grad_checkpointing:
            lines.append("    model.gradient_checkpointing_enable({'use_reentrant': False})")
    else:
        lines.append(f"    {attention_note(w)}")
        if w.grad_checkpointing:
            lines.append(f"    {checkpointing_note(w)}")
    lines.append(f"    optimizer = torch.optim.AdamW(model.parameters(), lr={w.lr!r}, weight_decay={w.weight_decay!r}, {flags})")
    lines.append(
        f"    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / {max(w.warmup_steps, 1)}))"
    )
    lines.append(f"    scaler = torch.amp.GradScaler({device!r})" if precision.scaled else "    scaler = None")
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
