"""`hpo dashboard`: optuna-dashboard on one study's storage, with hpo's input rules.

optuna-dashboard's own `run_server` binds inside and lets a bad port surface as a traceback
(`OverflowError`, `OSError: Address already in use`). Here the socket is bound first, so a bad port
is one line and exit 2 before anything starts, and the WSGI app is served by a threading server
that a Ctrl-C stops cleanly. The dashboard opens the storage like every reader of hpo: no table
creation, and SQLite waits for a writer's lock (workers may still be writing) instead of failing.
"""

from __future__ import annotations

import errno
import signal
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from hpo import deps
from hpo.errors import UserInputError
from hpo.logging import get_logger
from hpo.masking import mask_secrets
from hpo.storage import load_study_or_none, open_storage, study_id_of

_log = get_logger(__name__)

__all__ = ["serve_dashboard", "study_url"]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow browser request never holds up Ctrl-C


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:
        pass  # one line per HTTP request would bury the URL the user needs


def check_port(port: int) -> None:
    if not 1 <= port <= 65535:
        raise UserInputError(f"--port must be between 1 and 65535, got {port}")


def study_url(host: str, port: int, study_id: int | None) -> str:
    base = f"http://{host}:{port}/dashboard"
    return base if study_id is None else f"{base}/studies/{study_id}"


def serve_dashboard(storage_url: str, study_name: str | None, host: str, port: int) -> None:
    """Serve until Ctrl-C. Raises UserInputError for a bad port, host, storage or study name."""
    check_port(port)
    dashboard = deps.optuna_dashboard()
    storage = open_storage(storage_url)
    study_id = None if study_name is None else _study_id(storage, study_name, storage_url)
    server = _bound_server(host, port, dashboard.wsgi(storage))
    _log.info(f"optuna-dashboard for {mask_secrets(storage_url)}: {study_url(host, port, study_id)}")
    _serve_until_interrupted(server)


def _study_id(storage, study_name: str, storage_url: str) -> int:
    study = load_study_or_none(storage, study_name)
    if study is None:
        raise UserInputError(f"study {study_name!r} not found in {mask_secrets(storage_url)}")
    return study_id_of(study)


def _bound_server(host: str, port: int, app) -> WSGIServer:
    """The server, its socket bound: a port in use or a bad host is one line, before anything is served."""
    try:
        return make_server(host, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler)
    except OSError as exc:
        reason = "already in use; choose another with --port" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
        raise UserInputError(f"cannot listen on {host}:{port}: {reason}") from None


def _serve_until_interrupted(server: WSGIServer) -> None:
    # A process a shell started in the background inherits SIGINT ignored, and Python then never
    # raises KeyboardInterrupt: Ctrl-C (or `kill -INT`) must still stop the dashboard.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        _log.info("dashboard stopped")
    finally:
        server.server_close()
