"""Shared fixtures: a fast toy config, global torch state reset, and storages to run against; tests
that use a database server's fixture are marked for it (`postgres`, `mysql`), so the fast layer
(`scripts/test --fast`) can leave them out."""

from __future__ import annotations

import os
import time
import uuid

import pytest
import torch

os.environ.setdefault("KINETO_LOG_LEVEL", "5")
# No test downloads: hpo honours HF_HUB_OFFLINE (hpo.workloads.options.hf_models), so a hub id missing
# from the cache is refused in one line instead. A test of the online path unsets it and fakes the Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# pytest-xdist workers share the cores, as `hpo run`'s CPU workers do (hpo/runtime/_workers.py):
# each worker's torch otherwise starts a thread per core, and on CI's 2 workers x 2 threads on 2
# cores OpenMP's spinning threads stretched a 4 ms step to 700 ms, which the timing tests read as
# the knobs' speed. Children started by the tests inherit the setting through OMP_NUM_THREADS.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ and "OMP_NUM_THREADS" not in os.environ:
    _threads = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ["OMP_NUM_THREADS"] = str(_threads)
    torch.set_num_threads(_threads)

from hpo.config.trial import Knobs, TrainingConfig, TrialConfig
from hpo.storage import _pools as pools

TOY = "toy_workloads:Toy"


def toy_config(
    knobs: Knobs | None = None,
    *,
    max_steps: int = 6,
    eval_every: int = 3,
    seed: int = 0,
    compile_backend: str = "eager",
    **options,
) -> TrialConfig:
    return TrialConfig(
        workload=TOY,
        workload_options=options,
        training=TrainingConfig(
            lr=3e-3, batch_size=16, max_steps=max_steps, eval_every=eval_every, compile_backend=compile_backend
        ),
        knobs=knobs or Knobs(precision="fp32", attention="eager", optimizer="forloop"),
        seed=seed,
        objectives=("val_loss",),
        directions=("minimize",),
        device="cpu",
        # Knob tests must not depend on this machine's speed (bf16 is emulated on some CPUs here).
        skip_slow=False,
    )


@pytest.fixture(autouse=True, scope="session")
def _never_the_users_machine_facts(tmp_path_factory):
    """A store of this machine's facts for the session, before any module-scoped fixture runs: the
    per-test one below is set up after those, and a module fixture's `hpo probe` subprocess wrote
    its fp16 verdict into ~/.cache/hpo/machine-facts."""
    saved = os.environ.get("HPO_MACHINE_FACTS")
    os.environ["HPO_MACHINE_FACTS"] = str(tmp_path_factory.getbasetemp() / "machine-facts-session")
    yield
    if saved is None:
        os.environ.pop("HPO_MACHINE_FACTS", None)
    else:
        os.environ["HPO_MACHINE_FACTS"] = saved


@pytest.fixture(autouse=True)
def _own_machine_facts(tmp_path_factory):
    """Each test its own empty store of this machine's facts (`hpo.verify.stored._machine_facts`), never the
    user's: a fact one test proved would otherwise spare another test's probe. Made when written.
    Not through `monkeypatch`: an autouse fixture that requests it would set it up before a test
    module's own autouse fixtures, so its undo would come after their teardown, and a teardown
    that reads something the test patched would still see the patch."""
    saved = os.environ.get("HPO_MACHINE_FACTS")
    os.environ["HPO_MACHINE_FACTS"] = str(tmp_path_factory.getbasetemp() / f"machine-facts-{uuid.uuid4().hex}")
    yield
    if saved is None:
        os.environ.pop("HPO_MACHINE_FACTS", None)
    else:
        os.environ["HPO_MACHINE_FACTS"] = saved


@pytest.fixture(autouse=True)
def _no_database_connection_left_held():
    """No test may end with a database connection still checked out in this process: the thread
    that holds one holds the process's turn (`hpo.storage._pools`), and every other thread of every
    later test in this pytest process then waits `WAIT_S` for it. On CI an in-process worker's
    heartbeat thread waited so twice (60 s each) behind a turn an earlier test left held, and its
    heartbeats failed. A thread the test started may still be returning one: it gets a moment."""
    yield
    deadline = time.monotonic() + 2.0
    while pools.connections_held_by_this_process() and time.monotonic() < deadline:
        time.sleep(0.01)
    held = pools.connections_held_by_this_process()
    if held:
        pools._TURN.forget_in_forked_child()  # later tests start from an empty turn, not behind this one
        pytest.fail(f"the test left {held} database connection(s) checked out in this process (hpo.storage._pools)")


@pytest.fixture(autouse=True)
def _restore_torch_state():
    """Tests must not leak global torch state into each other (litgpt does the same)."""
    saved = (torch.get_default_dtype(), torch.is_grad_enabled(), torch.backends.cudnn.benchmark)
    yield
    torch.set_default_dtype(saved[0])
    torch.set_grad_enabled(saved[1])
    torch.backends.cudnn.benchmark = saved[2]
    torch._dynamo.reset()


# ---- markers ---------------------------------------------------------------------------------

# Fixtures that need a server, by the marker that names it. `storage_url` is marked per parameter.
SERVER_FIXTURES = {"postgres_url": "postgres", "pgbouncer_url": "postgres", "postgres_or_pgbouncer_url": "postgres"}


# Names whose use means a test starts a child Python (hpo, a script, pytest): each child imports
# torch, which costs seconds, so these stay out of the fast layer.
SPAWNS = {"subprocess", "Popen", "executable"}


def _names_used(function, depth: int = 2) -> set[str]:
    """Global names a test's code uses, and those of the module's helpers it calls (two levels)."""
    code = getattr(function, "__code__", None)
    if code is None:
        return set()
    codes, names = [code], set()
    while codes:
        current = codes.pop()
        names.update(current.co_names)
        codes.extend(c for c in current.co_consts if hasattr(c, "co_names"))
    if depth:
        for name in list(names):
            helper = function.__globals__.get(name)
            if callable(helper) and getattr(helper, "__module__", None) == function.__module__:
                names |= _names_used(helper, depth - 1)
    return names


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SPAWNS & _names_used(getattr(item, "function", None)):
            item.add_marker("subprocess")
        servers = {SERVER_FIXTURES[name] for name in item.fixturenames if name in SERVER_FIXTURES}
        storage = getattr(item, "callspec", None) and item.callspec.params.get("storage_url")
        if storage in ("postgres", "mysql"):
            servers.add(storage)
        for server in sorted(servers):
            item.add_marker(server)


# ---- storages -------------------------------------------------------------------------------

POSTGRES_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
MYSQL_ADMIN = "mysql+pymysql://root@127.0.0.1:3306/"


def _require(kind: str, reason: str):
    if os.environ.get("HPO_REQUIRE_POSTGRES") and kind == "postgres":
        pytest.fail(f"PostgreSQL is required in CI but unusable: {reason}")
    pytest.skip(f"{kind} unavailable: {reason}")


def _fresh_database(admin_url: str, kind: str) -> tuple[str, callable]:
    import sqlalchemy as sa

    name = f"hpo_test_{uuid.uuid4().hex[:10]}"
    try:
        engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {name}"))
    except Exception as exc:  # noqa: BLE001 - any failure means the server is not usable
        _require(kind, str(exc).splitlines()[0])
    base = admin_url.rsplit("/", 1)[0]

    def drop() -> None:
        with engine.connect() as conn:
            if kind == "postgres":
                conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            else:
                conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
        engine.dispose()

    return f"{base}/{name}", drop


@pytest.fixture
def postgres_url():
    url, drop = _fresh_database(POSTGRES_ADMIN, "postgres")
    yield url
    drop()


PGBOUNCER = "127.0.0.1:6432"  # .ci/run starts it in transaction-pooling mode in front of 5432


@pytest.fixture
def pgbouncer_url(postgres_url):
    """A fresh PostgreSQL database reached through PgBouncer (transaction pooling), with the URL
    option that tells hpo so. Fails, not skips, in CI (HPO_REQUIRE_POSTGRES) when it is not running."""
    import socket

    try:
        socket.create_connection(tuple(PGBOUNCER.split(":")), timeout=2).close()
    except OSError as exc:
        _require("postgres", f"PgBouncer on {PGBOUNCER}: {exc} (.ci/run starts it)")
    return postgres_url.replace("127.0.0.1:5432", PGBOUNCER) + "?hpo_pooler=transaction"


@pytest.fixture(params=["postgres", "pgbouncer"])
def postgres_or_pgbouncer_url(request, postgres_url):
    """The same test on PostgreSQL directly and through PgBouncer."""
    return postgres_url if request.param == "postgres" else request.getfixturevalue("pgbouncer_url")


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def storage_url(request, tmp_path):
    """The same test over every RDB storage, as Optuna's own storage tests do."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'study.db'}"
        return
    admin = POSTGRES_ADMIN if request.param == "postgres" else MYSQL_ADMIN
    url, drop = _fresh_database(admin, request.param)
    yield url
    drop()


@pytest.fixture
def one_torch_thread():
    """Timing tests run torch on one thread: with two OpenMP threads on two cores that neighbours
    also want, barrier spinning stretched a 4 ms Toy step to ~900 ms (seen with two CPU hogs
    beside a test), a slowdown no injected fault outgrows; one thread only waits its turn."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def judged_despite_noise(prove):
    """`prove()` (a proof, a probe or a trial), asked again at most four times while its reference was too
    noisy to judge against, or too few of its pairs of steps lost to rule out noise (`not judged`,
    by design): on a 2-core host running two test workers, the reference's fastest steps read
    26-136% apart. A value never proven slow still fails."""
    for _ in range(5):
        result = prove()
        attrs = getattr(result, "attrs", None) or {}  # a trial's outcome records it among its attrs
        why = (
            getattr(result, "not_judged", None) or getattr(result, "slow_not_judged", None) or attrs.get("slow_not_judged") or ""
        )
        if "reference spread" not in why and not why.startswith("not proven slow"):
            return result
    return result


def slow_foreach_adamw(monkeypatch, seconds: float) -> None:
    """Fault: AdamW's foreach path sleeps `seconds` more per step, its for-loop path (the
    reference's) does not. A sleep is a slowdown that load on a busy machine cannot shorten."""
    original = torch.optim.AdamW.step

    def step(self, *args, **kwargs):
        if self.param_groups[0].get("foreach"):
            time.sleep(seconds)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
