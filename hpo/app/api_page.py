"""The Python API's reference page, from the docstrings of what `import hpo` exports
(`hpo.run_study`, `hpo.Objective`): written by `python -m hpo.app.docgen` with the other pages.

The docstrings are Google style: an `Args:` or `Raises:` section becomes a list, an `Example::`
block becomes a Python code block; the rest is Markdown as written."""

from __future__ import annotations

import inspect
import re

__all__ = ["api_page"]

_SECTIONS = ("Args:", "Raises:", "Returns:")
_HEAD = """# Python API

{note}

`import hpo` imports neither Optuna nor torch: each name below is imported when first used. A study
run from Python stores the same records as one run by `hpo run` ([Trial records](records.md)), and
its search space is the same file, or a dict of the same sections ([Search-space file](search-space.md)).
"""


def api_page(note: str) -> str:
    import hpo

    lines = [_HEAD.format(note=note)]
    for name in hpo.__all__:
        value = getattr(hpo, name)
        if callable(value):
            lines += _entry(f"hpo.{name}", value)
    return "\n".join(lines).rstrip() + "\n"


def _entry(title: str, value) -> list[str]:
    lines = [f"## `{title}`", "", "```python", f"{title}{_signature(value)}", "```", "", *_markdown(inspect.getdoc(value)), ""]
    if inspect.isclass(value):
        for name, member in vars(value).items():
            if name == "__call__" or (not name.startswith("_") and isinstance(member, property | type(_entry))):
                target = member.fget if isinstance(member, property) else member
                shown = f"{title}.{name}" + ("" if isinstance(member, property) else _signature(member))
                lines += [f"### `{shown}`", "", *_markdown(inspect.getdoc(target) or ""), ""]
    return lines


def _signature(value) -> str:
    """The signature as written in the code (annotations are strings under `from __future__ import
    annotations`: their quotes go), without `self`."""
    text = str(inspect.signature(value)).replace("'", "")
    return re.sub(r"^\(self,? ?", "(", text)


def _markdown(doc: str) -> list[str]:
    out, section = [], None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in _SECTIONS or stripped == "Example::":
            section = stripped
            out += ["", f"**{stripped.rstrip(':')}**", ""] + (["```python"] if section == "Example::" else [])
        elif section == "Example::" and (line.startswith("    ") or not stripped):
            out.append(line[4:])
        elif section in _SECTIONS and line.startswith("        "):  # a continued item
            out[-1] += " " + stripped
        elif section in _SECTIONS and line.startswith("    "):
            name, _, text = stripped.partition(": ")
            out.append(f"- `{name}`: {text}")
        else:
            out += ["```"] if section == "Example::" else []
            section = None
            out.append(line)
    return out + (["```"] if section == "Example::" else [])
