"""Name the knob behind an exception raised while probing, for the trial's `incompatible:` verdict."""

from __future__ import annotations

from hpo.config import Knobs


def classify_failure(exc: BaseException, knobs: Knobs) -> str:
    message = _message(exc)
    module = type(exc).__module__
    if module.startswith(("torch._dynamo", "torch._inductor")) or "compile" in type(exc).__name__.lower():
        return f"incompatible: compile={knobs.compile}: {type(exc).__name__}: {message}"
    if "scaled_dot_product" in message or "No viable backend" in message or "attention" in message.lower():
        return f"incompatible: attention={knobs.attention}: {message}"
    if any(s in message for s in ("dtype", "scalar type", "Half", "BFloat16")):
        return f"incompatible: dtype mismatch under precision={knobs.precision}: {message}"
    if "fused" in message or "foreach" in message:
        return f"incompatible: optimizer={knobs.optimizer}: {message}"
    return f"incompatible: {type(exc).__name__}: {message}"


def _message(exc: BaseException) -> str:
    """First line of the error, followed by its root cause when the wrapper only says 'raised:'."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    cause = getattr(exc, "inner_exception", None) or exc.__cause__
    if cause is not None and cause is not exc:
        first = f"{first} {type(cause).__name__}: {_message(cause)}"
    return first[:300]
