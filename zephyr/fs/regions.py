"""Where this machine runs, and whether a bucket location counts as "the same region".

Cross-region reads cost egress money, so the filesystem guard needs two facts: the region of this
machine and the location of each bucket. This module owns the first fact and the comparison rule.

Region of this machine, first match wins:
  1. ``ZEPHYR_REGION`` (e.g. ``us-central1``; a zone such as ``us-central1-a`` is reduced to its
     region; ``unknown`` skips detection on purpose, without a warning).
  2. The GCE metadata server (``http://$GCE_METADATA_HOST/computeMetadata/v1/instance/zone``; the
     host defaults to ``metadata.google.internal``), asked once per process with a hard timeout of
     ``ZEPHYR_METADATA_TIMEOUT`` seconds (default 1.0) so that machines outside GCE never hang.
  3. Unknown: every read is allowed, with a one-time warning.

Location comparison: a location equals the region, or is a multi-region that contains it (``US``
holds every ``us-*`` region, ``EU`` every ``europe-*``, ``ASIA`` every ``asia-*``), or a predefined
or custom dual-region (``NAM4``, ``EUR4``, ``us-central1+us-east1``) that lists it.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import urllib.request

__all__ = [
    "REGION_ENV",
    "METADATA_HOST_ENV",
    "METADATA_TIMEOUT_ENV",
    "machine_region",
    "normalize_location",
    "location_contains",
    "locations_overlap",
    "reset_region_cache",
]

REGION_ENV = "ZEPHYR_REGION"
METADATA_HOST_ENV = "GCE_METADATA_HOST"  # the variable google-auth and gcloud also honour
METADATA_TIMEOUT_ENV = "ZEPHYR_METADATA_TIMEOUT"
_DEFAULT_METADATA_HOST = "metadata.google.internal"
_DEFAULT_METADATA_TIMEOUT_S = 1.0

_log = logging.getLogger("zephyr.fs")

# Multi-regions: location -> prefix of the regions inside it.
_MULTI_REGION_PREFIXES = {"us": ("us-",), "eu": ("europe-",), "asia": ("asia-",)}
# Predefined GCS dual-regions (https://cloud.google.com/storage/docs/locations#predefined).
_DUAL_REGIONS = {
    "nam4": frozenset({"us-central1", "us-east1"}),
    "eur4": frozenset({"europe-north1", "europe-west4"}),
    "eur5": frozenset({"europe-west1", "europe-west2"}),
    "eur7": frozenset({"europe-west3", "europe-west10"}),
    "eur8": frozenset({"europe-west3", "europe-west6"}),
    "asia1": frozenset({"asia-northeast1", "asia-northeast2"}),
}
_GCE_ZONE = re.compile(r"^([a-z]+-[a-z]+\d+)-[a-z]$")  # us-central1-a -> us-central1
_AWS_ZONE = re.compile(r"^([a-z]+-[a-z]+-\d+)[a-z]$")  # us-east-1a -> us-east-1

_lock = threading.Lock()
_metadata_cache: dict[str, str | None] = {}  # metadata host -> detected region (None: unknown)
_warned_unknown = False


def normalize_location(location: str) -> str:
    """Lower-case `location` and reduce a zone (``us-central1-a``, ``us-east-1a``) to its region."""
    value = location.strip().lower()
    for pattern in (_GCE_ZONE, _AWS_ZONE):
        match = pattern.match(value)
        if match:
            return match.group(1)
    return value


def location_contains(location: str, region: str) -> bool:
    """True when data stored in bucket `location` is local to a machine in `region`."""
    loc, reg = normalize_location(location), normalize_location(region)
    if loc == reg:
        return True
    if "+" in loc:  # custom dual-region, e.g. "us-central1+us-east1"
        return any(location_contains(part, reg) for part in loc.split("+"))
    if loc in _DUAL_REGIONS:
        return reg in _DUAL_REGIONS[loc]
    return reg.startswith(_MULTI_REGION_PREFIXES.get(loc, ()))


def locations_overlap(a: str, b: str) -> bool:
    """True when a copy between buckets at `a` and `b` stays inside one region or multi-region."""
    return location_contains(a, b) or location_contains(b, a)


def machine_region() -> str | None:
    """The region this process runs in, or None when it cannot be known (see the module docstring)."""
    override = os.environ.get(REGION_ENV, "").strip()
    if override:
        return None if override.lower() == "unknown" else normalize_location(override)
    host = os.environ.get(METADATA_HOST_ENV, "").strip() or _DEFAULT_METADATA_HOST
    with _lock:
        if host not in _metadata_cache:
            _metadata_cache[host] = _region_from_metadata(host, _metadata_timeout_s())
        region = _metadata_cache[host]
    if region is None:
        _warn_unknown_once(host)
    return region


def reset_region_cache() -> None:
    """Forget the detected region and the one-time warning (tests; a process that moved)."""
    global _warned_unknown
    with _lock:
        _metadata_cache.clear()
        _warned_unknown = False


def _metadata_timeout_s() -> float:
    raw = os.environ.get(METADATA_TIMEOUT_ENV, "").strip()
    if not raw:
        return _DEFAULT_METADATA_TIMEOUT_S
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise ValueError(
            f"{METADATA_TIMEOUT_ENV} must be a number of seconds, got {raw!r}; e.g. {METADATA_TIMEOUT_ENV}=0.5"
        ) from None


def _region_from_metadata(host: str, timeout_s: float) -> str | None:
    """Ask the GCE metadata server for this VM's zone; None when it does not answer in `timeout_s`.

    The request runs in a daemon thread joined with a deadline because a socket timeout does not
    bound DNS resolution of ``metadata.google.internal`` on machines outside GCE.
    """
    if timeout_s <= 0:
        return None
    base = host if host.startswith(("http://", "https://")) else f"http://{host}"
    url = f"{base.rstrip('/')}/computeMetadata/v1/instance/zone"
    result: list[str | None] = [None]

    def ask() -> None:
        request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                if response.headers.get("Metadata-Flavor") != "Google":
                    return  # something else answered (a proxy, a captive portal): not a GCE server
                zone = response.read(1024).decode("utf-8", "replace").strip().rsplit("/", 1)[-1]
        except Exception as error:  # any failure means "not on GCE (or not reachable)"
            _log.debug("GCE metadata server %s did not answer: %s", url, error)
            return
        result[0] = normalize_location(zone) if zone else None

    thread = threading.Thread(target=ask, name="zephyr-gce-metadata", daemon=True)
    thread.start()
    thread.join(timeout_s + 0.1)
    if thread.is_alive():
        _log.debug("GCE metadata server %s did not answer within %.2fs", url, timeout_s)
        return None
    return result[0]


def _warn_unknown_once(host: str) -> None:
    global _warned_unknown
    with _lock:
        if _warned_unknown:
            return
        _warned_unknown = True
    _log.warning(
        "zephyr: the region of this machine is unknown (no %s set and the GCE metadata server at %s "
        "did not answer), so cross-region reads are NOT guarded. Set %s=<region>, e.g. %s=us-central1, "
        "to enable the guard.",
        REGION_ENV,
        host,
        REGION_ENV,
        REGION_ENV,
    )
