"""Remote storage failures at the command line are one line naming the URL and the fix, exit 1, in seconds
(issue #17 item 9): a cross-region refusal (never retried, never a UserCodeError), gs:// without a network,
s3:// without credentials. Real commands in subprocesses against real servers on 127.0.0.1 (the GCS
emulator, moto) and a closed port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from zephyr import Dataset, execution
from zephyr.fs import url_to_fs
from zephyr.fs.transfer_budget import CrossRegionBudgetExceeded

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "import sys\nfrom zephyr import Dataset\nprint(Dataset.from_files(sys.argv[1]).map(lambda r: r).count())\n"


def _closed_port() -> int:
    with socket.socket() as sock:  # bound, never listening, closed: connections to it are refused
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _zephyr(args: list[str], cwd: Path, **env: str | None) -> tuple[subprocess.CompletedProcess, float]:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "ZEPHYR_PROGRESS": "0"}
    for name, value in env.items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "zephyr.cli", *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=120
    )
    return proc, time.monotonic() - started


def _error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if ": error: " in line]


def _commands(url: str, tmp_path: Path) -> dict[str, list[str]]:
    (tmp_path / "read.py").write_text(SCRIPT)
    return {
        "run": ["run", "--backend", "local", "read.py", url],
        "tokenize": ["tokenize", url, str(tmp_path / "store")],
    }


NO_S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": None,
    "AWS_SECRET_ACCESS_KEY": None,
    "AWS_SESSION_TOKEN": None,
    "AWS_PROFILE": None,
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/credentials",
    "AWS_CONFIG_FILE": "/nonexistent/config",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@pytest.mark.parametrize("command", ["run", "tokenize"])
@pytest.mark.parametrize("store", ["gs", "s3"])
def test_a_bucket_without_network_is_one_line_naming_the_url_in_seconds(tmp_path, fs_state, command, store):
    port = _closed_port()
    url = f"{store}://bucket/x/*.jsonl"
    endpoint = {"gs": "STORAGE_EMULATOR_HOST", "s3": "AWS_ENDPOINT_URL_S3"}[store]
    proc, seconds = _zephyr(
        _commands(url, tmp_path)[command],
        tmp_path,
        **{endpoint: f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2, proc.stderr  # not 160 lines of client retries
    (line,) = _error_lines(proc)
    assert url in line and f"127.0.0.1:{port}" in line and f"{endpoint}=" in line and "Fix:" in line, line
    assert "Traceback" not in proc.stderr
    assert seconds < 30  # the client's own retries took 37-54 s


@pytest.mark.parametrize("command", ["run", "tokenize"])
def test_s3_without_credentials_is_one_line_naming_the_url_and_the_fix(tmp_path, s3_server, fs_state, command):
    bucket = s3_server.create_bucket("us-east-1")
    url = f"s3://{bucket}/x/*.jsonl"
    proc, seconds = _zephyr(
        _commands(url, tmp_path)[command], tmp_path, AWS_ENDPOINT_URL_S3=s3_server.endpoint, **NO_S3_CREDENTIALS
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2, proc.stderr  # not 98 lines of botocore
    (line,) = _error_lines(proc)
    assert f"no AWS credentials to read {url}" in line and "AWS_ACCESS_KEY_ID" in line, line
    assert "Traceback" not in proc.stderr and seconds < 30


@pytest.fixture
def far_file(gcs_env, monkeypatch) -> str:
    """A jsonl file in a EUROPE-WEST4 bucket, read from a machine in us-central1 with no budget left."""
    monkeypatch.setenv("ZEPHYR_REGION", "us-central1")
    bucket = gcs_env.create_bucket("EUROPE-WEST4")
    fs, _ = url_to_fs(f"gs://{bucket}")
    fs.pipe(f"{bucket}/far/part-0.jsonl", b'{"a": 1}\n' * 100)
    monkeypatch.setenv("ZEPHYR_CROSS_REGION_BUDGET", "0")
    return f"gs://{bucket}/far/part-0.jsonl"


def test_a_cross_region_refusal_is_one_line_and_never_retried(tmp_path, far_file):
    (tmp_path / "read.py").write_text(SCRIPT)
    proc, _ = _zephyr(["run", "--backend", "processes", "--workers", "2", "read.py", far_file], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = _error_lines(proc)
    assert line.startswith("zephyr run: error: CrossRegionBudgetExceeded: "), line
    assert far_file in line and "ZEPHYR_CROSS_REGION_BUDGET=" in line
    assert "budget (all workers together) of 0 bytes is spent" in line  # not "reading 0 bytes more ..."
    assert "UserCodeError" not in proc.stderr and "retrying" not in proc.stderr and "Traceback" not in proc.stderr


@dataclass(frozen=True)
class _ReadFar:
    """A user function that reads a far file itself (and notes each call): the refusal is still a refusal."""

    url: str
    attempts: str

    def __call__(self, record):
        with open(self.attempts, "a") as log:
            log.write("call\n")
        fs, path = url_to_fs(self.url)
        return {**record, "far": len(fs.cat(path))}


def test_a_refusal_inside_a_user_function_is_raised_as_itself_once(tmp_path, far_file, scratch):
    attempts = tmp_path / "attempts"
    with (
        execution(backend="local", scratch=scratch, progress=False, summary=False, max_user_retries=3),
        pytest.raises(CrossRegionBudgetExceeded, match="cross-region read refused"),
    ):
        Dataset.from_list([{"i": 1}]).map(_ReadFar(far_file, str(attempts))).collect()
    assert attempts.read_text().count("call") == 1
