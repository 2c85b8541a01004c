"""No secret in any output. Every command that takes a storage (`--storage`, `$HPO_STORAGE`,
`--from-storage`) runs as a user runs it, on its success path and on its error path (a server that
refuses connections), with a storage URL that carries a password in every place libpq takes one:
the user part (percent-encoded, holding '@', ':' and '/'), `?password=` and `?sslpassword=`.
Neither stdout, stderr, a file written, the dashboard's API nor any row of the study's database may
hold any of them. A trial's error quotes the URL (`leaky_workloads`), so the trial record, its
traceback, the worker's and Optuna's logs and the progress line are on the path. Each place alone,
and the keys libpq refuses (`token=`, `api_key=`, `secret=`, `access_key=`), run on the cheapest
command, `hpo best`.

PostgreSQL trusts local connections here: libpq sends a password only when the server asks for
one, so a URL full of passwords opens the study and the success paths run for real."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from conftest import POSTGRES_ADMIN, _fresh_database
from space_files import write_space
from web import free_port, get_json

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), KINETO_LOG_LEVEL="5")
ENV.pop("HPO_STORAGE", None)

# Each secret has a core found nowhere else, the same in its percent-encoded and decoded forms.
USER_PART = "pw%40Ua7Kx%3Ac%2Fd"  # the password "pw@Ua7Kx:c/d"
QUERY = "password=Qb8Lw&sslpassword=Sc9Mv"
REJECTED = "token=Td1Nu&api_key=Ae2Ot&secret=Sf3Ps&access_key=Kg4Qr"  # keys libpq refuses
CORES = ["Ua7Kx", "Qb8Lw", "Sc9Mv", "Td1Nu", "Ae2Ot", "Sf3Ps", "Kg4Qr"]


def _with_secrets(url: str, query: str = QUERY) -> str:
    """`postgresql+psycopg://postgres@HOST/DB` with a secret in every place."""
    head, rest = url.split("@", 1)
    return f"{head}:{USER_PART}@{rest}?{query}"


def _leaks(text: str, cores=CORES) -> list[str]:
    return [core for core in cores if core in text]


@dataclass
class Ran:
    code: int
    out: str
    err: str


def _start(cwd: Path, env: dict, argv: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "hpo.app.cli", *argv]
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, timeout: float = 300) -> Ran:
    out, err = proc.communicate(timeout=timeout)
    return Ran(proc.returncode, out, err)


def _space(tmp: Path) -> Path:
    space = {
        "study": {"name": "secrets", "sampler": {"name": "random", "seed": 0}, "pruner": {"name": "none"}, "n_trials": 1},
        "workload": {"name": "leaky_workloads:Leaky", "max_steps": 2, "eval_every": 2, "once": str(tmp / "raised")},
        "params": {"lr": {"low": 1.0e-3, "high": 1.0e-2, "log": True}},
        "systems": {"precision": "fp32", "attention": "eager", "optimizer": "forloop"},
    }
    return write_space(tmp / "space.yaml", space)


def _dashboard(tmp: Path, env: dict) -> Ran:
    """Served until its API answered (that answer is part of its output), then Ctrl-C."""
    port = free_port()
    proc = _start(tmp, env, ["dashboard", "--study", "secrets", "--port", str(port)])
    try:
        api = str(get_json(f"http://127.0.0.1:{port}/api/studies", deadline_s=120))
    finally:
        proc.send_signal(signal.SIGINT)
    ran = _finish(proc, timeout=60)
    return Ran(ran.code, ran.out + api, ran.err)


SUCCESS = ["run", "best", "export", "report", "enqueue --from-storage", "worker", "probe", "doctor", "dashboard"]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A study on a real PostgreSQL database, made by `hpo run` and then read by every other command
    at once, through a URL that carries a secret in every place: in `$HPO_STORAGE`, and in
    `--storage` and `--from-storage` where a command takes them. Yields (the database's URL
    without secrets, the commands' folder, each command's run)."""
    url, drop = _fresh_database(POSTGRES_ADMIN, "postgres")
    tmp = tmp_path_factory.mktemp("secrets")
    secret_url, space = _with_secrets(url), str(_space(tmp))
    env = dict(ENV, HPO_STORAGE=secret_url)
    runs = {"run": _finish(_start(tmp, env, ["run", space, "--storage", secret_url]))}
    readers = {
        "best": ["best", "--study", "secrets", "--format", "json"],
        "export": ["export", "--study", "secrets", "-o", "best.yaml"],
        "report": ["report", "--study", "secrets", "-o", "report.html"],
        "enqueue --from-storage": ["enqueue", "--study", "warm", "--from-study", "secrets", "--from-storage", secret_url],
        "worker": ["worker", "--study", "secrets"],
        "probe": ["probe", space, "--study", "probed"],
        "doctor": ["doctor", "--study", "secrets"],
    }
    procs = {name: _start(tmp, env, argv) for name, argv in readers.items()}
    runs |= {name: _finish(proc) for name, proc in procs.items()}
    runs["dashboard"] = _dashboard(tmp, env)
    yield url, tmp, runs
    drop()


@pytest.mark.parametrize("command", SUCCESS)
def test_no_secret_in_the_output_of_a_command_that_succeeds(live, command):
    ran = live[2][command]
    assert ran.code == 0, ran.err[-3000:]
    assert not _leaks(ran.out + ran.err), (ran.out + ran.err)[-3000:]


def test_a_trial_error_that_quotes_the_url_is_shown_masked(live):
    """The path a secret most plausibly takes into a record: a user's error message."""
    err = live[2]["run"].err
    assert "error: ConnectionError: the feature store beside postgresql+psycopg://postgres:***@" in err  # the progress line
    assert "?password=***&sslpassword=***" in err and "Traceback (most recent call last)" in err  # the worker's log


def test_no_secret_in_the_studys_database_or_any_file_written(live):
    url, tmp, _ = live
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            tables = sa.inspect(conn).get_table_names()
            rows = {table: conn.execute(sa.text(f'SELECT * FROM "{table}"')).fetchall() for table in tables}
    finally:
        engine.dispose()
    assert any("ConnectionError" in str(r) for r in rows["trial_user_attributes"])  # the error is recorded...
    assert {table: _leaks(str(found)) for table, found in rows.items() if _leaks(str(found))} == {}  # ...masked
    written = [p for p in tmp.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"best.yaml", "report.html", "space.yaml"}
    assert {str(p): _leaks(p.read_text(errors="replace")) for p in written if _leaks(p.read_text(errors="replace"))} == {}


@pytest.fixture(scope="module")
def failing(tmp_path_factory):
    """Every command at once against a server that refuses connections, the URL carrying a secret in
    every place libpq accepts one; in `$HPO_STORAGE` and in each flag a command takes."""
    tmp = tmp_path_factory.mktemp("failing")
    secret_url, space = _with_secrets("postgresql+psycopg://postgres@127.0.0.1:1/hpo"), str(_space(tmp))
    env = dict(ENV, HPO_STORAGE=secret_url)
    argvs = {
        "run": ["run", space, "--storage", secret_url],
        "worker": ["worker", "--study", "s"],
        "best": ["best", "--study", "s"],
        "export": ["export", "--study", "s", "-o", "best.yaml"],
        "report": ["report", "--study", "s", "-o", "report.html"],
        "enqueue": ["enqueue", "--study", "b", "--from-study", "a", "--from-storage", secret_url],
        "probe": ["probe", space, "--study", "p"],
        "doctor": ["doctor", "--study", "s"],
        "dashboard": ["dashboard", "--study", "s", "--port", str(free_port())],
    }
    procs = {name: _start(tmp, env, argv) for name, argv in argvs.items()}
    return {name: _finish(proc) for name, proc in procs.items()}


@pytest.mark.parametrize("command", ["run", "worker", "best", "export", "report", "enqueue", "probe", "doctor", "dashboard"])
def test_no_secret_in_the_error_of_a_command_whose_storage_fails(failing, command):
    ran = failing[command]
    assert ran.code == 3 and "Traceback" not in ran.err, ran.err[-3000:]
    masked = "storage postgresql+psycopg://postgres:***@127.0.0.1:1/hpo?password=***&sslpassword=***: cannot connect"
    assert ran.err.startswith(f"hpo {command}: error: {masked}"), ran.err
    assert not _leaks(ran.out + ran.err), ran.err


# One place at a time on the live study: (URL with {host} and {db} to fill, its secrets' cores
# joined by |, exit code). A URL libpq or SQLAlchemy cannot take is refused in one masked line.
PLACES = {
    "user part": ("postgres:Va1Pw@{host}/{db}", "Va1Pw", 0),
    "user part, percent-encoded @ : /": ("postgres:x%40Vb2Pw%3Ay%2Fz@{host}/{db}", "Vb2Pw", 0),
    "user part, raw : and /": ("postgres:x:Vc3Pw/z@{host}/{db}", "Vc3Pw", 0),
    "user part, raw @ (refused before connecting)": ("postgres:x@Vd4Pw@{host}/{db}", "Vd4Pw", 2),
    "?password=": ("postgres@{host}/{db}?password=Ve5Pw", "Ve5Pw", 0),
    "?sslpassword=": ("postgres@{host}/{db}?sslpassword=Vf6Pw", "Vf6Pw", 0),
    "?password= with a percent-encoded key": ("postgres@{host}/{db}?pass%77ord=Vg7Pw", "Vg7Pw", 0),
    "?password= with a percent-encoded value": ("postgres@{host}/{db}?password=Vh8Pw%26%3D", "Vh8Pw", 0),
    "hosts as SQLAlchemy lists them (?host= twice)": ("postgres:Vi9Pw@/{db}?host={host}&host={host}", "Vi9Pw", 0),
    "hosts as libpq lists them (host1:5432,host2: refused)": ("postgres:Vj0Pw@{host},{host}/{db}", "Vj0Pw", 2),
    "?token=": ("postgres@{host}/{db}?token=Vk1Pw", "Vk1Pw", 2),
    "?api_key=, ?secret=, ?access_key=": ("postgres@{host}/{db}?api_key=Vl2Pw&secret=Vl2Pw&access_key=Vl2Pw", "Vl2Pw", 2),
    "every place at once, with keys libpq refuses": (
        f"postgres:{USER_PART}@{{host}}/{{db}}?{QUERY}&{REJECTED}",
        "|".join(CORES),
        2,
    ),
}


@pytest.fixture(scope="module")
def one_place(live):
    """`hpo best --storage URL` on the live study, once per place, all at once."""
    url, tmp, _ = live
    host, db = url.split("@", 1)[1].rsplit("/", 1)
    procs = {}
    for name, (template, _cores, _code) in PLACES.items():
        storage = "postgresql+psycopg://" + template.format(host=host, db=db)
        procs[name] = _start(tmp, ENV, ["best", "--study", "secrets", "--storage", storage])
    return {name: _finish(proc) for name, proc in procs.items()}


@pytest.mark.parametrize("place", sorted(PLACES))
def test_a_secret_in_any_one_place_is_never_shown(one_place, place):
    ran, (_, cores, code) = one_place[place], PLACES[place]
    assert ran.code == code, ran.err
    if code == 0:
        assert ran.out.startswith("Pareto front of study 'secrets'") and "Traceback" not in ran.err
    else:
        assert ran.err.startswith("hpo best: error: storage postgresql+psycopg://postgres") and len(ran.err.splitlines()) == 1
    assert not _leaks(ran.out + ran.err, cores.split("|")), ran.err
