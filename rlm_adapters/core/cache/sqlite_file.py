"""The cache file: what makes a file ours, how a new one is made, and why another is refused.

A new file is created ``0600`` (SQLite gives its ``-wal`` and ``-shm`` files the same mode), stamped with
our ``application_id`` and schema version in one transaction, then switched to WAL. An existing file is
used only when it carries that stamp; anything else (a text file, another program's SQLite database, a
newer schema, a damaged table) is refused with a `CacheError` naming it, and never written to. So is a file
another user could have written: a symbolic link, a file (or ``-wal``/``-shm`` file) owned by another user or
writable by its group or anyone, since a planted reply of the root model is code the sandbox runs. An existing cache
readable by other users keeps its mode (its owner may share it on purpose) and is named in a warning.
Damage further in shows on a lookup: it fails (the call goes live) and a rolled-back write changes nothing.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import time
import urllib.parse

from rlm_adapters.errors import CacheError

logger = logging.getLogger("rlm_adapters.cache")

APPLICATION_ID = 0x524C4D43  # "RLMC" in the database header: this library's call cache
SCHEMA_VERSION = 1
# Files SQLite opens beside the cache by name: a planted one is a planted reply.
COMPANIONS = ("-wal", "-shm", "-journal")
COLUMNS = ("key", "text", "model", "input_tokens", "output_tokens", "cost", "stored_at")
SCHEMA = """
CREATE TABLE calls (
    key TEXT PRIMARY KEY NOT NULL,
    text TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cost REAL NOT NULL,
    stored_at REAL NOT NULL
) WITHOUT ROWID
"""


def connect(path: str, timeout: float) -> sqlite3.Connection:
    """A connection to an existing file (never creating one), in autocommit mode, waiting `timeout` s on locks.

    Every connection is one SQLite may recover a ``-wal`` (or roll back a ``-journal``) through, so the file's
    folder and companions are checked before each one (`check_files`), not only when the store opens.

    Raises:
        CacheError: when the folder or a companion file cannot be trusted.
    """
    check_files(path)
    uri = f"file:{urllib.parse.quote(path)}?mode=rw"
    connection = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=timeout, check_same_thread=False)
    connection.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    return connection


def explain(error: sqlite3.Error, path: str | None = None) -> str:
    """What an SQLite error says about the file at `path`, as the end of "the call cache PATH ...".

    SQLite reports a full disk as a full database or as a bare "disk I/O error" (the ``-shm`` file could not
    grow), and a read-only file system as "unable to open database file": the file system is asked which.
    """
    text = str(error)
    lowered = text.lower()
    trouble = ("full", "i/o error", "unable to open", "readonly", "read-only")
    if path is not None and any(word in lowered for word in trouble):
        where = _storage_trouble(path)
        if where is not None:
            return f"{where} ({text})"
    if "not a database" in lowered:
        return "is not an rlm-adapters call cache (not an SQLite database)"
    if "malformed" in lowered or "corrupt" in lowered:
        return f"is damaged ({text})"
    if "locked" in lowered or "busy" in lowered:
        return f"stayed locked by another process ({text})"
    if "readonly" in lowered or "read-only" in lowered:
        return f"cannot be written ({text})"
    return f"cannot be used ({text})"


def _storage_trouble(path: str) -> str | None:
    """Why the file system holding `path` takes no writes (read-only, full), or None when it does."""
    try:
        info = os.statvfs(os.path.dirname(path) or ".")
    except OSError:
        return None
    if info.f_flag & os.ST_RDONLY:
        return "cannot be written: it is on a read-only file system; pass cache= a file on a writable disk"
    if info.f_bavail == 0 or info.f_favail == 0:
        return "cannot be written: the disk it is on is full; free some space there"
    return None


def prepare(path: str, timeout: float) -> None:
    """Make `path` a usable call cache, creating it if needed; raise `CacheError` for any other file."""
    if os.path.isdir(path):
        raise CacheError(path, "is a folder, not a file")
    _refuse_link(path)
    _create(path)
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise CacheError(path, f"cannot be read ({exc.strerror})") from None
    _check_owner(path, info, "")
    blank = info.st_size == 0
    try:
        connection = connect(path, timeout)  # checks the folder and the companions first
    except sqlite3.Error as exc:
        raise CacheError(path, explain(exc, path)) from None
    try:
        _check_or_stamp(connection, path)
        mode = _use_wal(connection, timeout)
    except sqlite3.Error as exc:
        raise CacheError(path, explain(exc, path)) from None
    finally:
        connection.close()
    if str(mode).lower() != "wal":
        raise CacheError(path, f"cannot use SQLite's WAL journal here (it stays {mode!r}); put it on a local disk")
    if info.st_mode & 0o077:
        if blank:
            os.chmod(path, 0o600)  # an empty file got its first content from us: it gets our mode too
        else:
            logger.warning(
                "the call cache %s is readable by other users (mode %o): it holds model replies, which may quote "
                "your documents; chmod 600 it unless it is shared on purpose",
                path,
                stat.S_IMODE(info.st_mode),
            )


def _use_wal(connection: sqlite3.Connection, timeout: float) -> str:
    """Switch the file to WAL; the journal mode it ends in.

    SQLite answers a switch made while another connection reads the file with "locked" at once, without its
    busy timeout, so a second worker opening a new cache as the first stamps it would give up: wait here.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return str(connection.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower() or time.monotonic() > deadline:
                raise
        time.sleep(0.005)


def check_files(path: str) -> None:
    """Refuse a cache whose folder or companion files another user could have written; run before each connection.

    SQLite recovers any ``-wal`` it finds beside the file and rolls back a hot ``-journal``, and it opens them by
    name, following links and accepting any owner: a companion planted while no connection was open becomes the
    cache's content. So the file and each companion that exists must be a regular file of ours, not linked
    elsewhere, that nobody else can write. In a folder others can write, a companion that does not exist yet could
    be planted between this check and SQLite's open: such a folder is refused unless it is sticky (others can
    then add files but never replace ours), and there the companions are created here, empty and ours
    (``O_EXCL``), so that the names are taken before SQLite looks for them.

    Raises:
        CacheError: naming the file and what is wrong.
    """
    shared = _check_folder(path)
    try:
        _check_owner(path, os.lstat(path), "")
    except FileNotFoundError:
        raise CacheError(path, "was removed while in use") from None
    except OSError as exc:
        raise CacheError(path, f"cannot be read ({exc.strerror})") from None
    for suffix in COMPANIONS:
        _check_companion(path, suffix, create=shared)


def _check_folder(path: str) -> bool:
    """Whether others can add files to the cache's folder (which must then be sticky); refuse it otherwise."""
    folder = os.path.dirname(path) or "."
    try:
        info = os.stat(folder)
    except OSError as exc:
        raise CacheError(path, f"cannot be used: its folder cannot be read ({exc.strerror})") from None
    if hasattr(os, "geteuid") and info.st_uid not in (os.geteuid(), 0):
        raise CacheError(
            path,
            f"cannot be trusted: its folder belongs to another user (uid {info.st_uid}), who can replace the files "
            "SQLite reads beside it; put the cache in a folder of your own",
        )
    if not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return False
    if not info.st_mode & stat.S_ISVTX:
        raise CacheError(
            path,
            f"cannot be trusted: its folder can be written by others (mode {stat.S_IMODE(info.st_mode):o}, not "
            "sticky), who could plant a -wal file of replies the model would act on; put the cache in a folder "
            "of your own",
        )
    return True


def _check_companion(path: str, suffix: str, *, create: bool) -> None:
    """Check `path` + `suffix` if it exists (creating it empty and ours first when `create`)."""
    name = path + suffix
    nofollow = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    if create:
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | nofollow, 0o600))
            return
        except FileExistsError:
            pass  # someone's: checked below
        except OSError as exc:
            reason = _storage_trouble(path) or f"cannot be used: its {suffix} file cannot be created ({exc.strerror})"
            raise CacheError(path, reason) from None
    try:
        # O_NONBLOCK: a FIFO planted under the name must not hang the open.
        descriptor = os.open(name, os.O_RDONLY | os.O_NONBLOCK | nofollow)
    except FileNotFoundError:
        return
    except OSError as exc:
        if os.path.islink(name):
            raise CacheError(path, f"cannot be used: its {suffix} file is a symbolic link") from None
        raise CacheError(path, f"cannot be used: its {suffix} file cannot be read ({exc.strerror})") from None
    try:
        info = os.fstat(descriptor)
    finally:
        os.close(descriptor)
    _check_owner(path, info, suffix)
    if info.st_nlink > 1:
        raise CacheError(
            path, f"cannot be trusted: its {suffix} file has other names (hard links), through which it can change"
        )


def _refuse_link(path: str) -> None:
    """A symbolic link is refused: whoever can change it would choose which file we stamp and trust."""
    if os.path.islink(path):
        raise CacheError(path, f"is a symbolic link (to {os.readlink(path)!r}); pass the file itself")


def _check_owner(path: str, info: os.stat_result, suffix: str) -> None:
    """Refuse a file (or its `suffix` companion) that another user wrote or can write: its replies become code."""
    what = f"its {suffix} file " if suffix else ""
    if stat.S_ISLNK(info.st_mode):
        raise CacheError(path, f"cannot be used: {what}is a symbolic link")
    if not stat.S_ISREG(info.st_mode):
        raise CacheError(path, f"cannot be used: {what}is not a regular file" if suffix else "is not a regular file")
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        raise CacheError(
            path, f"cannot be trusted: {what}belongs to another user (uid {info.st_uid}); use a cache file of your own"
        )
    if info.st_mode & (stat.S_IWOTH | stat.S_IWGRP):
        # Group-writable too (a setgid team folder): any member could plant a reply, as runs.json is refused.
        who = "any user" if info.st_mode & stat.S_IWOTH else "its group"
        raise CacheError(
            path,
            f"cannot be trusted: {what}can be written by {who} (mode {stat.S_IMODE(info.st_mode):o}), who could "
            "plant replies the model would act on; chmod 600 it if you trust what it holds",
        )


def _create(path: str) -> bool:
    """Create `path` empty with mode 0600; False when it exists already."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for attempt in (1, 2):
        try:
            os.close(os.open(path, flags, 0o600))
            return True
        except FileExistsError:
            return False
        except FileNotFoundError:
            if attempt == 2:
                raise CacheError(path, "cannot be created (its folder is missing)") from None
            try:
                os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
            except OSError as exc:
                raise CacheError(path, f"cannot be created ({exc.strerror})") from None
        except OSError as exc:
            raise CacheError(path, _storage_trouble(path) or f"cannot be created ({exc.strerror})") from None
    return False  # not reached


def _is_blank(connection: sqlite3.Connection) -> bool:
    """An SQLite file with no stamp and nothing in it (a new file, or one whose first run was killed)."""
    application_id = connection.execute("PRAGMA application_id").fetchone()[0]
    tables = connection.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    return bool(application_id == 0 and tables == 0 and version == 0)


def _read_stamp(connection: sqlite3.Connection) -> tuple[bool, bool]:
    """Whether the file is ours, and whether it is blank, read in one snapshot.

    Read statement by statement, another process could stamp the file between the reads (no stamp yet, then a
    table) and a blank file would look like another program's database.
    """
    connection.execute("BEGIN")
    try:
        ours = connection.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        return ours, not ours and _is_blank(connection)
    finally:
        connection.execute("COMMIT")


def _check_or_stamp(connection: sqlite3.Connection, path: str) -> None:
    ours, blank = _read_stamp(connection)
    if not ours:
        if not blank:
            raise CacheError(path, "is not an rlm-adapters call cache (it is another SQLite database)")
        connection.execute("BEGIN IMMEDIATE")  # two processes may find the same blank file: one stamps it
        try:
            if _is_blank(connection):
                connection.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                connection.execute(SCHEMA)
            elif connection.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
                raise CacheError(path, "is not an rlm-adapters call cache (it is another SQLite database)")
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise CacheError(
            path, f"was written by a newer rlm-adapters (schema {version}; this one reads {SCHEMA_VERSION}): upgrade"
        )
    try:
        connection.execute(f"SELECT {', '.join(COLUMNS)} FROM calls LIMIT 0")
    except sqlite3.OperationalError:
        raise CacheError(path, "is damaged (its calls table is missing or changed)") from None
    if version < 1:
        raise CacheError(path, f"is damaged (schema version {version})")
