"""What a step showed is recorded as lists that code reads (`precisions`, `attentions`), beside the
strings people read: nothing parses "mixed(bf16+fp32)" to learn that two precisions ran."""

from __future__ import annotations

from collections import Counter

from hpo.evidence.observe import StepEvidence, observed_knobs
from hpo.records import observed_lists


def test_two_precisions_and_two_kernels_are_lists_and_their_strings():
    seen = observed_knobs(
        StepEvidence(
            matmul_dtypes=Counter({"bfloat16": 5, "float32": 1}),
            profiler_ops={"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math"},
        )
    )
    assert seen["precisions"] == ["bf16", "fp32"] and seen["precision"] == "mixed(bf16+fp32)"
    assert seen["attentions"] == ["sdpa_flash", "sdpa_math"] and seen["attention"] == "sdpa_flash+sdpa_math"
    assert observed_lists(seen) == (["bf16", "fp32"], ["sdpa_flash", "sdpa_math"])


def test_nothing_observed_is_empty_lists_and_nulls():
    seen = observed_knobs(StepEvidence())
    assert (seen["precision"], seen["precisions"], seen["attention"], seen["attentions"]) == (None, [], None, [])


def test_a_record_written_before_the_lists_reads_the_same():
    old = {"precision": "mixed(bf16+fp32)", "attention": "sdpa_flash+sdpa_math"}
    assert observed_lists(old) == (["bf16", "fp32"], ["sdpa_flash", "sdpa_math"])
    assert observed_lists({"precision": "bf16", "attention": "sdpa"}) == (["bf16"], ["sdpa"])
    assert observed_lists({"precision": None, "attention": None}) == ([], [])
