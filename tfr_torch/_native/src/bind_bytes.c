/* The bytes bindings of tfr_torch._native._core (see module.c): lists of bytes packed into and unpacked from
 * shared memory for the worker transport, and bytes values given as spans of their records. The kernels:
 * transport.c, spans.c. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>

#include "bindings.h"
#include "spans.h"
#include "transport.h"

/* ---- batches through shared memory (data/transport.py; the copies: transport.c) ------------------------------ */

/* bytes_total(values) -> the sum of the lengths when `values` is a list of bytes (exactly), else -1 */
PyObject *py_bytes_total(PyObject *self, PyObject *arg) {
    if (!PyList_CheckExact(arg)) return PyLong_FromLong(-1);
    Py_ssize_t n = PyList_GET_SIZE(arg), total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(arg, i);
        if (!PyBytes_CheckExact(item)) return PyLong_FromLong(-1);
        total += PyBytes_GET_SIZE(item); /* cannot overflow: the objects exist in memory */
    }
    return PyLong_FromSsize_t(total);
}

/* The items of a tuple of bytes as pointers and lengths (new arrays at *srcs, *lens), their lengths as a list of
 * ints, their sum at *total; NULL with ValueError when an item is not bytes. */
static PyObject *bytes_items(PyObject *items, const char ***srcs, size_t **lens, Py_ssize_t *total) {
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    *srcs = malloc((n ? (size_t)n : 1) * sizeof(char *));
    *lens = malloc((n ? (size_t)n : 1) * sizeof(size_t));
    PyObject *lengths = *srcs && *lens ? PyList_New(n) : PyErr_NoMemory();
    *total = 0;
    for (Py_ssize_t i = 0; lengths && i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(items, i);
        if (!PyBytes_CheckExact(item)) {
            PyErr_Format(PyExc_ValueError, "pack_bytes: item %zd is %.100s, not bytes", i, Py_TYPE(item)->tp_name);
            Py_CLEAR(lengths);
            break;
        }
        PyObject *length = PyLong_FromSsize_t(PyBytes_GET_SIZE(item));
        if (!length) Py_CLEAR(lengths);
        else PyList_SET_ITEM(lengths, i, length);
        (*srcs)[i] = PyBytes_AS_STRING(item);
        (*lens)[i] = (size_t)PyBytes_GET_SIZE(item);
        *total += PyBytes_GET_SIZE(item);
    }
    return lengths;
}

/* Copy n values (srcs, lens; `total` bytes) into the writable `target` from `offset`: 0, or -1 with ValueError
 * when they do not fit. */
static int pack_into(PyObject *target, Py_ssize_t offset, const char *const *srcs, const size_t *lens, size_t n,
                     Py_ssize_t total, const char *who) {
    Py_buffer buf;
    if (PyObject_GetBuffer(target, &buf, PyBUF_WRITABLE) < 0) return -1;
    int result = -1;
    if (offset < 0 || offset > buf.len || total > buf.len - offset) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes from offset %zd do not fit in %zd", who, total, offset,
                     buf.len);
    } else {
        Py_BEGIN_ALLOW_THREADS
        tfr_gather((char *)buf.buf + offset, srcs, lens, n);
        Py_END_ALLOW_THREADS
        result = 0;
    }
    PyBuffer_Release(&buf);
    return result;
}

/* pack_bytes(values, buffer, offset) -> lengths: the bytes of `values` (a list of bytes) written back to back into
 * the writable `buffer` from `offset`; ValueError when they do not fit or an item is not bytes. */
PyObject *py_pack_bytes(PyObject *self, PyObject *args) {
    PyObject *values, *target;
    Py_ssize_t offset, total;
    if (!PyArg_ParseTuple(args, "OOn:pack_bytes", &values, &target, &offset)) return NULL;
    PyObject *items = PySequence_Tuple(values); /* ours: its items stay alive while the GIL is released */
    if (!items) return NULL;
    const char **srcs;
    size_t *lens;
    PyObject *lengths = bytes_items(items, &srcs, &lens, &total);
    if (lengths && pack_into(target, offset, srcs, lens, (size_t)PyTuple_GET_SIZE(items), total, "pack_bytes") < 0)
        Py_CLEAR(lengths);
    free((void *)srcs);
    free(lens);
    Py_DECREF(items);
    return lengths;
}

/* A list of n new bytes objects of the given lengths (a sequence of ints), their storage at dsts and their
 * lengths at lens; ValueError for a negative length or one that runs past `size` bytes from `offset`. */
static PyObject *new_bytes_list(PyObject *lengths, Py_ssize_t n, Py_ssize_t offset, Py_ssize_t size, char **dsts,
                                size_t *lens) {
    PyObject *out = PyList_New(n);
    Py_ssize_t pos = offset;
    if (out && (offset < 0 || offset > size)) {
        PyErr_Format(PyExc_ValueError, "unpack_bytes: offset %zd is outside the %zd-byte buffer", offset, size);
        Py_CLEAR(out);
    }
    for (Py_ssize_t i = 0; out && i < n; i++) {
        Py_ssize_t length = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(lengths, i));
        if (length == -1 && PyErr_Occurred()) {
            Py_CLEAR(out);
        } else if (length < 0 || length > size - pos) {
            PyErr_Format(PyExc_ValueError, "unpack_bytes: item %zd of %zd bytes at offset %zd runs past the %zd-byte "
                         "buffer", i, length, pos, size);
            Py_CLEAR(out);
        } else {
            PyObject *item = PyBytes_FromStringAndSize(NULL, length);
            if (!item) Py_CLEAR(out);
            else PyList_SET_ITEM(out, i, item);
            if (item) dsts[i] = PyBytes_AS_STRING(item), lens[i] = (size_t)length;
            pos += length;
        }
    }
    return out;
}

/* unpack_bytes(buffer, offset, lengths) -> list of bytes: new bytes objects of the given lengths, copied from
 * `buffer` back to back from `offset`; ValueError for a negative length or one that runs past the buffer. */
PyObject *py_unpack_bytes(PyObject *self, PyObject *args) {
    PyObject *lengths_arg, *out = NULL;
    Py_buffer buf;
    Py_ssize_t offset;
    if (!PyArg_ParseTuple(args, "y*nO:unpack_bytes", &buf, &offset, &lengths_arg)) return NULL;
    PyObject *lengths = PySequence_Fast(lengths_arg, "unpack_bytes: lengths must be a sequence of ints");
    Py_ssize_t n = lengths ? PySequence_Fast_GET_SIZE(lengths) : 0;
    char **dsts = malloc((n ? (size_t)n : 1) * sizeof(char *));
    size_t *lens = malloc((n ? (size_t)n : 1) * sizeof(size_t));
    if (lengths && (!dsts || !lens)) PyErr_NoMemory();
    else if (lengths) out = new_bytes_list(lengths, n, offset, buf.len, dsts, lens);
    if (out) {
        Py_BEGIN_ALLOW_THREADS
        tfr_scatter((const char *)buf.buf + offset, dsts, lens, (size_t)n);
        Py_END_ALLOW_THREADS
    }
    free(dsts);
    free(lens);
    Py_XDECREF(lengths);
    PyBuffer_Release(&buf);
    return out;
}

/* ---- bytes values as spans of their records (ExampleDecoder.decode(records, True); the kernel: spans.c) ------ */

static void spans_error(const uint8_t *at, size_t j, const char *who) {
    int64_t span[3];
    tfr_span_at(at, j, span);
    PyErr_Format(PyExc_ValueError, "%s: span %zd (record %lld, bytes %lld+%lld) is outside the records", who,
                 (Py_ssize_t)j, (long long)span[0], (long long)span[1], (long long)span[2]);
}

/* The `total` spans at `offset` of the arena (checked by spans_args to lie in it) resolved against the records (a
 * tuple of bytes: a span may name nothing else) into ptrs and lens (arrays of total), their sum at *sum; -1 with
 * ValueError when one lies outside its record. */
static int resolve_spans(PyObject *items, const Py_buffer *arena, Py_ssize_t offset, Py_ssize_t total,
                         const char **ptrs, size_t *lens, size_t *sum, const char *who) {
    size_t nrec = (size_t)PyTuple_GET_SIZE(items);
    const char **recs = malloc((nrec ? nrec : 1) * sizeof(char *));
    size_t *rec_lens = malloc((nrec ? nrec : 1) * sizeof(size_t));
    int result = -1;
    if (!recs || !rec_lens) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t r = 0; r < nrec; r++) {
        PyObject *record = PyTuple_GET_ITEM(items, (Py_ssize_t)r);
        recs[r] = PyBytes_CheckExact(record) ? PyBytes_AS_STRING(record) : NULL;
        rec_lens[r] = recs[r] ? (size_t)PyBytes_GET_SIZE(record) : 0;
    }
    const uint8_t *at = (const uint8_t *)arena->buf + offset;
    int64_t bad = tfr_resolve_spans(at, (size_t)total, recs, rec_lens, nrec, ptrs, lens, sum);
    if (bad >= 0) spans_error(at, (size_t)bad, who);
    else result = 0;
done:
    free((void *)recs);
    free(rec_lens);
    return result;
}

/* Parse (records, arena, offset, total, ...) and resolve the spans; the caller frees *ptrs and *lens and releases
 * *items and *arena. */
static int spans_args(PyObject *records_arg, PyObject *arena_arg, Py_ssize_t offset, Py_ssize_t total,
                      PyObject **items, Py_buffer *arena, const char ***ptrs, size_t **lens, size_t *sum,
                      const char *who) {
    *items = PySequence_Tuple(records_arg);
    if (!*items) return -1;
    if (PyObject_GetBuffer(arena_arg, arena, PyBUF_SIMPLE) < 0) {
        Py_CLEAR(*items);
        return -1;
    }
    /* the spans must lie in the arena before anything is allocated for them: `total` is the caller's word */
    int fit = !(offset < 0 || total < 0 || offset > arena->len || total > (arena->len - offset) / TFR_SPAN_BYTES);
    size_t count = total > 0 ? (size_t)total : 1;
    *ptrs = fit ? malloc(count * sizeof(char *)) : NULL;
    *lens = *ptrs ? malloc(count * sizeof(size_t)) : NULL;
    if (!fit) {
        PyErr_Format(PyExc_ValueError, "%s: %zd spans at offset %zd do not fit in the %zd-byte arena", who, total,
                     offset, arena->len);
    } else if (!*lens) {
        PyErr_NoMemory();
    } else if (resolve_spans(*items, arena, offset, total, *ptrs, *lens, sum, who) == 0) {
        return 0;
    }
    free((void *)*ptrs);
    free(*lens);
    PyBuffer_Release(arena);
    Py_CLEAR(*items);
    return -1;
}

/* A list of the n lengths as ints. */
static PyObject *length_list(const size_t *lens, size_t n) {
    PyObject *lengths = PyList_New((Py_ssize_t)n);
    for (size_t j = 0; lengths && j < n; j++) {
        PyObject *length = PyLong_FromSize_t(lens[j]);
        if (!length) Py_CLEAR(lengths);
        else PyList_SET_ITEM(lengths, (Py_ssize_t)j, length);
    }
    return lengths;
}

/* pack_spans(records, arena, offset, total, buffer, pos) -> lengths: the values the spans name, written back to
 * back into the writable `buffer` from `pos` (one copy, from the records themselves) */
PyObject *py_pack_spans(PyObject *self, PyObject *args) {
    PyObject *records_arg, *arena_arg, *target, *items, *lengths;
    Py_ssize_t offset, total, pos;
    size_t sum, *lens;
    Py_buffer arena;
    const char **ptrs;
    if (!PyArg_ParseTuple(args, "OOnnOn:pack_spans", &records_arg, &arena_arg, &offset, &total, &target, &pos))
        return NULL;
    if (spans_args(records_arg, arena_arg, offset, total, &items, &arena, &ptrs, &lens, &sum, "pack_spans") < 0)
        return NULL;
    lengths = length_list(lens, (size_t)total);
    if (lengths && pack_into(target, pos, ptrs, lens, (size_t)total, (Py_ssize_t)sum, "pack_spans") < 0)
        Py_CLEAR(lengths);
    free((void *)ptrs);
    free(lens);
    PyBuffer_Release(&arena);
    Py_DECREF(items);
    return lengths;
}

/* bytes_of_spans(records, arena, offset, total) -> list of bytes: the values the spans name, as new bytes */
PyObject *py_bytes_of_spans(PyObject *self, PyObject *args) {
    PyObject *records_arg, *arena_arg, *items, *out;
    Py_ssize_t offset, total;
    size_t sum, *lens;
    Py_buffer arena;
    const char **ptrs;
    if (!PyArg_ParseTuple(args, "OOnn:bytes_of_spans", &records_arg, &arena_arg, &offset, &total)) return NULL;
    if (spans_args(records_arg, arena_arg, offset, total, &items, &arena, &ptrs, &lens, &sum, "bytes_of_spans") < 0)
        return NULL;
    out = PyList_New(total);
    for (Py_ssize_t j = 0; out && j < total; j++) {
        PyObject *item = PyBytes_FromStringAndSize(ptrs[j], (Py_ssize_t)lens[j]);
        if (!item) Py_CLEAR(out);
        else PyList_SET_ITEM(out, j, item);
    }
    free((void *)ptrs);
    free(lens);
    PyBuffer_Release(&arena);
    Py_DECREF(items);
    return out;
}
