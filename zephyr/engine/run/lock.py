"""One run at a time per scratch directory and per output directory.

Two runs started from one working folder share `./.zephyr/scratch`; when they run the same pipeline they
share its checkpoint directory too, and the first to finish deletes what the other is still reading
(`FileNotFoundError .../runs/run-00000.arrow`). Two runs writing into one output folder overwrite each
other's shards. So a run takes a lock file in its checkpoint directory and in each output folder
(`.zephyr-run.lock`, hidden: readers skip it) and a second run says in one line who holds it. A lock left
by a run that died (its process is gone, same host) is taken over: the new run resumes from the
checkpoints.

Local folders are locked with an exclusive create (`O_EXCL`); bucket folders (gs://, s3://) with a
create-if-absent upload (GCS `ifGenerationMatch=0`, S3 `If-None-Match: *`, through fsspec's
`pipe_file(mode="create")`), which the services refuse atomically when the object exists. A store that
ignores the precondition (older S3-compatible servers; the `gcp-storage-emulator` used in tests) gives no
exclusion, only the message when the lock is already there. A bucket lock of a run that died on another
machine cannot be checked: the message names the object to delete. Other protocols are not locked.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Sequence

from fsspec.core import split_protocol

from zephyr.errors import ZephyrError, storage_error
from zephyr.fs import join, url_to_fs
from zephyr.fs.copy_once import pid_alive

__all__ = ["RunLockedError", "hold_folder", "run_locks"]

LOCK_NAME = ".zephyr-run.lock"


class RunLockedError(ZephyrError):
    """Another live run holds the scratch or output directory this run needs."""


def _local_dir(url: str) -> str | None:
    fs, path = url_to_fs(url)
    protocol = fs.protocol[0] if isinstance(fs.protocol, tuple) else fs.protocol
    return path if protocol in ("file", "local") else None


_BUCKETS = ("gs", "gcs", "s3", "s3a")


def _bucket_dir(url: str) -> str | None:
    return url.rstrip("/") if split_protocol(url)[0] in _BUCKETS else None


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
            if holder.get("host") == me["host"] and isinstance(holder.get("pid"), int) and not pid_alive(holder["pid"]):
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


def _acquire_bucket(directory: str, role: str) -> Callable[[], None] | None:
    """Take the lock object `directory/.zephyr-run.lock` with a create-if-absent upload; returns how to
    release it (None: this process already holds it)."""
    url = join(directory, LOCK_NAME)
    fs, path = url_to_fs(url)
    from zephyr.fs.region_guard import unguarded

    reader = unguarded(fs)  # reading a holder is a few bytes, never charged to the cross-region budget
    me = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "token": uuid.uuid4().hex,
    }
    for _ in range(3):
        try:
            fs.pipe_file(path, json.dumps(me).encode(), mode="create")
        except FileExistsError:
            try:
                holder = json.loads(reader.cat_file(path))
            except FileNotFoundError:
                continue  # released meanwhile: try again
            except (OSError, ValueError):
                holder = {}
            if holder.get("pid") == os.getpid() and holder.get("host") == me["host"]:
                return None
            if holder.get("host") == me["host"] and isinstance(holder.get("pid"), int) and not pid_alive(holder["pid"]):
                with contextlib.suppress(FileNotFoundError):
                    fs.rm_file(path)  # its run died on this machine: take over
                continue
            raise RunLockedError(
                f"another run (pid {holder.get('pid', '?')} on {holder.get('host', '?')}, started "
                f"{holder.get('started', '?')}) is using the {role} {directory}; wait for it to finish, or give this "
                f"run its own (--scratch / another output). If no such run exists, delete {url}."
            ) from None
        fs.invalidate_cache(path)

        def release() -> None:
            try:
                if json.loads(reader.cat_file(path)).get("token") == me["token"]:  # still ours
                    fs.rm_file(path)
            except (FileNotFoundError, ValueError):
                pass

        return release
    raise RunLockedError(f"could not take the lock {url}: it keeps reappearing; is another run starting right now?")


def hold_folder(url: str, role: str) -> Callable[[], None] | None:
    """Take the lock of one folder (local or bucket; other protocols are not locked); returns how to release
    it, None when there is nothing to release (not lockable, or this process holds it already)."""
    directory, bucket = _local_dir(url), _bucket_dir(url)
    try:
        if directory is not None:
            lock = _acquire(directory, role)
            return functools.partial(_unlink_quietly, lock) if lock else None
        if bucket is not None:
            return _acquire_bucket(bucket, role)
    except OSError as error:  # e.g. an output under a read-only or forbidden folder
        environment = storage_error(error, f"taking the {role} {directory or bucket}")
        if environment is None:
            raise
        raise environment from None
    return None


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


@contextlib.contextmanager
def run_locks(run_url: str, output_dirs: Sequence[str]) -> Iterator[None]:
    """Hold the run's checkpoint directory and its output folders (local or bucket) for the block."""
    held: list[Callable[[], None]] = []
    try:
        for url, role in [(run_url, "scratch (checkpoint) directory")] + [(d, "output folder") for d in output_dirs]:
            if (release := hold_folder(url, role)) is not None:
                held.append(release)
        yield
    finally:
        for release in reversed(held):
            with contextlib.suppress(FileNotFoundError):
                release()
