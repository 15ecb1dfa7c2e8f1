/* Compiled fast path of shared/records/decoder.py: a records section decoded into Record objects in
 * one C loop.
 *
 * decode_plain(data, start, end, count, base_offset, base_timestamp, log_append_time, cls)
 *   -> list of cls instances, or None
 *
 * Only valid sections are handled here (headers included): every varint well-formed and inside its
 * record, header keys valid UTF-8, every record ending exactly where its length says and the section
 * ending after the last record. Anything else returns None and the caller decodes the section with the
 * pure-Python decoder, which names what is wrong. So for any input this gives either exactly what the
 * Python decoder gives, or None.
 *
 * It also holds the producer's record encoder (append_record) and per-record future (new_future), the
 * broker's record walk for plain records (check_plain), the columnar decode's field reader and value copy
 * (plain_fields, gather) and the bench's byte count (payload_size).
 *
 * The objects are made without running __init__: allocated with the class's tp_alloc and their five
 * slots (offset, timestamp, key, value, headers) stored at the offsets of Record's member descriptors,
 * which set_record_class() reads once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

static PyTypeObject *record_type = NULL;
static Py_ssize_t slot_offset[5]; /* offset, timestamp, key, value, headers */
static PyObject *no_headers = NULL;

static const char *const slot_names[5] = {"offset", "timestamp", "key", "value", "headers"};

/* A fast-call function's argument count and its class, registered once by ``setter``: 0 with TypeError or
 * RuntimeError set if either is wrong. */
static int call_ready(Py_ssize_t nargs, Py_ssize_t want, const char *usage, const void *registered, const char *setter) {
    if (nargs != want) {
        PyErr_SetString(PyExc_TypeError, usage);
        return 0;
    }
    if (registered == NULL) {
        PyErr_Format(PyExc_RuntimeError, "%s was not called", setter);
        return 0;
    }
    return 1;
}

/* The offsets of ``n`` object slots of ``cls`` (its own or inherited: each name's member descriptor), into
 * ``out``; -1 with TypeError if one is not an object slot. */
static int slot_offsets(PyObject *cls, const char *const *names, int n, Py_ssize_t *out) {
    for (int i = 0; i < n; i++) {
        PyObject *d = PyObject_GetAttrString(cls, names[i]);
        if (d == NULL)
            return -1;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (ok)
            out[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", ((PyTypeObject *)cls)->tp_name, names[i]);
            return -1;
        }
    }
    return 0;
}

static PyObject *set_record_class(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *cls, *headers;
    Py_ssize_t offsets[5];
    if (!PyArg_ParseTuple(args, "O!O", &PyType_Type, &cls, &headers) || slot_offsets(cls, slot_names, 5, offsets) < 0)
        return NULL;
    memcpy(slot_offset, offsets, sizeof(offsets));
    Py_XSETREF(record_type, (PyTypeObject *)Py_NewRef(cls));
    Py_XSETREF(no_headers, Py_NewRef(headers));
    Py_RETURN_NONE;
}

/* A zig-zag varint of at most 10 bytes at *pos (< end); 0 if it runs past end or does not fit 64 bits. */
static inline int read_zigzag(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end, int64_t *out) {
    uint64_t raw = 0;
    Py_ssize_t p = *pos;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end)
            return 0;
        unsigned char c = b[p++];
        if (shift == 63 && c > 1)
            return 0;
        raw |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80) {
            *pos = p;
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 1;
        }
    }
    return 0;
}

/* A record's headers: ``count`` (key, value) tuples at *pos, as decoder.decode_headers gives them (keys
 * UTF-8 text, values bytes or None). NULL with no error set: not this shape (the Python decoder decides);
 * NULL with an error set: out of memory. */
static PyObject *read_headers(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end, int64_t count) {
    if (count > (end - *pos) / 2)
        return NULL;
    PyObject *list = PyList_New((Py_ssize_t)count);
    if (list == NULL)
        return NULL;
    Py_ssize_t p = *pos;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        int64_t klen, vlen;
        if (!read_zigzag(b, &p, end, &klen) || klen < 0 || klen > end - p)
            goto bad;
        PyObject *k = PyUnicode_DecodeUTF8((const char *)b + p, (Py_ssize_t)klen, "strict");
        if (k == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                PyErr_Clear();
            goto bad;
        }
        p += (Py_ssize_t)klen;
        if (!read_zigzag(b, &p, end, &vlen) || vlen < -1 || vlen > end - p) {
            Py_DECREF(k);
            goto bad;
        }
        PyObject *v = vlen < 0 ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)b + p, vlen);
        if (v == NULL) {
            Py_DECREF(k);
            goto bad;
        }
        if (vlen > 0)
            p += (Py_ssize_t)vlen;
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(k);
            Py_DECREF(v);
            goto bad;
        }
        PyTuple_SET_ITEM(pair, 0, k);
        PyTuple_SET_ITEM(pair, 1, v);
        PyList_SET_ITEM(list, i, pair);
    }
    *pos = p;
    return list;
bad:
    Py_DECREF(list);
    return NULL;
}

/* A records section's arguments (data, start, stop, count) with ``data``'s buffer held in *view: 1 if the
 * bounds lie in the buffer and can hold ``count`` records (every record takes at least 7 bytes), 0 if not
 * (the buffer still held), -1 with an error set (no buffer held; also for an error of the caller's own
 * argument parsing before this call). */
static int section_args(PyObject *const *args, Py_buffer *view, Py_ssize_t *start, Py_ssize_t *stop, long long *count) {
    *start = PyLong_AsSsize_t(args[1]);
    *stop = PyLong_AsSsize_t(args[2]);
    *count = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred() || PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE) < 0)
        return -1;
    return !(*start < 0 || *stop > view->len || *start > *stop || *count < 0 || *count > (*stop - *start) / 7 + 1);
}

static PyObject *decode_plain(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (!call_ready(nargs, 8, "decode_plain takes 8 arguments", record_type, "set_record_class"))
        return NULL;
    PyObject *cls = args[7];
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, record_type)) {
        PyErr_SetString(PyExc_TypeError, "cls must be a Record class");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    long long base_offset = PyLong_AsLongLong(args[4]);
    long long base_ts = PyLong_AsLongLong(args[5]);
    int log_append = args[6] != Py_None;
    long long append_ts = log_append ? PyLong_AsLongLong(args[6]) : 0;
    Py_buffer view;
    Py_ssize_t start, stop;
    long long count;
    int fits = section_args(args, &view, &start, &stop, &count);
    if (fits < 0)
        return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    PyObject *result = NULL;
    PyObject *out = NULL;
    if (!fits)
        goto fallback;
    out = PyList_New((Py_ssize_t)count);
    if (out == NULL)
        goto done;
    Py_ssize_t pos = start;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        int64_t length, ts_delta, off_delta, klen, vlen, hcount;
        if (!read_zigzag(b, &pos, stop, &length) || length < 0 || length > stop - pos)
            goto fallback;
        Py_ssize_t rec_end = pos + (Py_ssize_t)length;
        pos += 1; /* the unused attributes byte */
        if (!read_zigzag(b, &pos, rec_end, &ts_delta) || !read_zigzag(b, &pos, rec_end, &off_delta) || off_delta < 0)
            goto fallback;
        /* A null key or value is -1 in one byte (0x01), as the Python decoder takes it. */
        Py_ssize_t at = pos;
        if (!read_zigzag(b, &pos, rec_end, &klen) || klen < -1 || klen > rec_end - pos || (klen == -1 && pos - at != 1))
            goto fallback;
        Py_ssize_t kpos = pos;
        if (klen > 0)
            pos += (Py_ssize_t)klen;
        at = pos;
        if (!read_zigzag(b, &pos, rec_end, &vlen) || vlen < -1 || vlen > rec_end - pos || (vlen == -1 && pos - at != 1))
            goto fallback;
        Py_ssize_t vpos = pos;
        if (vlen > 0)
            pos += (Py_ssize_t)vlen;
        if (!read_zigzag(b, &pos, rec_end, &hcount) || hcount < 0)
            goto fallback; /* a damaged record: the Python decoder names what is wrong */
        PyObject *headers;
        if (hcount == 0) {
            headers = Py_NewRef(no_headers);
        } else {
            headers = read_headers(b, &pos, rec_end, hcount);
            if (headers == NULL) {
                if (PyErr_Occurred())
                    goto done;
                goto fallback;
            }
        }
        if (pos != rec_end) {
            Py_DECREF(headers);
            goto fallback;
        }
        long long offset, ts;
        if (__builtin_add_overflow(base_offset, off_delta, &offset)
            || (!log_append && __builtin_add_overflow(base_ts, ts_delta, &ts))) {
            Py_DECREF(headers);
            goto fallback;
        }
        if (log_append)
            ts = append_ts;

        PyObject *key = klen < 0 ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)b + kpos, klen);
        if (key == NULL) {
            Py_DECREF(headers);
            goto done;
        }
        PyObject *value = vlen < 0 ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)b + vpos, vlen);
        if (value == NULL) {
            Py_DECREF(key);
            Py_DECREF(headers);
            goto done;
        }
        PyObject *o = PyLong_FromLongLong(offset);
        PyObject *t = o ? PyLong_FromLongLong(ts) : NULL;
        PyObject *rec = t ? type->tp_alloc(type, 0) : NULL;
        if (rec == NULL) {
            Py_XDECREF(o);
            Py_XDECREF(t);
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            goto done;
        }
        char *base = (char *)rec;
        *(PyObject **)(base + slot_offset[0]) = o;
        *(PyObject **)(base + slot_offset[1]) = t;
        *(PyObject **)(base + slot_offset[2]) = key;
        *(PyObject **)(base + slot_offset[3]) = value;
        *(PyObject **)(base + slot_offset[4]) = headers;
        PyList_SET_ITEM(out, i, rec);
    }
    if (pos != stop)
        goto fallback; /* bytes after the last record */
    result = out;
    out = NULL;
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return result;
}

static inline int put_zigzag(unsigned char *p, int64_t v) {
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 0;
    while (u >= 0x80) {
        p[n++] = (unsigned char)(u | 0x80);
        u >>= 7;
    }
    p[n++] = (unsigned char)u;
    return n;
}

/* append_record(parts, offset_delta, timestamp_delta, key, value, headers) -> bool
 *
 * builder.BatchBuilder.append's encoding of one record, appended to ``parts`` as the same bytes: the
 * record's length, attributes 0, the two deltas, the key and value with their lengths (-1: null) and
 * ``headers`` (already encoded: the count and the headers). A value of up to 256 bytes goes into one
 * piece with the rest; a longer one is appended as its own piece (copied once, at the batch's join).
 * False, with nothing appended, if key, value or headers is not exactly bytes (or None), or ``parts``
 * not a list (a closed builder's): the Python code encodes those, or refuses them. The deltas must fit 62 bits (the caller checks). */
static PyObject *append_record(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "append_record(parts, offset_delta, timestamp_delta, key, value, headers)");
        return NULL;
    }
    PyObject *parts = args[0], *key = args[3], *value = args[4], *headers = args[5];
    if (!PyList_CheckExact(parts) || (key != Py_None && !PyBytes_CheckExact(key)) || (value != Py_None && !PyBytes_CheckExact(value))
        || !PyBytes_CheckExact(headers))
        Py_RETURN_FALSE;
    long long od = PyLong_AsLongLong(args[1]);
    long long td = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    Py_ssize_t klen = key == Py_None ? -1 : PyBytes_GET_SIZE(key);
    Py_ssize_t vlen = value == Py_None ? -1 : PyBytes_GET_SIZE(value);
    Py_ssize_t hlen = PyBytes_GET_SIZE(headers);
    unsigned char head[64]; /* attributes, deltas, key length: at most 1 + 10 + 10 + 10 bytes */
    int h = 0;
    head[h++] = 0;
    h += put_zigzag(head + h, td);
    h += put_zigzag(head + h, od);
    h += put_zigzag(head + h, klen);
    unsigned char vhead[10];
    int vh = put_zigzag(vhead, vlen);
    Py_ssize_t kbytes = klen > 0 ? klen : 0, vbytes = vlen > 0 ? vlen : 0;
    int64_t body = (int64_t)h + kbytes + vh + vbytes + hlen;
    unsigned char lhead[10];
    int lh = put_zigzag(lhead, body);
    int inline_value = vbytes <= 256;
    Py_ssize_t first = lh + h + kbytes + vh + (inline_value ? vbytes + hlen : 0);
    PyObject *piece = PyBytes_FromStringAndSize(NULL, first);
    if (piece == NULL)
        return NULL;
    char *p = PyBytes_AS_STRING(piece);
    memcpy(p, lhead, lh);
    p += lh;
    memcpy(p, head, h);
    p += h;
    if (kbytes) {
        memcpy(p, PyBytes_AS_STRING(key), kbytes);
        p += kbytes;
    }
    memcpy(p, vhead, vh);
    p += vh;
    if (inline_value) {
        if (vbytes) {
            memcpy(p, PyBytes_AS_STRING(value), vbytes);
            p += vbytes;
        }
        memcpy(p, PyBytes_AS_STRING(headers), hlen);
    }
    int failed = PyList_Append(parts, piece) < 0;
    Py_DECREF(piece);
    if (!failed && !inline_value)
        failed = PyList_Append(parts, value) < 0 || (hlen && PyList_Append(parts, headers) < 0);
    if (failed)
        return NULL;
    Py_RETURN_TRUE;
}

/* The key and value bytes of a list of records (a null counts 0); None if an item is not a Record. */
static PyObject *payload_size(PyObject *Py_UNUSED(self), PyObject *records) {
    if (record_type == NULL || !PyList_Check(records)) {
        PyErr_SetString(PyExc_TypeError, "payload_size takes a list of records (after set_record_class)");
        return NULL;
    }
    long long total = 0;
    Py_ssize_t n = PyList_GET_SIZE(records);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(records, i);
        if (!PyObject_TypeCheck(r, record_type))
            Py_RETURN_NONE;
        for (int f = 2; f <= 3; f++) { /* key, value */
            PyObject *v = *(PyObject **)((char *)r + slot_offset[f]);
            if (v == NULL || v == Py_None)
                continue;
            if (!PyBytes_CheckExact(v))
                Py_RETURN_NONE;
            total += PyBytes_GET_SIZE(v);
        }
    }
    return PyLong_FromLongLong(total);
}

/* A zig-zag varint of at most 5 bytes (as Kafka reads 32-bit fields) at *pos (< end). */
static inline int read_varint32(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end, int64_t *out) {
    Py_ssize_t at = *pos;
    return read_zigzag(b, pos, end, out) && *pos - at <= 5;
}

/* The walk check_plain and plain_fields share: ``count`` records without headers filling b[start:stop]
 * exactly. ``rows`` NULL (the broker's check): offset deltas must be 0..count-1 and *max_td gets the
 * largest timestamp delta. ``rows`` set (the consumer's columnar decode): offset deltas must be >= 0
 * (compacted batches have gaps) and six rows of ``count`` int64 are written (see plain_fields). */
static int walk_plain(const unsigned char *b, Py_ssize_t start, Py_ssize_t stop, long long count, int64_t *rows,
                      int64_t *max_td) {
    Py_ssize_t pos = start;
    for (long long i = 0; i < count; i++) {
        int64_t length, td, delta, n;
        if (!read_varint32(b, &pos, stop, &length) || length < 1 || length > stop - pos)
            return 0;
        Py_ssize_t end = pos + (Py_ssize_t)length;
        pos += 1; /* the unused attributes byte */
        if (!read_zigzag(b, &pos, end, &td) || !read_varint32(b, &pos, end, &delta) || delta < 0)
            return 0;
        if (rows == NULL && delta != i)
            return 0;
        if (rows != NULL) {
            rows[i] = td;
            rows[count + i] = delta;
        } else if (td > *max_td)
            *max_td = td;
        for (int f = 0; f < 2; f++) { /* key, value */
            if (!read_varint32(b, &pos, end, &n) || n < -1 || (n > 0 && n > end - pos))
                return 0;
            if (rows != NULL) {
                rows[(2 + 2 * f) * count + i] = pos;
                rows[(3 + 2 * f) * count + i] = n;
            }
            if (n > 0)
                pos += (Py_ssize_t)n;
        }
        if (pos >= end || b[pos] != 0) /* no header count, or headers: the Python walk */
            return 0;
        pos += 1;
        if (pos != end)
            return 0;
    }
    return pos == stop;
}

/* check_plain(data, start, stop, count) -> the records' max timestamp delta, or None
 *
 * The broker's record walk (shared/records/validate.py, check_records) for the common shape: ``count``
 * records without headers filling data[start:stop] exactly, every field inside its record, length and
 * offset-delta varints of at most 5 bytes (as Kafka reads 32-bit fields), offset deltas 0..count-1, key
 * and value lengths >= -1. It accepts only records the Python walk accepts, with the same max delta;
 * anything else (headers, a damaged record, a timestamp delta beyond 64 bits) gives None and the Python
 * checks decide and name the fault. */
static PyObject *check_plain(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "check_plain(data, start, stop, count)");
        return NULL;
    }
    Py_buffer view;
    Py_ssize_t start, stop;
    long long count;
    int fits = section_args(args, &view, &start, &stop, &count);
    if (fits < 0)
        return NULL;
    int64_t max_td = INT64_MIN;
    int ok = fits && count >= 1 && walk_plain((const unsigned char *)view.buf, start, stop, count, NULL, &max_td);
    PyBuffer_Release(&view);
    if (!ok)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(max_td);
}

/* plain_fields(data, start, stop, count, out) -> bool
 *
 * The consumer's columnar decode (shared/records/positions.py, record_positions) for records without
 * headers: for each of the ``count`` records filling data[start:stop] exactly, six int64 are written to
 * ``out`` (a writable buffer of at least count * 6 of them, as six rows of ``count``): timestamp delta,
 * offset delta, key start, key length, value start, value length (-1: null). False, with ``out`` partly
 * written, for anything else -- headers, a length or delta that does not fit, a field past its record, a
 * negative offset delta, a byte after the last record -- and the numpy or record-by-record decoders
 * decide and name the fault, as before. */
static PyObject *plain_fields(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "plain_fields(data, start, stop, count, out)");
        return NULL;
    }
    Py_buffer view, outv;
    Py_ssize_t start, stop;
    long long count;
    int fits = section_args(args, &view, &start, &stop, &count);
    if (fits < 0)
        return NULL;
    if (PyObject_GetBuffer(args[4], &outv, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int ok = fits && count >= 1 && outv.len >= (Py_ssize_t)(count * 6 * (long long)sizeof(int64_t))
             && walk_plain((const unsigned char *)view.buf, start, stop, count, (int64_t *)outv.buf, NULL);
    PyBuffer_Release(&outv);
    PyBuffer_Release(&view);
    return PyBool_FromLong(ok);
}

/* gather(src, starts, ends, out, at) -> at + the bytes copied
 *
 * The Arrow path's value copy (shared/records/arrow.py, binary_column_of): src[starts[i]:ends[i]] for each
 * i, one after the other into ``out`` from ``at`` (starts and ends: int64 buffers of one length). A span
 * outside src, or more bytes than ``out`` holds, is a ValueError and nothing is promised of ``out``. */
static PyObject *gather(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "gather(src, starts, ends, out, at)");
        return NULL;
    }
    Py_ssize_t at = PyLong_AsSsize_t(args[4]);
    if (at == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer src, sv, ev, out;
    if (PyObject_GetBuffer(args[0], &src, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &sv, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &ev, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&sv);
        PyBuffer_Release(&src);
        return NULL;
    }
    if (PyObject_GetBuffer(args[3], &out, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&ev);
        PyBuffer_Release(&sv);
        PyBuffer_Release(&src);
        return NULL;
    }
    const char *why = NULL;
    if (sv.len != ev.len || sv.len % (Py_ssize_t)sizeof(int64_t) || at < 0 || at > out.len)
        why = "gather: starts and ends must be int64 buffers of one length, and at inside out";
    Py_ssize_t n = sv.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *st = (const int64_t *)sv.buf, *en = (const int64_t *)ev.buf;
    const char *from = (const char *)src.buf;
    char *to = (char *)out.buf;
    for (Py_ssize_t i = 0; i < n && why == NULL; i++) {
        int64_t a = st[i], b = en[i];
        if (a < 0 || b < a || b > src.len)
            why = "gather: a span lies outside src";
        else if (b - a > out.len - at)
            why = "gather: out is too small";
        else {
            memcpy(to + at, from + a, (size_t)(b - a));
            at += (Py_ssize_t)(b - a);
        }
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&ev);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&src);
    if (why != NULL) {
        PyErr_SetString(PyExc_ValueError, why);
        return NULL;
    }
    return PyLong_FromSsize_t(at);
}

/* The producer's per-record future (shared.client.futures.FutureRecordMetadata), made without running
 * __init__: allocated with the class's tp_alloc and its three slots (_result, _relative, _timestamp)
 * stored at the offsets set_future_class() reads once. Calling the Python class cost send() ~0.3 µs. */
static PyTypeObject *future_type = NULL;
static Py_ssize_t future_offset[3]; /* _result, _relative, _timestamp */
static const char *const future_slots[3] = {"_result", "_relative", "_timestamp"};

static PyObject *set_future_class(PyObject *Py_UNUSED(self), PyObject *cls) {
    Py_ssize_t offsets[3];
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "set_future_class takes a class");
        return NULL;
    }
    if (slot_offsets(cls, future_slots, 3, offsets) < 0)
        return NULL;
    memcpy(future_offset, offsets, sizeof(offsets));
    Py_XSETREF(future_type, (PyTypeObject *)Py_NewRef(cls));
    Py_RETURN_NONE;
}

/* new_future(result, relative_offset, timestamp) -> FutureRecordMetadata */
static PyObject *new_future(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (!call_ready(nargs, 3, "new_future(result, relative_offset, timestamp)", future_type, "set_future_class"))
        return NULL;
    PyObject *f = future_type->tp_alloc(future_type, 0);
    if (f == NULL)
        return NULL;
    for (int i = 0; i < 3; i++)
        *(PyObject **)((char *)f + future_offset[i]) = Py_NewRef(args[i]);
    return f;
}

static PyMethodDef methods[] = {
    {"append_record", (PyCFunction)(void (*)(void))append_record, METH_FASTCALL,
     "append_record(parts, offset_delta, timestamp_delta, key, value, headers) -> bool"},
    {"payload_size", payload_size, METH_O, "payload_size(records) -> key and value bytes of the records, or None"},
    {"set_record_class", set_record_class, METH_VARARGS,
     "set_record_class(Record, NO_HEADERS): the class whose slots decode_plain fills, and the headers value"},
    {"decode_plain", (PyCFunction)(void (*)(void))decode_plain, METH_FASTCALL,
     "decode_plain(data, start, end, count, base_offset, base_timestamp, log_append_time, cls) -> list | None"},
    {"check_plain", (PyCFunction)(void (*)(void))check_plain, METH_FASTCALL,
     "check_plain(data, start, stop, count) -> max timestamp delta of valid plain records, or None"},
    {"plain_fields", (PyCFunction)(void (*)(void))plain_fields, METH_FASTCALL,
     "plain_fields(data, start, stop, count, out) -> whether out holds the fields of plain records"},
    {"gather", (PyCFunction)(void (*)(void))gather, METH_FASTCALL,
     "gather(src, starts, ends, out, at) -> at + bytes copied: the spans of src one after the other in out"},
    {"set_future_class", set_future_class, METH_O,
     "set_future_class(FutureRecordMetadata): the class whose slots new_future fills"},
    {"new_future", (PyCFunction)(void (*)(void))new_future, METH_FASTCALL,
     "new_future(result, relative_offset, timestamp) -> a future of that class, without running __init__"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", "Compiled record decoding.", -1, methods};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
