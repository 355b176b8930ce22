/* The framing bindings of tfr_torch._native._core (see module.c): CRC-32C, scanning and finding records in a
 * buffer, reading framed records of known sizes from a file (not on Windows), and framing records. The kernels:
 * crc32c.c, framing.c, fileread.c. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifndef _WIN32
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#endif

#include "bindings.h"
#include "crc32c.h"
#include "fileread.h"
#include "framing.h"

/* ---- CRC ---------------------------------------------------------------------------------------------------- */

PyObject *py_crc32c(PyObject *self, PyObject *args) {
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

PyObject *py_masked_crc32c(PyObject *self, PyObject *arg) {
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = tfr_mask_crc(tfr_crc32c(0, data.buf, (size_t)data.len));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

PyObject *py_hardware_crc(PyObject *self, PyObject *noargs) { return PyBool_FromLong(tfr_crc32c_hardware()); }

/* ---- framing ------------------------------------------------------------------------------------------------ */

/* scan_records(buffer, lo, hi, limit, verify, max_records[, lengths]) -> (records, stop, status); with `lengths`
 * true, `records` is instead a bytes object of their int64 lengths (for counting and indexing: no copy of data) */
PyObject *py_scan_records(PyObject *self, PyObject *args) {
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
PyObject *py_read_framed(PyObject *self, PyObject *args) {
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
PyObject *py_find_header(PyObject *self, PyObject *args) {
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
PyObject *py_frame_records(PyObject *self, PyObject *arg) {
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
