"""Run an action (a mirror copy) exactly once across processes and machines: `run_once`.

Two locks, taken in order:

1. A local file lock (``fcntl.flock`` on a file under ``ZEPHYR_MIRROR_LOCK_DIR``, default
   ``$TMPDIR/zephyr-mirror-locks``) serialises the processes of one machine. The kernel drops it
   when its holder dies, so it is never stale.
2. A lock object next to the data (``<bucket root>/.zephyr-locks/<key>.lock``) serialises
   machines. It is created with an exclusive create (``ifGenerationMatch=0`` on GCS,
   ``If-None-Match: *`` on S3, ``O_EXCL`` locally), holds JSON ``{owner, host, pid, created,
   expires}``, and is read back after a short pause so that a store that ignores the
   precondition (some emulators) is caught in all but the closest races.

Stale locks: a lock past its ``expires`` time, or one written by a process of this machine that
no longer exists, is deleted and the acquisition retried. ``expires`` is set by the holder from
the size of the copy (a base TTL plus the time to copy at a pessimistic 20 MB/s), so a live
holder is never broken; a crashed one blocks others only until then.

Waiters poll `done()` (the target exists) with backoff, so they return as soon as the holder
finishes, and raise `TimeoutError` naming the lock and its holder past their deadline.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import fsspec

__all__ = ["LOCK_DIR_ENV", "LOCK_DIRNAME", "LockRecord", "pid_alive", "run_once", "read_lock", "write_lock_record"]

LOCK_DIR_ENV = "ZEPHYR_MIRROR_LOCK_DIR"
LOCK_DIRNAME = ".zephyr-locks"
_SETTLE_S = 0.15
_log = logging.getLogger("zephyr.fs")


@dataclass(frozen=True)
class LockRecord:
    """What a lock object says about its holder."""

    owner: str
    host: str
    pid: int
    created: float
    expires: float

    def is_stale(self, now: float) -> bool:
        if now > self.expires:
            return True
        return self.host == socket.gethostname() and not pid_alive(self.pid)

    def describe(self) -> str:
        since, expires = time.ctime(self.created), time.ctime(self.expires)
        return f"held by pid {self.pid} on {self.host} since {since}, expires {expires}"


def run_once(
    *,
    key: str,
    lock_fs: fsspec.AbstractFileSystem,
    lock_path: str,
    done: Callable[[], bool],
    action: Callable[[], None],
    ttl_s: float,
    wait_timeout_s: float,
    local_lock: bool = True,
    poll_s: float = 0.05,
) -> bool:
    """Run `action` unless `done()`; among concurrent callers for `key`, exactly one runs it.

    Returns True when this call ran `action`, False when it found the work done (by anyone).
    """
    deadline = time.monotonic() + wait_timeout_s
    with _local_lock(key, deadline) if local_lock else contextlib.nullcontext():
        delay = poll_s
        while True:
            if done():
                return False
            me = LockRecord(uuid.uuid4().hex, socket.gethostname(), os.getpid(), time.time(), time.time() + ttl_s)
            if _try_create(lock_fs, lock_path, me):
                try:
                    if done():  # finished by the previous holder between our check and our lock
                        return False
                    action()
                    return True
                finally:
                    _release(lock_fs, lock_path, me)
            holder = read_lock(lock_fs, lock_path)
            if holder is not None and holder.is_stale(time.time()):
                _log.warning("zephyr: breaking stale copy lock %s (%s)", lock_path, holder.describe())
                with contextlib.suppress(FileNotFoundError):
                    lock_fs.rm_file(lock_path)
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"waited {wait_timeout_s:.0f}s for the copy lock {lock_path} "
                    f"({holder.describe() if holder else 'holder unknown'}) and the copy of {key} did not finish; "
                    f"if no process is copying it, delete the lock object and retry"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)


def read_lock(fs: fsspec.AbstractFileSystem, path: str) -> LockRecord | None:
    """The lock record at `path`, None when there is none (or it is unreadable: treated as gone)."""
    fs.invalidate_cache(path)
    try:
        data = json.loads(fs.cat_file(path))
        return LockRecord(
            str(data["owner"]), str(data["host"]), int(data["pid"]), float(data["created"]), float(data["expires"])
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        # Half-written or foreign content: stale by construction, so a waiter breaks it.
        return LockRecord("unreadable", "unknown", -1, 0.0, 0.0)


def write_lock_record(fs: fsspec.AbstractFileSystem, path: str, record: LockRecord, *, exclusive: bool) -> None:
    """Write `record` at `path`; `exclusive=True` fails with FileExistsError when a lock exists."""
    payload = json.dumps(record.__dict__).encode()
    parent = path.rsplit("/", 1)[0]
    with contextlib.suppress(Exception):
        fs.makedirs(parent, exist_ok=True)
    fs.pipe_file(path, payload, mode="create" if exclusive else "overwrite")
    fs.invalidate_cache(path)


def _try_create(fs: fsspec.AbstractFileSystem, path: str, me: LockRecord) -> bool:
    try:
        write_lock_record(fs, path, me, exclusive=True)
    except FileExistsError:
        return False
    except OSError as error:  # a 412 Precondition Failed that the client did not map to FileExistsError
        if "412" in str(error) or "precondition" in str(error).lower():
            return False
        raise
    time.sleep(_SETTLE_S)
    holder = read_lock(fs, path)
    return holder is not None and holder.owner == me.owner


def _release(fs: fsspec.AbstractFileSystem, path: str, me: LockRecord) -> None:
    holder = read_lock(fs, path)
    if holder is not None and holder.owner == me.owner:
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(path)
        fs.invalidate_cache(path)


@contextlib.contextmanager
def _local_lock(key: str, deadline: float) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # not POSIX: the lock object alone serialises
        yield
        return
    directory = os.environ.get(LOCK_DIR_ENV) or os.path.join(tempfile.gettempdir(), "zephyr-mirror-locks")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, hashlib.sha256(key.encode()).hexdigest()[:40] + ".lock")
    with open(path, "a+b") as handle:
        delay = 0.02
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"waited for the local copy lock {path} (for {key}) past the deadline") from None
                time.sleep(delay)
                delay = min(delay * 1.5, 0.5)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this machine (one of another user counts as running)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
