"""Cross-process wake-ups for the SQLite store: a datagram per commit, no polling.

Every process waiting on a store file binds a Unix datagram socket in a folder named after
the file (under the temp folder, private to the user: the path of a store can be longer than
a socket path may be). After each commit that added events, the writer sends the new last
seq to every socket in that folder: a few microseconds per listener, nothing when nobody
waits. A socket whose process died refuses the datagram and is removed. Waiters still look at
the file on a slow safety-net interval, for writers that do not ring (other tools, other
users, platforms without Unix sockets).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import itertools
import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

SUPPORTED = hasattr(socket, "AF_UNIX") and os.name == "posix"
_ids = itertools.count()


def channel_dir(db_path: str) -> Path:
    key = hashlib.sha256(os.path.realpath(db_path).encode()).hexdigest()[:20]
    return Path(tempfile.gettempdir()) / f"clawtower-wake-{os.getuid()}" / key


class WakeChannel:
    """Ring the other processes that wait on one store file, and be rung by them."""

    def __init__(self, db_path: str) -> None:
        self.dir = channel_dir(db_path)
        self._sender: socket.socket | None = None
        self._listener: socket.socket | None = None
        self._name = ""
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def listening(self) -> bool:
        return self._listener is not None

    def listen(self, on_seq: Callable[[int], None]) -> bool:
        """Bind this process's socket and call `on_seq(seq)` on the loop for each ring.
        False when the platform or the folder does not allow it (then waiters poll)."""
        if self._listener is not None:
            return True
        if not SUPPORTED:
            return False
        loop = asyncio.get_running_loop()
        name = f"{os.getpid()}-{next(_ids)}"
        path = self.dir / name
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        for last in (False, True):  # the folder may go between its mkdir and the bind
            try:
                self.dir.parent.mkdir(mode=0o700, exist_ok=True)
                self.dir.mkdir(mode=0o700, exist_ok=True)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                sock.bind(str(path))
                break
            except FileNotFoundError:
                if last:  # pragma: no cover - removed twice in a row by closing peers
                    sock.close()
                    return False
            except OSError:
                sock.close()
                return False

        def readable() -> None:
            newest = 0
            while True:
                try:
                    data = sock.recv(64)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    break
                with contextlib.suppress(ValueError):
                    newest = max(newest, int(data))
            if newest:
                on_seq(newest)

        loop.add_reader(sock.fileno(), readable)
        self._listener, self._name, self._loop = sock, name, loop
        return True

    def ring(self, seq: int) -> None:
        """Tell every other listener on this file that `seq` is committed."""
        try:
            names = os.listdir(self.dir)
        except OSError:
            return  # nobody has ever waited on this file
        if not names or names == [self._name]:
            return
        if self._sender is None:
            self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sender.setblocking(False)
        data = str(seq).encode()
        for name in names:
            if name == self._name:
                continue
            path = self.dir / name
            try:
                self._sender.sendto(data, str(path))
            except OSError as exc:
                if exc.errno in (errno.ECONNREFUSED, errno.ENOTSOCK):  # its process is gone
                    with contextlib.suppress(OSError):
                        path.unlink()
                # EAGAIN: its queue is full of rings it has not read yet; it will wake anyway

    def close(self) -> None:
        if self._listener is not None:
            if self._loop is not None and not self._loop.is_closed():
                with contextlib.suppress(Exception):
                    self._loop.remove_reader(self._listener.fileno())
            self._listener.close()
            with contextlib.suppress(OSError):
                (self.dir / self._name).unlink()
            with contextlib.suppress(OSError):  # the last listener takes the folder with it
                self.dir.rmdir()  # (one per store file ever waited on, under the temp folder)
            self._listener = None
        if self._sender is not None:
            self._sender.close()
            self._sender = None
