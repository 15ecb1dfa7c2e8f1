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


def _zstd_decompress(data: bytes) -> bytes:
    # Frames written by streaming compressors carry no content size; read them as streams.
    dctx = zstandard.ZstdDecompressor()
    return dctx.decompressobj().decompress(data)


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


def decompress(kind: int, data: bytes) -> bytes:
    """Decompress a batch's records section; any codec failure is a CorruptRecordError."""
    try:
        if kind == CompressionType.GZIP:
            return gzip.decompress(data)
        if kind == CompressionType.SNAPPY:
            return _snappy_decompress(data)
        if kind == CompressionType.LZ4:
            return lz4.frame.decompress(data)
        if kind == CompressionType.ZSTD:
            return _zstd_decompress(data)
        if kind == CompressionType.NONE:
            return data
    except CorruptRecordError:
        raise
    except (OSError, EOFError, zlib.error, RuntimeError, ValueError, zstandard.ZstdError) as exc:
        raise CorruptRecordError(f"cannot decompress {CompressionType(kind).name} records: {exc}") from exc
    except Exception as exc:  # cramjam raises its own DecompressionError type
        raise CorruptRecordError(f"cannot decompress records: {exc}") from exc
    raise CorruptRecordError(f"unknown compression type {kind} in batch attributes")
