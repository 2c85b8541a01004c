"""A trial run as N processes of one torch.distributed group: launch, the group, one config on
every rank, DDP/FSDP2 wrapping, what crossed the wire, and how a failed rank ends the trial."""

from hpo.exports import lazy_exports

__all__ = ["ConfigMismatch", "RanksOutcome", "config_hash", "run_ranks", "train_on_rank"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ConfigMismatch": "agreement",
        "RanksOutcome": "launch",
        "config_hash": "agreement",
        "run_ranks": "launch",
        "train_on_rank": "rank_loop",
    },
)
