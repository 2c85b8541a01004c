"""A zoo transformer (GPT-2 from transformers, `examples.zoo.text:GPT2`) trained as 2 ranks over real
gloo on the CPU, under DDP and under FSDP2: the same losses as one process at the same global batch,
within the rounding bound, and each strategy's collectives seen on the wire."""

from __future__ import annotations

import pytest
from parallel_ranks import assert_parity, no_rank_left_behind, two_rank_config  # noqa: F401 (autouse)

from hpo.parallel import run_ranks

pytestmark = pytest.mark.slow

GPT2 = {"name": "examples.zoo.text:GPT2", "hidden": 32, "layers": 2, "heads": 4}


def test_gpt2_as_two_ddp_ranks_trains_as_one_process():
    config = two_rank_config("ddp", workload=GPT2)
    outcome = run_ranks(config, deadline_s=300)
    assert_parity(config, outcome)
    assert outcome.record()["wire"]["all_reduce"]["dtypes"] == ["float32"]


def test_gpt2_as_two_fsdp_ranks_trains_as_one_process():
    config = two_rank_config("fsdp", workload=GPT2, reshard_after_forward=True)
    outcome = run_ranks(config, deadline_s=300)
    assert_parity(config, outcome)
    wire = outcome.record()["wire"]
    # GPT-2's 2 blocks and the root are three groups: each gathered for forward and, resharded after
    # it, again for backward; each group's gradients reduce-scattered once.
    assert (wire["all_gather"]["calls"], wire["reduce_scatter"]["calls"]) == (6, 3)
