"""Name the knob behind an exception raised while probing, for the trial's `incompatible:` verdict."""

from __future__ import annotations

from hpo.config.trial import Knobs
from hpo.verdicts import Kind, Verdict


def classify_failure(exc: BaseException, knobs: Knobs) -> Verdict:
    """An `incompatible` verdict naming the knob the error points at, and implicating it: alone
    when it fails whatever the precision, paired with the precision when it is a reduced one (a
    kernel that refuses a dtype)."""
    message = _message(exc)
    module = type(exc).__module__
    if module.startswith(("torch._dynamo", "torch._inductor")) or "compile" in type(exc).__name__.lower():
        return _blame(knobs, "compile", f"compile={knobs.compile}: {type(exc).__name__}: {message}")
    if "scaled_dot_product" in message or "No viable backend" in message or "attention" in message.lower():
        return _blame(knobs, "attention", f"attention={knobs.attention}: {message}")
    if any(s in message for s in ("dtype", "scalar type", "Half", "BFloat16")):
        detail = f"dtype mismatch under precision={knobs.precision}: {message}"
        return Verdict.make(Kind.INCOMPATIBLE, detail, [("precision", knobs.precision)])
    if "fused" in message or "foreach" in message:
        return _blame(knobs, "optimizer", f"optimizer={knobs.optimizer}: {message}")
    # Nothing names a knob: blame the values that differ from the reference, together.
    return Verdict.make(Kind.INCOMPATIBLE, f"{type(exc).__name__}: {message}", differing_from_reference(knobs))


def _blame(knobs: Knobs, knob: str, detail: str) -> Verdict:
    values = knobs.as_dict()
    part = [(knob, values[knob])]
    if knobs.precision != "fp32" and knob != "precision":
        part.append(("precision", knobs.precision))
    return Verdict.make(Kind.INCOMPATIBLE, detail, part)


# What the probe compares every trial with; a verdict measured against it blames the differences.
REFERENCE_KNOBS = Knobs(precision="fp32", attention="eager", optimizer="forloop")


def differing_from_reference(knobs: Knobs) -> list[tuple[str, object]]:
    """The knob values that differ from the fp32/eager/for-loop reference: what a verdict measured
    against it (too slow, too far off) can blame. One differing value is blamed alone; several are
    blamed together, since the probe cannot tell which of them did it."""
    reference = REFERENCE_KNOBS.as_dict()
    return [(k, v) for k, v in knobs.as_dict().items() if v != reference[k]]


def _message(exc: BaseException) -> str:
    """First line of the error, followed by its root cause when the wrapper only says 'raised:'."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    cause = getattr(exc, "inner_exception", None) or exc.__cause__
    if cause is not None and cause is not exc:
        first = f"{first} {type(cause).__name__}: {_message(cause)}"
    return first[:300]
