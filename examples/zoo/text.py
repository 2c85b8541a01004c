"""Text models from transformers, tiny and randomly initialised: two encoders (BERT, DistilBERT)
that classify a sequence, four decoders (GPT-2; Llama, Mistral and Qwen2 with rotary embeddings
and grouped-query attention: fewer key/value heads than query heads) that predict the next token,
and two encoder-decoders (T5, BART) that copy their input shifted by one token.

Tokens follow a rule a model can learn in a few steps: a sequence counts up by a step drawn per
sequence, and an encoder's label is that step. Run one with

    workload: {name: "examples.zoo.text:Llama"}
"""

from __future__ import annotations

import torch
from torch import nn

from examples.zoo.hf import HFWorkload
from hpo.workloads.base import Batch

__all__ = ["BART", "BERT", "GPT2", "T5", "DistilBERT", "Llama", "Mistral", "Qwen2"]

VOCAB, SEQ_LEN, CLASSES = 128, 16, 4


def counting(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, step): rows that count up from a random start by a step in 1..CLASSES."""
    start = torch.randint(0, VOCAB, (n, 1), generator=generator)
    step = torch.randint(1, CLASSES + 1, (n, 1), generator=generator)
    return (start + step * torch.arange(SEQ_LEN)) % VOCAB, step.squeeze(1) - 1


class _Encoder(HFWorkload):
    def batch(self, n: int, generator: torch.Generator) -> Batch:
        tokens, labels = counting(n, generator)
        return {"input_ids": tokens, "attention_mask": torch.ones_like(tokens), "labels": labels}


class _Decoder(HFWorkload):
    def batch(self, n: int, generator: torch.Generator) -> Batch:
        tokens, _ = counting(n, generator)
        return {"input_ids": tokens, "labels": tokens}  # transformers shifts the labels itself


class _EncoderDecoder(HFWorkload):
    def batch(self, n: int, generator: torch.Generator) -> Batch:
        tokens, _ = counting(n, generator)
        return {"input_ids": tokens, "attention_mask": torch.ones_like(tokens), "labels": (tokens + 1) % VOCAB}


class BERT(_Encoder):
    def model(self, impl: str) -> nn.Module:
        from transformers import BertConfig, BertForSequenceClassification

        o = self.options
        config = BertConfig(
            vocab_size=VOCAB, hidden_size=o.hidden, num_hidden_layers=o.layers, num_attention_heads=o.heads,
            intermediate_size=2 * o.hidden, max_position_embeddings=SEQ_LEN, num_labels=CLASSES,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        )  # fmt: skip
        return _with(BertForSequenceClassification, config, impl)


class DistilBERT(_Encoder):
    def model(self, impl: str) -> nn.Module:
        from transformers import DistilBertConfig, DistilBertForSequenceClassification

        o = self.options
        config = DistilBertConfig(
            vocab_size=VOCAB, dim=o.hidden, n_layers=o.layers, n_heads=o.heads, hidden_dim=2 * o.hidden,
            max_position_embeddings=SEQ_LEN, num_labels=CLASSES, dropout=0.0, attention_dropout=0.0, seq_classif_dropout=0.0,
        )  # fmt: skip
        return _with(DistilBertForSequenceClassification, config, impl)


class GPT2(_Decoder):
    def model(self, impl: str) -> nn.Module:
        from transformers import GPT2Config, GPT2LMHeadModel

        o = self.options
        config = GPT2Config(
            vocab_size=VOCAB, n_embd=o.hidden, n_layer=o.layers, n_head=o.heads, n_positions=SEQ_LEN,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        )  # fmt: skip
        return _with(GPT2LMHeadModel, config, impl)


def _rotary_decoder(config_cls, **extra):
    """Config of a Llama-family decoder: rotary embeddings, `kv_heads` key/value heads shared by the query heads."""

    def build(o, kv_heads: int):
        return config_cls(
            vocab_size=VOCAB, hidden_size=o.hidden, intermediate_size=2 * o.hidden, num_hidden_layers=o.layers,
            num_attention_heads=o.heads, num_key_value_heads=kv_heads, max_position_embeddings=SEQ_LEN, **extra,
        )  # fmt: skip

    return build


class Llama(_Decoder):
    """Grouped-query attention: 4 query heads share 2 key/value heads."""

    def model(self, impl: str) -> nn.Module:
        from transformers import LlamaConfig, LlamaForCausalLM

        return _with(LlamaForCausalLM, _rotary_decoder(LlamaConfig)(self.options, kv_heads=self.options.heads // 2), impl)


class Mistral(_Decoder):
    """Grouped-query attention and a sliding window shorter than the sequence."""

    def model(self, impl: str) -> nn.Module:
        from transformers import MistralConfig, MistralForCausalLM

        config = _rotary_decoder(MistralConfig, sliding_window=SEQ_LEN // 2)(self.options, kv_heads=self.options.heads // 2)
        return _with(MistralForCausalLM, config, impl)


class Qwen2(_Decoder):
    """Multi-query attention (one key/value head) and biases on the query, key and value projections."""

    def model(self, impl: str) -> nn.Module:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        return _with(Qwen2ForCausalLM, _rotary_decoder(Qwen2Config)(self.options, kv_heads=1), impl)


class T5(_EncoderDecoder):
    def model(self, impl: str) -> nn.Module:
        from transformers import T5Config, T5ForConditionalGeneration

        o = self.options
        config = T5Config(
            vocab_size=VOCAB, d_model=o.hidden, d_kv=o.hidden // o.heads, d_ff=2 * o.hidden, num_layers=o.layers,
            num_heads=o.heads, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0,
        )  # fmt: skip
        return _with(T5ForConditionalGeneration, config, impl)


class BART(_EncoderDecoder):
    def model(self, impl: str) -> nn.Module:
        from transformers import BartConfig, BartForConditionalGeneration

        o = self.options
        config = BartConfig(
            vocab_size=VOCAB, d_model=o.hidden, encoder_layers=o.layers, decoder_layers=o.layers,
            encoder_attention_heads=o.heads, decoder_attention_heads=o.heads, encoder_ffn_dim=2 * o.hidden,
            decoder_ffn_dim=2 * o.hidden, max_position_embeddings=SEQ_LEN, dropout=0.0, attention_dropout=0.0,
            activation_dropout=0.0, pad_token_id=VOCAB - 1, bos_token_id=VOCAB - 2, eos_token_id=VOCAB - 3,
            decoder_start_token_id=VOCAB - 2, forced_eos_token_id=None,
        )  # fmt: skip
        return _with(BartForConditionalGeneration, config, impl)


def _with(model_cls, config, impl: str) -> nn.Module:
    # No key/value cache in training: it serves generation, and a checkpointed layer, run again in
    # backward, would append its keys and values to it a second time (transformers' own
    # gradient_checkpointing_enable turns it off for the same reason).
    config.use_cache = False
    return model_cls._from_config(config, attn_implementation=impl)
