"""hpo's benchmarks, beside the package and not installed with it (README.md): scripts/bench-* put
the repository root on sys.path and call these modules; results go to benchmarks/results/."""
