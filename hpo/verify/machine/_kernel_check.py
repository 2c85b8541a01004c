"""Which systems-knob values can run on this machine, known before any trial: the one check behind
`hpo doctor`'s table and the values a worker never proposes (`hpo.runtime._machine_check`).

A value cannot run here when its registry spec's needs say so (`hpo.knobs.registry.Needs`: an
optional package that is missing, a device type its kernels do not exist for, a capability probe
that says no), or when its kernel, run once forward and backward on a few small tensors, fails with
a refusal `hpo.verify.fault._known_failures` knows. xformers 0.0.35 built for another torch imports, but
its dispatcher finds no operator; only running it shows that. The kernel of an attention value
with needs is run in each precision, so a refusal of one dtype (fp32 with sdpa_flash or sdpa_cudnn
on CUDA, fp32 with flash-attn) excludes that (attention, precision) pair only; refused in every
precision, the value itself is excluded. An optimizer value that needs a package runs one step.

Nothing else is guessed: a tiny run that fails in a way no known refusal matches proves nothing
about the knob, so the value stays, is reported as `unchecked`, and the trials' probe judges it.
No model is built: each check is a handful of 1x2x16x64 tensors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from hpo import deps
from hpo.config.trial import Knobs
from hpo.errors import KnobUnavailable
from hpo.hardware import probes
from hpo.knobs.registry import VALUE_SPECS, Needs, spec_for
from hpo.verdicts import Verdict
from hpo.verify.fault import REFERENCE_KNOBS, match_known_failure
from hpo.verify.machine._check_result import CHECKED_KNOBS, MachineCheck, NotRunnable

__all__ = ["check_values", "registry_values", "value_capability"]


def registry_values() -> dict[str, list]:
    """Every value of the checked knobs the registry holds: what `hpo doctor` checks."""
    return {knob: list(VALUE_SPECS[knob]) for knob in CHECKED_KNOBS}


def value_capability(knob: str, value: str, device: torch.device) -> probes.Capability:
    """Whether `knob=value` can run on `device` by its registry needs, checked in their order: a
    missing package is named first, then a device its kernels do not exist for, then the probe."""
    needs: Needs = spec_for(knob, value).needs
    if needs.package:
        try:
            deps.require(needs.package)
        except KnobUnavailable as exc:
            return probes.Capability(False, exc.verdict.detail)
    if needs.devices and device.type not in needs.devices:
        return probes.Capability(False, f"{value} kernels are {'/'.join(d.upper() for d in needs.devices)}-only")
    if needs.probe:
        return getattr(probes, needs.probe)(*needs.probe_args, device)
    return probes.Capability(True)


def check_values(systems: Mapping[str, Sequence], device: torch.device) -> MachineCheck:
    """Check every value of `systems` (knob -> values: a space's, or `registry_values()`) on `device`."""
    found, remarks = _needs_refusals(systems, device)
    excluded = {n.part for n in found}
    precisions = [p for p in systems.get("precision", ()) if (("precision", p),) not in excluded]
    refused, unchecked = _kernel_refusals(systems, excluded, precisions, device)
    return MachineCheck(probes.device_model(device), tuple(found + refused), tuple(unchecked), remarks)


def _needs_refusals(
    systems: Mapping[str, Sequence], device: torch.device
) -> tuple[list[NotRunnable], dict[tuple[str, str], str]]:
    """The values whose registry needs this machine does not meet, and remarks on those it meets."""
    found: list[NotRunnable] = []
    remarks: dict[tuple[str, str], str] = {}
    for knob in CHECKED_KNOBS:
        for value in dict.fromkeys(systems.get(knob, ())):
            cap = value_capability(knob, value, device)
            if not cap.usable:
                found.append(NotRunnable(((knob, value),), cap.why))
            elif cap.why:
                remarks[(knob, value)] = cap.why
    return found, remarks


def _kernel_refusals(
    systems: Mapping[str, Sequence], excluded: set, precisions: list[str], device: torch.device
) -> tuple[list[NotRunnable], list[str]]:
    """The attention and optimizer values (not `excluded` already) whose kernel, run once under each
    of `precisions`, was refused; and what could not be told from the run."""
    found: list[NotRunnable] = []
    unchecked: list[str] = []
    for knob, run in (("attention", _attention_refusals), ("optimizer", _optimizer_refusals)):
        for value in dict.fromkeys(systems.get(knob, ())):
            spec = spec_for(knob, value)
            if ((knob, value),) in excluded or not _kernel_checked(knob, spec.needs):
                continue
            refused, unknown = run(value, precisions, device)
            found += refused
            unchecked += unknown
    return found, unchecked


def _kernel_checked(knob: str, needs: Needs) -> bool:
    """An attention value with any needs (a pinned SDPA kernel, a package) runs its kernel per
    precision; an optimizer value runs a step only when it needs a package (torch's own fused path
    has its probe)."""
    return bool(needs.package) or (knob == "attention" and needs != Needs())


def _attention_refusals(name: str, precisions: Sequence[str], device) -> tuple[list[NotRunnable], list[str]]:
    """The known refusals of attention `name`, run in each precision: a refusal of the kernel
    alone, or of it with every precision, excludes the value; otherwise each refused pair."""
    pairs: list[NotRunnable] = []
    unknown: list[str] = []
    for precision in precisions:
        knobs = Knobs(precision=precision, attention=name, optimizer=REFERENCE_KNOBS.optimizer)
        try:
            _run_attention(name, precision, device)
        except Exception as exc:  # noqa: BLE001 - classified below; an unknown failure is reported
            verdict = match_known_failure(exc, knobs)
            if verdict is None:
                unknown.append(_unknown(f"attention={name} with precision={precision}", exc))
                continue
            if verdict.implicates == (("attention", name),):
                return [NotRunnable(verdict.implicates, _why(verdict, exc))], unknown
            pairs.append(NotRunnable(verdict.implicates, _why(verdict, exc)))
    if pairs and len(pairs) == len(precisions):  # refused with every precision searched: the value
        return [NotRunnable((("attention", name),), pairs[0].why)], unknown
    return pairs, unknown


def _run_attention(name: str, precision: str, device: torch.device) -> None:
    from hpo.knobs.attention_kernels import attention_function, pinned_kernel
    from hpo.knobs.precision_plugins import DTYPES

    q, k, v = (torch.randn(1, 2, 16, 64, device=device, dtype=DTYPES[precision], requires_grad=True) for _ in range(3))
    with pinned_kernel(name):
        attention_function(name)(q, k, v, is_causal=True).float().sum().backward()
    _synchronize(device)


def _synchronize(device: torch.device) -> None:
    """A kernel's own failure surfaces here, not at the next call after the check (CUDA is async)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _optimizer_refusals(name: str, precisions: Sequence[str], device) -> tuple[list[NotRunnable], list[str]]:
    """One step of optimizer `name` on a small fp32 parameter. `precisions` go unused: autocast
    leaves the parameters in fp32, so no precision is part of an optimizer's refusal."""
    from hpo.knobs.adamw_builders import build_optimizer

    param = torch.nn.Parameter(torch.zeros(16, device=device))
    param.grad = torch.ones_like(param)
    try:
        build_optimizer(name, [param], lr=1e-3, weight_decay=0.0).step()
        _synchronize(device)
    except Exception as exc:  # noqa: BLE001 - classified below; an unknown failure is reported
        verdict = match_known_failure(exc, Knobs(optimizer=name))
        if verdict is None:
            return [], [_unknown(f"optimizer={name}", exc)]
        return [NotRunnable(verdict.implicates, _why(verdict, exc))], []
    return [], []


def _why(verdict: Verdict, exc: BaseException) -> str:
    """The verdict's reason without the `knob=value: ` its detail starts with (the line names it).
    xformers' dispatcher puts its reasons after the inputs it was given, one block per operator
    (`<op> is not supported because:` then indented lines, xformers/ops/fmha/dispatch.py v0.0.35
    `_run_priority_list`): they are what a user can act on, so they are kept, each once."""
    head, sep, rest = verdict.detail.partition(": ")
    why = rest if sep and "=" in head and " " not in head else verdict.detail
    reasons = _operator_reasons(str(exc))
    return f"{why.removesuffix(' with inputs:')} ({'; '.join(reasons)})" if reasons else why


def _operator_reasons(message: str) -> list[str]:
    reasons: list[str] = []
    within = False
    for line in message.splitlines():
        if line.endswith("is not supported because:"):
            within = True
        elif within and line.startswith(" "):
            reasons.append(line.strip())
        else:
            within = False
    return list(dict.fromkeys(reasons))


def _unknown(what: str, exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{what}: its check raised {type(exc).__name__}: {first} (no known refusal: trials probe it)"
