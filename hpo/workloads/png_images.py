"""Image classification whose input costs something: every training sample is a PNG file decoded
with Pillow, cropped at random and flipped, in the loader (`train_dataset`), so the loader settings
(`systems.num_workers`, ...) decide how long a step waits for its batch.

Data: four classes of synthetic pictures (horizontal bars, vertical bars, a disc, a cross) in
random colours, positions and noise, written once as PNG files into a cache folder (generated here,
nothing is downloaded). A sample's crop and flip come from a generator seeded with (seed, index),
so a batch is the same whichever worker decodes it. Validation: a quarter as many images, centre-
cropped, decoded once. Model: two strided convolutions, one self-attention layer over the feature
map (the attention knob acts on it), a linear head.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from hpo import deps
from hpo.knobs.attention_kernels import attention_function
from hpo.workloads.base import Batch, MoveFn, Workload
from hpo.workloads.options.png_images import METRICS, PngImagesOptions

CLASSES = ("hbars", "vbars", "disc", "cross")
_FORMAT = 1  # bump when the pictures change, so an old cache folder is not read as the new one


def _pil():
    pil = deps.pillow()
    return pil.Image, pil.ImageDraw


def _picture(index: int, size: int, label: int):
    Image, ImageDraw = _pil()
    g = torch.Generator().manual_seed(index)
    colour = tuple(int(c) for c in torch.randint(64, 256, (3,), generator=g))
    noise = torch.randint(0, 48, (size, size, 3), generator=g, dtype=torch.uint8)
    image = Image.fromarray(noise.numpy(), "RGB")
    draw, at = ImageDraw.Draw(image), [int(v) for v in torch.randint(size // 4, 3 * size // 4, (2,), generator=g)]
    step = max(2, size // 8)
    if label == 0:
        for y in range(at[1] % step, size, 2 * step):
            draw.rectangle([0, y, size, y + step // 2], fill=colour)
    elif label == 1:
        for x in range(at[0] % step, size, 2 * step):
            draw.rectangle([x, 0, x + step // 2, size], fill=colour)
    elif label == 2:
        draw.ellipse([at[0] - size // 5, at[1] - size // 5, at[0] + size // 5, at[1] + size // 5], fill=colour)
    else:
        draw.rectangle([at[0] - step // 2, 0, at[0] + step // 2, size], fill=colour)
        draw.rectangle([0, at[1] - step // 2, size, at[1] + step // 2], fill=colour)
    return image


def write_images(options: PngImagesOptions) -> Path:
    """The cache folder holding `images` training and `images // 4` validation PNGs, written once:
    into a fresh folder renamed into place, so concurrent trials never read a half-written one."""
    root = Path(options.cache_dir or Path(tempfile.gettempdir(), "hpo-png-images"))
    folder = root / f"v{_FORMAT}-{options.images}x{options.size}"
    if folder.is_dir():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(dir=root, prefix=".partial-"))
    for index in range(options.images + options.images // 4):
        _picture(index, options.size, index % len(CLASSES)).save(partial / f"{index:06d}-{index % len(CLASSES)}.png")
    try:
        os.rename(partial, folder)
    except OSError:  # another trial renamed its own first: theirs is the same pictures
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def _decoded(path: Path) -> torch.Tensor:
    Image, _ = _pil()
    with Image.open(path) as image:
        pixels = torch.frombuffer(bytearray(image.convert("RGB").tobytes()), dtype=torch.uint8)
        return pixels.view(image.height, image.width, 3).permute(2, 0, 1)


class PngSamples(Dataset):
    """Training samples: PNG i decoded, cropped at random to `crop` and flipped with probability 1/2,
    both drawn from a generator seeded with (seed, i)."""

    def __init__(self, paths: list[Path], seed: int, crop: int):
        self.paths, self.seed, self.crop = paths, seed, crop

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        path = self.paths[index]
        pixels = _decoded(path)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        top, left = (int(torch.randint(0, pixels.shape[d] - self.crop + 1, (), generator=g)) for d in (1, 2))
        pixels = pixels[:, top : top + self.crop, left : left + self.crop]
        if torch.rand((), generator=g) < 0.5:
            pixels = pixels.flip(-1)
        label = int(path.stem.rsplit("-", 1)[1])
        return {"pixels": pixels.float().div_(255), "labels": torch.tensor(label)}


class PngModel(nn.Module):
    def __init__(self, width: int, attention, dropout: float = 0.0):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.qkv = nn.Linear(2 * width, 6 * width)
        self.head = nn.Linear(2 * width, len(CLASSES))
        self.dropout = nn.Dropout(dropout)
        self.attention = attention

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv2(F.relu(self.conv1(pixels))))
        tokens = x.flatten(2).transpose(1, 2)  # (batch, positions, channels)
        q, k, v = self.qkv(tokens).unsqueeze(1).chunk(3, dim=-1)  # one head
        return self.head(self.dropout((tokens + self.attention(q, k, v).squeeze(1)).mean(dim=1)))


class PngImages(Workload):
    Options = PngImagesOptions
    metrics = METRICS
    model_reads_hparams = False

    def __init__(self, options: PngImagesOptions):
        super().__init__(options)
        self.folder = write_images(options)
        paths = sorted(self.folder.glob("*.png"))
        self.train_paths, self.val_paths = paths[: options.images], paths[options.images :]
        self._val: Batch | None = None

    def build_model(self, attention: str) -> nn.Module:
        return PngModel(self.options.width, attention_function(attention), self.options.dropout)

    def train_dataset(self, seed: int) -> Dataset:
        return PngSamples(self.train_paths, seed, self.options.crop)

    def training_loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(model(batch["pixels"]).float(), batch["labels"])

    def evaluate(self, model: nn.Module, move: MoveFn) -> dict[str, float]:
        if self._val is None:
            margin, crop = (self.options.size - self.options.crop) // 2, self.options.crop
            pixels = [_decoded(p)[:, margin : margin + crop, margin : margin + crop] for p in self.val_paths]
            labels = [int(p.stem.rsplit("-", 1)[1]) for p in self.val_paths]
            self._val = {"pixels": torch.stack(pixels).float().div_(255), "labels": torch.tensor(labels)}
        batch = move(self._val)
        logits = model(batch["pixels"]).float()
        return {
            "val_accuracy": (logits.argmax(-1) == batch["labels"]).float().mean().item(),
            "val_loss": F.cross_entropy(logits, batch["labels"]).item(),
        }
