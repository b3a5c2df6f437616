"""Region detection (env override, a real GCE-style metadata server on 127.0.0.1), location rules,
and the transfer budget's arithmetic, threads and messages."""

from __future__ import annotations

import http.server
import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from zephyr.fs.regions import location_contains, locations_overlap, machine_region, normalize_location
from zephyr.fs.transfer_budget import (
    CrossRegionBudgetExceeded,
    allow_cross_region,
    charge_cross_region,
    cross_region_budget,
    cross_region_bytes,
    parse_bytes,
    set_cross_region_budget,
)

pytestmark = pytest.mark.usefixtures("fs_state")


# ----- location rules ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("location", "region", "local"),
    [
        ("US", "us-central1", True),
        ("us", "us-east4", True),
        ("US", "europe-west4", False),
        ("EU", "europe-west4", True),
        ("EU", "us-central1", False),
        ("ASIA", "asia-northeast1", True),
        ("EUROPE-WEST4", "europe-west4", True),
        ("europe-west4", "europe-west1", False),
        ("NAM4", "us-east1", True),
        ("NAM4", "us-west1", False),
        ("EUR4", "europe-west4", True),
        ("us-central1+us-east4", "us-east4", True),
        ("us-central1+us-east4", "us-west1", False),
        ("eu-west-1", "eu-west-1", True),
        ("eu-west-1", "us-east-1", False),
        ("US-CENTRAL1", "us-central1-a", True),  # a zone counts as its region
    ],
)
def test_location_contains(location: str, region: str, local: bool) -> None:
    assert location_contains(location, region) is local


def test_normalize_location_reduces_zones() -> None:
    assert normalize_location("us-central1-a") == "us-central1"
    assert normalize_location("EUROPE-WEST4-B") == "europe-west4"
    assert normalize_location("us-east-1a") == "us-east-1"
    assert normalize_location("US") == "us"


def test_locations_overlap_is_symmetric_for_multi_regions() -> None:
    assert locations_overlap("US", "us-central1") and locations_overlap("us-central1", "US")
    assert not locations_overlap("EU", "us-central1")


# ----- machine region ----------------------------------------------------------------------------
class _MetadataHandler(http.server.BaseHTTPRequestHandler):
    zone = "projects/123456/zones/europe-west4-b"
    flavor = "Google"
    requests: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        type(self).requests.append(self.path)
        body = self.zone.encode()
        self.send_response(200)
        if self.flavor:
            self.send_header("Metadata-Flavor", self.flavor)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def metadata_server() -> Iterator[tuple[str, type[_MetadataHandler]]]:
    handler = type("Handler", (_MetadataHandler,), {"requests": []})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A port that accepts TCP connections (kernel backlog) and never answers a byte."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_region_from_metadata_server(monkeypatch, metadata_server) -> None:
    host, handler = metadata_server
    monkeypatch.setenv("GCE_METADATA_HOST", host)
    monkeypatch.setenv("ZEPHYR_METADATA_TIMEOUT", "2")
    assert machine_region() == "europe-west4"
    assert machine_region() == "europe-west4"
    assert handler.requests == ["/computeMetadata/v1/instance/zone"]  # asked once, then cached


def test_env_override_wins_without_asking_the_server(monkeypatch, metadata_server) -> None:
    host, handler = metadata_server
    monkeypatch.setenv("GCE_METADATA_HOST", host)
    monkeypatch.setenv("ZEPHYR_REGION", "us-east1-b")
    assert machine_region() == "us-east1"
    assert handler.requests == []


def test_answer_without_metadata_flavor_is_not_trusted(monkeypatch, metadata_server, caplog) -> None:
    host, handler = metadata_server
    handler.flavor = ""
    monkeypatch.setenv("GCE_METADATA_HOST", host)
    with caplog.at_level(logging.WARNING, logger="zephyr.fs"):
        assert machine_region() is None
    assert len(handler.requests) == 1


def test_metadata_server_that_never_answers_falls_back_quickly(monkeypatch, silent_server, caplog) -> None:
    monkeypatch.setenv("GCE_METADATA_HOST", silent_server)
    monkeypatch.setenv("ZEPHYR_METADATA_TIMEOUT", "0.3")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="zephyr.fs"):
        assert machine_region() is None
        assert machine_region() is None  # cached: no second wait
    elapsed = time.monotonic() - started
    assert elapsed < 1.5, f"fallback took {elapsed:.2f}s with a 0.3s timeout"
    warnings = [r for r in caplog.records if "region of this machine is unknown" in r.getMessage()]
    assert len(warnings) == 1
    assert "ZEPHYR_REGION" in warnings[0].getMessage()


def test_explicit_unknown_region_skips_detection(monkeypatch, metadata_server) -> None:
    host, handler = metadata_server
    monkeypatch.setenv("GCE_METADATA_HOST", host)
    monkeypatch.setenv("ZEPHYR_REGION", "unknown")
    assert machine_region() is None
    assert handler.requests == []


# ----- budget --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10GB", 10**10),
        ("512MiB", 512 * 2**20),
        ("0", 0),
        ("1_000", 1000),
        ("1.5 GB", 1_500_000_000),
        ("unlimited", None),
    ],
)
def test_parse_bytes(text: str, value: int | None) -> None:
    assert parse_bytes(text) == value


def test_parse_bytes_rejects_garbage_naming_the_variable() -> None:
    with pytest.raises(ValueError, match="ZEPHYR_CROSS_REGION_BUDGET"):
        parse_bytes("ten gigs")


def test_default_budget_is_10_gb() -> None:
    assert cross_region_budget() == 10 * 10**9


def test_refused_charge_is_not_recorded_but_streamed_bytes_are(monkeypatch) -> None:
    monkeypatch.setenv("ZEPHYR_CROSS_REGION_BUDGET", "1000")
    charge_cross_region("gs://b/x", 600, source="eu", destination="us-central1")
    with pytest.raises(CrossRegionBudgetExceeded) as info:
        charge_cross_region("gs://b/y", 600, source="eu", destination="us-central1")
    assert cross_region_bytes() == 600  # refused before the transfer: nothing recorded
    message = str(info.value)
    for needle in (
        "gs://b/y",
        "600 bytes",
        "1,000 bytes",
        "ZEPHYR_CROSS_REGION_BUDGET=",
        "ZEPHYR_ALLOW_CROSS_REGION=1",
        "'eu'",
        "'us-central1'",
    ):
        assert needle in message, (needle, message)
    with pytest.raises(CrossRegionBudgetExceeded):
        charge_cross_region("gs://b/z", 600, source="eu", destination="us-central1", transferred=True)
    assert cross_region_bytes() == 1200  # these bytes already moved: counted even though it raised


def test_overrides_lift_the_limit(monkeypatch) -> None:
    monkeypatch.setenv("ZEPHYR_CROSS_REGION_BUDGET", "10")
    with allow_cross_region():
        charge_cross_region("gs://b/x", 100, source="eu", destination="us")
    monkeypatch.setenv("ZEPHYR_ALLOW_CROSS_REGION", "1")
    charge_cross_region("gs://b/x", 100, source="eu", destination="us")
    monkeypatch.delenv("ZEPHYR_ALLOW_CROSS_REGION")
    set_cross_region_budget(1000)
    charge_cross_region("gs://b/x", 100, source="eu", destination="us")
    assert cross_region_bytes() == 300
    with pytest.raises(CrossRegionBudgetExceeded):
        charge_cross_region("gs://b/x", 800, source="eu", destination="us")


def test_budget_is_thread_safe(monkeypatch) -> None:
    monkeypatch.setenv("ZEPHYR_CROSS_REGION_BUDGET", "50000")
    refused = []

    def work() -> None:
        for _ in range(1000):
            try:
                charge_cross_region("gs://b/x", 7, source="eu", destination="us")
            except CrossRegionBudgetExceeded:
                refused.append(1)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 8000 charges of 7 bytes = 56000 asked; exactly floor(50000 / 7) fit.
    assert cross_region_bytes() == (50000 // 7) * 7
    assert len(refused) == 8000 - 50000 // 7
