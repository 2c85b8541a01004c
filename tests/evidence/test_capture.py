"""The evidence profiler's reading of what ran: every op, and apart those inside the optimizer's step."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from hpo.evidence.capture import ops_seen


def test_ops_inside_a_range_are_told_apart_from_the_same_thread_s_other_ops():
    x = torch.ones(4, 4)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.add(x, x)
        with record_function("Optimizer.step#AdamW.step"):
            torch.mul(x, x)
            with record_function("inner"):
                torch.sub(x, x)
        torch.div(x, 2)
    seen, inside = ops_seen(prof, inside="Optimizer.step#")
    assert {"aten::add", "aten::mul", "aten::sub", "aten::div", "Optimizer.step#AdamW.step"} <= seen
    assert inside == {"aten::mul", "aten::sub", "inner"}  # nested ranges count; the range itself does not
