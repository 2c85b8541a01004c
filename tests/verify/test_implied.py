"""A combination inherits a proven part's verdict only on the device that proved it, and only when it
contains the whole part."""

from __future__ import annotations

from hpo.verdicts import Kind, Verdict
from hpo.verify.stored import MemoryVerdicts, implied_failure

HERE, THERE = "cpu: AMD EPYC", "cpu: Intel Xeon Platinum 8480+"


def _store(device: str) -> MemoryVerdicts:
    store = MemoryVerdicts()
    slow = Verdict.make(Kind.SLOW, "8.2x the fp32/eager step time at batch 16", [("precision", "bf16"), ("batch_size", 16)])
    store.add("abc", {"verdict": "ok", "knobs": {"precision": "bf16"}, "device": device})
    store.add("abc-b16", {"verdict": str(slow), "implicates": slow.implicated_record(), "batch_size": 16})
    return store


def test_a_combination_containing_a_proven_part_inherits_its_verdict():
    verdict = implied_failure(_store(HERE), {"precision": "bf16", "attention": "sdpa", "batch_size": 16}, HERE)
    assert verdict is not None and verdict.kind is Kind.SLOW
    assert verdict.implicates == (("batch_size", 16), ("precision", "bf16"))
    assert "not probed: batch_size=16, precision=bf16 was proven at fault" in verdict.detail


def test_no_inheritance_without_the_whole_part_or_on_another_device():
    assert implied_failure(_store(HERE), {"precision": "bf16", "batch_size": 32}, HERE) is None  # another batch size
    assert implied_failure(_store(HERE), {"precision": "fp32", "batch_size": 16}, HERE) is None
    assert implied_failure(_store(THERE), {"precision": "bf16", "batch_size": 16}, HERE) is None
