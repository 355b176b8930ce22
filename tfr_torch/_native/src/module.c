/* tfr_torch._native._core: the Python face of the kernels, and nothing else. Each function converts its Python
 * arguments into buffers, releases the GIL while the kernel runs, and returns buffers or lists plus positions;
 * Python turns positions into messages. The kernels live beside it, one concern each, and touch no Python object:
 *   crc32c.c    CRC-32C                          framing.c   TFRecord framing (scan, find, frame, check)
 *   fileread.c  framed records read from a file  example.c   one Example's Features: scan, count, fill
 *   batch.c     a batch of Examples, by column   sequence.c  SequenceExample feature lists of a batch
 *   spans.c     bytes values as spans of records transport.c the worker transport's copies
 *   seek.c      seek points in GZIP / ZLIB streams (with zlib)
 *   png.c       PNG image sequences decoded into one array (with zlib)
 *   pixels.c    pixel layout changes for the image transforms */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifndef _WIN32
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#endif

#include "batch.h"
#include "crc32c.h"
#include "example.h"
#include "fileread.h"
#include "framing.h"
#include "jpeg.h"
#include "pixels.h"
#include "sequence.h"
#ifdef TFR_HAVE_ZLIB
#include "png.h"
#include "seek.h"
#endif
#include "spans.h"
#include "transport.h"

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
/* The buffers of one read_framed call */
typedef struct {
    size_t n;
    uint8_t *scratch, **datas;
    size_t *lens;
    int64_t *offsets;
    struct iovec *iov;
} framed_job;

static void framed_free(framed_job *job) {
    free(job->scratch);
    free(job->datas);
    free(job->lens);
    free(job->offsets);
    free(job->iov);
}

static int framed_alloc(framed_job *job, size_t n) {
    size_t nn = n ? n : 1;
    job->n = n;
    job->scratch = malloc(16 * (n + 1));
    job->datas = malloc(nn * sizeof(*job->datas));
    job->lens = malloc(nn * sizeof(*job->lens));
    job->offsets = malloc(nn * sizeof(*job->offsets));
    job->iov = malloc((2 * nn + 1) * sizeof(*job->iov)); /* a run of records back to back: 2 per record + 1 */
    if (job->scratch && job->datas && job->lens && job->offsets && job->iov) return 0;
    PyErr_NoMemory();
    return -1;
}

/* The records' places in file `fd` (tfr_place_framed), and job->n cut to those inside the file. */
static int framed_place(framed_job *job, int fd, const Py_buffer *sizes, const Py_buffer *offsets,
                        long long first_offset) {
    struct stat st;
    if (fstat(fd, &st) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    int64_t bad = tfr_place_framed(sizes->buf, job->n, offsets->buf, first_offset, (uint64_t)st.st_size,
                                   job->offsets, job->lens, &job->n);
    if (bad < 0) return 0;
    int64_t size;
    memcpy(&size, (const char *)sizes->buf + bad * sizeof size, sizeof size);
    PyErr_Format(PyExc_ValueError, "read_framed: record %zu at offset %lld, framed size %lld, is out of range",
                 (size_t)bad, (long long)job->offsets[bad], (long long)size);
    return -1;
}

/* A list of job->n new bytes objects of the records' lengths, each one's storage at job->datas[i]. */
static PyObject *framed_records(framed_job *job) {
    PyObject *records = PyList_New((Py_ssize_t)job->n);
    for (size_t i = 0; records && i < job->n; i++) {
        PyObject *record = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)job->lens[i]);
        if (!record) {
            Py_CLEAR(records);
            break;
        }
        PyList_SET_ITEM(records, (Py_ssize_t)i, record);
        job->datas[i] = (uint8_t *)PyBytes_AS_STRING(record);
    }
    return records;
}

/* read_framed(fd, where, sizes, verify) -> (records, good): records of known framed sizes (int64, each >= 16, from
 * an index) read from file `fd` straight into their bytes objects (their framing into a scratch buffer): one copy
 * from the file, none after. `where` is either the byte offset of the first of records that lie back to back
 * (read by a few preadv calls for all of them), or an int64 array of one offset per record (one preadv per run of
 * records that lie back to back, as records asked for in file order do).
 * `good` records from the first are whole and pass their checks (header CRC, the length the index gave, the
 * data CRC when `verify`); `records` holds just those. From the first that does not, the caller reads on as
 * usual, which says what is wrong. A record that would end past the file is not allocated (nor any after it). */
static PyObject *py_read_framed(PyObject *self, PyObject *args) {
    int fd, verify;
    PyObject *where, *records = NULL, *result = NULL;
    Py_buffer sizes, offsets = {0};
    framed_job job = {0};
    long long first_offset = 0;
    if (!PyArg_ParseTuple(args, "iOy*p:read_framed", &fd, &where, &sizes, &verify)) return NULL;
    int back_to_back = PyLong_Check(where);
    size_t n = (size_t)sizes.len / sizeof(int64_t), good;
    if (back_to_back) {
        first_offset = PyLong_AsLongLong(where);
        if (first_offset == -1 && PyErr_Occurred()) goto done;
    } else if (PyObject_GetBuffer(where, &offsets, PyBUF_SIMPLE) < 0) {
        goto done;
    }
    if (sizes.len % (Py_ssize_t)sizeof(int64_t) || first_offset < 0 || n > (1u << 20) ||
        (!back_to_back && offsets.len != sizes.len)) {
        PyErr_SetString(PyExc_ValueError, "read_framed: sizes must be int64 framed sizes, with an offset >= 0 or one "
                                          "int64 offset per record");
        goto done;
    }
    if (framed_alloc(&job, n) < 0 || framed_place(&job, fd, &sizes, &offsets, first_offset) < 0 ||
        !(records = framed_records(&job)))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    good = tfr_read_framed(fd, back_to_back, job.offsets, job.datas, job.lens, job.n, job.scratch, job.iov, verify);
    Py_END_ALLOW_THREADS
    if (PyList_SetSlice(records, (Py_ssize_t)good, (Py_ssize_t)job.n, NULL) < 0) goto done;
    result = Py_BuildValue("(On)", records, (Py_ssize_t)good);
done:
    Py_XDECREF(records);
    framed_free(&job);
    if (offsets.buf) PyBuffer_Release(&offsets);
    PyBuffer_Release(&sizes);
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

/* jpeg_next_marker(buffer, start) -> offset of the next marker's 0xFF in a JPEG's entropy-coded data, or -1 */
static PyObject *py_jpeg_next_marker(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "y*n:jpeg_next_marker", &buf, &start)) return NULL;
    if (start < 0 || start > buf.len) {
        PyBuffer_Release(&buf);
        return PyErr_Format(PyExc_ValueError, "jpeg_next_marker: start %zd outside %zd bytes", start, buf.len);
    }
    size_t found = tfr_jpeg_next_marker(buf.buf, (size_t)buf.len, (size_t)start);
    PyBuffer_Release(&buf);
    return PyLong_FromSsize_t(found == (size_t)-1 ? -1 : (Py_ssize_t)found);
}

#ifdef TFR_HAVE_ZLIB
/* png_decode_many(images, out, width, height, colour) -> (index, reason): the PNGs (a sequence of bytes) decoded
 * into the writable `out` (len(images) * height * width * channels bytes); index -1 when all decoded, else the
 * first refused image (an item that is not bytes is refused too, reason 1) and why (png.h's TFR_PNG_*). */
static PyObject *py_png_decode_many(PyObject *self, PyObject *args) {
    PyObject *images, *target;
    unsigned int width, height;
    int colour;
    if (!PyArg_ParseTuple(args, "OOIIi:png_decode_many", &images, &target, &width, &height, &colour)) return NULL;
    PyObject *items = PySequence_Tuple(images); /* ours: its items stay alive while the GIL is released */
    if (!items) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(items), usable = n;
    const unsigned char **srcs = malloc((n ? (size_t)n : 1) * sizeof(char *));
    size_t *lens = malloc((n ? (size_t)n : 1) * sizeof(size_t));
    PyObject *result = NULL;
    Py_buffer buf = {0};
    if (!srcs || !lens) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(items, i);
        if (!PyBytes_CheckExact(item)) {
            usable = i;
            break;
        }
        srcs[i] = (const unsigned char *)PyBytes_AS_STRING(item);
        lens[i] = (size_t)PyBytes_GET_SIZE(item);
    }
    if (PyObject_GetBuffer(target, &buf, PyBUF_WRITABLE) < 0) goto done;
    int channels = colour == 0 ? 1 : colour == 2 ? 3 : colour == 4 ? 2 : colour == 6 ? 4 : 0;
    if (!channels || !width || !height) {
        PyErr_Format(PyExc_ValueError, "png_decode_many: colour type %d of %ux%u pixels is not decoded here", colour,
                     width, height);
        goto done;
    }
    size_t row = (size_t)width * (size_t)channels, image = row * height;
    if (row / (size_t)channels != width || image / height != row || (size_t)buf.len % image ||
        (size_t)buf.len / image != (size_t)n) {
        PyErr_Format(PyExc_ValueError, "png_decode_many: %zd images of %ux%ux%d bytes do not fill %zd bytes", n,
                     height, width, channels, buf.len);
        goto done;
    }
    int reason = 0;
    ptrdiff_t failed;
    Py_BEGIN_ALLOW_THREADS
    failed = tfr_png_decode_many(srcs, lens, (size_t)usable, width, height, colour, buf.buf, &reason);
    Py_END_ALLOW_THREADS
    if (failed < 0 && usable < n) failed = usable, reason = TFR_PNG_SIGNATURE;
    result = Py_BuildValue("(ni)", (Py_ssize_t)failed, reason);
done:
    if (buf.obj) PyBuffer_Release(&buf);
    free(srcs);
    free(lens);
    Py_DECREF(items);
    return result;
}
#endif

/* planes_from_pixels(out, pixels, height, width, channels, step, row, flip): the writable `out` (exactly channels *
 * height * width bytes) gets the planes of the interleaved pixels in the buffer `pixels` (channel k of pixel (y, x)
 * at byte y * row + x * step + k; with flip, pixel (y, width - 1 - x)). Both extents are checked here. */
static PyObject *py_planes_from_pixels(PyObject *self, PyObject *args) {
    PyObject *target, *source;
    Py_ssize_t h, w, c, step, row;
    int flip;
    if (!PyArg_ParseTuple(args, "OOnnnnnp:planes_from_pixels", &target, &source, &h, &w, &c, &step, &row, &flip))
        return NULL;
    if (h < 0 || w < 0 || c <= 0 || step < c || row < 0) {
        PyErr_Format(PyExc_ValueError, "planes_from_pixels: %zd x %zd pixels of %zd channels, %zd bytes apart, rows "
                     "%zd bytes apart, is not a layout", h, w, c, step, row);
        return NULL;
    }
    Py_buffer out = {0}, in = {0};
    PyObject *result = NULL;
    if (PyObject_GetBuffer(target, &out, PyBUF_WRITABLE) < 0) return NULL;
    if (PyObject_GetBuffer(source, &in, PyBUF_SIMPLE) < 0) goto done;
    size_t planes = (size_t)c * (size_t)h, need = tfr_pixels_extent((size_t)h, (size_t)w, (size_t)c, (size_t)step,
                                                                    (size_t)row);
    int fits = (!h || planes / (size_t)h == (size_t)c) && (!w || planes <= SIZE_MAX / (size_t)w) &&
               planes * (size_t)w == (size_t)out.len;
    if (!fits || need == SIZE_MAX || need > (size_t)in.len) {
        PyErr_Format(PyExc_ValueError, "planes_from_pixels: %zd x %zd pixels of %zd channels need %zd bytes of "
                     "planes (got %zd) and pixels within %zd bytes (the layout needs %s)", h, w, c, c * h * w,
                     out.len, in.len, need == SIZE_MAX ? "more than memory" : "more");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    tfr_planes_from_pixels(out.buf, in.buf, (size_t)h, (size_t)w, (size_t)c, (size_t)step, (size_t)row, flip);
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    if (in.obj) PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return result;
}

/* normalize_pixels(out, bf16, interleaved, pixels, height, width, channels, step, row, flip, sub, mul): the pixels
 * (laid out as for planes_from_pixels) as ((v - sub[k]) * mul[k]) floats into `out` (float32, or bfloat16 when
 * `bf16`; planes, or pixels when `interleaved`); sub and mul: `channels` float32 values each (buffers). */
static PyObject *py_normalize_pixels(PyObject *self, PyObject *args) {
    PyObject *target, *source, *sub_arg, *mul_arg;
    Py_ssize_t h, w, c, step, row;
    int bf16, interleaved, flip;
    if (!PyArg_ParseTuple(args, "OppOnnnnnpOO:normalize_pixels", &target, &bf16, &interleaved, &source, &h, &w, &c,
                          &step, &row, &flip, &sub_arg, &mul_arg))
        return NULL;
    if (h < 0 || w < 0 || c <= 0 || step < c || row < 0) {
        PyErr_Format(PyExc_ValueError, "normalize_pixels: %zd x %zd pixels of %zd channels, %zd bytes apart, rows "
                     "%zd bytes apart, is not a layout", h, w, c, step, row);
        return NULL;
    }
    Py_buffer out = {0}, in = {0}, sub = {0}, mul = {0};
    PyObject *result = NULL;
    if (PyObject_GetBuffer(target, &out, PyBUF_WRITABLE) < 0) return NULL;
    if (PyObject_GetBuffer(source, &in, PyBUF_SIMPLE) < 0 || PyObject_GetBuffer(sub_arg, &sub, PyBUF_SIMPLE) < 0 ||
        PyObject_GetBuffer(mul_arg, &mul, PyBUF_SIMPLE) < 0)
        goto done;
    size_t values = (size_t)c * (size_t)h, size = bf16 ? 2 : 4,
           need = tfr_pixels_extent((size_t)h, (size_t)w, (size_t)c, (size_t)step, (size_t)row);
    int fits = (!h || values / (size_t)h == (size_t)c) && (!w || values <= SIZE_MAX / size / (size_t)w) &&
               values * (size_t)w * size == (size_t)out.len;
    if (!fits || need == SIZE_MAX || need > (size_t)in.len) {
        PyErr_Format(PyExc_ValueError, "normalize_pixels: %zd x %zd pixels of %zd channels need %zd bytes of "
                     "output (got %zd) and pixels within %zd bytes (the layout needs %s)", h, w, c,
                     c * h * w * (Py_ssize_t)size, out.len, in.len, need == SIZE_MAX ? "more than memory" : "more");
        goto done;
    }
    if (sub.len != c * (Py_ssize_t)sizeof(float) || mul.len != c * (Py_ssize_t)sizeof(float)) {
        PyErr_Format(PyExc_ValueError, "normalize_pixels: sub and mul need %zd float32 values each (got %zd and %zd "
                     "bytes)", c, sub.len, mul.len);
        goto done;
    }
    float subs[16], muls[16];
    if (c > 16) {
        PyErr_Format(PyExc_ValueError, "normalize_pixels: at most 16 channels, got %zd", c);
        goto done;
    }
    memcpy(subs, sub.buf, (size_t)sub.len);
    memcpy(muls, mul.buf, (size_t)mul.len);
    Py_BEGIN_ALLOW_THREADS
    tfr_normalize_pixels(out.buf, bf16, interleaved, in.buf, (size_t)h, (size_t)w, (size_t)c, (size_t)step,
                         (size_t)row, flip, subs, muls);
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    if (mul.obj) PyBuffer_Release(&mul);
    if (sub.obj) PyBuffer_Release(&sub);
    if (in.obj) PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return result;
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

static PyObject *py_decode_free_ns(PyObject *self, PyObject *unused) {
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
} ExampleDecoder;

/* The keys of a plan from Python (a sequence of bytes, one kind byte each) as pointers and lengths, checked. */
static int keys_from_python(PyObject *keys, const Py_buffer *kinds, const uint8_t **ptrs, size_t *lens,
                            const char *who) {
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(keys); k++) {
        PyObject *key = PySequence_Fast_GET_ITEM(keys, k);
        if (!PyBytes_Check(key) || ((const uint8_t *)kinds->buf)[k] > TFR_INT64) {
            PyErr_Format(PyExc_TypeError, "%s: keys must be bytes, kinds 0 (bytes), 1 (float), 2 (int64)", who);
            return -1;
        }
        ptrs[k] = (const uint8_t *)PyBytes_AS_STRING(key);
        lens[k] = (size_t)PyBytes_GET_SIZE(key);
    }
    return 0;
}

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
    if (keys_from_python(keys, kinds, ptrs, lens, who) < 0) goto done;
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

/* ExampleDecoder(keys, kinds[, indices[, spans[, dense]]]): one byte per key in `indices`, `spans`; `indices`
 * nonzero where decode() also writes the sparse COO indices of that (numeric) column, `spans` where
 * decode(records, True) gives that bytes column as spans of the records instead of bytes objects; `dense`: int64
 * (key index, count) pairs, the numeric columns whose values decode() lays out back to back in that order when
 * every record holds each with its count */
static int decoder_init(ExampleDecoder *self, PyObject *args, PyObject *kwds) {
    PyObject *keys_arg;
    Py_buffer kinds, indices = {0}, spans = {0}, dense = {0};
    if (!PyArg_ParseTuple(args, "Oy*|y*y*y*:ExampleDecoder", &keys_arg, &kinds, &indices, &spans, &dense)) return -1;
    int result = plan_from_python(&self->plan, keys_arg, &kinds, "ExampleDecoder");
    if (result == 0) result = key_flags(&self->plan, &indices, -1, "indices", &self->indices);
    if (result == 0) result = key_flags(&self->plan, &spans, TFR_BYTES, "spans", &self->spans);
    if (result == 0) result = dense_columns(self, &dense);
    PyBuffer_Release(&kinds);
    if (indices.buf) PyBuffer_Release(&indices);
    if (spans.buf) PyBuffer_Release(&spans);
    if (dense.buf) PyBuffer_Release(&dense);
    return result;
}

static void decoder_dealloc(ExampleDecoder *self) {
    tfr_plan_free(&self->plan);
    free(self->indices);
    free(self->spans);
    free(self->dense_count);
    free(self->dense_order);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Each record of a tuple as bytes for a kernel: -1 when all are bytes (exactly), else the first that is not. */
static Py_ssize_t records_from_tuple(PyObject *seq, const uint8_t **data, size_t *size) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); i++) {
        PyObject *item = PyTuple_GET_ITEM(seq, i);
        if (!PyBytes_CheckExact(item)) return i;
        data[i] = (const uint8_t *)PyBytes_AS_STRING(item);
        size[i] = (size_t)PyBytes_GET_SIZE(item);
    }
    return -1;
}

static PyObject *new_bytearray(const void *src, size_t n) {
    if (n > (size_t)PY_SSIZE_T_MAX) return PyErr_NoMemory();
    PyObject *out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (out && src && n) memcpy(PyByteArray_AS_STRING(out), src, n);
    return out;
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

/* A list of new bytes objects, one for each of the `total` slices. */
static PyObject *bytes_of_slices(const tfr_slice *slices, size_t total) {
    if (total > (size_t)PY_SSIZE_T_MAX) return PyErr_NoMemory();
    PyObject *values = PyList_New((Py_ssize_t)total);
    for (size_t j = 0; values && j < total; j++) {
        PyObject *item = PyBytes_FromStringAndSize((const char *)slices[j].ptr, (Py_ssize_t)slices[j].len);
        if (!item) Py_CLEAR(values);
        else PyList_SET_ITEM(values, (Py_ssize_t)j, item);
    }
    return values;
}

/* A list of new bytes objects: every value of the bytes_list Features features[0], features[stride], ... (n of
 * them; absent ones have a NULL ptr), `total` values in all, as counted before. */
static PyObject *bytes_of_features(const tfr_slice *features, size_t n, size_t stride, uint64_t total) {
    if (total > (uint64_t)PY_SSIZE_T_MAX / sizeof(tfr_slice)) return PyErr_NoMemory();
    tfr_slice *slices = malloc((total ? (size_t)total : 1) * sizeof(tfr_slice));
    if (!slices) return PyErr_NoMemory();
    size_t at = tfr_fill_bytes_column(features, n, stride, slices);
    PyObject *values = NULL;
    if (at != total) /* the counting pass saw other bytes: never leave NULL items in a list */
        PyErr_Format(PyExc_SystemError, "bytes column: counted %llu values, found %zu", (unsigned long long)total, at);
    else
        values = bytes_of_slices(slices, at);
    free(slices);
    return values;
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

/* ---- SequenceExample feature lists (the kernel: sequence.c) -------------------------------------------------- */

/* A new bytearray for `total` float32 (4 bytes) or int64 values; *out points at its storage. */
static PyObject *numeric_column(int kind, uint64_t total, void **out) {
    if (total > (uint64_t)PY_SSIZE_T_MAX / 8) return PyErr_NoMemory();
    PyObject *values = new_bytearray(NULL, (size_t)total * (kind == TFR_FLOAT ? 4 : 8));
    if (values) *out = PyByteArray_AS_STRING(values);
    return values;
}

/* One column of decode_feature_lists' result; a numeric column's storage goes to *numeric_out, to be filled
 * without the GIL. */
static PyObject *list_column(const tfr_seq_batch *s, int kind, size_t key, void **numeric_out) {
    size_t b = s->b, n = (size_t)s->total_steps[key];
    PyObject *present = new_bytearray(NULL, b);
    if (present) tfr_seq_has(s, key, (uint8_t *)PyByteArray_AS_STRING(present));
    PyObject *list_steps = new_bytearray(s->steps + key * b, b * sizeof(uint64_t));
    PyObject *step_present = new_bytearray(s->step_present[key], n);
    PyObject *step_counts = new_bytearray(s->step_counts[key], n * sizeof(uint64_t));
    PyObject *values = kind == TFR_BYTES ? bytes_of_features(s->step_slices[key], n, 1, s->total_values[key])
                                         : numeric_column(kind, s->total_values[key], numeric_out);
    if (present && list_steps && step_present && step_counts && values)
        return Py_BuildValue("(NNNNNn)", present, list_steps, step_present, step_counts, values,
                             (Py_ssize_t)tfr_seq_uniform(s, key));
    Py_XDECREF(present);
    Py_XDECREF(list_steps);
    Py_XDECREF(step_present);
    Py_XDECREF(step_counts);
    Py_XDECREF(values);
    return NULL;
}

/* (0, columns) for a counted batch: the columns made with the GIL, then the numeric values filled without it. */
static PyObject *list_columns(const tfr_plan *plan, const tfr_seq_batch *s) {
    void **numeric_out = calloc(s->k ? s->k : 1, sizeof(void *));
    PyObject *columns = numeric_out ? PyList_New((Py_ssize_t)s->k) : PyErr_NoMemory();
    for (size_t key = 0; columns && key < s->k; key++) {
        PyObject *column = list_column(s, plan->kinds[key], key, &numeric_out[key]);
        if (!column) Py_CLEAR(columns);
        else PyList_SET_ITEM(columns, (Py_ssize_t)key, column);
    }
    if (columns) {
        Py_BEGIN_ALLOW_THREADS
        for (size_t key = 0; key < s->k; key++)
            if (numeric_out[key]) tfr_seq_fill(plan->kinds[key], s, key, numeric_out[key]);
        Py_END_ALLOW_THREADS
    }
    free(numeric_out);
    return columns ? Py_BuildValue("(iN)", 0, columns) : NULL;
}

/* decode_feature_lists(keys, kinds, records) -> (0, columns) | (1, i) | (2, i) | (3, i)
 *   columns[k]: (present: bytearray[b] 0/1 (record i has the list), steps: bytearray of b int64 (its step count),
 *   step_present: bytearray[s] 0/1 (the step's Feature has a kind set), step_counts: bytearray of s int64,
 *   values: bytearray of float32/int64 or list of bytes, uniform: every step's count when all are present with
 *   one count, else -1), s = all records' steps of that key;
 *   1: record i is malformed or uncommon, 2: a step's Feature in record i is malformed, uncommon or of another
 *   kind, 3: record i is not bytes. For 1-3 the caller decodes the batch with the reference parser. */
static PyObject *py_decode_feature_lists(PyObject *self, PyObject *args) {
    PyObject *keys_arg, *records_arg, *seq = NULL, *result = NULL;
    Py_buffer kinds;
    tfr_plan plan;
    tfr_seq_batch s;
    memset(&s, 0, sizeof(s));
    memset(&plan, 0, sizeof(plan));
    if (!PyArg_ParseTuple(args, "Oy*O:decode_feature_lists", &keys_arg, &kinds, &records_arg)) return NULL;
    int planned = plan_from_python(&plan, keys_arg, &kinds, "decode_feature_lists");
    PyBuffer_Release(&kinds);
    if (planned < 0 || !(seq = PySequence_Tuple(records_arg))) goto done;
    if (tfr_seq_alloc(&s, (size_t)PyTuple_GET_SIZE(seq), plan.nkeys) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t bad = records_from_tuple(seq, s.data, s.size);
    int why = 3;
    if (bad < 0) {
        Py_BEGIN_ALLOW_THREADS
        bad = tfr_seq_count(&plan, &s, &why);
        Py_END_ALLOW_THREADS
    }
    if (bad == -2) PyErr_NoMemory();
    else if (bad >= 0) result = Py_BuildValue("(in)", why, (Py_ssize_t)bad);
    else result = list_columns(&plan, &s);
done:
    tfr_seq_free(&s);
    tfr_plan_free(&plan);
    Py_XDECREF(seq);
    return result;
}

/* ---- sparse indices ------------------------------------------------------------------------------------------ */

/* sparse_indices(counts) -> bytearray: for per-row value counts (int64, each >= 0) the [2, nnz] int64 COO indices
 * (row of each value, then its position in the row), nnz = sum(counts). */
static PyObject *py_sparse_indices(PyObject *self, PyObject *arg) {
    Py_buffer counts;
    if (PyObject_GetBuffer(arg, &counts, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = NULL;
    size_t rows = (size_t)counts.len / sizeof(int64_t);
    uint64_t total = 0;
    if (counts.len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_Format(PyExc_ValueError, "sparse_indices: %zd bytes is not a whole number of int64 counts", counts.len);
        goto done;
    }
    for (size_t i = 0; i < rows; i++) {
        int64_t c;
        memcpy(&c, (const char *)counts.buf + i * sizeof c, sizeof c);
        if (c < 0 || (uint64_t)c > ((uint64_t)PY_SSIZE_T_MAX / 16) - total) {
            PyErr_Format(PyExc_ValueError, "sparse_indices: count %lld of row %zu is out of range", (long long)c, i);
            goto done;
        }
        total += (uint64_t)c;
    }
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(total * 2 * sizeof(int64_t)));
    if (!out) goto done;
    int64_t *row_of = (int64_t *)PyByteArray_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    tfr_coo_indices(counts.buf, rows, row_of, row_of + total);
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&counts);
    return out;
}

/* ---- batches through shared memory (data/transport.py; the copies: transport.c) ------------------------------ */

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
static PyObject *py_pack_bytes(PyObject *self, PyObject *args) {
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
static PyObject *py_unpack_bytes(PyObject *self, PyObject *args) {
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

/* The `total` spans at `offset` of the arena resolved against the records (a tuple of bytes: a span may name
 * nothing else) into ptrs and lens (arrays of total), their sum at *sum; -1 with ValueError when they do not fit
 * in the arena or one lies outside its record. */
static int resolve_spans(PyObject *items, const Py_buffer *arena, Py_ssize_t offset, Py_ssize_t total,
                         const char **ptrs, size_t *lens, size_t *sum, const char *who) {
    if (offset < 0 || total < 0 || offset > arena->len || total > (arena->len - offset) / TFR_SPAN_BYTES) {
        PyErr_Format(PyExc_ValueError, "%s: %zd spans at offset %zd do not fit in the %zd-byte arena", who, total,
                     offset, arena->len);
        return -1;
    }
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
    size_t count = total > 0 ? (size_t)total : 1;
    *ptrs = total >= 0 && (size_t)total < PY_SSIZE_T_MAX / sizeof(Py_ssize_t) ? malloc(count * sizeof(char *)) : NULL;
    *lens = *ptrs ? malloc(count * sizeof(size_t)) : NULL;
    if (!*lens) {
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
static PyObject *py_pack_spans(PyObject *self, PyObject *args) {
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
static PyObject *py_bytes_of_spans(PyObject *self, PyObject *args) {
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

#ifdef TFR_HAVE_ZLIB
/* ---- seek points in compressed files ------------------------------------------------------------------------ */

/* seek_build(data, gzip, span) -> (status, points, windows, total_out, error_in): inflate a whole GZIP / ZLIB file
 * and return its seek points: `points` int64 rows (out, in, bits, dict), `windows` 32768 bytes per point (its
 * window at the end of the slot). status 0 is success; else error_in is the compressed bytes used before it. */
static PyObject *py_seek_build(PyObject *self, PyObject *args) {
    Py_buffer data;
    int gzip;
    unsigned long long span;
    if (!PyArg_ParseTuple(args, "y*pK:seek_build", &data, &gzip, &span)) return NULL;
    tfr_seek_index ix;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = tfr_seek_build(data.buf, (size_t)data.len, gzip, span ? span : 1, &ix);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (status == TFR_SEEK_NOMEM) {
        tfr_seek_free(&ix);
        return PyErr_NoMemory();
    }
    PyObject *points = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(ix.count * 4 * sizeof(int64_t)));
    PyObject *windows = PyBytes_FromStringAndSize((const char *)ix.windows, (Py_ssize_t)(ix.count * TFR_SEEK_WINDOW));
    if (points && windows) {
        int64_t *row = (int64_t *)PyBytes_AS_STRING(points);
        for (size_t i = 0; i < ix.count; i++, row += 4) {
            row[0] = (int64_t)ix.points[i].out;
            row[1] = (int64_t)ix.points[i].in;
            row[2] = (int64_t)ix.points[i].bits;
            row[3] = (int64_t)ix.points[i].dict;
        }
    }
    PyObject *result = points && windows ? Py_BuildValue("(iOOKK)", status, points, windows,
                                                         (unsigned long long)ix.total_out,
                                                         (unsigned long long)ix.error_in) : NULL;
    Py_XDECREF(points);
    Py_XDECREF(windows);
    tfr_seek_free(&ix);
    return result;
}

/* seek_extract(data, bits, window, gzip, skip, want) -> (status, bytes): restart inflation at a seek point (`data`
 * from its shared byte when bits > 0), drop `skip` decompressed bytes and return up to `want` more. */
static PyObject *py_seek_extract(PyObject *self, PyObject *args) {
    Py_buffer data, window;
    unsigned int bits;
    int gzip;
    unsigned long long skip;
    Py_ssize_t want;
    if (!PyArg_ParseTuple(args, "y*Iy*pKn:seek_extract", &data, &bits, &window, &gzip, &skip, &want)) return NULL;
    PyObject *out = NULL;
    if (want < 0 || bits > 7 || window.len > (Py_ssize_t)TFR_SEEK_WINDOW) {
        PyErr_SetString(PyExc_ValueError, "seek_extract: want must be >= 0, bits 0..7 and the window at most 32768 "
                                          "bytes");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, want);
    if (!out) goto done;
    size_t got = 0;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = tfr_seek_extract(data.buf, (size_t)data.len, bits, window.buf, (size_t)window.len, gzip, skip,
                              (uint8_t *)PyBytes_AS_STRING(out), (size_t)want, &got);
    Py_END_ALLOW_THREADS
    if (status == TFR_SEEK_NOMEM) {
        Py_CLEAR(out);
        PyErr_NoMemory();
        goto done;
    }
    if ((Py_ssize_t)got != want && _PyBytes_Resize(&out, (Py_ssize_t)got) < 0) goto done;
    PyObject *result = Py_BuildValue("(iN)", status, out);
    out = NULL;
    PyBuffer_Release(&data);
    PyBuffer_Release(&window);
    return result;
done:
    Py_XDECREF(out);
    PyBuffer_Release(&data);
    PyBuffer_Release(&window);
    return NULL;
}

/* seek_extract_ranges(data, bits, window, gzip, starts, lens) -> (status, list of bytes, got): restart inflation
 * at a seek point once and inflate the ranges (int64 buffers: starts[i] decompressed bytes after the point, lens[i]
 * long; in increasing order, apart) straight into their bytes objects, made before inflation starts. `got` is how
 * many bytes were inflated into them in all: less than the sum of lens when the stream ends first. */
static PyObject *py_seek_extract_ranges(PyObject *self, PyObject *args) {
    Py_buffer data, window, starts, lens;
    unsigned int bits;
    int gzip;
    if (!PyArg_ParseTuple(args, "y*Iy*py*y*:seek_extract_ranges", &data, &bits, &window, &gzip, &starts, &lens))
        return NULL;
    PyObject *list = NULL, *result = NULL;
    uint8_t **outs = NULL;
    Py_ssize_t n = starts.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *s = starts.buf, *l = lens.buf;
    int ok = bits <= 7 && window.len <= (Py_ssize_t)TFR_SEEK_WINDOW && starts.len == lens.len &&
             starts.len % (Py_ssize_t)sizeof(int64_t) == 0;
    for (Py_ssize_t i = 0; ok && i < n; i++) /* each range after the one before, none negative */
        ok = s[i] >= 0 && l[i] >= 0 && l[i] <= PY_SSIZE_T_MAX && (i == 0 || s[i] - l[i - 1] >= s[i - 1]);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "seek_extract_ranges: starts and lens must be int64 buffers of one length, "
                                          "ranges in increasing order and apart, bits 0..7 and the window at most "
                                          "32768 bytes");
        goto done;
    }
    list = PyList_New(n);
    outs = malloc((size_t)(n ? n : 1) * sizeof *outs);
    if (!list || !outs) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)l[i]);
        if (!item) goto done;
        PyList_SET_ITEM(list, i, item);
        outs[i] = (uint8_t *)PyBytes_AS_STRING(item);
    }
    size_t got = 0;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = tfr_seek_extract_ranges(data.buf, (size_t)data.len, bits, window.buf, (size_t)window.len, gzip,
                                     (const uint64_t *)s, (const uint64_t *)l, (size_t)n, outs, &got);
    Py_END_ALLOW_THREADS
    if (status == TFR_SEEK_NOMEM) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_BuildValue("(iOK)", status, list, (unsigned long long)got);
done:
    Py_XDECREF(list);
    free(outs);
    PyBuffer_Release(&data);
    PyBuffer_Release(&window);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&lens);
    return result;
}
#endif

/* ---- module --------------------------------------------------------------------------------------------------- */

static PyMethodDef module_methods[] = {
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, value=0) -> int: CRC-32C of a bytes-like object"},
    {"masked_crc32c", py_masked_crc32c, METH_O, "masked_crc32c(data) -> int: TFRecord's masked CRC-32C"},
    {"hardware_crc", py_hardware_crc, METH_NOARGS, "hardware_crc() -> bool: whether CRC-32C uses CPU instructions"},
    {"scan_records", py_scan_records, METH_VARARGS,
     "scan_records(buffer, lo, hi, limit, verify, max_records[, lengths]) -> (records or their int64 lengths, stop, "
     "status)"},
    {"find_header", py_find_header, METH_VARARGS, "find_header(buffer, lo, hi) -> offset or -1"},
    {"planes_from_pixels", py_planes_from_pixels, METH_VARARGS,
     "planes_from_pixels(out, pixels, height, width, channels, step, row, flip): interleaved pixels into planes"},
    {"normalize_pixels", py_normalize_pixels, METH_VARARGS,
     "normalize_pixels(out, bf16, interleaved, pixels, height, width, channels, step, row, flip, sub, mul): "
     "interleaved uint8 pixels as (v - sub) * mul floats (float32 or bfloat16), planes or interleaved"},
    {"jpeg_next_marker", py_jpeg_next_marker, METH_VARARGS,
     "jpeg_next_marker(buffer, start) -> offset of the next marker's 0xFF after JPEG entropy-coded data, or -1"},
#ifndef _WIN32
    {"read_framed", py_read_framed, METH_VARARGS,
     "read_framed(fd, offset or offsets, sizes, verify) -> (records, good): records of known framed sizes (back to "
     "back from an offset, or one offset each) read from a file straight into their bytes objects, checked"},
#endif
#ifdef TFR_HAVE_ZLIB
    {"seek_build", py_seek_build, METH_VARARGS,
     "seek_build(data, gzip, span) -> (status, points, windows, total_out, error_in): seek points of a GZIP/ZLIB file"},
    {"seek_extract", py_seek_extract, METH_VARARGS,
     "seek_extract(data, bits, window, gzip, skip, want) -> (status, bytes): inflate from a seek point"},
    {"seek_extract_ranges", py_seek_extract_ranges, METH_VARARGS,
     "seek_extract_ranges(data, bits, window, gzip, starts, lens) -> (status, list of bytes, got): ranges from one "
     "seek point"},
#endif
#ifdef TFR_HAVE_ZLIB
    {"png_decode_many", py_png_decode_many, METH_VARARGS,
     "png_decode_many(images, out, width, height, colour) -> (index, reason): 8-bit PNGs decoded into out; -1 or "
     "the first refused image"},
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
    {"decode_free_ns", py_decode_free_ns, METH_NOARGS,
     "decode_free_ns() -> int: nanoseconds ExampleDecoder.decode has run without the GIL (all calls, all threads)"},
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
