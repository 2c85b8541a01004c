"""Step timing and the proofs built on it: the steady-state timing policy behind every step time
that becomes a verdict or a ranking (`time_model`), the reference's step time (`time_reference`),
the `slow` limit (`SlowLimit`), two models timed side by side and the proof of which values make a
trial slow (`prove_slow`), a timed step stopped past its bound, and a precision this CPU only
emulates, proven slow once per machine (`emulated_slow`)."""

from hpo.exports import lazy_exports

__all__ = [
    "DEFAULT_POLICY",
    "ONE_STEP",
    "SlowLimit",
    "SlowProof",
    "StepTimes",
    "TimingPolicy",
    "emulated_slow",
    "prove_slow",
    "time_knobs",
    "time_model",
    "time_reference",
    "time_side_by_side",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "DEFAULT_POLICY": "_steady",
        "ONE_STEP": "_steady",
        "SlowLimit": "_slow_limit",
        "SlowProof": "_slow_proof",
        "StepTimes": "_steady",
        "TimingPolicy": "_steady",
        "emulated_slow": "_emulated",
        "prove_slow": "_slow_proof",
        "time_knobs": "_slow_proof",
        "time_model": "_steady",
        "time_reference": "_reference_time",
        "time_side_by_side": "_slow_proof",
    },
)
