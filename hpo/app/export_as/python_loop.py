"""`--as python`: a plain PyTorch training loop with the trial's knobs, each knob's part written by
its module (`Knob.python_loop`)."""

from __future__ import annotations

from hpo.app.export_as.winner import Winner, knobs_line
from hpo.knobs.knob import LoopPart
from hpo.knobs.systems import KNOBS

__all__ = ["python_snippet"]


def _parts(w: Winner) -> LoopPart:
    """Every knob's part, joined."""
    joined = LoopPart()
    for knob in KNOBS.values():
        part = knob.python_loop(w)
        joined.setup += part.setup
        joined.contexts += part.contexts
        joined.optimizer_flags = ", ".join(f for f in (joined.optimizer_flags, part.optimizer_flags) if f)
        joined.forward = part.forward or joined.forward
        joined.scaler = joined.scaler or part.scaler
        joined.loader.update(part.loader)
    return joined


def python_snippet(w: Winner) -> str:
    """A plain PyTorch loop with the trial's knobs: `train(model, batches, loss_fn)`."""
    part = _parts(w)
    lines = [
        f"# hpo trial {w.number}, knobs as observed: {knobs_line(w)}",
        "import contextlib",
        "import torch",
        "from torch.nn.attention import SDPBackend, sdpa_kernel",
        "",
        "",
        *_setup_lines(w, part),
        *_loop_lines(w, part),
        "",
    ]
    return "\n".join(lines)


def _setup_lines(w: Winner, part: LoopPart) -> list[str]:
    """`train`'s signature and what it sets up: seed, the knobs' setup, optimizer, schedule, scaler."""
    flags = f", {part.optimizer_flags}" if part.optimizer_flags else ""
    loader = "".join(f", {k}={v!r}" for k, v in part.loader.items())
    return [
        "def train(model, batches, loss_fn):",
        f'    """{w.max_steps} steps; `batches` yields inputs, `loss_fn(model, batch)` returns the loss."""',
        f"    # batches: torch.utils.data.DataLoader(dataset, batch_size={w.batch_size}{loader})",
        f"    torch.manual_seed({w.seed})",
        *(f"    {line}" for line in part.setup),
        f"    optimizer = torch.optim.AdamW(model.parameters(), lr={w.lr!r}, weight_decay={w.weight_decay!r}{flags})",
        f"    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / {max(w.warmup_steps, 1)}))",
        f"    scaler = {part.scaler or None}",
        f"    forward = {part.forward or 'model'}",
    ]


def _loop_lines(w: Winner, part: LoopPart) -> list[str]:
    """`train`'s loop: the step under the knobs' contexts, scaled, clipped and scheduled."""
    return [
        "    model.train()",
        f"    for _, batch in zip(range({w.max_steps}), batches):",
        f"        with {', '.join(part.contexts) or 'contextlib.nullcontext()'}:",
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
    ]
