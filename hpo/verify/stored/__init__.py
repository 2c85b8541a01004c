"""Stored verdicts: where knob verdicts and the probe's shared measurements are kept (`VerdictStore`:
the study's own storage or memory; torch-free, as the sampler wrapper reads it), the keys they are
kept under (`verdict_key`, `speed_key`, `reference_key`, `flops_key`), the facts a machine keeps
between studies (`MachineFacts`), and the verdicts a combination inherits from a part of it already
proven at fault (`implied_failure`)."""

from hpo.exports import lazy_exports

__all__ = [
    "FLOPS_PREFIX",
    "MachineFacts",
    "MemoryVerdicts",
    "REFERENCE_PREFIX",
    "StudyVerdicts",
    "VERDICT_PREFIX",
    "VerdictStore",
    "batch_signature",
    "flops_key",
    "implied_failure",
    "model_signature",
    "package_versions",
    "reference_key",
    "speed_key",
    "verdict_key",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "FLOPS_PREFIX": "_verdict_store",
        "MachineFacts": "_machine_facts",
        "MemoryVerdicts": "_verdict_store",
        "REFERENCE_PREFIX": "_verdict_store",
        "StudyVerdicts": "_verdict_store",
        "VERDICT_PREFIX": "_verdict_store",
        "VerdictStore": "_verdict_store",
        "batch_signature": "_machine_facts",
        "flops_key": "_keys",
        "implied_failure": "_implied",
        "model_signature": "_machine_facts",
        "package_versions": "_keys",
        "reference_key": "_keys",
        "speed_key": "_keys",
        "verdict_key": "_keys",
    },
)
