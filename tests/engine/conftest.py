"""Real storage servers on 127.0.0.1 for the filesystem tests (no mocks of the storage clients).

- `gcs_server`: the `gcp-storage-emulator` package (GCS JSON API) as a subprocess, with the `objects.move`
  call gcsfs makes on every rename added (gcs_emulator.py).
- `s3_server`: moto in server mode (`moto_server`) as a subprocess.

Both are session-scoped, listen on free loopback ports and are always shut down. Tests get the
endpoints through the function-scoped `gcs_env` / `s3_env` fixtures, which set the standard
endpoint variables with monkeypatch (never globally) and reset Zephyr's per-process filesystem
state. Buckets are created with real locations: S3 through CreateBucket's LocationConstraint; GCS
through a PATCH of the bucket's `location` (the emulator ignores `location` on insert but keeps
what PATCH writes, and serves it back on GET, which is what gcsfs reads).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

_VENV_BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server for {url} exited with code {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(url, timeout=1.0):
                return
        except Exception:
            time.sleep(0.1)
    raise RuntimeError(f"server for {url} did not answer within {timeout_s:.0f}s")


@contextlib.contextmanager
def _serve(cmd: list[str], probe_url: str) -> Iterator[None]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        _wait_http(probe_url, proc)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@dataclass(frozen=True)
class GcsServer:
    endpoint: str  # http://127.0.0.1:PORT

    def create_bucket(self, location: str, prefix: str = "zgcs") -> str:
        """A new bucket stored at `location` (e.g. "US", "EUROPE-WEST4"); returns its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        _http_json("POST", f"{self.endpoint}/storage/v1/b?project=test", {"name": name})
        patched = _http_json("PATCH", f"{self.endpoint}/storage/v1/b/{name}", {"location": location})
        assert patched["location"] == location, patched
        return name


@dataclass(frozen=True)
class S3Server:
    endpoint: str

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )

    def create_bucket(self, region: str, prefix: str = "zs3") -> str:
        """A new bucket in AWS `region` (e.g. "us-east-1", "eu-west-1"); returns its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        if region == "us-east-1":
            self.client().create_bucket(Bucket=name)
        else:
            self.client().create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": region})
        return name


def _http_json(method: str, url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"{}")


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GcsServer]:
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    cmd = [
        sys.executable,
        str(Path(__file__).with_name("gcs_emulator.py")),  # the emulator, with objects.move added
        "start",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--in-memory",
        "-q",
    ]
    with _serve(cmd, f"{endpoint}/storage/v1/b"):
        yield GcsServer(endpoint)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    moto = _VENV_BIN / "moto_server"
    cmd = (
        [str(moto), "-H", "127.0.0.1", "-p", str(port)]
        if moto.exists()
        else [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    )
    with _serve(cmd, f"{endpoint}/moto-api/"):
        yield S3Server(endpoint)


def reset_fs_state() -> None:
    """Forget every per-process cache of the filesystem layer (regions, locations, budget, instances)."""
    from zephyr.fs.mirror import MirrorFileSystem
    from zephyr.fs.region_guard import guarded_filesystem_class, reset_bucket_location_cache
    from zephyr.fs.regions import reset_region_cache
    from zephyr.fs.transfer_budget import reset_transfer_budget

    reset_transfer_budget()
    reset_region_cache()
    reset_bucket_location_cache()
    MirrorFileSystem.clear_instance_cache()
    for protocol in ("gs", "s3"):
        cls = guarded_filesystem_class(protocol)
        cls.clear_instance_cache()
        cls.__mro__[2].clear_instance_cache()  # the plain twin class


@pytest.fixture
def fs_state(monkeypatch, tmp_path) -> Iterator[None]:
    """Clean per-process filesystem state, no ambient region/budget settings, private lock dir."""
    for name in list(os.environ):
        if name.startswith("ZEPHYR_") or name in ("GCE_METADATA_HOST",):
            monkeypatch.delenv(name)
    # No metadata server in tests unless a test points GCE_METADATA_HOST at one.
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("ZEPHYR_METADATA_TIMEOUT", "0.2")
    monkeypatch.setenv("ZEPHYR_MIRROR_LOCK_DIR", str(tmp_path / "locks"))
    reset_fs_state()
    yield
    reset_fs_state()


@pytest.fixture
def gcs_env(gcs_server, fs_state, monkeypatch) -> GcsServer:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.endpoint)
    return gcs_server


@pytest.fixture
def s3_env(s3_server, fs_state, monkeypatch) -> S3Server:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    return s3_server
