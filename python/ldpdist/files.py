"""Writing output files: atomically, with ordinary permissions.

A file is written to a temporary name in the destination folder and renamed over the
destination, so a reader never sees a half-written file and an interrupted write leaves the
old one. The temporary file is created with mode 0666 minus the process umask — the
permissions of any file a command writes (specs are public by design; reports and states
hold only privatized data) — not the 0600 of ``tempfile.mkstemp``.

The ``ldpdist`` commands never overwrite silently (:func:`check_output`): an output that is
one of the command's inputs is refused whatever the spelling of its path (the same device and
inode: ``./x``, ``a/../x``, a symbolic or a hard link), even with ``--force``; an existing
output is refused unless ``--force`` is given; an output that exists and is not a regular
file (a directory, a device such as ``/dev/null``, a pipe) is refused. Without ``--force``
the write itself cannot replace a file created after the check either
(``overwrite=False``: the temporary file is hard-linked into place, which fails on an
existing name).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import IO, Any, Callable, Iterable, Optional, Union

__all__ = ["write_atomic", "write_atomic_with", "check_output", "same_file", "STDOUT"]

PathLike = Union[str, "os.PathLike[str]"]

#: The output name that means standard output (never a file).
STDOUT = "-"


def same_file(a: PathLike, b: PathLike) -> bool:
    """Whether ``a`` and ``b`` name one existing file (same device and inode, symbolic
    links followed): false when either does not exist."""
    try:
        first, second = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def _exists_message(path: str) -> str:
    return f"output exists: {path!r} (use --force to overwrite)"


def check_output(path: Optional[PathLike], inputs: Iterable[Optional[PathLike]] = (), *,
                 force: bool = False) -> None:
    """Refuse to write ``path`` when it would destroy something.

    * ``ValueError`` when ``path`` is one of ``inputs`` (the same file, however spelled:
      :func:`same_file`), whatever ``force``;
    * ``IsADirectoryError`` / ``ValueError`` when ``path`` exists and is a directory or
      not a regular file (a device, a pipe, a socket), whatever ``force``;
    * ``FileExistsError`` when ``path`` exists (a dangling symbolic link included) and
      ``force`` is false.

    ``None`` and ``"-"`` (standard output) are never refused; inputs that are ``None``,
    ``"-"`` or do not exist are skipped."""
    if path is None or os.fspath(path) == STDOUT:
        return
    path = os.fspath(path)
    for given in inputs:
        if given is None or os.fspath(given) == STDOUT:
            continue
        if same_file(path, given):
            also = "" if os.fspath(given) == path else f" (as {os.fspath(given)!r})"
            raise ValueError(f"output {path!r} is also an input{also}: writing it would "
                             "destroy the input; write to another file (--force does not "
                             "apply)")
    try:
        status = os.stat(path)
    except FileNotFoundError:
        if os.path.lexists(path) and not force:  # a dangling symbolic link
            raise FileExistsError(errno.EEXIST, _exists_message(path)) from None
        return
    except OSError:
        return  # e.g. a folder that cannot be searched: the write reports it
    if stat.S_ISDIR(status.st_mode):
        raise IsADirectoryError(errno.EISDIR, f"output {path!r} is a directory: give a file "
                                              "name")
    if not stat.S_ISREG(status.st_mode):
        raise ValueError(f"output {path!r} exists and is not a regular file (a device, a "
                         "pipe or a socket): give a file name (--force does not apply)")
    if not force:
        raise FileExistsError(errno.EEXIST, _exists_message(path))


def write_atomic(path: PathLike, data: bytes, *, overwrite: bool = True) -> None:
    """Write ``data`` to ``path`` atomically; ``OSError`` with a message naming the path.
    With ``overwrite=False`` an existing ``path`` is left as it is (``FileExistsError``)."""
    write_atomic_with(path, lambda handle: handle.write(data), overwrite=overwrite)


def _link_into_place(tmp: str, path: str) -> None:
    """Rename ``tmp`` to ``path`` unless ``path`` exists (atomically: a hard link, which fails
    on an existing name, then the temporary name removed). On a file system without hard
    links, a check followed by the rename."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise FileExistsError(errno.EEXIST, _exists_message(path)) from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK,
                             errno.EXDEV, errno.ENOSYS):
            raise
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, _exists_message(path)) from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def write_atomic_with(path: PathLike, fill: Callable[[IO[bytes]], Any], *,
                      overwrite: bool = True) -> None:
    """Like :func:`write_atomic`, with ``fill(handle)`` writing the contents (in pieces, for
    files larger than memory; it may seek). Any exception of ``fill`` removes the temporary
    file and propagates (``OSError`` is reworded to name the path)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"cannot write {path!r}: folder {folder!r} does not exist")
    for _attempt in range(100):
        tmp = os.path.join(folder, f".ldpdist-{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
        except OSError as exc:
            raise OSError(exc.errno, f"cannot write {path!r}: {exc.strerror}") from None
    else:  # pragma: no cover - 100 collisions of 48 random bits
        raise OSError(f"cannot write {path!r}: no free temporary name in {folder!r}")
    try:
        with os.fdopen(fd, "wb") as handle:
            fill(handle)
        if overwrite:
            os.replace(tmp, path)
        else:
            _link_into_place(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if not isinstance(exc, OSError) or isinstance(exc, FileExistsError):
            raise
        raise OSError(exc.errno, f"cannot write {path!r}: {exc.strerror or exc}") from None
