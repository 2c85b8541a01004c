"""Every model of the zoo: its workload target (what a search-space file's `workload.name` says)
and options, hpo's built-in workloads among them at small sizes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ZOO", "ZooModel"]


@dataclass(frozen=True)
class ZooModel:
    name: str
    workload: str  # a built-in name or "package.module:Class"
    options: dict[str, Any] = field(default_factory=dict)
    family: str = ""


def _zoo(*models: ZooModel) -> dict[str, ZooModel]:
    return {m.name: m for m in models}


ZOO: dict[str, ZooModel] = _zoo(
    ZooModel("bert", "examples.zoo.text:BERT", family="encoder"),
    ZooModel("distilbert", "examples.zoo.text:DistilBERT", family="encoder"),
    ZooModel("gpt2", "examples.zoo.text:GPT2", family="decoder"),
    ZooModel("llama", "examples.zoo.text:Llama", family="decoder, GQA, rotary"),
    ZooModel("mistral", "examples.zoo.text:Mistral", family="decoder, GQA, rotary, sliding window"),
    ZooModel("qwen2", "examples.zoo.text:Qwen2", family="decoder, MQA, rotary"),
    ZooModel("t5", "examples.zoo.text:T5", family="encoder-decoder"),
    ZooModel("bart", "examples.zoo.text:BART", family="encoder-decoder"),
    ZooModel("vit", "examples.zoo.vision:ViT", family="vision transformer"),
    ZooModel("resnet", "examples.zoo.vision:ResNet", family="CNN, BatchNorm"),
    ZooModel("convnext", "examples.zoo.vision:ConvNeXt", family="CNN, LayerNorm"),
    ZooModel("wav2vec2", "examples.zoo.audio:Wav2Vec2", family="audio"),
    ZooModel("lit_patch_transformer", "examples.zoo.lightning:LitPatchTransformer", family="Lightning, vision transformer"),
    ZooModel("lit_convnet", "examples.zoo.lightning:LitConvNet", family="Lightning, CNN, BatchNorm"),
    # hpo's own workloads (the seeds), at small sizes
    ZooModel("causal_lm", "causal_lm", {"d_model": 32, "seq_len": 32, "corpus_bytes": 20_000}, "hpo built-in, decoder"),
    ZooModel(
        "causal_lm_lightning",
        "causal_lm_lightning",
        {"d_model": 32, "seq_len": 32, "corpus_bytes": 20_000},
        "hpo built-in, Lightning decoder",
    ),
    ZooModel(
        "timeseries",
        "timeseries_classification",
        {"conv_channels": 16, "lstm_hidden": 16, "window": 32, "dropout": 0.0},
        "hpo built-in, CNN-LSTM-attention",
    ),
    ZooModel("png_images", "png_images", {"images": 32, "size": 32, "crop": 28, "width": 8}, "hpo built-in, CNN on decoded PNGs"),
    ZooModel(
        "text_classification", "text_classification", {"model": "tiny", "n_train": 256, "n_eval": 64}, "hpo built-in, encoder"
    ),
)
