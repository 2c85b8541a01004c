"""`hpo.masking.mask_secrets`, the one function between a secret and any output: a password, key or
token in every place a URL, a libpq connection string or a dict can carry one. Each case names the
secret that must go and the text around it that must stay (a masker that blanks everything would
pass the first check alone). `tests/cli/test_no_secret_in_output.py` runs every command with them."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from hpo.app import cli
from hpo.errors import error_verdict, short_traceback
from hpo.logging import enable_propagation, get_logger, mask_library_logs
from hpo.masking import is_secret_key, mask_secrets

PG = "postgresql+psycopg"

CASES = {
    "userinfo": (f"{PG}://hpo:Zq7pw@db.example:5432/hpo", "Zq7pw", f"{PG}://hpo:***@db.example:5432/hpo"),
    "userinfo percent-encoded @ : /": (f"{PG}://hpo:a%40Zq7%3Ab%2Fc@db/hpo", "Zq7", f"{PG}://hpo:***@db/hpo"),
    "userinfo raw : and /": (f"{PG}://hpo:a:Zq7/b@db/hpo", "Zq7", f"{PG}://hpo:***@db/hpo"),
    "userinfo raw @ (to the last @)": (f"{PG}://hpo:a@Zq7@db/hpo", "Zq7", f"{PG}://hpo:***@db/hpo"),
    "user name holding @": (f"{PG}://me@corp:Zq7@db/hpo", "Zq7", f"{PG}://me@corp:***@db/hpo"),
    "libpq hosts": ("postgresql://hpo:Zq7@h1:5432,h2:5433/hpo", "Zq7", "postgresql://hpo:***@h1:5432,h2:5433/hpo"),
    "?password=": (f"{PG}://hpo@db/hpo?password=Zq7&application_name=w1", "Zq7", f"{PG}://hpo@db/hpo?password=***&application_name=w1"),
    "?sslpassword= beside sslkey": (f"{PG}://hpo@db/x?sslkey=/k/client.key&sslpassword=Zq7", "Zq7", f"{PG}://hpo@db/x?sslkey=/k/client.key&sslpassword=***"),
    "percent-encoded key": (f"{PG}://hpo@db/x?pass%77ord=Zq7", "Zq7", f"{PG}://hpo@db/x?pass%77ord=***"),
    "repeated hosts": (f"{PG}://hpo@/x?host=h1:5432&host=h2&password=Zq7", "Zq7", f"{PG}://hpo@/x?host=h1:5432&host=h2&password=***"),
    "token, api_key, secret, access_key": (
        "s3://b/k?token=Zq7a&api_key=Zq7b&secret=Zq7c&access_key=Zq7d&X-Amz-Signature=Zq7e&tokenizer=gpt2",
        "Zq7",
        "s3://b/k?token=***&api_key=***&secret=***&access_key=***&X-Amz-Signature=***&tokenizer=gpt2",
    ),
    "libpq connection string, quoted": ("host=db password='a b\\' Zq7' sslpassword=Zq7 user=hpo", "Zq7", "host=db password='***' sslpassword=*** user=hpo"),
    "a dict's repr": ("{'host': 'db', 'password': 'Zq7', \"token\": \"Zq7\"}", "Zq7", "{'host': 'db', 'password': '***', \"token\": \"***\"}"),
    "SQLAlchemy's repr, which hides only the user part": (f"Engine({PG}://hpo:***@db/x?password=Zq7)", "Zq7", f"Engine({PG}://hpo:***@db/x?password=***"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_place_a_secret_travels_is_masked_and_the_rest_kept(name):
    text, secret, masked = CASES[name]
    assert secret not in mask_secrets(text)
    assert mask_secrets(text) == masked
    assert mask_secrets(mask_secrets(text)) == masked  # masking twice changes nothing


@pytest.mark.parametrize(
    "text",
    [
        "sqlite:///studies/quickstart.db",
        f"{PG}://hpo@db.example:5432/hpo?hpo_pooler=transaction",
        'password authentication failed for user "hpo"',
        "http://127.0.0.1:8080/dashboard/studies/1",
        "trial #3 (4 of 8) complete [ok] 0.412 precision=bf16 attention=sdpa",
    ],
)
def test_text_without_a_secret_is_unchanged(text):
    assert mask_secrets(text) == text


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "sslpassword",
        "PASSWORD",
        "pass%77ord",
        "token",
        "access_token",
        "api-key",
        "client_secret",
        "X-Amz-Credential",
    ],
)
def test_keys_that_name_a_secret(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["sslkey", "sslcert", "passfile", "host", "user", "tokenizer", "max_tokens", "application_name"])
def test_keys_that_name_where_a_secret_lives_or_nothing_secret(key):
    assert not is_secret_key(key)


def test_every_record_of_an_hpo_logger_is_masked_for_any_handler(monkeypatch):
    """hpo's own handler, and an application's after `enable_propagation()`, see the record masked:
    its message, its %-arguments and its traceback."""
    stderr, seen = io.StringIO(), []
    monkeypatch.setattr(sys, "stderr", stderr)
    root = logging.getLogger()
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(logging.Formatter().format(record))
    root.addHandler(handler)
    monkeypatch.setattr(logging.getLogger("hpo"), "propagate", False)
    enable_propagation()
    try:
        log, url = get_logger("hpo.test_masking"), f"{PG}://hpo@db/x?password=Zq7"
        try:
            raise ConnectionError(f"lost {url}")
        except ConnectionError:
            log.warning("storage %s failed", f"{PG}://hpo:Zq7@db/x", exc_info=True)
    finally:
        root.removeHandler(handler)
    assert seen and "ConnectionError: lost" in seen[0] and "storage postgresql+psycopg://hpo:***@db/x failed" in seen[0]
    assert "Zq7" not in seen[0] and "Zq7" not in stderr.getvalue() and "***@db/x failed" in stderr.getvalue()


def test_a_module_that_took_logging_getlogger_is_masked_by_hpos_handler(monkeypatch):
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    get_logger("hpo")  # hpo's handler is configured
    logging.getLogger("hpo.workloads.some_module").warning(f"reading {PG}://hpo:Zq7@db/x")
    assert stderr.getvalue() == f"reading {PG}://hpo:***@db/x\n"


def test_an_internal_errors_traceback_is_masked(monkeypatch, capsys):
    """Exit 70 prints the traceback of a bug in hpo: a secret in its message (or a frame's line) is masked."""

    url = f"{PG}://hpo:Zq7@db/x?sslpassword=Zq7"

    def broken(args):
        raise RuntimeError(f"could not read {url}")

    monkeypatch.setitem(cli.COMMANDS, "best", broken)
    code = cli.main(["best", "--study", "s"])
    err = capsys.readouterr().err
    assert code == 70 and "Traceback (most recent call last)" in err and "RuntimeError: could not read" in err
    assert "Zq7" not in err and f"{PG}://hpo:***@db/x?sslpassword=***" in err


def test_a_librarys_own_handler_and_pythons_last_resort_are_masked(monkeypatch):
    """Optuna logs a failed trial's error with its traceback through its own handler."""
    stream = io.StringIO()
    library = logging.getLogger("some_library")
    handler = logging.StreamHandler(stream)
    monkeypatch.setattr(library, "handlers", [handler])
    monkeypatch.setattr(library, "propagate", False)
    mask_library_logs("some_library")
    url = f"{PG}://hpo:Zq7@db/x"
    try:
        raise ConnectionError(f"lost {url}")
    except ConnectionError:
        library.warning("Trial 0 failed with parameters: {'dsn': 'password=Zq7'}", exc_info=True)
    assert "Trial 0 failed with parameters: {'dsn': 'password=***'}" in stream.getvalue()
    assert "ConnectionError: lost" in stream.getvalue() and "Zq7" not in stream.getvalue()
    assert any(isinstance(f, type(handler.filters[0])) for f in logging.lastResort.filters)


def test_a_message_that_masks_its_url_then_is_masked_whole_keeps_its_shape():
    """`storage URL: reason` is masked where it is made and again when printed: the ':' stays."""
    line = f"storage {mask_secrets(f'{PG}://hpo@db/x?sslpassword=Zq7')}: cannot connect"
    assert mask_secrets(line) == line == f"storage {PG}://hpo@db/x?sslpassword=***: cannot connect"
    assert mask_secrets("password=Zq7:x: y") == "password=***: y"


def test_an_errors_verdict_and_traceback_are_masked_before_they_are_cut():
    """A verdict keeps 300 characters of the message: cut between the password and its '@', a
    masker run after the cut finds no URL and the password's start would be stored."""
    url = f"{PG}://hpo:Zq7{'x' * 40}@db/x"
    message = "." * 250 + " " + url  # the 300th character is in the password, past its first letters
    try:
        raise ConnectionError(message)
    except ConnectionError as exc:
        verdict, traceback = str(error_verdict(exc)), short_traceback(exc)
    assert verdict.startswith("error: ConnectionError: ...") and "Zq7" not in verdict
    assert "ConnectionError: ..." in traceback and "Zq7" not in traceback
