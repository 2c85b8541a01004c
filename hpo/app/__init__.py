"""The `hpo` command line, the top layer: `main` parses and runs one command; the result commands'
library calls export a trial's config, pick the fastest trial within a quality margin and write a
study's HTML report."""

from hpo.exports import lazy_exports

__all__ = ["build_parser", "export_config", "exported_config", "fastest_within", "main", "write_report"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "build_parser": "cli",
        "export_config": "best_and_export",
        "exported_config": "best_and_export",
        "fastest_within": "pick",
        "main": "cli",
        "write_report": "report",
    },
)
