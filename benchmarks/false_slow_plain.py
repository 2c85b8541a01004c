"""The plain side-by-side loop that confirms or refutes a `slow` verdict, written apart from
hpo's verifier: the causal_lm model class at the study's sizes, the reference knobs (fp32, an
eager attention written here, for-loop AdamW, no checkpointing) and the judged knobs (autocast
dtype, torch.utils.checkpoint around each block), one training step of each a round, the side that
goes first alternating, an untimed step of each first; the median of the per-round ratios.

    python -m benchmarks.false_slow_plain --precision bf16 --checkpointing --rounds 10

prints one JSON object. Run in a fresh process, under the same load as the study."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from hpo.workloads.causal_lm import GPT
from hpo.workloads.options.causal_lm import CausalLMOptions

__all__ = ["median_ratio", "run_plain"]

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def _eager_attention(q, k, v, is_causal=True, dropout_p=0.0):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


def _side(sizes: dict, precision: str, checkpointing: bool):
    torch.manual_seed(0)
    model_sizes = {k: v for k, v in sizes.items() if k != "batch_size"}
    model = GPT(CausalLMOptions(**model_sizes), _eager_attention)
    if checkpointing:
        for block in model.blocks:
            block.forward = _checkpointed(block.forward)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    tokens = torch.randint(0, 256, (sizes["batch_size"], sizes["seq_len"] + 1))
    dtype = DTYPES[precision]

    def step() -> float:
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            logits = model(tokens[:, :-1])
        F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    return step


def _checkpointed(forward):
    return lambda x: checkpoint(forward, x, use_reentrant=False)


def median_ratio(reference_s: list[float], knobs_s: list[float]) -> float:
    """The median over rounds of knobs step / reference step (rounds paired by index)."""
    return statistics.median(k / r for r, k in zip(reference_s, knobs_s, strict=True))


def run_plain(sizes: dict, precision: str, checkpointing: bool, rounds: int) -> dict:
    reference, knobs = _side(sizes, "fp32", False), _side(sizes, precision, checkpointing)
    reference(), knobs()  # untimed: first calls allocate and pick kernels
    ref_s, knob_s = [], []
    for i in range(rounds):
        order = (reference, knobs) if i % 2 == 0 else (knobs, reference)
        first, second = order[0](), order[1]()
        r, k = (first, second) if i % 2 == 0 else (second, first)
        ref_s.append(r)
        knob_s.append(k)
    return {
        "ratio": round(median_ratio(ref_s, knob_s), 3),
        "reference_ms": [round(s * 1e3, 2) for s in ref_s],
        "knobs_ms": [round(s * 1e3, 2) for s in knob_s],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--precision", choices=sorted(DTYPES), required=True)
    parser.add_argument("--checkpointing", action="store_true")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--sizes", type=json.loads, required=True, help="JSON: d_model, n_layers, seq_len, batch_size")
    args = parser.parse_args(argv)
    print(json.dumps(run_plain(args.sizes, args.precision, args.checkpointing, args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
