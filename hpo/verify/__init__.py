"""Everything hpo proves about a trial's knobs before and while it trains, one subpackage per job:

- `hpo.verify.probing`: the pre-trial probe, a real step under the trial's knobs against the
  fp32/eager reference, within bounds measured on the model;
- `hpo.verify.timing`: steady step timing, the reference's step time, the `slow` limit and its proof;
- `hpo.verify.peaks`: memory peaks fitted before a step runs;
- `hpo.verify.machine`: what this machine can run, checked before any trial;
- `hpo.verify.stored`: where verdicts and measurements are kept, and under which keys;
- `hpo.verify.fault`: which knob values a failure is blamed on (shared by the others).

The few names most callers need are re-exported here."""

from hpo.exports import lazy_exports

__all__ = ["MemoryVerdicts", "NumericBound", "ProbeResult", "VerdictStore", "bound_from_floor", "run_probe"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "MemoryVerdicts": "stored._verdict_store",
        "NumericBound": "probing._bounds",
        "ProbeResult": "probing._result",
        "VerdictStore": "stored._verdict_store",
        "bound_from_floor": "probing._bounds",
        "run_probe": "probing._probe",
    },
)
