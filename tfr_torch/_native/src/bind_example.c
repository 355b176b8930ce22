/* The Example bindings of tfr_torch._native._core (see module.c): the ExampleDecoder type, the Arena type its
 * batches' columns live in, and decode_free_ns. The kernels: batch.c, example.c. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batch.h"
#include "bindings.h"
#include "example.h"

/* ---- arenas: memory a kernel fills without the GIL, handed to Python as one writable buffer ------------------ */

typedef struct {
    PyObject_HEAD
    char *data; /* from PyMem_RawMalloc, owned */
    Py_ssize_t size;
} Arena;

static int arena_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Arena *arena = (Arena *)self;
    return PyBuffer_FillInfo(view, self, arena->data, arena->size, 0, flags);
}

static void arena_dealloc(PyObject *self) {
    PyMem_RawFree(((Arena *)self)->data);
    PyObject_Free(self);
}

static PyBufferProcs arena_as_buffer = {arena_getbuffer, NULL};

PyTypeObject ArenaType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tfr_torch._native._core.Arena",
    .tp_basicsize = sizeof(Arena),
    .tp_dealloc = arena_dealloc,
    .tp_as_buffer = &arena_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory filled by a kernel (a decoded batch's columns); read it through the buffer protocol.",
};

/* A new Arena owning `data` (size bytes); frees `data` when the object cannot be made. */
static PyObject *arena_wrap(char *data, size_t size) {
    Arena *arena = PyObject_New(Arena, &ArenaType);
    if (!arena) {
        PyMem_RawFree(data);
        return NULL;
    }
    arena->data = data;
    arena->size = (Py_ssize_t)size;
    return (PyObject *)arena;
}

/* ---- Example decoding (the kernels: batch.c, example.c) ------------------------------------------------------ */

/* Nanoseconds that ExampleDecoder.decode has spent without the GIL, all calls and threads together (added to with
 * the GIL held): what a benchmark subtracts from a batch's time to find the time it held the GIL. */
static unsigned long long decode_free_ns;

static unsigned long long monotonic_ns(void) {
#if defined(CLOCK_MONOTONIC) && !defined(_WIN32)
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ULL + (unsigned long long)t.tv_nsec;
#else
    return 0;
#endif
}

PyObject *py_decode_free_ns(PyObject *self, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(decode_free_ns);
}

typedef struct {
    PyObject_HEAD
    tfr_plan plan;
    uint8_t *indices; /* [nkeys]: 1 where decode() also writes the column's sparse COO indices */
    uint8_t *spans;   /* [nkeys]: 1 where decode(records, True) gives a bytes column as spans of the records */
    int64_t *dense_count; /* [nkeys]: a dense column's count of values per record, -1 for the other keys */
    size_t *dense_order;  /* [ndense]: the dense columns, in the order their values lie in the arena */
    size_t ndense;
    int busy; /* decode() calls using the plan and arrays (without the GIL): __init__ must not free them meanwhile */
} ExampleDecoder;

/* Per-key flags from an optional bytes argument (one byte per key; nonzero sets the flag where the key's kind is
 * `want` == TFR_BYTES, or is not bytes when `want` is -1) into a new array at *out. */
static int key_flags(const tfr_plan *plan, const Py_buffer *arg, int want, const char *what, uint8_t **out) {
    size_t n = plan->nkeys;
    if (arg->buf && (size_t)arg->len != n) {
        PyErr_Format(PyExc_ValueError, "ExampleDecoder: %s needs one byte per key", what);
        return -1;
    }
    free(*out);
    *out = calloc(n ? n : 1, 1);
    if (!*out) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t k = 0; arg->buf && k < n; k++)
        (*out)[k] = ((const uint8_t *)arg->buf)[k] && (want < 0 ? plan->kinds[k] != TFR_BYTES : plan->kinds[k] == want);
    return 0;
}

/* The dense columns from an optional buffer of int64 pairs (key, count of values per record), checked: numeric
 * keys of the plan, each once, counts from 1 to 2**32. */
static int dense_columns(ExampleDecoder *self, const Py_buffer *arg) {
    size_t n = self->plan.nkeys, m = arg->buf ? (size_t)arg->len / 16 : 0;
    if (arg->buf && arg->len % 16) {
        PyErr_SetString(PyExc_ValueError, "ExampleDecoder: dense needs (key, count) int64 pairs");
        return -1;
    }
    free(self->dense_count);
    free(self->dense_order);
    self->ndense = 0;
    self->dense_count = malloc((n ? n : 1) * sizeof(int64_t));
    self->dense_order = malloc((m ? m : 1) * sizeof(size_t));
    if (!self->dense_count || !self->dense_order) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t key = 0; key < n; key++) self->dense_count[key] = -1;
    for (size_t j = 0; j < m; j++) {
        int64_t pair[2];
        memcpy(pair, (const char *)arg->buf + 16 * j, sizeof pair);
        if (pair[0] < 0 || (uint64_t)pair[0] >= n || self->plan.kinds[pair[0]] == TFR_BYTES ||
            self->dense_count[pair[0]] >= 0 || pair[1] < 1 || pair[1] > ((int64_t)1 << 32)) {
            PyErr_SetString(PyExc_ValueError, "ExampleDecoder: dense needs (key, count) int64 pairs: numeric keys, "
                                              "each once, counts from 1 to 2**32");
            return -1;
        }
        self->dense_count[pair[0]] = pair[1];
        self->dense_order[j] = (size_t)pair[0];
    }
    self->ndense = m;
    return 0;
}

/* The decoder emptied: no plan, no per-key arrays (decode refuses it until an __init__ succeeds). */
static void decoder_clear(ExampleDecoder *self) {
    tfr_plan_free(&self->plan);
    free(self->indices);
    free(self->spans);
    free(self->dense_count);
    free(self->dense_order);
    self->indices = self->spans = NULL;
    self->dense_count = NULL;
    self->dense_order = NULL;
    self->ndense = 0;
}

/* ExampleDecoder(keys, kinds[, indices[, spans[, dense]]]): one byte per key in `indices`, `spans`; `indices`
 * nonzero where decode() also writes the sparse COO indices of that (numeric) column, `spans` where
 * decode(records, True) gives that bytes column as spans of the records instead of bytes objects; `dense`: int64
 * (key index, count) pairs, the numeric columns whose values decode() lays out back to back in that order when
 * every record holds each with its count */
static int decoder_init(ExampleDecoder *self, PyObject *args, PyObject *kwds) {
    PyObject *keys_arg;
    Py_buffer kinds, indices = {0}, spans = {0}, dense = {0};
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "ExampleDecoder: __init__ while a decode() of this decoder runs");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "Oy*|y*y*y*:ExampleDecoder", &keys_arg, &kinds, &indices, &spans, &dense)) return -1;
    int result = plan_from_python(&self->plan, keys_arg, &kinds, "ExampleDecoder");
    if (result == 0) result = key_flags(&self->plan, &indices, -1, "indices", &self->indices);
    if (result == 0) result = key_flags(&self->plan, &spans, TFR_BYTES, "spans", &self->spans);
    if (result == 0) result = dense_columns(self, &dense);
    PyBuffer_Release(&kinds);
    if (indices.buf) PyBuffer_Release(&indices);
    if (spans.buf) PyBuffer_Release(&spans);
    if (dense.buf) PyBuffer_Release(&dense);
    /* a failed __init__ (a second one included) must not leave a plan of one size with per-key arrays of another */
    if (result < 0) decoder_clear(self);
    return result;
}

static void decoder_dealloc(ExampleDecoder *self) {
    decoder_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The raw Feature bytes of one column, per record (None where absent), for the reference decoder. */
static PyObject *raw_column(const tfr_batch *s, size_t key) {
    PyObject *raws = PyList_New((Py_ssize_t)s->b);
    for (size_t i = 0; raws && i < s->b; i++) {
        tfr_slice slot = s->slots[i * s->k + key];
        PyObject *item = slot.ptr ? PyBytes_FromStringAndSize((const char *)slot.ptr, (Py_ssize_t)slot.len) : Py_None;
        if (!item) {
            Py_CLEAR(raws);
            break;
        }
        if (item == Py_None) Py_INCREF(item);
        PyList_SET_ITEM(raws, (Py_ssize_t)i, item);
    }
    return raws;
}

/* One column of decode()'s result (see decoder_decode). */
static PyObject *decoded_column(const ExampleDecoder *self, const tfr_batch *s, const tfr_column_layout *c,
                                size_t key, int use_spans) {
    if (s->uncommon[key]) {
        PyObject *raws = raw_column(s, key);
        return raws ? Py_BuildValue("(OONiiii)", Py_None, Py_None, raws, 0, -1, -1, 0) : NULL;
    }
    /* a bytes column's values were found as slices without the GIL (tfr_batch_fill): only the objects are made here */
    PyObject *values = self->plan.kinds[key] == TFR_BYTES && !(use_spans && self->spans[key])
                           ? bytes_of_slices(s->strings + c->strings, (size_t)s->totals[key])
                           : PyLong_FromSize_t(c->values);
    if (!values) return NULL;
    return Py_BuildValue("(nnNKnnK)", (Py_ssize_t)c->present, (Py_ssize_t)c->counts, values,
                         (unsigned long long)s->totals[key], (Py_ssize_t)tfr_batch_uniform(s, key),
                         self->indices[key] ? (Py_ssize_t)c->indices : (Py_ssize_t)-1, (unsigned long long)c->longest);
}

/* (0, arena, columns, dense) for a batch decoded into `arena` (a PyMem_RawMalloc block, owned from here on). */
static PyObject *decoded_batch(const ExampleDecoder *self, const tfr_batch *s, const tfr_column_layout *layout,
                               char *arena, size_t arena_size, int use_spans, int dense) {
    PyObject *arena_obj = arena_wrap(arena, arena_size);
    PyObject *columns = arena_obj ? PyList_New((Py_ssize_t)s->k) : NULL;
    for (size_t key = 0; columns && key < s->k; key++) {
        PyObject *column = decoded_column(self, s, &layout[key], key, use_spans);
        if (!column) Py_CLEAR(columns);
        else PyList_SET_ITEM(columns, (Py_ssize_t)key, column);
    }
    PyObject *result = columns ? Py_BuildValue("(iONO)", 0, arena_obj, columns, dense ? Py_True : Py_False) : NULL;
    Py_XDECREF(arena_obj);
    return result;
}

/* decode(records) -> (0, arena, columns, dense) | (1, i) | (2, i) | (3, i)
 *   arena: one writable buffer holding every column's arrays; columns[k]: (present, counts, values, total,
 *   uniform, indices, longest) where present (b bytes of 0/1) and counts (b int64) are offsets into the arena;
 *   values is the offset of `total` float32/int64 values, or a list of bytes; uniform is the count of every record
 *   when all have the feature with one count, else -1; indices is the offset of the [2, total] int64 COO indices
 *   (row, position) when the decoder was asked for them, else -1; longest is the largest count. A column of
 *   uncommon encodings is (None, None, raws, 0, -1, -1, 0), raws each record's Feature bytes or None. dense:
 *   True when every record holds each of the decoder's dense columns with its count, and their values then lie
 *   back to back in the decoder's order from the arena's start (each at its column's values offset).
 *   1: record i is malformed or uncommon, 2: a feature of record i is malformed or of another kind, 3: record i is
 *   not bytes. For 1-3 the caller decodes the batch with the reference parser, which defines the error.
 * The batch's arrays are allocated, and the scan, the count, the filling of the arena and the finding of the bytes
 * values run, in one stretch without the GIL, so decoding scales across threads; with the GIL only the records'
 * pointers are read before it and the result's objects (one list and tuple per column, a bytes object per bytes
 * value) made after it. */
static PyObject *decoder_decode(ExampleDecoder *self, PyObject *args) {
    PyObject *arg, *result = NULL;
    int use_spans = 0, why = 0;
    if (!PyArg_ParseTuple(args, "O|p:decode", &arg, &use_spans)) return NULL;
    /* a tuple of our own: its items stay alive and unchanged while the GIL is released */
    PyObject *seq = PySequence_Tuple(arg);
    if (!seq) return NULL;
    /* checked once the tuple is made: making it (a generator) may run __init__ */
    if (!self->indices || !self->spans || !self->dense_count || !self->dense_order) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_RuntimeError, "ExampleDecoder: not initialized (its __init__ failed or never ran)");
        return NULL;
    }
    self->busy++; /* to `done`: another thread's __init__ must not free what this call reads without the GIL */
    size_t k = self->plan.nkeys, arena_size = 0;
    tfr_column_layout *layout = NULL;
    tfr_batch s;
    tfr_batch_wants wants = {self->indices, use_spans ? self->spans : NULL, self->dense_count, self->dense_order,
                             self->ndense};
    char *arena = NULL;
    int64_t bad;
    if (tfr_batch_init(&s, (size_t)PyTuple_GET_SIZE(seq), k) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if ((bad = records_from_tuple(seq, s.data, s.size)) >= 0) {
        result = Py_BuildValue("(in)", 3, (Py_ssize_t)bad);
        goto done;
    }
    unsigned long long started = 0, stopped = 0;
    Py_BEGIN_ALLOW_THREADS
    started = monotonic_ns();
    bad = -2; /* out of memory, unless the batch's arrays are allocated */
    if (tfr_batch_alloc(&s) == 0 && (layout = calloc(k ? k : 1, sizeof(tfr_column_layout)))) {
        bad = tfr_batch_count(&self->plan, &s, &why);
        if (bad < 0 && !tfr_batch_dense(&s, wants)) wants.ndense = 0;
        if (bad < 0 && (arena_size = tfr_batch_layout(&self->plan, &s, wants, layout)) != (size_t)-1) {
            /* thread-safe without the GIL, and seen by tracemalloc */
            arena = PyMem_RawMalloc(arena_size ? arena_size : 1);
            bad = arena ? tfr_batch_fill(&self->plan, &s, wants, layout, arena) : -2;
            why = TFR_WHY_FEATURE;
        } else if (bad < 0) {
            bad = -2;
        }
    }
    stopped = monotonic_ns();
    Py_END_ALLOW_THREADS
    decode_free_ns += stopped - started;
    if (bad >= 0 || bad == -2) {
        PyMem_RawFree(arena);
        result = bad >= 0 ? Py_BuildValue("(in)", why, (Py_ssize_t)bad) : PyErr_NoMemory();
        goto done;
    }
    result = decoded_batch(self, &s, layout, arena, arena_size, use_spans, wants.ndense > 0);
done:
    self->busy--;
    free(layout);
    tfr_batch_free(&s);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef decoder_methods[] = {
    {"decode", (PyCFunction)decoder_decode, METH_VARARGS,
     "decode(records, spans=False) -> (0, arena, columns) or (status, record index): the planned features of a "
     "batch of Examples"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject ExampleDecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tfr_torch._native._core.ExampleDecoder",
    .tp_basicsize = sizeof(ExampleDecoder),
    .tp_dealloc = (destructor)decoder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ExampleDecoder(keys, kinds): decodes the Features of `keys` (bytes; kinds 0 bytes, 1 float, 2 int64)",
    .tp_methods = decoder_methods,
    .tp_init = (initproc)decoder_init,
    .tp_new = PyType_GenericNew,
};
