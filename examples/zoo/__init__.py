"""A zoo of real architectures wrapped as hpo workloads the way docs/workloads.md says a user wraps
theirs, each importable from the repository root as `examples.zoo.<module>:<Class>`:

    text       BERT, DistilBERT (encoders); GPT2, Llama, Mistral, Qwen2 (decoders; the last three
               with rotary embeddings and grouped-query attention); T5, BART (encoder-decoders)
    vision     ViT; ResNet (BatchNorm); ConvNeXt (LayerNorm)
    audio      Wav2Vec2
    lightning  LitPatchTransformer, LitConvNet (LightningModules)

`examples.zoo.models.ZOO` lists them with hpo's own built-in workloads at small sizes;
`examples.zoo.matrix` probes each against every knob value; `python -m examples.zoo.table` writes
the table of docs/zoo.md. Every model is tiny (hidden 32, 2 layers) and built from a config with
random weights: nothing is downloaded.
"""
