"""One process owns a DATA_DIR: an exclusive OS lock on `DATA_DIR/atelier.lock`.

The embedded run engine executes runs in the process that accepted them, and at
start-up (and every few seconds after) restarts the runs it finds pending or
running that it is not executing, taking them for runs a stopped process left
behind. Two processes executing runs of one DATA_DIR would therefore restart each
other's runs. Whatever opens the embedded engine (`atelier serve`, `atelier run`)
owns the directory first: `own_data_dir` takes a non-blocking `flock` on the lock
file, or says which process holds it.

The lock belongs to the open file, so the OS releases it when the owner closes it or
dies in any way (a SIGKILL included), and a stale file never blocks anyone. The file
is never deleted (deleting it would let a newcomer lock a fresh file while the owner
still holds the old one); it holds the owner's pid and what it is, for the message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

#: The lock file's name inside DATA_DIR.
LOCK_FILE = "atelier.lock"


class DataDirInUse(RuntimeError):
    """Another process owns the DATA_DIR (it holds the lock on its lock file)."""

    def __init__(self, data_dir: Path, owner: str) -> None:
        """Name the directory and its owner as the lock file describes it.

        Args:
            data_dir: The directory.
            owner: The owner's line from the lock file, "PID WHAT" (empty when the
                owner has not written it yet).
        """
        pid, _, what = owner.partition(" ")
        self.data_dir = data_dir
        self.pid = int(pid) if pid.isdigit() else None
        self.what = what.strip()
        holder = f"process {self.pid}" if self.pid is not None else "another process"
        if self.what:
            holder += f" ({self.what})"
        super().__init__(f"DATA_DIR {data_dir} is in use by {holder}")


@contextlib.contextmanager
def own_data_dir(data_dir: Path, what: str = "atelier") -> Iterator[Path]:
    """Own `data_dir` for the block: hold an exclusive lock on its lock file.

    Args:
        data_dir: The DATA_DIR (created when missing).
        what: What this process is ("atelier serve", "atelier run"), named to
            whoever is refused.

    Yields:
        The lock file's path.

    Raises:
        DataDirInUse: Another process (or another open of the file in this one)
            holds the lock.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / LOCK_FILE
    # Not inherited by children (Python opens files close-on-exec): an embedded model
    # server this process starts must not keep the directory owned after it died.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirInUse(data_dir, _read_owner(fd)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {what}\n".encode(), 0)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _read_owner(fd: int) -> str:
    """Return the owner's line of a locked lock file (empty when it wrote none yet)."""
    return os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()


__all__ = ["LOCK_FILE", "DataDirInUse", "own_data_dir"]
