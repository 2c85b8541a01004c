"""Optuna's sampler test kit, run against every sampler hpo offers plain and as hpo builds it: a
wrapped sampler must pass every case its plain sampler passes (tests/sampler_kit/kit_cases.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _outcomes(junit: Path) -> dict[tuple[str, str, str], bool]:
    """(sampler, variant, case) -> passed."""
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        _, sampler, variant = case.get("classname").rsplit(".", 1)[1].split("_", 2)
        passed = not any(child.tag in ("failure", "error") for child in case)
        outcomes[(sampler, variant, case.get("name"))] = passed
    return outcomes


@pytest.mark.slow
@pytest.mark.subprocess
def test_wrapped_samplers_pass_every_kit_case_their_plain_sampler_passes(tmp_path):
    junit = tmp_path / "kit.xml"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore", f"--junitxml={junit}"]
    kit = subprocess.run(
        [*cmd, str(ROOT / "tests" / "sampler_kit" / "kit_cases.py")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # 0: every case passed; 1: some failed, which the comparison below judges. Anything else (an
    # interrupted run, a collection or usage error) leaves the report partial or missing.
    assert kit.returncode in (0, 1), f"the kit's pytest exited {kit.returncode}: {(kit.stdout + kit.stderr)[-3000:]}"
    outcomes = _outcomes(junit)
    plain = {(s, case): ok for (s, variant, case), ok in outcomes.items() if variant == "plain"}
    assert {s for s, _ in plain} == {"tpe", "random", "nsga2", "cmaes", "gp"}
    assert sum(plain.values()) > 400, "the kit should have run hundreds of passing cases"
    regressions = [
        f"{sampler}/{variant}: {case}"
        for (sampler, variant, case), ok in outcomes.items()
        if variant != "plain" and plain[(sampler, case)] and not ok
    ]
    assert not regressions, regressions
    assert sum(1 for (_, variant, _), ok in outcomes.items() if variant == "worker" and ok) == sum(plain.values())
