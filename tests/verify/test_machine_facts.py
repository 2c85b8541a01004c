"""This machine's facts (`hpo.verify.stored._machine_facts`): a later sweep of the same model, batch and
software reads what an earlier one proved instead of probing; another model shape, batch or torch
version is another key; `--fresh` reads nothing; concurrent writers never leave a torn entry; a
later probe_first decision confirms the stored race with one timing of its front runners."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from hpo.config.space import parse_space
from hpo.config.trial import Knobs
from hpo.strategy import SweepRow, knobs_key, make_decision, sweep
from hpo.strategy import _combination as sweep_module
from hpo.verify.stored import MachineFacts, MemoryVerdicts
from hpo.verify.stored import _keys as cache

SPACE = {
    "study": {"name": "facts", "strategy": "probe_first"},
    "workload": {"name": "toy_workloads:Toy", "max_steps": 2, "eval_every": 2},
    "params": {"lr": 1.0e-3, "batch_size": 8},
    "systems": {"precision": "fp32", "attention": ["eager", "sdpa"], "optimizer": "forloop"},
}


def _probes(monkeypatch) -> list:
    """Count the probes that run (each still runs for real)."""
    ran, real = [], sweep_module.run_probe
    monkeypatch.setattr(
        sweep_module, "run_probe", lambda workload, config, *a, **k: ran.append(config.knobs) or real(workload, config, *a, **k)
    )
    return ran


def _space(**workload):
    return parse_space({**SPACE, "workload": {**SPACE["workload"], **workload}}, source="t")


def test_a_later_sweep_of_the_same_model_reads_this_machines_facts_instead_of_probing(monkeypatch):
    ran = _probes(monkeypatch)
    first = sweep(_space(), MemoryVerdicts(), machine=MachineFacts())
    assert len(ran) == 2 and not any(r.from_machine for r in first)
    again = sweep(_space(), MemoryVerdicts(), machine=MachineFacts())  # a new study: an empty study store
    assert len(ran) == 2 and all(r.from_machine and r.cached for r in again)
    assert [(r.knobs, r.verdict, r.samples_per_s) for r in again] == [(r.knobs, r.verdict, r.samples_per_s) for r in first]
    listed = MachineFacts().entries()
    assert sorted(e["facts"]["knobs"]["attention"] for e in listed) == ["eager", "sdpa"]


def _other_torch(versions: dict):
    return lambda: {**versions, "torch": "0.0.1"}


@pytest.mark.parametrize(
    "change",
    [
        lambda mp: _space(d_model=48),  # another model shape
        lambda mp: _space(seq_len=24),  # another sequence length
        lambda mp: parse_space({**SPACE, "params": {**SPACE["params"], "batch_size": 4}}, source="t"),  # another batch
        lambda mp: mp.setattr(cache, "package_versions", _other_torch(cache.package_versions())) or _space(),
    ],
    ids=["model-shape", "seq-len", "batch", "torch-version"],
)
def test_another_shape_batch_or_torch_is_another_key(monkeypatch, change):
    ran = _probes(monkeypatch)
    sweep(_space(), MemoryVerdicts(), machine=MachineFacts())
    rows = sweep(change(monkeypatch), MemoryVerdicts(), machine=MachineFacts())
    assert len(ran) == 4 and not any(r.from_machine for r in rows)


def test_fresh_reads_nothing_and_replaces_what_it_measures(monkeypatch):
    ran = _probes(monkeypatch)
    sweep(_space(), MemoryVerdicts(), machine=MachineFacts())
    before = {e["key"]: e["at"] for e in MachineFacts().entries()}
    rows = sweep(_space(), MemoryVerdicts(), machine=MachineFacts(fresh=True))
    assert len(ran) == 4 and not any(r.from_machine for r in rows)
    after = {e["key"]: e["at"] for e in MachineFacts().entries()}
    assert after.keys() == before.keys() and all(after[k] > before[k] for k in before)


def _writer(directory, key, n):
    facts = MachineFacts(directory)
    for i in range(n):
        facts.put(key, {"verdict": {"verdict": "ok"}, "payload": [i] * 2000})


def test_concurrent_writers_never_leave_a_torn_entry(tmp_path):
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_writer, args=(tmp_path, "k", 40)) for _ in range(2)]
    for w in writers:
        w.start()
    reads = 0
    while any(w.is_alive() for w in writers):
        text = (tmp_path / "k.json").read_text() if (tmp_path / "k.json").exists() else None
        if text is not None:
            json.loads(text)  # whole, or this raises
            reads += 1
    assert [w.exitcode for w in writers] == [0, 0] and reads > 0
    assert [p.name for p in tmp_path.iterdir()] == ["k.json"]  # no temporary file left behind


def _knobs(attention, optimizer="forloop"):
    return Knobs(precision="fp32", attention=attention, optimizer=optimizer).as_dict()


FORLOOP = knobs_key(_knobs("eager"))  # the fp32 eager for-loop combination's key


def _known_rows(stored: dict):
    return [
        SweepRow(_knobs(*k), "ok", 100.0, 1.0, 1.0, 0.0, 0.0, True, from_machine=True, known_ms=list(v))
        for k, v in stored.items()
    ]


RACE = parse_space({**SPACE, "systems": {**SPACE["systems"], "optimizer": ["forloop", "fused"]}}, source="t")
# As a race stores them: a dropped candidate was timed at least twice (one timing never drops one).
STORED = {("eager", "forloop"): (10.0, 10.1, 10.0), ("eager", "fused"): (10.2, 10.2, 10.3), ("sdpa", "forloop"): (15.0, 15.1)}


def _timer(now: dict, seen: list):
    def measure(config, timing):
        name = "sdpa" if config.knobs.attention == "sdpa" else config.knobs.optimizer
        seen.append(name)
        return now[name]

    return measure


def test_a_stored_race_is_confirmed_by_one_timing_of_its_front_runner():
    seen = []
    decided = make_decision(RACE, _known_rows(STORED), keep=1, measure=_timer({"forloop": 10.1}, seen))
    assert seen == ["forloop"]  # one timing of the kept one (keep=1); the others stand on their stored times
    assert set(decided["confirmed"]["fp32"]) == {FORLOOP}
    assert [(d["knobs"]["attention"], d["round"]) for d in decided["dropped"]] == [("sdpa", 2)]
    assert "stored on this machine" in decided["dropped"][0]["reason"]
    assert decided["ranking"][0]["times_ms"] == [10.0, 10.1, 10.0, 10.1]  # the stored repeats and the confirming one
    assert decided["timings"] == 1 and decided["discarded"] == {}


@pytest.mark.parametrize("now", [20.2, 14.0], ids=["busier-machine", "one-slow-step"])
def test_a_slower_confirming_step_is_no_evidence_against_the_stored_race(now):
    """Noise only adds time: a confirming step slower than stored (a busier machine, or one step's
    outlier) joins the stored repeats; the steady stored ones still decide, nothing is timed again."""
    seen = []
    decided = make_decision(RACE, _known_rows(STORED), keep=1, measure=_timer({"forloop": now}, seen))
    assert set(decided["confirmed"]["fp32"]) == {FORLOOP} and seen == ["forloop"]
    assert decided["kept"][0]["knobs"] == _knobs("eager")


def test_a_confirming_step_faster_than_this_machine_ever_was_races_anew_without_the_stored_times():
    seen = []
    now = {"forloop": 5.0, "fused": 5.1, "sdpa": 5.0}
    decided = make_decision(RACE, _known_rows(STORED), keep=1, measure=_timer(now, seen))
    assert decided["confirmed"] == {} and "sdpa" in seen  # sdpa, out on the stored times, races again
    assert decided["discarded"] == {"fp32": {FORLOOP: {"confirming_ms": 5.0, "stored_fastest_ms": 10.0}}}
    assert all(max(line["times_ms"]) <= 5.1 for line in decided["ranking"])  # nothing stored is raced on
    assert not [d for d in decided["dropped"] if "stored on this machine" in d["reason"]]


@pytest.mark.usefixtures("one_torch_thread")  # step times that load cannot stretch 100x
def test_hpo_doctor_lists_each_stored_fact_and_says_when_a_step_time_is_a_lower_bound(monkeypatch):
    """Fault: SDPA sleeps 300 ms a call, so the sweep proves sdpa slow on steps stopped past the
    limit; `hpo doctor`'s listing shows both stored combinations, and sdpa's step time as a lower
    bound (`step_stopped`), never as a step time."""
    import time

    import torch

    from hpo.app.doctor import machine_facts

    original = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", lambda *a, **k: time.sleep(0.3) or original(*a, **k))
    # A reference too noisy to judge against gives no verdict, by design (two test workers on two
    # cores): swept again then, at most four times, replacing what was stored (`fresh`).
    for attempt in range(5):
        rows = sweep(_space(seq_len=64, d_model=128), MemoryVerdicts(), machine=MachineFacts(fresh=attempt > 0))
        if any(r.verdict.startswith("slow") for r in rows):
            break
    listed = {row["knobs"]["attention"]: row for row in machine_facts()["entries"]}
    assert set(listed) == {"eager", "sdpa"}, listed
    sdpa = listed["sdpa"]
    assert sdpa["speed"].startswith("slow: at least") and sdpa["step_stopped"] is True and sdpa["step_ms"] >= 300, sdpa
    eager = listed["eager"]
    assert eager["verdict"] == "ok" and eager["step_stopped"] is False and eager["step_ms"] > 0, eager
    assert [r.slowdown_at_least for r in rows] == [r.knobs["attention"] == "sdpa" for r in rows]
