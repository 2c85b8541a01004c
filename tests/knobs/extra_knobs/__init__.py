"""Knob modules that exist only for tests: each is written as a module of `hpo.knobs.systems` would be,
and found by the same discovery (`hpo.knobs.knob.knobs_in`), but only when a test calls `register()`.
hpo's own discovery reads `hpo/knobs/systems` alone, and this package is not installed with hpo, so
production never sees these knobs.
"""

from __future__ import annotations

import sys

from hpo.knobs.knob import Knob, knobs_in

__all__ = ["register"]

# What hpo derives from the knob list when it is imported: registering after them would be too late.
_DERIVED = ("hpo.config.trial", "hpo.config.schema", "hpo.records", "hpo.evidence.observe")


def register() -> dict[str, Knob]:
    """Add this package's knobs to hpo's, as if their modules were in `hpo/knobs/systems`: call it in
    a fresh interpreter, before anything derives from the knob list (a trial's `Knobs`, the records)."""
    imported = [name for name in _DERIVED if name in sys.modules]
    if imported:
        raise RuntimeError(f"register() must run before {imported} is imported (they read the knob list once); call it first")
    from hpo.knobs import systems

    found = knobs_in(__name__, __path__)
    for name, knob in found.items():
        systems.KNOBS[name] = knob
        systems.TRIAL_KNOBS[name] = knob
    return found
