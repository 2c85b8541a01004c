"""Benchmarks as an importable package: the scripts under scripts/ call these."""
