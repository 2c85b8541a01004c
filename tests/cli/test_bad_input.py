"""Bad input, through the CLI as a user meets it: exit code 2, one line on stderr naming what is
wrong, where, and how to fix it, no traceback, no password, and nothing written to the storage.

Every case is its own `hpo` process; they start together (each spends seconds importing torch)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
from conftest import MYSQL_ADMIN, POSTGRES_ADMIN
from key_paths import edited
from space_files import write_space

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret"

GOOD = {
    "study": {"name": "bad-input", "sampler": {"name": "random", "seed": 0}, "n_trials": 2},
    "workload": {"name": "causal_lm", "max_steps": 2, "eval_every": 2},  # built-in: validated without torch
    "params": {"lr": {"low": 1.0e-4, "high": 1.0e-2, "log": True}, "batch_size": {"low": 8, "high": 32, "step": 8}},
    "systems": {"precision": "fp32", "attention": "eager", "optimizer": "forloop"},
}


def _variant(**changes) -> dict:
    return edited(GOOD, changes, sep="__")


@dataclass
class Case:
    argv: list[str]
    says: str  # a part of the one error line
    untouched: list[Path] = field(default_factory=list)  # sqlite files: absent, or unchanged
    needs: str = ""  # "postgres" or "mysql": the server the case talks to
    exit: int = 2  # 3: the storage is unreachable (README's exit codes)


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def _server_up(admin_url: str) -> bool:
    try:
        engine = sa.create_engine(admin_url, connect_args={"connect_timeout": 5})
        with engine.connect():
            pass
        engine.dispose()
        return True
    except Exception:  # noqa: BLE001 - any failure: not usable
        return False


def _require(server: str) -> None:
    if server == "mysql" and not _server_up(MYSQL_ADMIN):
        pytest.skip("MariaDB/MySQL is not running on 127.0.0.1:3306")
    if server == "postgres" and not _server_up(POSTGRES_ADMIN):
        if os.environ.get("HPO_REQUIRE_POSTGRES"):
            pytest.fail("PostgreSQL is required in CI but not running on 127.0.0.1:5432")
        pytest.skip("PostgreSQL is not running on 127.0.0.1:5432")


def _existing_study(path: Path, space_file: Path) -> None:
    """A study made by `hpo run` with one finished trial, built directly to save a trial's time."""
    from hpo.config.space import load_space
    from hpo.storage import engine_of, storage_of
    from hpo.study import create_or_resume

    study = create_or_resume(load_space(space_file), f"sqlite:///{path}")
    study.add_trial(
        optuna.trial.create_trial(
            params={"lr": 1e-3},
            distributions={"lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)},
            value=0.5,
            user_attrs={"verdict": "ok", "config": {"format": 1}},
        )
    )
    engine_of(storage_of(study)).dispose()


def _cases(tmp: Path) -> dict[str, Case]:
    def space(name: str, content: dict | str) -> str:
        path = tmp / f"{name}.yaml"
        if isinstance(content, str):
            path.write_text(content)
        else:
            write_space(path, content, sort_keys=False)
        return str(path)

    fresh = {name: tmp / f"{name}.db" for name in "abcdefghijklm"}
    existing = tmp / "existing.db"
    _existing_study(existing, Path(space("good", GOOD)))
    good = space("good", GOOD)
    newer = write_space(tmp / "newer.yaml", {"format": 99, "workload": {"name": "toy_workloads:Toy"}})
    missing_db = f"hpo_missing_{uuid.uuid4().hex[:8]}"
    pg_host = POSTGRES_ADMIN.split("@", 1)[1].rsplit("/", 1)[0]

    def run(space_path: str, db: Path, *extra: str) -> list[str]:
        return ["run", space_path, "--storage", f"sqlite:///{db}", *extra]

    return {
        "missing file": Case(run(str(tmp / "missing.yaml"), fresh["a"]), "missing.yaml: no such file", [fresh["a"]]),
        "malformed yaml": Case(
            run(space("malformed", "study: {name: x\n  n_trials: [1, 2\n"), fresh["b"]),
            "malformed.yaml: malformed YAML at line",
            [fresh["b"]],
        ),
        "unsafe yaml tag": Case(
            run(space("unsafe", f"study: !!python/object/apply:os.system ['touch {tmp}/pwned']\n"), fresh["m"]),
            "unsafe.yaml: malformed YAML at line 1",
            [fresh["m"], tmp / "pwned"],
        ),
        "unknown key": Case(
            run(space("unknown_key", _variant(study__colour="red")), fresh["c"]), "study.colour: unknown key", [fresh["c"]]
        ),
        "low > high": Case(
            run(space("low_high", _variant(params__lr={"low": 1e-2, "high": 1e-4})), fresh["d"]),
            "params.lr: low <= high must hold",
            [fresh["d"]],
        ),
        "negative step": Case(
            run(space("step", _variant(params__batch_size={"low": 8, "high": 32, "step": -8})), fresh["e"]),
            "params.batch_size.step must be > 0",
            [fresh["e"]],
        ),
        "unknown workload": Case(
            run(space("workload", _variant(workload__name="nosuch_workload")), fresh["f"]),
            "workload.name: unknown workload 'nosuch_workload'; use one of",
            [fresh["f"]],
        ),
        "unknown knob value": Case(
            run(space("knob", _variant(systems__precision="fp64")), fresh["g"]),
            "systems.precision: Input should be 'fp32', 'bf16' or 'fp16', got 'fp64'",
            [fresh["g"]],
        ),
        "unknown sampler": Case(
            run(space("sampler", _variant(study__sampler={"name": "annealing"})), fresh["h"]),
            "study.sampler.name: Input should be 'tpe', 'random', 'nsga2', 'cmaes' or 'gp', got 'annealing'",
            [fresh["h"]],
        ),
        "storage URL of no database": Case(
            ["run", good, "--storage", "nosuchdb://host/x"], "storage nosuchdb://host/x: not a database URL"
        ),
        "unreachable host": Case(
            ["run", good, "--storage", f"postgresql+psycopg://postgres:{SECRET}@127.0.0.1:1/hpo"], "cannot connect", exit=3
        ),
        "wrong password": Case(
            ["run", good, "--storage", MYSQL_ADMIN.replace("root@", f"root:{SECRET}@") + "mysql"],
            "authentication failed",
            needs="mysql",
        ),
        "missing database": Case(
            ["run", good, "--storage", f"postgresql+psycopg://postgres:{SECRET}@{pg_host}/{missing_db}"],
            f'database "{missing_db}" does not exist; create the database first',
            needs="postgres",
        ),
        "study with another space": Case(
            [
                "run",
                space("other_space", _variant(params__lr={"low": 1e-5, "high": 1e-1})),
                "--storage",
                f"sqlite:///{existing}",
                "--study",
                "bad-input",
            ],
            "study 'bad-input' exists with a different search space (differs in params)",
            [existing],
        ),
        "export of a missing trial": Case(
            [
                "export",
                "--study",
                "bad-input",
                "--storage",
                f"sqlite:///{existing}",
                "--trial",
                "99",
                "-o",
                str(tmp / "out.yaml"),
            ],
            "--trial 99",
            [existing, tmp / "out.yaml"],
        ),
        "train of a newer config": Case(["train", str(newer)], "config format 99 is not supported"),
        "worker for a missing study": Case(
            ["worker", "--study", "nope", "--storage", f"sqlite:///{existing}"], "study 'nope' not found", [existing]
        ),
        "best from a missing storage": Case(
            ["best", "--study", "x", "--storage", f"sqlite:///{fresh['i']}"], "no such file", [fresh["i"]]
        ),
        "negative workers": Case(run(good, fresh["j"], "--workers", "-1"), "--workers must be >= 0", [fresh["j"]]),
        "zero trials": Case(run(good, fresh["k"], "--n-trials", "0"), "--n-trials must be >= 1, got 0", [fresh["k"]]),
        "bad heartbeat setting": Case(
            run(good, fresh["l"]), "HPO_GRACE_PERIOD (5) must be larger than HPO_HEARTBEAT_INTERVAL (10)", [fresh["l"]]
        ),
    }


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Start every case at once; yield {name: (case, completed process, digests before)}."""
    tmp = tmp_path_factory.mktemp("bad-input")
    cases = _cases(tmp)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), OMP_NUM_THREADS="1")
    started = {}
    for name, case in cases.items():
        before = {path: _digest(path) for path in case.untouched}
        case_env = dict(env, HPO_GRACE_PERIOD="5") if name == "bad heartbeat setting" else env
        proc = subprocess.Popen(
            [sys.executable, "-m", "hpo.app.cli", *case.argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=case_env,
            cwd=tmp,
        )
        started[name] = (case, proc, before)
    results = {}
    for name, (case, proc, before) in started.items():
        out, err = proc.communicate(timeout=300)
        results[name] = (case, proc.returncode, out, err, before)
    return results


CASE_NAMES = [
    "missing file",
    "malformed yaml",
    "unsafe yaml tag",
    "unknown key",
    "low > high",
    "negative step",
    "unknown workload",
    "unknown knob value",
    "unknown sampler",
    "storage URL of no database",
    "unreachable host",
    "wrong password",
    "missing database",
    "study with another space",
    "export of a missing trial",
    "train of a newer config",
    "worker for a missing study",
    "best from a missing storage",
    "negative workers",
    "zero trials",
    "bad heartbeat setting",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", CASE_NAMES)
def test_bad_input_is_one_line_exit_2_or_3_and_writes_nothing(outcomes, name):
    case, code, out, err, before = outcomes[name]
    _require(case.needs)
    command = case.argv[0]
    assert "Traceback" not in out + err
    assert SECRET not in out + err
    lines = err.strip().splitlines()
    assert code == case.exit, err
    assert len(lines) == 1, err
    assert lines[0].startswith(f"hpo {command}: error: ") and case.says in lines[0], lines[0]
    assert out == ""
    for path, digest in before.items():
        assert _digest(path) == digest, f"{path} was written"


def test_every_case_is_checked(tmp_path):
    assert sorted(CASE_NAMES) == sorted(_cases(tmp_path))


@pytest.mark.slow
def test_a_missing_database_is_not_created(outcomes):
    _require("postgres")
    case, *_ = outcomes["missing database"]
    name = case.argv[-1].rsplit("/", 1)[1]
    engine = sa.create_engine(POSTGRES_ADMIN)
    with engine.connect() as conn:
        found = conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first()
    engine.dispose()
    assert found is None
