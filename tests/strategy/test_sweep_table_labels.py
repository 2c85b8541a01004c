"""`hpo probe`'s table says how far each speed can be trusted: a figure from one step is a lower
bound of the samples/s (a step's time only gains from noise) and reads `>=`; a row read back from
this machine's facts says so, with the day the fact was stored. On search_spaces/speed_quality.yaml
a one-step row ranked at 0.67 of the top trained faster than the top row's own figure, and a second
`hpo probe` printed the same numbers to the decimal, read back from the facts."""

from __future__ import annotations

import calendar

from hpo.strategy import table
from hpo.strategy._rows import SweepRow, steady

KNOBS = {"precision": "fp32", "attention": "eager", "optimizer": "forloop", "grad_checkpointing": False, "compile": False}


def _row(steps_ms, **kw) -> SweepRow:
    return SweepRow(dict(KNOBS), "ok", 1000.0, 1.0, None, None, None, cached=False, steps_ms=steps_ms, **kw)


def test_a_one_step_figure_reads_as_a_lower_bound_and_a_steady_one_as_measured():
    one, steady_steps, uneven = _row([10.0]), _row([10.0, 10.5, 10.2]), _row([10.0, 14.0, 19.0])
    assert not steady(one) and steady(steady_steps) and not steady(uneven)
    lines = table([one, steady_steps, uneven]).splitlines()[1:]
    assert [">=1000.0" in line for line in lines] == [True, False, True], lines
    assert "  1000.0  " in lines[1]


def test_a_row_from_the_machine_facts_says_so_with_its_date():
    stored = calendar.timegm((2026, 12, 4, 10, 0, 0))
    line = table([_row([10.0, 10.0, 10.0], from_machine=True, fact_at=stored)]).splitlines()[1]
    assert line.endswith("machine fact of 2026-12-04: ok"), line
    assert "machine fact" not in table([_row([10.0, 10.0, 10.0])])


def test_hpo_probe_times_a_speed_from_the_machine_facts_again_before_it_ranks(tmp_path):
    """The second sweep reads the first one's facts; with `confirm_facts` (what `hpo probe` asks) the
    speed is timed again, steady, and the row says so; without it (probe_first's sweep, whose race
    times its candidates again) the fact's figure is kept to the decimal."""
    from hpo.config.space import parse_space
    from hpo.strategy import sweep
    from hpo.verify.stored import MachineFacts, MemoryVerdicts

    space = parse_space(
        {
            "study": {"name": "facts", "n_trials": 1, "skip_slow": False},
            "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2},
            "params": {"lr": 1.0e-3, "batch_size": 8},
            "systems": {"precision": "fp32", "attention": "eager", "optimizer": "foreach"},
        },
        source="test",
    )
    (first,) = sweep(space, MemoryVerdicts(), machine=MachineFacts(tmp_path), memory=False)
    (kept,) = sweep(space, MemoryVerdicts(), machine=MachineFacts(tmp_path), memory=False)
    (confirmed,) = sweep(space, MemoryVerdicts(), machine=MachineFacts(tmp_path), memory=False, confirm_facts=True)
    assert kept.from_machine and not kept.timed_now and kept.samples_per_s == first.samples_per_s
    assert confirmed.from_machine and confirmed.timed_now and confirmed.steps_ms != first.steps_ms
    assert confirmed.samples_per_s == 1000 * 8 / min(confirmed.steps_ms)
    assert ", speed timed now: ok" in table([confirmed]).splitlines()[1]
