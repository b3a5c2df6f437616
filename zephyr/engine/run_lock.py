"""One run at a time per scratch directory and per output directory.

Two runs started from one working folder share `./.zephyr/scratch`; when they run the same pipeline they
share its checkpoint directory too, and the first to finish deletes what the other is still reading
(`FileNotFoundError .../runs/run-00000.arrow`). Two runs writing into one output folder overwrite each
other's shards. So a run takes a lock file in its checkpoint directory and in each local output folder
(`.zephyr-run.lock`, hidden: readers skip it) and a second run says in one line who holds it. A lock left
by a run that died (its process is gone, same host) is taken over: the new run resumes from the
checkpoints. Object stores have no exclusive create, so only local (file://) locations are locked.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator, Sequence

from zephyr.errors import ZephyrError, storage_error
from zephyr.fs import url_to_fs

__all__ = ["RunLockedError", "run_locks"]

LOCK_NAME = ".zephyr-run.lock"


class RunLockedError(ZephyrError):
    """Another live run holds the scratch or output directory this run needs."""


def _local_dir(url: str) -> str | None:
    fs, path = url_to_fs(url)
    protocol = fs.protocol[0] if isinstance(fs.protocol, tuple) else fs.protocol
    return path if protocol in ("file", "local") else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _acquire(directory: str, role: str) -> str:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, LOCK_NAME)
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                with open(path) as handle:
                    holder = json.load(handle)
            except (OSError, ValueError):
                holder = {}
            if holder.get("pid") == os.getpid() and holder.get("host") == me["host"]:
                return ""  # this process already holds it (a pipeline run from inside another): nothing to release
            if holder.get("host") == me["host"] and isinstance(holder.get("pid"), int) and not _alive(holder["pid"]):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # its run died: take over (the checkpoints let this run resume)
                continue
            raise RunLockedError(
                f"another run (pid {holder.get('pid', '?')} on {holder.get('host', '?')}, started "
                f"{holder.get('started', '?')}) is using the {role} {directory}; wait for it to finish, or give this "
                f"run its own (--scratch / another output). If no such run exists, delete {path}."
            ) from None
        with os.fdopen(fd, "w") as handle:
            json.dump(me, handle)
        return path
    raise RunLockedError(f"could not take the lock {path}: it keeps reappearing; is another run starting right now?")


@contextlib.contextmanager
def run_locks(run_url: str, output_dirs: Sequence[str]) -> Iterator[None]:
    """Hold the run's checkpoint directory and its local output folders for the duration of the block."""
    held: list[str] = []
    try:
        for url, role in [(run_url, "scratch (checkpoint) directory")] + [(d, "output folder") for d in output_dirs]:
            directory = _local_dir(url)
            if directory is not None:
                try:
                    lock = _acquire(directory, role)
                except OSError as error:  # e.g. an output under a read-only or forbidden folder
                    environment = storage_error(error, f"taking the {role} {directory}")
                    if environment is None:
                        raise
                    raise environment from None
                if lock:
                    held.append(lock)
        yield
    finally:
        for lock in reversed(held):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)
