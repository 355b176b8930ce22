/* tfr_torch._native._core: the Python face of the kernels. Each function takes buffers, releases the GIL while
 * the kernel runs, and returns buffers or lists plus positions; Python turns positions into messages. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifndef _WIN32
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>
#endif

#include "crc32c.h"
#include "example.h"
#include "framing.h"

/* ---- CRC ---------------------------------------------------------------------------------------------------- */

static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    Py_buffer data;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I:crc32c", &data, &value)) return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = tfr_crc32c(value, data.buf, (size_t)data.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *py_masked_crc32c(PyObject *self, PyObject *arg) {
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = tfr_mask_crc(tfr_crc32c(0, data.buf, (size_t)data.len));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *py_hardware_crc(PyObject *self, PyObject *noargs) { return PyBool_FromLong(tfr_crc32c_hardware()); }

/* ---- framing ------------------------------------------------------------------------------------------------ */

/* scan_records(buffer, lo, hi, limit, verify, max_records[, lengths]) -> (records, stop, status); with `lengths`
 * true, `records` is instead a bytes object of their int64 lengths (for counting and indexing: no copy of data) */
static PyObject *py_scan_records(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t lo, hi, limit, max_records;
    int verify, lengths = 0;
    if (!PyArg_ParseTuple(args, "y*nnnpn|p:scan_records", &buf, &lo, &hi, &limit, &verify, &max_records, &lengths))
        return NULL;
    if (lo < 0 || hi < lo || hi > buf.len || max_records < 1 || max_records > (1 << 20)) {
        PyBuffer_Release(&buf);
        return PyErr_Format(PyExc_ValueError, "scan_records: bad range lo=%zd hi=%zd of %zd bytes (max_records=%zd)",
                            lo, hi, buf.len, max_records);
    }
    if (limit < lo) limit = lo;
    tfr_span *spans = malloc((size_t)max_records * sizeof(tfr_span));
    if (!spans) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    size_t count, stop;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = tfr_scan_records(buf.buf, (size_t)lo, (size_t)hi, (size_t)limit, verify, spans, (size_t)max_records,
                              &count, &stop);
    Py_END_ALLOW_THREADS
    PyObject *records;
    if (lengths) {
        records = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * sizeof(int64_t)));
        if (records) {
            int64_t *out = (int64_t *)PyBytes_AS_STRING(records);
            for (size_t i = 0; i < count; i++) out[i] = (int64_t)spans[i].length;
        }
        count = 0; /* nothing more to make */
    } else {
        records = PyList_New((Py_ssize_t)count);
    }
    for (size_t i = 0; records && i < count; i++) {
        PyObject *record = PyBytes_FromStringAndSize((const char *)buf.buf + spans[i].offset, (Py_ssize_t)spans[i].length);
        if (!record) Py_CLEAR(records);
        else PyList_SET_ITEM(records, (Py_ssize_t)i, record);
    }
    free(spans);
    PyBuffer_Release(&buf);
    if (!records) return NULL;
    return Py_BuildValue("(Nni)", records, (Py_ssize_t)stop, status);
}

#ifndef _WIN32
/* Fill iov[0 .. niov) from byte `pos` of file `fd` (preadv, up to 1024 iovecs a call: IOV_MAX on Linux and macOS).
 * Returns the index of the first iovec not filled whole: niov when all were, less at the end of the file or on a
 * read error. Filled iovecs are left with iov_len 0, a partly filled one shrunk. No Python calls. */
static size_t read_iovecs(int fd, struct iovec *iov, size_t niov, off_t pos) {
    size_t first = 0;
    while (first < niov) {
        int count = niov - first < 1024 ? (int)(niov - first) : 1024;
        ssize_t got = preadv(fd, iov + first, count, pos);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        pos += got;
        while (got > 0 && first < niov) {
            if ((size_t)got >= iov[first].iov_len) {
                got -= (ssize_t)iov[first].iov_len;
                iov[first++].iov_len = 0;
            } else {
                iov[first].iov_base = (char *)iov[first].iov_base + got;
                iov[first].iov_len -= (size_t)got;
                got = 0;
            }
        }
    }
    return first;
}

/* read_framed(fd, where, sizes, verify) -> (records, good): records of known framed sizes (int64, each >= 16, from
 * an index) read from file `fd` straight into their bytes objects (their framing into a scratch buffer): one copy
 * from the file, none after. `where` is either the byte offset of the first of records that lie back to back
 * (read by a few preadv calls for all of them), or an int64 array of one offset per record (one preadv each).
 * `good` records from the first are whole and pass their checks (header CRC, the length the index gave, the
 * data CRC when `verify`); `records` holds just those. From the first that does not, the caller reads on as
 * usual, which says what is wrong. A record that would end past the file is not allocated (nor any after it). */
static PyObject *py_read_framed(PyObject *self, PyObject *args) {
    int fd, verify;
    PyObject *where;
    Py_buffer sizes_buf, offsets_buf = {0};
    if (!PyArg_ParseTuple(args, "iOy*p:read_framed", &fd, &where, &sizes_buf, &verify)) return NULL;
    size_t n = (size_t)sizes_buf.len / sizeof(int64_t);
    PyObject *records = NULL, *result = NULL;
    uint8_t *scratch = NULL, **datas = NULL;
    size_t *lens = NULL;
    int64_t *offsets = NULL;
    struct iovec *iov = NULL;
    long long first_offset = 0;
    int back_to_back = PyLong_Check(where);
    struct stat st;
    if (back_to_back) {
        first_offset = PyLong_AsLongLong(where);
        if (first_offset == -1 && PyErr_Occurred()) goto done;
    } else if (PyObject_GetBuffer(where, &offsets_buf, PyBUF_SIMPLE) < 0) {
        goto done;
    }
    if (sizes_buf.len % (Py_ssize_t)sizeof(int64_t) || first_offset < 0 || n > (1u << 20) ||
        (!back_to_back && offsets_buf.len != sizes_buf.len)) {
        PyErr_SetString(PyExc_ValueError, "read_framed: sizes must be int64 framed sizes, with an offset >= 0 or one "
                                          "int64 offset per record");
        goto done;
    }
    if (fstat(fd, &st) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    scratch = malloc(16 * (n + 1));
    datas = malloc((n ? n : 1) * sizeof(*datas));
    lens = malloc((n ? n : 1) * sizeof(*lens));
    offsets = malloc((n ? n : 1) * sizeof(*offsets));
    iov = back_to_back ? malloc((2 * n + 1) * sizeof(*iov)) : NULL;
    if (!scratch || !datas || !lens || !offsets || (back_to_back && !iov)) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t size, offset;
        memcpy(&size, (const char *)sizes_buf.buf + i * sizeof size, sizeof size);
        if (back_to_back) offset = i ? offsets[i - 1] + (int64_t)lens[i - 1] + TFR_HEADER + TFR_FOOTER : first_offset;
        else memcpy(&offset, (const char *)offsets_buf.buf + i * sizeof offset, sizeof offset);
        if (size < TFR_HEADER + TFR_FOOTER || offset < 0) {
            PyErr_Format(PyExc_ValueError, "read_framed: record %zu at offset %lld, framed size %lld, is out of range",
                         i, (long long)offset, (long long)size);
            goto done;
        }
        if ((uint64_t)offset > (uint64_t)st.st_size || (uint64_t)size > (uint64_t)st.st_size - (uint64_t)offset) {
            n = i; /* past the end of the file (a size that lies never allocates more than the file holds) */
            break;
        }
        offsets[i] = offset;
        lens[i] = (size_t)size - TFR_HEADER - TFR_FOOTER;
    }
    records = PyList_New((Py_ssize_t)n);
    if (!records) goto done;
    for (size_t i = 0; i < n; i++) {
        PyObject *record = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)lens[i]);
        if (!record) goto done;
        PyList_SET_ITEM(records, (Py_ssize_t)i, record);
        datas[i] = (uint8_t *)PyBytes_AS_STRING(record);
    }
    /* the layout tfr_check_framed reads: header i at scratch + 4 + 16 i, its footer at scratch + 16 (i + 1), so a
     * footer and the next header are 16 adjacent bytes */
    size_t whole = 0, good;
    Py_BEGIN_ALLOW_THREADS
    if (back_to_back && n) { /* header 0; each record's data, then its footer and the next header; the last footer */
        size_t niov = 0;
        iov[niov].iov_base = scratch + 4;
        iov[niov++].iov_len = TFR_HEADER;
        for (size_t i = 0; i < n; i++) {
            iov[niov].iov_base = datas[i];
            iov[niov++].iov_len = lens[i];
            iov[niov].iov_base = scratch + 16 * (i + 1);
            iov[niov++].iov_len = i + 1 < n ? 16 : TFR_FOOTER;
        }
        size_t filled = read_iovecs(fd, iov, niov, (off_t)first_offset);
        whole = filled >= niov ? n : (filled >= 2 ? (filled - 1) / 2 : 0); /* record i ends with iovec 2 i + 2 */
    } else {
        for (; whole < n; whole++) {
            struct iovec one[3] = {{scratch + 4 + 16 * whole, TFR_HEADER}, {datas[whole], lens[whole]},
                                   {scratch + 16 * (whole + 1), TFR_FOOTER}};
            if (read_iovecs(fd, one, 3, (off_t)offsets[whole]) < 3) break;
        }
    }
    if (whole > n) whole = n;
    good = tfr_check_framed(scratch, datas, lens, whole, verify); /* a short read: the caller's reader says why */
    Py_END_ALLOW_THREADS
    if (PyList_SetSlice(records, (Py_ssize_t)good, (Py_ssize_t)n, NULL) < 0) goto done;
    result = Py_BuildValue("(On)", records, (Py_ssize_t)good);
done:
    Py_XDECREF(records);
    free(scratch);
    free(datas);
    free(lens);
    free(offsets);
    free(iov);
    if (offsets_buf.buf) PyBuffer_Release(&offsets_buf);
    PyBuffer_Release(&sizes_buf);
    return result;
}
#endif

/* find_header(buffer, lo, hi) -> offset of the first header passing its length CRC in [lo, hi), or -1 */
static PyObject *py_find_header(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "y*nn:find_header", &buf, &lo, &hi)) return NULL;
    if (lo < 0 || hi < lo || hi > buf.len) {
        PyBuffer_Release(&buf);
        return PyErr_Format(PyExc_ValueError, "find_header: bad range lo=%zd hi=%zd of %zd bytes", lo, hi, buf.len);
    }
    size_t found;
    Py_BEGIN_ALLOW_THREADS
    found = tfr_find_header(buf.buf, (size_t)lo, (size_t)hi);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    return PyLong_FromSsize_t(found == (size_t)-1 ? -1 : (Py_ssize_t)found);
}

/* frame_records(records) -> bytes: every record framed, back to back */
static PyObject *py_frame_records(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "frame_records expects a sequence of bytes-like records");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_buffer *views = calloc(n ? (size_t)n : 1, sizeof(Py_buffer));
    PyObject *out = NULL;
    Py_ssize_t got = 0, total = 0;
    if (!views) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < n; got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, got), &views[got], PyBUF_SIMPLE) < 0) goto done;
        if (views[got].len > PY_SSIZE_T_MAX - total - (TFR_HEADER + TFR_FOOTER)) {
            PyErr_SetString(PyExc_OverflowError, "frame_records: the records are too large together");
            got++;
            goto done;
        }
        total += views[got].len + TFR_HEADER + TFR_FOOTER;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        tfr_frame(dst, views[i].buf, (size_t)views[i].len);
        dst += views[i].len + TFR_HEADER + TFR_FOOTER;
    }
    Py_END_ALLOW_THREADS
done:
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    free(views);
    Py_DECREF(seq);
    return out;
}

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

static PyTypeObject ArenaType = {
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

/* ---- Example decoding ----------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    tfr_plan plan;
    uint8_t *indices; /* [nkeys]: 1 where decode() also writes the column's sparse COO indices */
    uint8_t *spans;   /* [nkeys]: 1 where decode(records, True) gives a bytes column as spans of the records */
} ExampleDecoder;

/* A plan from Python keys (a sequence of bytes) and kinds (one byte each: 0 bytes, 1 float, 2 int64). */
static int plan_from_python(tfr_plan *plan, PyObject *keys_arg, const Py_buffer *kinds, const char *who) {
    PyObject *keys = PySequence_Fast(keys_arg, "keys must be a sequence of bytes");
    int result = -1;
    const uint8_t **ptrs = NULL;
    size_t *lens = NULL;
    if (!keys) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(keys);
    if (n != kinds->len || n > (1 << 20)) {
        PyErr_Format(PyExc_ValueError, "%s: one kind per key, at most 2**20 keys", who);
        goto done;
    }
    ptrs = malloc((n ? (size_t)n : 1) * sizeof(*ptrs));
    lens = malloc((n ? (size_t)n : 1) * sizeof(*lens));
    if (!ptrs || !lens) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *key = PySequence_Fast_GET_ITEM(keys, k);
        uint8_t kind = ((const uint8_t *)kinds->buf)[k];
        if (!PyBytes_Check(key) || kind > TFR_INT64) {
            PyErr_Format(PyExc_TypeError, "%s: keys must be bytes, kinds 0 (bytes), 1 (float), 2 (int64)", who);
            goto done;
        }
        ptrs[k] = (const uint8_t *)PyBytes_AS_STRING(key);
        lens[k] = (size_t)PyBytes_GET_SIZE(key);
    }
    tfr_plan_free(plan);
    if (tfr_plan_init(plan, (size_t)n, ptrs, lens, kinds->buf) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    result = 0;
done:
    free(ptrs);
    free(lens);
    Py_XDECREF(keys);
    return result;
}

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

/* ExampleDecoder(keys, kinds[, indices[, spans]]): one byte per key in each; `indices` nonzero where decode()
 * also writes the sparse COO indices of that (numeric) column, `spans` where decode(records, True) gives that
 * bytes column as spans of the records instead of bytes objects */
static int decoder_init(ExampleDecoder *self, PyObject *args, PyObject *kwds) {
    PyObject *keys_arg;
    Py_buffer kinds, indices = {0}, spans = {0};
    if (!PyArg_ParseTuple(args, "Oy*|y*y*:ExampleDecoder", &keys_arg, &kinds, &indices, &spans)) return -1;
    int result = plan_from_python(&self->plan, keys_arg, &kinds, "ExampleDecoder");
    if (result == 0) result = key_flags(&self->plan, &indices, -1, "indices", &self->indices);
    if (result == 0) result = key_flags(&self->plan, &spans, TFR_BYTES, "spans", &self->spans);
    PyBuffer_Release(&kinds);
    if (indices.buf) PyBuffer_Release(&indices);
    if (spans.buf) PyBuffer_Release(&spans);
    return result;
}

static void decoder_dealloc(ExampleDecoder *self) {
    tfr_plan_free(&self->plan);
    free(self->indices);
    free(self->spans);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The scratch state of one decode call */
typedef struct {
    size_t b, k;
    const uint8_t **data;
    size_t *size;
    tfr_slice *slots;   /* [b * k]: each record's Feature of each key */
    uint64_t *counts;   /* [k * b] */
    tfr_slice *runs;    /* [k * b]: where each numeric Feature's values are (tfr_count_run) */
    uint8_t *present;   /* [k * b] */
    uint8_t *uncommon;  /* [k]: decode this column with the reference parser */
    uint64_t *totals;   /* [k] */
} batch;

static void batch_free(batch *s) {
    free(s->data);
    free(s->size);
    free(s->slots);
    free(s->counts);
    free(s->runs);
    free(s->present);
    free(s->uncommon);
    free(s->totals);
}

static int batch_alloc(batch *s, size_t b, size_t k) {
    memset(s, 0, sizeof(*s));
    s->b = b;
    s->k = k;
    size_t bb = b ? b : 1, kk = k ? k : 1;
    if (bb > SIZE_MAX / kk / sizeof(tfr_slice)) return -1;
    s->data = malloc(bb * sizeof(*s->data));
    s->size = malloc(bb * sizeof(*s->size));
    s->slots = calloc(bb * kk, sizeof(tfr_slice));
    s->counts = calloc(bb * kk, sizeof(uint64_t));
    s->runs = calloc(bb * kk, sizeof(tfr_slice));
    s->present = calloc(bb * kk, 1);
    s->uncommon = calloc(kk, 1);
    s->totals = calloc(kk, sizeof(uint64_t));
    return s->data && s->size && s->slots && s->counts && s->runs && s->present && s->uncommon && s->totals ? 0 : -1;
}

/* Find and count every planned Feature; returns -1 when all is well, else the record that needs the reference
 * (with *why 1: the record, 2: one of its features). No Python calls: runs without the GIL. */
static Py_ssize_t batch_count(const tfr_plan *plan, batch *s, int *why) {
    /* record by record: a record's Features are counted while its bytes are in cache */
    int32_t hints[TFR_KEY_HINTS] = {0};
    for (size_t i = 0; i < s->b; i++) {
        tfr_slice *slots = s->slots + i * s->k;
#if defined(__GNUC__)
        /* records are separate objects anywhere in memory: ask for the one after next while this one is read */
        if (i + 2 < s->b)
            for (size_t off = 0; off < s->size[i + 2] && off < 512; off += 64) __builtin_prefetch(s->data[i + 2] + off);
#endif
        if (tfr_scan_example(plan, s->data[i], s->size[i], slots, hints) < 0) {
            *why = 1;
            return (Py_ssize_t)i;
        }
        for (size_t key = 0; key < s->k; key++) {
            uint64_t count = 0;
            int present = 0;
            if (!slots[key].ptr) continue;
            int status = tfr_count_run(plan->kinds[key], slots[key], &count, &present, &s->runs[key * s->b + i]);
            if (status == TFR_F_UNCOMMON) {
                s->uncommon[key] = 1;
            } else if (status != TFR_F_OK) {
                *why = 2;
                return (Py_ssize_t)i;
            } else {
                s->counts[key * s->b + i] = count;
                s->present[key * s->b + i] = (uint8_t)present;
                s->totals[key] += count;
            }
        }
    }
    return -1;
}

/* The count every record has for `key` when all have the feature with the same count (a dense column), else -1 */
static Py_ssize_t uniform_count(const batch *s, size_t key) {
    const uint8_t *present = s->present + key * s->b;
    const uint64_t *counts = s->counts + key * s->b;
    if (s->b == 0 || counts[0] > (uint64_t)PY_SSIZE_T_MAX) return -1;
    for (size_t i = 0; i < s->b; i++)
        if (!present[i] || counts[i] != counts[0]) return -1;
    return (Py_ssize_t)counts[0];
}

static PyObject *new_bytearray(const void *src, size_t n) {
    if (n > (size_t)PY_SSIZE_T_MAX) return PyErr_NoMemory();
    PyObject *out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (out && src && n) memcpy(PyByteArray_AS_STRING(out), src, n);
    return out;
}

/* The raw Feature bytes of one column, per record (None where absent), for the reference decoder. */
static PyObject *raw_column(batch *s, size_t key) {
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

/* A list of new bytes objects: every value of the bytes_list Features features[0], features[stride], ... (n of
 * them; absent ones have a NULL ptr), `total` values in all, as counted before. */
static PyObject *bytes_of_features(const tfr_slice *features, size_t n, size_t stride, uint64_t total) {
    if (total > (uint64_t)PY_SSIZE_T_MAX / sizeof(tfr_slice)) return PyErr_NoMemory();
    tfr_slice *slices = malloc((total ? (size_t)total : 1) * sizeof(tfr_slice));
    if (!slices) return PyErr_NoMemory();
    PyObject *values = PyList_New((Py_ssize_t)total);
    size_t at = 0;
    for (size_t i = 0; values && i < n; i++) {
        tfr_slice feature = features[i * stride];
        if (feature.ptr) at += tfr_fill_bytes(feature, slices + at);
    }
    if (values && at != total) { /* the counting pass saw other bytes: never leave NULL items in a list */
        PyErr_Format(PyExc_SystemError, "bytes column: counted %llu values, found %zu", (unsigned long long)total, at);
        Py_CLEAR(values);
    }
    for (size_t j = 0; values && j < at; j++) {
        PyObject *item = PyBytes_FromStringAndSize((const char *)slices[j].ptr, (Py_ssize_t)slices[j].len);
        if (!item) Py_CLEAR(values);
        else PyList_SET_ITEM(values, (Py_ssize_t)j, item);
    }
    free(slices);
    return values;
}

/* A new bytearray for `total` float32 (4 bytes) or int64 values; *out points at its storage. */
static PyObject *numeric_column(int kind, uint64_t total, void **out) {
    if (total > (uint64_t)PY_SSIZE_T_MAX / 8) return PyErr_NoMemory();
    PyObject *values = new_bytearray(NULL, (size_t)total * (kind == TFR_FLOAT ? 4 : 8));
    if (values) *out = PyByteArray_AS_STRING(values);
    return values;
}

/* The values of the numeric Features features[0], features[stride], ... (n; absent ones NULL) into `out`, in
 * order. Called without the GIL. */
static void fill_numeric_column(int kind, const tfr_slice *features, size_t n, size_t stride, char *out) {
    size_t at = 0, width = kind == TFR_FLOAT ? 4 : 8;
    for (size_t i = 0; i < n; i++) {
        tfr_slice feature = features[i * stride];
        if (feature.ptr) at += tfr_fill_numeric(kind, feature, out + at * width);
    }
}

/* Where one column's arrays lie in a decoded batch's arena (byte offsets), and the longest row */
typedef struct {
    size_t present, counts, values, indices;
    uint64_t longest;
} column_layout;

static size_t round8(size_t n) { return (n + 7) & ~(size_t)7; }

/* A bytes column as spans: for each value (record index, start in the record, length), int64 each. Returns -1
 * when out of memory, or when the values found are not the values counted. */
static int fill_spans(const batch *s, size_t key, int64_t *out) {
    uint64_t total = s->totals[key];
    tfr_slice *values = malloc((total ? (size_t)total : 1) * sizeof(tfr_slice));
    if (!values) return -1;
    size_t at = 0;
    for (size_t i = 0; i < s->b; i++) {
        tfr_slice feature = s->slots[i * s->k + key];
        if (!feature.ptr || at + s->counts[key * s->b + i] > total) continue;
        size_t got = tfr_fill_bytes(feature, values + at);
        for (size_t j = at; j < at + got; j++, out += 3) {
            out[0] = (int64_t)i;
            out[1] = (int64_t)(values[j].ptr - s->data[i]);
            out[2] = (int64_t)values[j].len;
        }
        at += got;
    }
    free(values);
    return at == total ? 0 : -1;
}

/* One numeric column of a batch counted by batch_count into `out`: each record's run read straight, the rare other
 * encodings through their Feature. Returns -1, or the first record whose values fall short of its count (an int64
 * varint longer than 10 bytes: the record is malformed). */
static Py_ssize_t fill_runs(int kind, const batch *s, size_t key, char *out) {
    size_t width = kind == TFR_FLOAT ? 4 : 8, at = 0;
    const tfr_slice *runs = s->runs + key * s->b;
    const uint64_t *counts = s->counts + key * s->b;
    for (size_t i = 0; i < s->b; i++) {
        if (!counts[i]) continue;
        size_t got = runs[i].ptr ? tfr_fill_run(kind, runs[i], out + at * width)
                                 : tfr_fill_numeric(kind, s->slots[i * s->k + key], out + at * width);
        if (got != counts[i]) return (Py_ssize_t)i;
        at += got;
    }
    return -1;
}

/* Lay out every common column in one arena, allocate it and fill it: presence, counts, numeric values and, where
 * the plan asks, COO indices. No Python calls: runs without the GIL. Returns NULL when out of memory, or with *bad
 * set to the first record found malformed while filling (see fill_runs). */
static char *fill_arena(const ExampleDecoder *self, const batch *s, int use_spans, column_layout *layout,
                        size_t *size, Py_ssize_t *bad) {
    size_t b = s->b, at = 0;
    for (size_t key = 0; key < s->k; key++) {
        column_layout *c = &layout[key];
        if (s->uncommon[key]) continue;
        uint64_t total = s->totals[key];
        /* counted values come from the records' bytes (at least one byte each); checked all the same */
        if (total > (uint64_t)(SIZE_MAX / 64) || b > SIZE_MAX / 64 || at > SIZE_MAX / 4) return NULL;
        c->present = at;
        at += round8(b);
        c->counts = at;
        at += b * sizeof(uint64_t);
        if (self->plan.kinds[key] != TFR_BYTES) {
            c->values = at;
            at += round8((size_t)total * (self->plan.kinds[key] == TFR_FLOAT ? 4 : 8));
            if (self->indices[key]) {
                c->indices = at;
                at += (size_t)total * 2 * sizeof(int64_t);
            }
        } else if (use_spans && self->spans[key]) {
            c->values = at;
            at += (size_t)total * 3 * sizeof(int64_t);
        }
    }
    char *arena = PyMem_RawMalloc(at ? at : 1); /* thread-safe without the GIL, and seen by tracemalloc */
    if (!arena) return NULL;
    *size = at;
    for (size_t key = 0; key < s->k; key++) {
        column_layout *c = &layout[key];
        if (s->uncommon[key]) continue;
        const uint64_t *counts = s->counts + key * b;
        memcpy(arena + c->present, s->present + key * b, b);
        memcpy(arena + c->counts, counts, b * sizeof(uint64_t));
        for (size_t i = 0; i < b; i++)
            if (counts[i] > c->longest) c->longest = counts[i];
        int kind = self->plan.kinds[key];
        if (kind == TFR_BYTES) {
            if (use_spans && self->spans[key] && fill_spans(s, key, (int64_t *)(arena + c->values)) < 0) {
                PyMem_RawFree(arena);
                return NULL;
            }
            continue;
        }
        if ((*bad = fill_runs(kind, s, key, arena + c->values)) >= 0) {
            PyMem_RawFree(arena);
            return NULL;
        }
        if (self->indices[key]) {
            int64_t *row_of = (int64_t *)(arena + c->indices), *pos_of = row_of + s->totals[key];
            for (size_t i = 0, j = 0; i < b; i++)
                for (uint64_t v = 0; v < counts[i]; v++, j++) {
                    row_of[j] = (int64_t)i;
                    pos_of[j] = (int64_t)v;
                }
        }
    }
    return arena;
}

/* decode(records) -> (0, arena, columns) | (1, i) | (2, i) | (3, i)
 *   arena: one writable buffer holding every column's arrays; columns[k]: (present, counts, values, total,
 *   uniform, indices, longest) where present (b bytes of 0/1) and counts (b int64) are offsets into the arena;
 *   values is the offset of `total` float32/int64 values, or a list of bytes; uniform is the count of every record
 *   when all have the feature with one count, else -1; indices is the offset of the [2, total] int64 COO indices
 *   (row, position) when the decoder was asked for them, else -1; longest is the largest count. A column of
 *   uncommon encodings is (None, None, raws, 0, -1, -1, 0), raws each record's Feature bytes or None.
 *   1: record i is malformed or uncommon, 2: a feature of record i is malformed or of another kind, 3: record i is
 *   not bytes. For 1-3 the caller decodes the batch with the reference parser, which defines the error.
 * The scan, the count and the filling run in one stretch without the GIL, so decoding scales across threads. */
static PyObject *decoder_decode(ExampleDecoder *self, PyObject *args) {
    PyObject *arg;
    int use_spans = 0;
    if (!PyArg_ParseTuple(args, "O|p:decode", &arg, &use_spans)) return NULL;
    /* a tuple of our own: its items stay alive and unchanged while the GIL is released */
    PyObject *seq = PySequence_Tuple(arg);
    if (!seq) return NULL;
    size_t b = (size_t)PyTuple_GET_SIZE(seq), k = self->plan.nkeys;
    PyObject *result = NULL, *columns = NULL, *arena_obj = NULL;
    column_layout *layout = NULL;
    char *arena = NULL;
    size_t arena_size = 0;
    batch s;
    if (batch_alloc(&s, b, k) < 0 || !(layout = calloc(k ? k : 1, sizeof(column_layout)))) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < b; i++) {
        PyObject *item = PyTuple_GET_ITEM(seq, (Py_ssize_t)i);
        if (!PyBytes_CheckExact(item)) {
            result = Py_BuildValue("(in)", 3, (Py_ssize_t)i);
            goto done;
        }
        s.data[i] = (const uint8_t *)PyBytes_AS_STRING(item);
        s.size[i] = (size_t)PyBytes_GET_SIZE(item);
    }
    Py_ssize_t bad;
    int why = 0;
    Py_BEGIN_ALLOW_THREADS
    bad = batch_count(&self->plan, &s, &why);
    if (bad < 0) {
        arena = fill_arena(self, &s, use_spans, layout, &arena_size, &bad);
        why = 2;
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        result = Py_BuildValue("(in)", why, bad);
        goto done;
    }
    if (!arena || !(arena_obj = arena_wrap(arena, arena_size))) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    columns = PyList_New((Py_ssize_t)k);
    for (size_t key = 0; columns && key < k; key++) {
        PyObject *column;
        column_layout *c = &layout[key];
        if (s.uncommon[key]) {
            PyObject *raws = raw_column(&s, key);
            column = raws ? Py_BuildValue("(OONiiii)", Py_None, Py_None, raws, 0, -1, -1, 0) : NULL;
        } else {
            PyObject *values = self->plan.kinds[key] == TFR_BYTES && !(use_spans && self->spans[key])
                                   ? bytes_of_features(s.slots + key, b, k, s.totals[key])
                                   : PyLong_FromSize_t(c->values);
            column = values ? Py_BuildValue("(nnNKnnK)", (Py_ssize_t)c->present, (Py_ssize_t)c->counts, values,
                                            (unsigned long long)s.totals[key], uniform_count(&s, key),
                                            self->indices[key] ? (Py_ssize_t)c->indices : (Py_ssize_t)-1,
                                            (unsigned long long)c->longest)
                            : NULL;
        }
        if (!column) {
            Py_CLEAR(columns);
            break;
        }
        PyList_SET_ITEM(columns, (Py_ssize_t)key, column);
    }
    if (!columns) goto done;
    result = Py_BuildValue("(iON)", 0, arena_obj, columns);
done:
    Py_XDECREF(arena_obj);
    free(layout);
    batch_free(&s);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef decoder_methods[] = {
    {"decode", (PyCFunction)decoder_decode, METH_VARARGS,
     "decode(records, spans=False) -> (0, arena, columns) or (status, record index): the planned features of a "
     "batch of Examples"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ExampleDecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tfr_torch._native._core.ExampleDecoder",
    .tp_basicsize = sizeof(ExampleDecoder),
    .tp_dealloc = (destructor)decoder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ExampleDecoder(keys, kinds): decodes the Features of `keys` (bytes; kinds 0 bytes, 1 float, 2 int64)",
    .tp_methods = decoder_methods,
    .tp_init = (initproc)decoder_init,
    .tp_new = PyType_GenericNew,
};

/* ---- SequenceExample feature lists ---------------------------------------------------------------------------- */

/* decode_feature_lists(keys, kinds, records) -> (0, columns) | (1, i) | (2, i) | (3, i)
 *   columns[k]: (present: bytearray[b] 0/1 (record i has the list), steps: bytearray of b int64 (its step count),
 *   step_present: bytearray[s] 0/1 (the step's Feature has a kind set), step_counts: bytearray of s int64,
 *   values: bytearray of float32/int64 or list of bytes, uniform: every step's count when all are present with
 *   one count, else -1), s = all records' steps of that key;
 *   1: record i is malformed or uncommon, 2: a step's Feature in record i is malformed, uncommon or of another
 *   kind, 3: record i is not bytes. For 1-3 the caller decodes the batch with the reference parser. */
static PyObject *py_decode_feature_lists(PyObject *self, PyObject *args) {
    PyObject *keys_arg, *records_arg;
    Py_buffer kinds;
    if (!PyArg_ParseTuple(args, "Oy*O:decode_feature_lists", &keys_arg, &kinds, &records_arg)) return NULL;
    tfr_plan plan;
    memset(&plan, 0, sizeof(plan));
    int planned = plan_from_python(&plan, keys_arg, &kinds, "decode_feature_lists");
    PyBuffer_Release(&kinds);
    if (planned < 0) return NULL;
    PyObject *seq = PySequence_Tuple(records_arg);
    if (!seq) {
        tfr_plan_free(&plan);
        return NULL;
    }
    size_t b = (size_t)PyTuple_GET_SIZE(seq), k = plan.nkeys, bb = b ? b : 1, kk = k ? k : 1;
    PyObject *result = NULL, *columns = NULL;
    const uint8_t **data = malloc(bb * sizeof(*data));
    size_t *size = malloc(bb * sizeof(*size));
    tfr_slice *lists = bb <= SIZE_MAX / kk / sizeof(tfr_slice) ? calloc(bb * kk, sizeof(tfr_slice)) : NULL;
    uint64_t *steps = bb <= SIZE_MAX / kk / sizeof(uint64_t) ? calloc(bb * kk, sizeof(uint64_t)) : NULL;
    uint64_t *total_steps = calloc(kk, sizeof(uint64_t)), *total_values = calloc(kk, sizeof(uint64_t));
    tfr_slice **step_slices = calloc(kk, sizeof(tfr_slice *));
    uint64_t **step_counts = calloc(kk, sizeof(uint64_t *));
    uint8_t **step_present = calloc(kk, sizeof(uint8_t *));
    void **numeric_out = calloc(kk, sizeof(void *));
    if (!data || !size || !lists || !steps || !total_steps || !total_values || !step_slices || !step_counts ||
        !step_present || !numeric_out) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < b; i++) {
        PyObject *item = PyTuple_GET_ITEM(seq, (Py_ssize_t)i);
        if (!PyBytes_CheckExact(item)) {
            result = Py_BuildValue("(in)", 3, (Py_ssize_t)i);
            goto done;
        }
        data[i] = (const uint8_t *)PyBytes_AS_STRING(item);
        size[i] = (size_t)PyBytes_GET_SIZE(item);
    }
    Py_ssize_t bad = -1;
    int why = 0;
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; bad < 0 && i < b; i++)
        if (tfr_scan_sequence(&plan, data[i], size[i], lists + i * k) < 0) bad = (Py_ssize_t)i, why = 1;
    for (size_t key = 0; bad < 0 && key < k; key++)
        for (size_t i = 0; bad < 0 && i < b; i++) {
            tfr_slice list = lists[i * k + key];
            if (list.ptr && tfr_list_steps(list, NULL, &steps[key * b + i]) < 0) bad = (Py_ssize_t)i, why = 1;
            total_steps[key] += steps[key * b + i]; /* each step takes 2+ bytes of a record: cannot overflow */
        }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        result = Py_BuildValue("(in)", why, bad);
        goto done;
    }
    for (size_t key = 0; key < k; key++) {
        size_t n = total_steps[key] ? (size_t)total_steps[key] : 1;
        step_slices[key] = malloc(n * sizeof(tfr_slice));
        step_counts[key] = calloc(n, sizeof(uint64_t));
        step_present[key] = calloc(n, 1);
        if (!step_slices[key] || !step_counts[key] || !step_present[key]) {
            PyErr_NoMemory();
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (size_t key = 0; bad < 0 && key < k; key++) {
        size_t at = 0;
        for (size_t i = 0; bad < 0 && i < b; i++) {
            tfr_slice list = lists[i * k + key];
            uint64_t n = 0;
            if (!list.ptr) continue;
            tfr_list_steps(list, step_slices[key] + at, &n); /* walked before: succeeds */
            for (uint64_t j = 0; j < n; j++, at++) {
                int present = 0;
                if (tfr_count_feature(plan.kinds[key], step_slices[key][at], &step_counts[key][at], &present)
                    != TFR_F_OK) {
                    bad = (Py_ssize_t)i, why = 2;
                    break;
                }
                step_present[key][at] = (uint8_t)present;
                total_values[key] += step_counts[key][at];
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        result = Py_BuildValue("(in)", why, bad);
        goto done;
    }
    columns = PyList_New((Py_ssize_t)k);
    for (size_t key = 0; columns && key < k; key++) {
        size_t n = (size_t)total_steps[key];
        int kind = plan.kinds[key];
        uint8_t *has = malloc(bb);
        Py_ssize_t uniform = -1;
        if (!has) {
            PyErr_NoMemory();
            Py_CLEAR(columns);
            break;
        }
        for (size_t i = 0; i < b; i++) has[i] = lists[i * k + key].ptr != NULL;
        if (n && step_counts[key][0] <= (uint64_t)PY_SSIZE_T_MAX) {
            uniform = (Py_ssize_t)step_counts[key][0];
            for (size_t j = 0; j < n; j++)
                if (!step_present[key][j] || step_counts[key][j] != step_counts[key][0]) {
                    uniform = -1;
                    break;
                }
        }
        PyObject *present = new_bytearray(has, b);
        free(has);
        PyObject *list_steps = new_bytearray(steps + key * b, b * sizeof(uint64_t));
        PyObject *sp = new_bytearray(step_present[key], n);
        PyObject *sc = new_bytearray(step_counts[key], n * sizeof(uint64_t));
        PyObject *values = NULL;
        if (kind == TFR_BYTES) values = bytes_of_features(step_slices[key], n, 1, total_values[key]);
        else values = numeric_column(kind, total_values[key], &numeric_out[key]);
        PyObject *column = NULL;
        if (present && list_steps && sp && sc && values) {
            column = Py_BuildValue("(NNNNNn)", present, list_steps, sp, sc, values, uniform);
        } else {
            Py_XDECREF(present);
            Py_XDECREF(list_steps);
            Py_XDECREF(sp);
            Py_XDECREF(sc);
            Py_XDECREF(values);
        }
        if (!column) {
            Py_CLEAR(columns);
            break;
        }
        PyList_SET_ITEM(columns, (Py_ssize_t)key, column);
    }
    if (!columns) goto done;
    Py_BEGIN_ALLOW_THREADS
    for (size_t key = 0; key < k; key++)
        if (numeric_out[key])
            fill_numeric_column(plan.kinds[key], step_slices[key], (size_t)total_steps[key], 1, numeric_out[key]);
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(iN)", 0, columns);
done:
    for (size_t key = 0; key < k; key++) {
        if (step_slices) free(step_slices[key]);
        if (step_counts) free(step_counts[key]);
        if (step_present) free(step_present[key]);
    }
    free(data);
    free(size);
    free(lists);
    free(steps);
    free(total_steps);
    free(total_values);
    free(step_slices);
    free(step_counts);
    free(step_present);
    free(numeric_out);
    tfr_plan_free(&plan);
    Py_DECREF(seq);
    return result;
}

/* ---- sparse indices ----------------------------------------------------------------------------------------- */

/* sparse_indices(counts) -> bytearray: for per-row value counts (int64, each >= 0) the [2, nnz] int64 COO indices
 * (row of each value, then its position in the row), nnz = sum(counts). */
static PyObject *py_sparse_indices(PyObject *self, PyObject *arg) {
    Py_buffer counts;
    if (PyObject_GetBuffer(arg, &counts, PyBUF_SIMPLE) < 0) return NULL;
    if (counts.len % (Py_ssize_t)sizeof(int64_t)) {
        PyBuffer_Release(&counts);
        return PyErr_Format(PyExc_ValueError, "sparse_indices: %zd bytes is not a whole number of int64 counts",
                            counts.len);
    }
    size_t rows = (size_t)counts.len / sizeof(int64_t);
    const unsigned char *raw = (const unsigned char *)counts.buf;
    uint64_t total = 0;
    for (size_t i = 0; i < rows; i++) {
        int64_t c;
        memcpy(&c, raw + i * sizeof c, sizeof c);
        if (c < 0 || (uint64_t)c > ((uint64_t)PY_SSIZE_T_MAX / 16) - total) {
            PyBuffer_Release(&counts);
            return PyErr_Format(PyExc_ValueError, "sparse_indices: count %lld of row %zu is out of range",
                                (long long)c, i);
        }
        total += (uint64_t)c;
    }
    PyObject *out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(total * 2 * sizeof(int64_t)));
    if (!out) {
        PyBuffer_Release(&counts);
        return NULL;
    }
    int64_t *row_of = (int64_t *)PyByteArray_AS_STRING(out);
    int64_t *pos_of = row_of + total;
    Py_BEGIN_ALLOW_THREADS
    size_t k = 0;
    for (size_t i = 0; i < rows; i++) {
        int64_t c;
        memcpy(&c, raw + i * sizeof c, sizeof c);
        for (int64_t j = 0; j < c; j++, k++) {
            row_of[k] = (int64_t)i;
            pos_of[k] = j;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&counts);
    return out;
}

/* ---- batches through shared memory (data/transport.py) ----------------------------------------------------- */

/* bytes_total(values) -> the sum of the lengths when `values` is a list of bytes (exactly), else -1 */
static PyObject *py_bytes_total(PyObject *self, PyObject *arg) {
    if (!PyList_CheckExact(arg)) return PyLong_FromLong(-1);
    Py_ssize_t n = PyList_GET_SIZE(arg), total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(arg, i);
        if (!PyBytes_CheckExact(item)) return PyLong_FromLong(-1);
        total += PyBytes_GET_SIZE(item); /* cannot overflow: the objects exist in memory */
    }
    return PyLong_FromSsize_t(total);
}

/* pack_bytes(values, buffer, offset) -> lengths: the bytes of `values` (a list of bytes) written back to back into
 * the writable `buffer` from `offset`; ValueError when they do not fit or an item is not bytes. */
static PyObject *py_pack_bytes(PyObject *self, PyObject *args) {
    PyObject *values, *target;
    Py_ssize_t offset;
    if (!PyArg_ParseTuple(args, "OOn:pack_bytes", &values, &target, &offset)) return NULL;
    PyObject *items = PySequence_Tuple(values); /* ours: its items stay alive while the GIL is released */
    if (!items) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(items), total = 0;
    PyObject *lengths = PyList_New(n);
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
        total += PyBytes_GET_SIZE(item);
    }
    Py_buffer buf;
    if (!lengths || PyObject_GetBuffer(target, &buf, PyBUF_WRITABLE) < 0) {
        Py_XDECREF(lengths);
        Py_DECREF(items);
        return NULL;
    }
    if (offset < 0 || offset > buf.len || total > buf.len - offset) {
        PyErr_Format(PyExc_ValueError, "pack_bytes: %zd bytes from offset %zd do not fit in %zd", total, offset,
                     buf.len);
        Py_CLEAR(lengths);
    } else {
        char *out = (char *)buf.buf + offset;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PyTuple_GET_ITEM(items, i);
            memcpy(out, PyBytes_AS_STRING(item), (size_t)PyBytes_GET_SIZE(item));
            out += PyBytes_GET_SIZE(item);
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&buf);
    Py_DECREF(items);
    return lengths;
}

/* unpack_bytes(buffer, offset, lengths) -> list of bytes: new bytes objects of the given lengths, copied from
 * `buffer` back to back from `offset`; ValueError for a negative length or one that runs past the buffer. */
static PyObject *py_unpack_bytes(PyObject *self, PyObject *args) {
    PyObject *lengths_arg;
    Py_buffer buf;
    Py_ssize_t offset;
    if (!PyArg_ParseTuple(args, "y*nO:unpack_bytes", &buf, &offset, &lengths_arg)) return NULL;
    PyObject *lengths = PySequence_Fast(lengths_arg, "unpack_bytes: lengths must be a sequence of ints");
    if (!lengths) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(lengths), pos = offset;
    PyObject *out = PyList_New(n);
    if (out && (offset < 0 || offset > buf.len)) {
        PyErr_Format(PyExc_ValueError, "unpack_bytes: offset %zd is outside the %zd-byte buffer", offset, buf.len);
        Py_CLEAR(out);
    }
    for (Py_ssize_t i = 0; out && i < n; i++) {
        Py_ssize_t length = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(lengths, i));
        if (length == -1 && PyErr_Occurred()) {
            Py_CLEAR(out);
        } else if (length < 0 || length > buf.len - pos) {
            PyErr_Format(PyExc_ValueError, "unpack_bytes: item %zd of %zd bytes at offset %zd runs past the %zd-byte "
                         "buffer", i, length, pos, buf.len);
            Py_CLEAR(out);
        } else {
            PyObject *item = PyBytes_FromStringAndSize(NULL, length);
            if (!item) Py_CLEAR(out);
            else PyList_SET_ITEM(out, i, item);
            pos += length;
        }
    }
    if (out) {
        const char *src = (const char *)buf.buf + offset;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PyList_GET_ITEM(out, i);
            memcpy(PyBytes_AS_STRING(item), src, (size_t)PyBytes_GET_SIZE(item));
            src += PyBytes_GET_SIZE(item);
        }
        Py_END_ALLOW_THREADS
    }
    Py_DECREF(lengths);
    PyBuffer_Release(&buf);
    return out;
}

/* ---- bytes values as spans of their records (ExampleDecoder.decode(records, True)) ------------------------- */

/* The `total` spans at `offset` of an arena, each (record index, start, length) as int64, checked against the
 * records (a tuple of bytes): every span must lie inside its record. Fills ptrs/lens (arrays of total) and *sum;
 * returns -1 with ValueError otherwise. */
static int check_spans(PyObject *records, const Py_buffer *arena, Py_ssize_t offset, Py_ssize_t total,
                       const char **ptrs, Py_ssize_t *lens, Py_ssize_t *sum, const char *who) {
    Py_ssize_t n = PyTuple_GET_SIZE(records);
    if (offset < 0 || total < 0 || offset > arena->len || total > (arena->len - offset) / 24) {
        PyErr_Format(PyExc_ValueError, "%s: %zd spans at offset %zd do not fit in the %zd-byte arena", who, total,
                     offset, arena->len);
        return -1;
    }
    const char *at = (const char *)arena->buf + offset;
    *sum = 0;
    for (Py_ssize_t j = 0; j < total; j++, at += 24) {
        int64_t span[3];
        memcpy(span, at, sizeof span);
        PyObject *record = span[0] >= 0 && span[0] < n ? PyTuple_GET_ITEM(records, (Py_ssize_t)span[0]) : NULL;
        if (!record || !PyBytes_CheckExact(record) || span[1] < 0 || span[2] < 0 ||
            span[1] > PyBytes_GET_SIZE(record) || span[2] > PyBytes_GET_SIZE(record) - span[1]) {
            PyErr_Format(PyExc_ValueError, "%s: span %zd (record %lld, bytes %lld+%lld) is outside the records", who,
                         j, (long long)span[0], (long long)span[1], (long long)span[2]);
            return -1;
        }
        ptrs[j] = PyBytes_AS_STRING(record) + span[1];
        lens[j] = (Py_ssize_t)span[2];
        *sum += lens[j]; /* cannot overflow: each span lies in an object in memory */
    }
    return 0;
}

/* Parse (records, arena, offset, total, ...) and check the spans; the caller frees *ptrs and *lens and releases
 * *items and *arena. */
static int spans_args(PyObject *records_arg, PyObject *arena_arg, Py_ssize_t offset, Py_ssize_t total,
                      PyObject **items, Py_buffer *arena, const char ***ptrs, Py_ssize_t **lens, Py_ssize_t *sum,
                      const char *who) {
    *items = PySequence_Tuple(records_arg);
    if (!*items) return -1;
    if (PyObject_GetBuffer(arena_arg, arena, PyBUF_SIMPLE) < 0) {
        Py_CLEAR(*items);
        return -1;
    }
    size_t count = total > 0 ? (size_t)total : 1;
    *ptrs = total >= 0 && (size_t)total < PY_SSIZE_T_MAX / sizeof(Py_ssize_t) ? malloc(count * sizeof(char *)) : NULL;
    *lens = *ptrs ? malloc(count * sizeof(Py_ssize_t)) : NULL;
    if (!*lens) {
        PyErr_NoMemory();
    } else if (check_spans(*items, arena, offset, total, *ptrs, *lens, sum, who) == 0) {
        return 0;
    }
    free((void *)*ptrs);
    free(*lens);
    PyBuffer_Release(arena);
    Py_CLEAR(*items);
    return -1;
}

/* pack_spans(records, arena, offset, total, buffer, pos) -> lengths: the values the spans name, written back to
 * back into the writable `buffer` from `pos` (one copy, from the records themselves) */
static PyObject *py_pack_spans(PyObject *self, PyObject *args) {
    PyObject *records_arg, *arena_arg, *target, *items, *lengths = NULL;
    Py_ssize_t offset, total, pos, sum;
    Py_buffer arena, buf;
    const char **ptrs;
    Py_ssize_t *lens;
    if (!PyArg_ParseTuple(args, "OOnnOn:pack_spans", &records_arg, &arena_arg, &offset, &total, &target, &pos))
        return NULL;
    if (spans_args(records_arg, arena_arg, offset, total, &items, &arena, &ptrs, &lens, &sum, "pack_spans") < 0)
        return NULL;
    if (PyObject_GetBuffer(target, &buf, PyBUF_WRITABLE) == 0) {
        if (pos < 0 || pos > buf.len || sum > buf.len - pos) {
            PyErr_Format(PyExc_ValueError, "pack_spans: %zd bytes from offset %zd do not fit in %zd", sum, pos,
                         buf.len);
        } else if ((lengths = PyList_New(total)) != NULL) {
            for (Py_ssize_t j = 0; lengths && j < total; j++) {
                PyObject *length = PyLong_FromSsize_t(lens[j]);
                if (!length) Py_CLEAR(lengths);
                else PyList_SET_ITEM(lengths, j, length);
            }
            if (lengths) {
                char *out = (char *)buf.buf + pos;
                Py_BEGIN_ALLOW_THREADS
                for (Py_ssize_t j = 0; j < total; j++) {
                    memcpy(out, ptrs[j], (size_t)lens[j]);
                    out += lens[j];
                }
                Py_END_ALLOW_THREADS
            }
        }
        PyBuffer_Release(&buf);
    }
    free((void *)ptrs);
    free(lens);
    PyBuffer_Release(&arena);
    Py_DECREF(items);
    return lengths;
}

/* bytes_of_spans(records, arena, offset, total) -> list of bytes: the values the spans name, as new bytes */
static PyObject *py_bytes_of_spans(PyObject *self, PyObject *args) {
    PyObject *records_arg, *arena_arg, *items, *out;
    Py_ssize_t offset, total, sum;
    Py_buffer arena;
    const char **ptrs;
    Py_ssize_t *lens;
    if (!PyArg_ParseTuple(args, "OOnn:bytes_of_spans", &records_arg, &arena_arg, &offset, &total)) return NULL;
    if (spans_args(records_arg, arena_arg, offset, total, &items, &arena, &ptrs, &lens, &sum, "bytes_of_spans") < 0)
        return NULL;
    out = PyList_New(total);
    for (Py_ssize_t j = 0; out && j < total; j++) {
        PyObject *item = PyBytes_FromStringAndSize(ptrs[j], lens[j]);
        if (!item) Py_CLEAR(out);
        else PyList_SET_ITEM(out, j, item);
    }
    free((void *)ptrs);
    free(lens);
    PyBuffer_Release(&arena);
    Py_DECREF(items);
    return out;
}

/* ---- module --------------------------------------------------------------------------------------------------- */

static PyMethodDef module_methods[] = {
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, value=0) -> int: CRC-32C of a bytes-like object"},
    {"masked_crc32c", py_masked_crc32c, METH_O, "masked_crc32c(data) -> int: TFRecord's masked CRC-32C"},
    {"hardware_crc", py_hardware_crc, METH_NOARGS, "hardware_crc() -> bool: whether CRC-32C uses CPU instructions"},
    {"scan_records", py_scan_records, METH_VARARGS,
     "scan_records(buffer, lo, hi, limit, verify, max_records[, lengths]) -> (records or their int64 lengths, stop, "
     "status)"},
    {"find_header", py_find_header, METH_VARARGS, "find_header(buffer, lo, hi) -> offset or -1"},
#ifndef _WIN32
    {"read_framed", py_read_framed, METH_VARARGS,
     "read_framed(fd, offset or offsets, sizes, verify) -> (records, good): records of known framed sizes (back to "
     "back from an offset, or one offset each) read from a file straight into their bytes objects, checked"},
#endif
    {"frame_records", py_frame_records, METH_O, "frame_records(records) -> bytes: the records framed back to back"},
    {"sparse_indices", py_sparse_indices, METH_O,
     "sparse_indices(counts) -> bytearray: [2, sum(counts)] int64 COO indices (row, position) of per-row counts"},
    {"decode_feature_lists", py_decode_feature_lists, METH_VARARGS,
     "decode_feature_lists(keys, kinds, records) -> (status, columns or record index): SequenceExample lists"},
    {"bytes_total", py_bytes_total, METH_O, "bytes_total(values) -> total length of a list of bytes, else -1"},
    {"pack_bytes", py_pack_bytes, METH_VARARGS,
     "pack_bytes(values, buffer, offset) -> lengths: a list of bytes written back to back into a writable buffer"},
    {"pack_spans", py_pack_spans, METH_VARARGS,
     "pack_spans(records, arena, offset, total, buffer, pos) -> lengths: bytes values named by spans (record, "
     "start, length) of the records, written back to back into a writable buffer"},
    {"bytes_of_spans", py_bytes_of_spans, METH_VARARGS,
     "bytes_of_spans(records, arena, offset, total) -> list of bytes: the values named by spans of the records"},
    {"unpack_bytes", py_unpack_bytes, METH_VARARGS,
     "unpack_bytes(buffer, offset, lengths) -> list of bytes copied out of a buffer"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_core", "tfr_torch's compiled core: framing, CRC-32C and Example batch decoding kernels.",
    -1, module_methods,
};

PyMODINIT_FUNC PyInit__core(void) {
    tfr_crc32c_init();
    if (PyType_Ready(&ExampleDecoderType) < 0 || PyType_Ready(&ArenaType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    Py_INCREF(&ExampleDecoderType);
    if (PyModule_AddObject(m, "ExampleDecoder", (PyObject *)&ExampleDecoderType) < 0) {
        Py_DECREF(&ExampleDecoderType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "SCAN_MORE", TFR_SCAN_MORE);
    PyModule_AddIntConstant(m, "SCAN_BAD_HEADER", TFR_SCAN_BAD_HEADER);
    PyModule_AddIntConstant(m, "SCAN_BAD_DATA", TFR_SCAN_BAD_DATA);
    PyModule_AddIntConstant(m, "SCAN_LIMIT", TFR_SCAN_LIMIT);
    PyModule_AddIntConstant(m, "SCAN_FULL", TFR_SCAN_FULL);
    return m;
}
