"""Whether the fp32/eager reference is predicted to fit at the trial's batch, before the probe
times it there (`hpo.verify.probing`).

The reference has no checkpointing and no low precision: it can need far more memory than the
trial's knobs. Its step time at the trial's batch was measured before anything predicted that it
fits: under a CPU limit a reference at batch 2048 of a d256 x 4 GPT allocated until the cap
failed it. Now its peak model is fitted first, as a trial's is (`hpo.verify.peaks._peak_fit`: from the
smallest batch up, each size predicted to fit), and kept in the verdict store per model and device;
a reference predicted over the limit at the trial's batch is not timed, and the trial trains with
its speed not judged, saying why.
"""

from __future__ import annotations

import dataclasses

from hpo.config.trial import TrialConfig
from hpo.engine import AssembledModel
from hpo.hardware import GB, limit_bytes
from hpo.verify.fault import REFERENCE_KNOBS
from hpo.verify.peaks._peak_fit import fitted_peaks
from hpo.verify.stored import VerdictStore, verdict_key

__all__ = ["reference_over_limit"]


def reference_over_limit(reference: AssembledModel, config: TrialConfig, store: VerdictStore) -> str | None:
    """Why `reference` is not to be timed at the trial's batch (its peak predicted over the limit),
    or None: it is predicted to fit, or no limit applies (none set on a CPU, or a workload hpo does
    not train, whose steps the fit cannot take)."""
    limit = limit_bytes(reference.device, config.memory_limit_gb)
    if limit is None or reference.workload.trainer != "hpo":
        return None
    # The reference's combination at the probe's batch: fitted from 1 sample up to a quarter of it.
    own = dataclasses.replace(config, knobs=REFERENCE_KNOBS, batch_auto=None)
    # Its own key, not a trial's `memory_key`: it was fitted beside a trial's model, which the probe holds.
    key = verdict_key(own, reference.device)[0] + "-reference-peaks"
    peaks = fitted_peaks(store, key, lambda: reference, reference.workload, own, limit)
    batch, predicted = config.training.batch_size, peaks.predict(config.training.batch_size)
    if predicted <= limit:
        return None
    fits = peaks.largest_fitting(limit, batch - 1)
    return (
        f"the fp32/eager reference is predicted not to fit at batch {batch} (predicted {predicted / GB:.3g} GB > "
        f"limit {limit / GB:.3g} GB, fits up to {fits}): nothing to judge this trial's speed against"
    )
