"""Options and metrics of the built-in `causal_lm_lightning` workload: those of `causal_lm`, whose
model it trains as a LightningModule (model: hpo.workloads.causal_lm_lightning)."""

from hpo.workloads.options.causal_lm import METRICS, CausalLMOptions

__all__ = ["METRICS", "Options", "EXTRA", "PACKAGES", "TRAINER"]

PACKAGES = ("lightning",)  # installed by hpo[lightning] (hpo.deps.EXTRA_PACKAGES)
EXTRA = "lightning"  # the extra of hpo that installs them: `pip install 'hpo[lightning]'`
TRAINER = "lightning"  # trained by Lightning's Trainer (hpo.workloads.catalog.trainer_of), read without torch

Options = CausalLMOptions
