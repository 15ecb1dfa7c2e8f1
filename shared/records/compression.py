"""Compression codecs of the record-batch format, byte-compatible with Kafka.

attributes bits 0-2: 0 none, 1 gzip, 2 snappy (xerial framing, as Kafka's Java
client writes it), 3 lz4 (LZ4 frame, independent 64 KiB blocks, as Kafka's
KafkaLZ4BlockOutputStream writes it), 4 zstd (zstd frame).
"""

from __future__ import annotations

import gzip
import struct
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from shared.errors import CorruptRecordError


class CompressionType(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str | int | CompressionType | None) -> CompressionType:
        """Accept Kafka's ``compression.type`` names (``none``, ``gzip``...)."""
        if name is None:
            return cls.NONE
        if isinstance(name, int):
            return cls(name)
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise ValueError(
                f"unknown compression type {name!r}; expected one of "
                + ", ".join(m.name.lower() for m in cls)
            ) from None


# xerial snappy framing: magic, version 1, compatible version 1, then
# blocks of [int32 compressed length][raw snappy block].
_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


def _snappy_compress(data: bytes) -> bytes:
    out = [_XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        out.append(struct.pack(">i", len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_decompress(data: bytes) -> bytes:
    if data[:8] != _XERIAL_HEADER[:8]:
        return bytes(cramjam.snappy.decompress_raw(data))
    out = []
    pos = 16
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("truncated xerial snappy block header")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptRecordError("truncated xerial snappy block")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + n])))
        pos += n
    return b"".join(out)


def _lz4_compress(data: bytes) -> bytes:
    return lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )


_ZSTD_C = zstandard.ZstdCompressor()


def compress(kind: CompressionType, data: bytes) -> bytes:
    if kind == CompressionType.NONE:
        return data
    if kind == CompressionType.GZIP:
        return gzip.compress(data, compresslevel=6, mtime=0)
    if kind == CompressionType.SNAPPY:
        return _snappy_compress(data)
    if kind == CompressionType.LZ4:
        return _lz4_compress(data)
    if kind == CompressionType.ZSTD:
        return _ZSTD_C.compress(data)
    raise ValueError(f"unsupported compression type {kind}")


#: A produced batch may not decompress to more than this (or 32x its compressed size, if larger):
#: a few KiB of zeros compress to bytes, and the broker decompresses every produced batch.
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024


def decompress(kind: int, data: bytes, limit: int | None = None) -> bytes:
    """Decompress a batch's records section; any codec failure is a CorruptRecordError.

    With ``limit`` (the broker, on untrusted produced batches), more than that many bytes of output is
    a CorruptRecordError too, found while decompressing, before the output is all in memory. Readers
    use the same code without a limit, so what the broker accepts every reader can decompress."""
    bound = -1 if limit is None else limit
    try:
        if kind == CompressionType.GZIP:
            out = _gzip_bounded(data, bound)
        elif kind == CompressionType.SNAPPY:
            out = _snappy_decompress(data)  # at most ~32x its input per block, by construction of the format
        elif kind == CompressionType.LZ4:
            out = _lz4_bounded(data, bound)
        elif kind == CompressionType.ZSTD:
            out = _zstd_bounded(data, bound)
        elif kind == CompressionType.NONE:
            return data
        else:
            raise CorruptRecordError(f"unknown compression type {kind} in batch attributes")
    except CorruptRecordError:
        raise
    except (OSError, EOFError, zlib.error, RuntimeError, ValueError, zstandard.ZstdError) as exc:
        raise CorruptRecordError(f"cannot decompress {CompressionType(kind).name} records: {exc}") from exc
    except Exception as exc:  # cramjam raises its own DecompressionError type
        raise CorruptRecordError(f"cannot decompress records: {exc}") from exc
    if limit is not None and len(out) > limit:
        raise CorruptRecordError(f"records decompress to more than {limit} bytes")
    return out


def produced_limit(compressed_size: int) -> int:
    """How large a produced batch's records may decompress to."""
    return max(MAX_DECOMPRESSED_BYTES, 32 * compressed_size)


#: Output buffer per call of a bounded LZ4 decompression. lz4 allocates ``max_length`` up front: asking for
#: the whole bound (64 MiB) mmaps it and cost ~0.4 ms per batch (10x the decompression of a 1 MiB batch);
#: a buffer barely larger than what is left to decompress is as slow (measured). 8 MiB is neither for the
#: usual batch (up to ~1 MiB decompressed), and stays below the services' mmap threshold (shared.runtime).
_LZ4_CHUNK = 8 << 20


def _lz4_bounded(data: bytes, bound: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    if bound < 0:
        out = d.decompress(data)
    else:
        parts = [d.decompress(data, max_length=min(bound + 1, _LZ4_CHUNK))]
        total = len(parts[0])
        while not d.eof and not d.needs_input and total <= bound:  # more output: the next chunk
            parts.append(d.decompress(b"", max_length=min(bound + 1 - total, _LZ4_CHUNK)))
            total += len(parts[-1])
        out = parts[0] if len(parts) == 1 else b"".join(parts)
        if total > bound:
            return out
    if not d.eof:
        raise CorruptRecordError("truncated LZ4 frame")
    if d.unused_data:
        raise CorruptRecordError(f"{len(d.unused_data)} bytes after the LZ4 frame")
    return out


def _gzip_bounded(data: bytes, bound: int) -> bytes:
    """Every gzip member of ``data``; stops early once more than ``bound`` bytes came out (-1: no bound)."""
    out: list[bytes] = []
    total = 0
    rest = data
    if not rest:
        raise CorruptRecordError("empty gzip stream")
    while rest:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        chunk = d.decompress(rest, bound - total + 1 if bound >= 0 else 0)
        out.append(chunk)
        total += len(chunk)
        if 0 <= bound < total:
            break
        if not d.eof:
            raise CorruptRecordError("truncated gzip stream")
        rest = d.unused_data
    return b"".join(out)


def _zstd_bounded(data: bytes, bound: int) -> bytes:
    """One zstd frame (written with or without its content size); stops early past ``bound`` bytes."""
    out: list[bytes] = []
    total = 0
    with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=False) as reader:
        while bound < 0 or total <= bound:
            chunk = reader.read(1 << 20)
            if not chunk:
                break
            out.append(chunk)
            total += len(chunk)
    return b"".join(out)
