"""Verdicts a knob combination inherits without being probed: a part of it (a value, a pair, a value
at a batch size) was already proven at fault on this device, in another combination.

`hpo probe` asks this before probing each combination. On a CPU without avx512_bf16, bf16 is proven
`slow` once (`hpo.verify.timing.prove_slow` blames `precision=bf16` alone); every other bf16
combination would only repeat that proof, at up to ten times the reference's step time each. The
sampler's wrapper (`hpo.study._avoid`) already never proposes such a combination; the sweep now
skips it the same way, and says so in its row rather than claiming a measurement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpo.verdicts import Part, Verdict
from hpo.verify.stored._verdict_store import VerdictStore

__all__ = ["implied_failure"]


def implied_failure(store: VerdictStore, values: Mapping[str, Any], device: str) -> Verdict | None:
    """The first avoidable verdict cached for `device` whose implicated part `values` (a
    combination's knobs and training values) contain; None when no proven part applies."""
    records = store.all()
    for key, record in records.items():
        verdict = Verdict.parse(record.get("verdict"))
        part = Verdict.part_from_record(record.get("implicates") or ())
        if not (verdict.avoidable and part and _contains(values, part)):
            continue
        if _device_of(records, key) != device:  # bf16 slow on one host says nothing of another
            continue
        return Verdict.make(
            verdict.kind, f"{verdict.detail} (not probed: {_render(part)} was proven at fault in another combination)", part
        )
    return None


def _contains(values: Mapping[str, Any], part: Part) -> bool:
    return all(k in values and values[k] == v for k, v in part)


def _device_of(records: Mapping[str, dict], key: str) -> str | None:
    """The device a record was measured on: a probe record names it; a speed fact (`<key>-b<bs>`)
    sits beside the probe record of its combination."""
    record = records.get(key) or {}
    if "device" in record:
        return record["device"]
    base, _, _ = key.rpartition("-b")
    return (records.get(base) or {}).get("device")


def _render(part: Part) -> str:
    return ", ".join(f"{k}={v}" for k, v in part)
