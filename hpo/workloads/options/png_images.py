"""Options and metrics of the built-in `png_images` workload (model: hpo.workloads.png_images)."""

from __future__ import annotations

import dataclasses

from hpo.workloads.options import WorkloadOptions

__all__ = ["METRICS", "EXTRA", "PACKAGES", "Options", "PngImagesOptions"]

METRICS = {"val_accuracy": "maximize", "val_loss": "minimize"}
# Installed by an extra, not with hpo (hpo.deps.EXTRA_PACKAGES): Pillow draws and decodes the PNGs.
PACKAGES = ("PIL",)
EXTRA = "images"  # the extra of hpo that installs them: `pip install 'hpo[images]'`


@dataclasses.dataclass(frozen=True, kw_only=True)
class PngImagesOptions(WorkloadOptions):
    images: int = 512  # training images written once to the cache folder (plus a quarter for validation)
    size: int = 64  # side of each PNG, in pixels
    crop: int = 48  # side of the random crop each training sample gets
    width: int = 16  # channels of the first convolution
    dropout: float = 0.0  # before the classifier head
    cache_dir: str = ""  # where the PNGs are written; "" : <temp dir>/hpo-png-images

    def __post_init__(self) -> None:
        for name, low in (("images", 8), ("size", 8), ("crop", 4), ("width", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}: must be an integer >= {low}, but got {value!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: 0 <= dropout < 1 must hold, but got {self.dropout!r}")
        if self.crop > self.size:
            raise ValueError(f"crop: crop <= size must hold, but got crop={self.crop}, size={self.size}")


Options = PngImagesOptions
