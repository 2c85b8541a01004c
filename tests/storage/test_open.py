"""Opening a storage: only `hpo run` creates one; connection problems are one-line user errors
without the password; heartbeats are configurable."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from hpo.errors import UserInputError
from hpo.masking import mask_secrets
from hpo.storage import liveness, open_storage


def test_reading_a_missing_sqlite_file_does_not_create_it(tmp_path):
    path = tmp_path / "nope" / "study.db"
    with pytest.raises(UserInputError, match="no such file"):
        open_storage(f"sqlite:///{path}")
    assert not path.parent.exists()


def test_reading_an_empty_server_database_writes_nothing(postgres_url):
    with pytest.raises(UserInputError, match="holds no Optuna studies"):
        open_storage(postgres_url)
    engine = sa.create_engine(postgres_url)
    assert sa.inspect(engine).get_table_names() == []
    engine.dispose()


def test_creating_makes_optuna_tables(postgres_url):
    open_storage(postgres_url, create=True).engine.dispose()
    storage = open_storage(postgres_url)  # and now it opens for reading
    assert liveness(storage) == (10, 30)
    storage.engine.dispose()


def test_heartbeat_and_grace_period_come_from_the_environment(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    monkeypatch.setenv("HPO_HEARTBEAT_INTERVAL", "2")
    monkeypatch.setenv("HPO_GRACE_PERIOD", "7")
    assert liveness(open_storage(url, create=True)) == (2, 7)
    monkeypatch.setenv("HPO_GRACE_PERIOD", "2")
    with pytest.raises(UserInputError, match=r"HPO_GRACE_PERIOD \(2\) must be larger than HPO_HEARTBEAT_INTERVAL \(2\)"):
        open_storage(url)
    monkeypatch.setenv("HPO_GRACE_PERIOD", "soon")
    with pytest.raises(UserInputError, match="HPO_GRACE_PERIOD must be a whole number of seconds >= 1, got 'soon'"):
        open_storage(url)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("postgresql+psycopg://postgres:s3cret@127.0.0.1:5432/hpo_no_such_db", "create the database first"),
        ("postgresql+psycopg://postgres:s3cret@127.0.0.1:1/x", "cannot connect"),
        ("mysql+pymysql://root:s3cret@127.0.0.1:3306/mysql", "authentication failed"),
        ("nosuchdb://user:s3cret@host/x", "not a database URL"),
    ],
)
def test_connection_errors_are_one_masked_line(url, reason):
    with pytest.raises(UserInputError) as caught:
        open_storage(url, create=True)
    message = str(caught.value)
    assert reason in message and "\n" not in message
    assert "s3cret" not in message and ":***@" in message


@pytest.mark.parametrize("create", [True, False])
def test_a_raw_at_sign_in_the_password_is_refused_before_connecting_without_showing_any_of_it(create):
    """SQLAlchemy would read `ss@127.0.0.1` as the host, and the driver's error would quote it."""
    with pytest.raises(UserInputError) as caught:
        open_storage("postgresql+psycopg://postgres:pa@ss@127.0.0.1:5432/hpo", create=create)
    message = str(caught.value)
    assert message.startswith(
        "storage postgresql+psycopg://postgres:***@127.0.0.1:5432/hpo: its user name or password holds a raw '@'"
    )
    assert "%40" in message and "pa@" not in message and "ss@" not in message


def test_libpqs_list_of_hosts_is_refused_with_sqlalchemys_spelling():
    with pytest.raises(UserInputError) as caught:
        open_storage("postgresql+psycopg://postgres:s3cret@10.0.0.1:5432,10.0.0.2:5432/hpo")
    message = str(caught.value)
    assert message.startswith("storage postgresql+psycopg://postgres:***@10.0.0.1:5432,10.0.0.2:5432/hpo: SQLAlchemy reads")
    assert "?host=HOST1:PORT&host=HOST2:PORT" in message and "s3cret" not in message


def test_mask_secrets_masks_every_url_in_a_text():
    text = "a postgresql+psycopg://u:p%40ss@h:5/db and mysql+pymysql://root:x@h/db, sqlite:///a.db"
    assert mask_secrets(text) == "a postgresql+psycopg://u:***@h:5/db and mysql+pymysql://root:***@h/db, sqlite:///a.db"


@pytest.mark.parametrize("url", ["grpc://127.0.0.1:13000", "GRPC://u:s3cret@proxy:13000/x"])
def test_a_grpc_proxy_url_is_refused_with_the_supported_path(url):
    with pytest.raises(UserInputError) as caught:
        open_storage(url)
    message = str(caught.value)
    assert "gRPC storage proxy is not supported" in message and "hpo_pooler=transaction" in message
    assert "\n" not in message and "s3cret" not in message
