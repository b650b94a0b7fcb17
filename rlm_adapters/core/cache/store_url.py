"""Store URLs: which store a ``cache=`` string names, and how a message may show it (never its password); and
how a store's key (``rlm keys add``) begins.

Loads neither sqlite3 nor psycopg: the CLI reads a URL before it knows which store it needs, and the servers
tell a key from their token before they load the store.
"""

from __future__ import annotations

import re
import urllib.parse

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
SQLITE_PREFIX = "sqlite:///"
KEY_PREFIX = "rlmk_"
# A store named by URL (a file path with "://" in it is not one any user has).
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(spec: str) -> bool:
    """Whether `spec` is a URL (``scheme://...``) rather than a file path."""
    return _URL.match(spec) is not None


def is_postgres(spec: str) -> bool:
    """Whether `spec` names a PostgreSQL store."""
    return spec.startswith(POSTGRES_SCHEMES)


def shown_url(url: str) -> str:
    """`url` as messages may show it: without its password (in the user part or as ``?password=``)."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}@{host}"
    query = urllib.parse.urlencode(
        [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if k != "password"]
    )
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def url_password(url: str) -> str | None:
    """The password `url` holds (to scrub it from a driver's message), or None."""
    parts = urllib.parse.urlsplit(url)
    if parts.password:
        return urllib.parse.unquote(parts.password)
    return dict(urllib.parse.parse_qsl(parts.query)).get("password") or None


def password_flag_warning(prog: str, flag: str, url: str) -> str | None:
    """The line a command prints when `flag` gave a URL with its password in the process list (else None)."""
    if url_password(url) is None:
        return None
    return (
        f"{prog}: {flag} holds a password, which every local user can read in the process list; give it in "
        "PGPASSWORD or ~/.pgpass and leave it out of the URL"
    )
