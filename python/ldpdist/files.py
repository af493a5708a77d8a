"""Writing output files: atomically, with ordinary permissions.

A file is written to a temporary name in the destination folder and renamed over the
destination, so a reader never sees a half-written file and an interrupted write leaves the
old one. The temporary file is created with mode 0666 minus the process umask — the
permissions of any file a command writes (specs are public by design; reports and states
hold only privatized data) — not the 0600 of ``tempfile.mkstemp``.
"""

from __future__ import annotations

import os
from typing import IO, Any, Callable, Union

__all__ = ["write_atomic", "write_atomic_with"]


def write_atomic(path: Union[str, "os.PathLike[str]"], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically; ``OSError`` with a message naming the path."""
    write_atomic_with(path, lambda handle: handle.write(data))


def write_atomic_with(path: Union[str, "os.PathLike[str]"],
                      fill: Callable[[IO[bytes]], Any]) -> None:
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
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if not isinstance(exc, OSError):
            raise
        raise OSError(exc.errno, f"cannot write {path!r}: {exc.strerror or exc}") from None
