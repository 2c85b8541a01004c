"""Helpers for tests of served and rendered pages: a free port, JSON over HTTP, and the DOM that
headless Chromium renders (Debian's chromium, installed by scripts/test)."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, deadline_s: float = 30.0):
    """GET `url` as JSON, retrying until a server that is still starting answers."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def rendered_dom(url: str, profile: Path, *, offline: bool = False) -> str:
    """The DOM after Chromium ran the page's scripts. `offline` points every fetch at a dead proxy."""
    args = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
    args += [f"--user-data-dir={profile}", "--virtual-time-budget=20000", "--dump-dom", url]
    if offline:
        args.insert(1, "--proxy-server=127.0.0.1:9")
    run = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout
