"""Reading the data a user points ``--data-dir`` at, and nothing it links to.

What is read here goes to a model (CodeQA's question files and contexts, OOLONG's exported rows), so a file
is read only when it is a regular file directly inside the folder: a symbolic link (it could lead to any
file of the host, ``~/.ssh/id_rsa`` say), a hard link (a file with more than one name: another may be
outside the folder), a FIFO, a device or a folder is refused in one line naming it. The
name is opened from the folder's descriptor with ``O_NOFOLLOW`` (and ``O_NONBLOCK``, so a FIFO cannot hang
the open), so an entry swapped for a link after it was listed is refused too.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from rlm_adapters.errors import ConfigurationError

_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _refused(path: Path, what: str, mode: int, links: int = 1) -> ConfigurationError:
    kind = "a symbolic link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
    if stat.S_ISREG(mode) and links > 1:
        kind = f"a hard link ({links} names share the file, one may be outside the folder)"
    return ConfigurationError(
        f"{what} {str(path)!r} is {kind}; --data-dir files must be regular files inside the folder (copy it in)"
    )


def present(folder: Path, name: str, what: str) -> bool:
    """True when `folder` holds a regular file `name`, False when it holds nothing of that name.

    Raises:
        ConfigurationError: when the entry is a link or anything but a regular file.
    """
    try:
        info = os.lstat(folder / name)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        raise _refused(folder / name, what, info.st_mode, info.st_nlink)
    return True


def read_text(folder: Path, name: str, what: str) -> str:
    """The UTF-8 text of the regular file `name` directly inside `folder`.

    Args:
        folder: The data folder (it may itself be a link: the user named it).
        name: A file name without a folder part.
        what: What the file is, for messages (``CodeQA context``).

    Raises:
        ConfigurationError: naming the file, when it is a link, not a regular file, unreadable or not UTF-8.
    """
    path = folder / name
    try:
        folder_fd = os.open(folder, _DIR_FLAGS)
    except OSError as exc:
        raise ConfigurationError(f"cannot open --data-dir {str(folder)!r}: {exc.strerror}") from None
    try:
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=folder_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _refused(path, what, stat.S_IFLNK) from None
            raise ConfigurationError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None
        try:
            info = os.fstat(fd)
            # A hard link is a second name of a file anywhere on the file system (~/.ssh/id_rsa), no link
            # to see: a file with more than one name is refused.
            if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
                raise _refused(path, what, info.st_mode, info.st_nlink)
            with os.fdopen(fd, "rb", closefd=False) as source:
                data = source.read()
        except OSError as exc:
            raise ConfigurationError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None
        finally:
            os.close(fd)
    finally:
        os.close(folder_fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"{what} {str(path)!r} is not UTF-8 text (byte {exc.start} is not)") from None
