"""The real storage servers of the filesystem tests (GCS emulator, moto S3), for token stores on buckets.

They live in ``tests/engine/conftest.py``; this loads that file under its own module name and
re-exports its fixtures, so both areas share one definition (each area starts its own server).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "zephyr_tests_storage_servers", Path(__file__).resolve().parents[1] / "engine" / "conftest.py"
)
_servers = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _servers  # dataclasses look their module up there
_spec.loader.exec_module(_servers)

gcs_server = _servers.gcs_server
s3_server = _servers.s3_server
fs_state = _servers.fs_state
gcs_env = _servers.gcs_env
s3_env = _servers.s3_env
