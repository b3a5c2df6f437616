"""Compression from file names, and streaming decompression that notices damage.

Compressed streams are decompressed here rather than by fsspec because zstandard's stream reader
stops without error at a truncated frame: a cut-off download would lose data silently.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Iterator
from typing import Any

import zstandard

COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2", ".xz": "xz"}
# Bytes per read, and compressed bytes per decompressor call: decompressed chunks of a few hundred
# KiB keep the lines and the records parsed from them in cache (measured ~1.5x faster than 1 MiB).
_READ_SIZE = 64 << 10  # plain files
_COMPRESSED_READ_SIZE = 256 << 10
_FEED_SIZE = 8 << 10  # ~50 KiB of text out per decompressor call


def split_compression(path: str) -> tuple[str, str | None]:
    """The lower-case file name without its compression suffix, and the codec that suffix names (or None)."""
    name = path.rsplit("/", 1)[-1].lower()
    for suffix, codec in COMPRESSIONS.items():
        if name.endswith(suffix):
            return name[: -len(suffix)], codec
    return name, None


class StreamDamage(Exception):
    """Internal: the byte stream ended early or holds undecodable data."""

    def __init__(self, reason: str, detail: str, fix: str) -> None:
        super().__init__(detail)
        self.reason, self.detail, self.fix = reason, detail, fix


def new_decompressor(codec: str) -> Any:
    """A decompressor for one member/frame/stream; all four expose decompress, eof, unused_data."""
    if codec == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if codec == "zstd":
        # Large window: files written with `zstd --long=31` are read too.
        return zstandard.ZstdDecompressor(max_window_size=1 << 31).decompressobj()
    if codec == "bz2":
        return bz2.BZ2Decompressor()
    if codec == "xz":
        return lzma.LZMADecompressor()
    raise ValueError(f"unknown compression {codec!r}: expected one of {sorted(set(COMPRESSIONS.values()))}")


_DECOMPRESS_ERRORS = (zlib.error, zstandard.ZstdError, OSError, EOFError, lzma.LZMAError, ValueError)


def decoded_chunks(raw: Any, codec: str | None) -> Iterator[bytes]:
    """Decompressed bytes of `raw`, raising StreamDamage on an empty, corrupt or truncated stream.

    Concatenated members/frames (pigz, parallel zstd) are followed to the end. A stream that stops
    inside a member is truncated: every decompressor reports `eof` only after a member's end marker.
    """
    chunk = raw.read(_READ_SIZE)
    if not chunk and codec is None:
        return  # an empty plain file holds no records (an empty shard's output); compressed, it is damage
    if not chunk:
        raise StreamDamage(
            "empty", "the file is empty (0 bytes)", "re-create or re-download it (an interrupted write or download?)"
        )
    if codec is None:
        while chunk:
            yield chunk
            chunk = raw.read(_READ_SIZE)
        return
    decompressor, fed, offset = new_decompressor(codec), False, 0
    while chunk:
        view = memoryview(chunk)
        for start in range(0, len(chunk), _FEED_SIZE):
            data: bytes | memoryview = view[start : start + _FEED_SIZE]
            while data:
                try:
                    out = decompressor.decompress(data)
                except _DECOMPRESS_ERRORS as exc:
                    raise StreamDamage(
                        "corrupt",
                        f"the {codec} data is corrupt near compressed byte {offset + start} ({exc}); "
                        f"expected a valid {codec} stream, as the name's suffix says",
                        "re-create or re-download the file, or rename it if it is not compressed this way",
                    ) from None
                fed = True
                if out:
                    yield out
                if decompressor.eof:
                    data, decompressor, fed = decompressor.unused_data, new_decompressor(codec), False
                else:
                    data = b""
        offset += len(chunk)
        chunk = raw.read(_COMPRESSED_READ_SIZE)
    if fed and not decompressor.eof:
        raise StreamDamage(
            "truncated",
            f"the {codec} stream ends without its end marker after {offset} compressed bytes: the file is truncated "
            f"(expected a complete {codec} stream)",
            "re-create or re-download the file (an interrupted write or download?)",
        )
