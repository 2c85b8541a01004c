"""A private PostgreSQL cluster, and a PgBouncer in front of it, for one benchmark run.

The benchmark needs a server whose `max_connections` it chooses (50, below the default 100), and
the host's shared PostgreSQL must not be reconfigured under other clients. So this starts its own
cluster in a temporary folder (`initdb`, then `pg_ctl start` on a port of its own) and a PgBouncer
in transaction mode in front of it, and stops and removes both afterwards. As root, both run as the
`postgres` user: PostgreSQL and PgBouncer refuse to run as root.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PrivateServer", "PrivateServerConfig", "private_postgres"]

USER = "postgres"


@dataclass(frozen=True, kw_only=True)
class PrivateServerConfig:
    max_connections: int = 50
    port: int = 5442
    bouncer_port: int = 6442
    pool_size: int = 20  # PgBouncer's server connections per database: what PostgreSQL sees
    # PgBouncer disconnects a client that waited this long for a server connection (its default:
    # 120 s). 0 waits: hundreds of workers on one overloaded core queue longer than that.
    query_wait_timeout_s: int = 0


@dataclass(frozen=True)
class PrivateServer:
    admin_url: str  # the superuser's database on the private server, directly
    pooler: str  # host:port of its PgBouncer
    max_connections: int


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [shutil.which(name)]
    if not found[-1]:
        raise FileNotFoundError(f"{name} not found: install PostgreSQL's server package (Debian: postgresql)")
    return found[-1]


def _as_owner(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", USER, "--", *cmd] if os.geteuid() == 0 else cmd


def _bouncer_ini(folder: Path, config: PrivateServerConfig) -> Path:
    ini = folder / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"* = host=127.0.0.1 port={config.port} user={USER}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {config.bouncer_port}\nunix_socket_dir =\n"
        f"auth_type = any\nauth_user = {USER}\npool_mode = transaction\nmax_client_conn = 5000\n"
        f"default_pool_size = {config.pool_size}\nmax_db_connections = {config.pool_size}\n"
        f"query_wait_timeout = {config.query_wait_timeout_s}\n"
        "server_reset_query =\nignore_startup_parameters = extra_float_digits,options\n"
        f"logfile = {folder}/pgbouncer.log\npidfile = {folder}/pgbouncer.pid\n"
    )
    return ini


def _wait_ready(port: int, what: str, log: Path) -> None:
    for _ in range(60):
        if subprocess.run([_bin("pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)]).returncode == 0:
            return
        time.sleep(0.5)
    raise RuntimeError(f"{what} did not start on 127.0.0.1:{port} within 30 s (see {log})")


@contextlib.contextmanager
def private_postgres(config: PrivateServerConfig | None = None) -> Iterator[PrivateServer]:
    config = config or PrivateServerConfig()
    folder = Path(tempfile.mkdtemp(prefix="hpo-bench-pg-"))
    data = folder / "data"
    if os.geteuid() == 0:
        shutil.chown(folder, USER)
    started_pg = False
    try:
        subprocess.run(
            _as_owner([_bin("initdb"), "-D", str(data), "-A", "trust", "-U", USER, "--no-sync"]), check=True, capture_output=True
        )
        options = f"-p {config.port} -c max_connections={config.max_connections} -c listen_addresses=127.0.0.1 -k {folder}"
        pg_ctl = [_bin("pg_ctl"), "-D", str(data), "-l", str(folder / "postgres.log"), "-o", options, "-w", "start"]
        subprocess.run(_as_owner(pg_ctl), check=True, capture_output=True)
        started_pg = True
        ini = _bouncer_ini(folder, config)
        if os.geteuid() == 0:
            shutil.chown(ini, USER)
        subprocess.run(_as_owner([_bin("pgbouncer"), "-d", str(ini)]), check=True, capture_output=True)
        _wait_ready(config.bouncer_port, "PgBouncer", folder / "pgbouncer.log")
        yield PrivateServer(
            f"postgresql+psycopg://{USER}@127.0.0.1:{config.port}/postgres",
            f"127.0.0.1:{config.bouncer_port}",
            config.max_connections,
        )
    finally:
        _stop_bouncer(folder / "pgbouncer.pid")
        if started_pg:
            subprocess.run(_as_owner([_bin("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]), capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def _stop_bouncer(pidfile: Path) -> None:
    """SIGTERM to the PgBouncer this module started (its own pid file names it)."""
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
