"""One function that keeps secrets out of everything hpo shows or stores: `mask_secrets`.

A database password travels in more places than a URL's user part. libpq and SQLAlchemy also take
it from the query string (`?password=`, `?sslpassword=`), a libpq connection string carries it as
`password=...`, and other services put keys and tokens in parameters (`token=`, `api_key=`,
`X-Amz-Signature=`). Every line hpo prints or logs, every error message, traceback, dashboard note,
report and trial record that may hold such text goes through `mask_secrets` first.

It masks by shape, not by knowing the secret:
- the password of every `scheme://user:password@host` URL, up to the token's last `@` (a password
  holding a raw `@`, `:` or `/` is masked whole, as is a percent-encoded one);
- the value of every `key=value` whose key names a secret (`password`, `sslpassword`, `token`,
  `api_key`, `secret`, `access_key`, ..., percent-encoded or not, in a URL's query or a libpq
  connection string), bare or quoted (a bare value's last ':' before a space is read as prose:
  "storage URL: reason");
- the value of every `'key': 'value'` (a dict's repr, JSON) whose key names a secret.
A key that only names where a secret lives (`sslkey`, `passfile`: paths) is kept.

It sits below every layer, `hpo.logging` included, so the log handler masks every record.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["MASK", "is_secret_key", "mask_secrets"]

MASK = "***"

# The password of a URL: from the ':' after the user to the last '@' of the whitespace-free token,
# so a raw '@' in the password (which SQLAlchemy would misread as part of the host) is masked too.
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/\s]*:)(?P<secret>\S*)(?P<tail>@)")
# key=value, the value quoted as libpq quotes it, or bare: up to whitespace, &, ;, # or a quote, less
# a ':' that ends the word (prose, as in "storage URL: reason", where the URL was masked already).
_KEY_VALUE = re.compile(
    r"""(?P<head>(?P<key>(?<![\w%.-])[\w%.-]+)\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'|"[^"]*"|[^\s&;#'"]+?(?=:?(?:\s|$)|[&;#'"]))"""
)
# 'key': 'value' or "key": "value", as a dict's repr or JSON writes it.
_QUOTED_PAIR = re.compile(
    r"""(?P<head>(?P<q>['"])(?P<key>[\w%.-]+)(?P=q)\s*:\s*)(?P<secret>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
)

# A key names a secret when it contains one of these (lower case, '-' read as '_'), ends in "token"
# (`access_token`, `X-Amz-Security-Token`; not `tokenizer`), or is one of the short names below.
_SECRET_PARTS = ("password", "passwd", "passphrase", "secret", "credential", "signature")
_SECRET_PARTS += ("api_key", "apikey", "access_key", "accesskey", "private_key", "privatekey")
_SECRET_KEYS = frozenset({"pwd", "pass", "auth", "authorization", "key", "sig"})


def is_secret_key(key: str) -> bool:
    """Whether a parameter named `key` (percent-encoded or not) holds a secret: `password`,
    `sslpassword`, `token`, `api_key`, `X-Amz-Signature`, ...; not `sslkey` or `passfile` (paths)."""
    name = unquote(key).lower().replace("-", "_")
    return name in _SECRET_KEYS or name.endswith("token") or any(part in name for part in _SECRET_PARTS)


def mask_secrets(text: str) -> str:
    """`text` with every password, key and token replaced by `***` (see the module's docstring)."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{MASK}{m['tail']}", text)
    text = _KEY_VALUE.sub(_mask_if_secret, text)
    return _QUOTED_PAIR.sub(_mask_if_secret, text)


def _mask_if_secret(match: re.Match) -> str:
    if not is_secret_key(match["key"]):
        return match[0]
    secret = match["secret"]
    quote = secret[0] if secret[0] in "'\"" else ""
    return f"{match['head']}{quote}{MASK}{quote}"
