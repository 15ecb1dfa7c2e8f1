"""Decoding a batch's records into ``Record`` objects, record by record or through the vectorised walk.

Pure: bytes in, objects out. Every record must end exactly where its length
says and the records section must end after the last record, so a damaged
batch raises ``CorruptRecordError`` rather than returning wrong data.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import repeat

from shared.errors import CorruptRecordError
from shared.records.compiled import speedups
from shared.records.compression import decompress
from shared.records.header import (
    ATTR_COMPRESSION_MASK,
    ATTR_TIMESTAMP_TYPE,
    HEADER_SIZE,
    BatchHeader,
    check_batch,
    iter_batches,
)
from shared.records.positions import cut_keys_values, record_positions
from shared.records.record import CONTROL_KEY, NO_HEADERS, Header, Record
from shared.records.varint import decode_zigzag

_speedups = speedups  # this module's handle on it (the tests set it to None to run the Python decoder)
if _speedups is not None:
    _speedups.set_record_class(Record, NO_HEADERS)

#: True when records are decoded by the compiled loop (``shared/records/_speedups.c``).
COMPILED = _speedups is not None
#: Record classes the compiled loop may make without running their ``__init__`` (Record's own).
_PLAIN_INIT: dict[type, bool] = {}


def _plain_init(cls: type[Record]) -> bool:
    ok = _PLAIN_INIT.get(cls)
    if ok is None:
        ok = _PLAIN_INIT[cls] = cls.__init__ is Record.__init__
    return ok


def decode_headers(buf: bytes, pos: int, count: int) -> tuple[list[Header], int]:
    headers: list[Header] = []
    for _ in range(count):
        klen, pos = decode_zigzag(buf, pos)
        if klen < 0 or pos + klen > len(buf):
            raise CorruptRecordError("invalid header key length")
        try:
            hk = buf[pos : pos + klen].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError("header key is not valid UTF-8") from exc
        pos += klen
        vlen, pos = decode_zigzag(buf, pos)
        if vlen < 0:
            hv = None
        else:
            if pos + vlen > len(buf):
                raise CorruptRecordError("header value runs past the record")
            hv = buf[pos : pos + vlen]
            pos += vlen
        headers.append((hk, hv))
    return headers, pos




def payload_size(records: list[Record]) -> int:
    """The key and value bytes of ``records`` (a null key or value counts 0), as Kafka's
    ConsumerPerformance counts them; summed in C when the extension is built."""
    if _speedups is not None:
        n = _speedups.payload_size(records)
        if n is not None:
            return n
    return sum(len(r.key) for r in records if r.key) + sum(len(r.value) for r in records if r.value)


def records_section(buf: bytes | memoryview, header: BatchHeader, pos: int = 0) -> bytes:
    """The batch's records bytes, decompressed."""
    raw = bytes(buf[pos + HEADER_SIZE : pos + header.size])
    comp = header.attributes & ATTR_COMPRESSION_MASK
    if comp:
        return decompress(comp, raw)
    return raw


def decode_records(header: BatchHeader, data: bytes, record_cls: type[Record] | None = None, *,
                   start: int = 0, end: int | None = None) -> list[Record]:
    """Decode the (decompressed) records section of a batch: ``data[start:end]``.

    A valid section (headers included) is decoded by a compiled loop when the
    extension is built (``COMPILED``); it gives up on anything else, leaving that to
    the Python code below, which decodes it or names what is wrong. Without it, batches
    of many plain records (no headers, lengths below 1 MiB) have their
    field positions found for all records at once (``positions``); then only the
    key and value bytes are cut and the record objects made. Anything else goes
    through the record-by-record decoder, whose common shapes (one- or two-byte
    varints) are decoded inline. ``record_cls`` (a ``Record`` subclass) lets a
    caller get richer records without a second object per record. Each record
    must end exactly where its length says and the section must end after the
    last record, so a damaged section raises ``CorruptRecordError`` rather than
    returning wrong data.
    """
    make = record_cls or Record
    stop = len(data) if end is None else end
    if _speedups is not None and _plain_init(make):
        fast = _speedups.decode_plain(data, start, stop, header.records_count, header.base_offset,
                                      header.base_timestamp,
                                      header.max_timestamp if header.attributes & ATTR_TIMESTAMP_TYPE else None, make)
        if fast is not None:
            return fast
    found = record_positions(data, start, stop, header.records_count, header.base_offset, header.base_timestamp,
                             header.max_timestamp if header.attributes & ATTR_TIMESTAMP_TYPE else None)
    if found is not None:
        cut_by_runs = cut_keys_values(data, found)
        if cut_by_runs is not None:
            keys, values = cut_by_runs
        else:
            cut = data.__getitem__
            keys = list(map(cut, map(slice, found.key_start.tolist(), found.key_end.tolist())))
            values = list(map(cut, map(slice, found.value_start.tolist(), found.value_end.tolist())))
            if found.key_null is not None:
                keys = [None if null else k for k, null in zip(keys, found.key_null.tolist())]
            if found.value_null is not None:
                values = [None if null else v for v, null in zip(values, found.value_null.tolist())]
        return list(map(make, found.offsets.tolist(), found.timestamps.tolist(), keys, values,
                        repeat(NO_HEADERS, len(keys))))
    if start or stop != len(data):
        data = data[start:stop]
    try:
        return decode_records_scalar(header, data, make)
    except IndexError as exc:
        raise CorruptRecordError(
            f"records of batch at offset {header.base_offset} run past the end of the batch"
        ) from exc


def decode_records_scalar(header: BatchHeader, data: bytes, make: type[Record]) -> list[Record]:
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    log_append_ts = header.max_timestamp if header.attributes & ATTR_TIMESTAMP_TYPE else None
    out: list[Record] = []
    append = out.append
    pos = 0
    dz = decode_zigzag
    for _ in range(header.records_count):
        b = data[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            b2 = data[pos + 1]
            if b2 < 0x80:
                v = (b & 0x7F) | (b2 << 7)
                length = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                length, pos = dz(data, pos)
        rec_end = pos + length  # a wrong length is caught by the end-of-record check below
        b = data[pos + 1]  # skip the unused attributes byte
        if b == 0:
            ts = base_ts
            pos += 2
        elif b < 0x80:
            ts = base_ts + ((b >> 1) ^ -(b & 1))
            pos += 2
        else:
            td, pos = dz(data, pos + 1)
            ts = base_ts + td
        b = data[pos]
        if b < 0x80 and not b & 1:
            off = base_offset + (b >> 1)
            pos += 1
        else:
            b2 = data[pos + 1]
            if b2 < 0x80 and not b & 1:
                off = base_offset + (((b & 0x7F) | (b2 << 7)) >> 1)
                pos += 2
            else:
                od, pos = dz(data, pos)
                if od < 0:
                    raise CorruptRecordError(f"negative offset delta in the batch at offset {base_offset}")
                off = base_offset + od
        b = data[pos]
        if b < 0x80:
            pos += 1
            if b & 1:
                if b != 1:
                    raise CorruptRecordError(f"negative key length at offset {off}")
                key = None
            else:
                key = data[pos : pos + (b >> 1)]
                pos += b >> 1
        else:
            klen, pos = dz(data, pos)
            if klen < 0:
                raise CorruptRecordError(f"negative key length at offset {off}")
            key = data[pos : pos + klen]
            pos += klen
        b = data[pos]
        if b < 0x80:
            pos += 1
            if b & 1:
                if b != 1:
                    raise CorruptRecordError(f"negative value length at offset {off}")
                value = None
            else:
                value = data[pos : pos + (b >> 1)]
                pos += b >> 1
        else:
            b2 = data[pos + 1]
            if b2 < 0x80:
                vlen = ((b & 0x7F) | (b2 << 7)) >> 1
                if b & 1:
                    vlen = -vlen - 1
                pos += 2
            else:
                vlen, pos = dz(data, pos)
            if vlen < 0:
                raise CorruptRecordError(f"negative value length at offset {off}")
            value = data[pos : pos + vlen]
            pos += vlen
        if data[pos] == 0:
            headers = NO_HEADERS
            pos += 1
        else:
            hcount, pos = dz(data, pos)
            if hcount < 0:
                raise CorruptRecordError(f"negative header count at offset {off}")
            headers, pos = decode_headers(data, pos, hcount)
        if pos != rec_end:
            raise CorruptRecordError(
                f"record at offset {off} does not end where its length says "
                f"({rec_end - pos:+d} bytes)"
            )
        append(make(off, ts if log_append_ts is None else log_append_ts, key, value, headers))
    if pos != len(data):
        raise CorruptRecordError(
            f"batch at offset {base_offset} has {len(data) - pos} bytes after its last record"
        )
    return out


def decode_batch(buf: bytes | memoryview, pos: int = 0, *, validate: bool = True) -> tuple[BatchHeader, list[Record]]:
    """Validate (optionally) and decode one batch at ``pos``."""
    header = check_batch(buf, pos) if validate else BatchHeader.parse(buf, pos)
    return header, decode_records(header, records_section(buf, header, pos))


def iter_records(buf: bytes | memoryview, *, skip_control: bool = True) -> Iterator[Record]:
    """Every record of every whole batch in ``buf`` (control records skipped)."""
    for pos, header in iter_batches(buf):
        if skip_control and header.is_control:
            continue
        yield from decode_records(header, records_section(buf, header, pos))


def control_record_type(record: Record) -> int:
    """The control type (``CONTROL_ABORT`` / ``CONTROL_COMMIT``) of a control record."""
    if record.key is None or len(record.key) < 4:
        raise CorruptRecordError("control record key shorter than 4 bytes")
    _version, kind = CONTROL_KEY.unpack_from(record.key)
    return kind
