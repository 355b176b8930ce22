/* The seek-point bindings of tfr_torch._native._core (see module.c): seek points of GZIP / ZLIB files built, and
 * inflation restarted from one. With zlib only (left out on Windows). The kernel: seek.c. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bindings.h"
#ifdef TFR_HAVE_ZLIB
#include "seek.h"

/* ---- seek points in compressed files ------------------------------------------------------------------------ */

/* seek_build(data, gzip, span) -> (status, points, windows, total_out, error_in): inflate a whole GZIP / ZLIB file
 * and return its seek points: `points` int64 rows (out, in, bits, dict), `windows` 32768 bytes per point (its
 * window at the end of the slot). status 0 is success; else error_in is the compressed bytes used before it. */
PyObject *py_seek_build(PyObject *self, PyObject *args) {
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
PyObject *py_seek_extract(PyObject *self, PyObject *args) {
    Py_buffer data, window;
    int bits, gzip;
    long long skip; /* parsed checked ("i", "L"), not masked ("I", "K"): 2**32 is not bits 0, -1 not skip 2**64-1 */
    Py_ssize_t want;
    if (!PyArg_ParseTuple(args, "y*iy*pLn:seek_extract", &data, &bits, &window, &gzip, &skip, &want)) return NULL;
    PyObject *out = NULL;
    if (want < 0 || skip < 0 || bits < 0 || bits > 7 || window.len > (Py_ssize_t)TFR_SEEK_WINDOW) {
        PyErr_SetString(PyExc_ValueError, "seek_extract: want and skip must be >= 0, bits 0..7 and the window at "
                                          "most 32768 bytes");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, want);
    if (!out) goto done;
    size_t got = 0;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = tfr_seek_extract(data.buf, (size_t)data.len, (unsigned)bits, window.buf, (size_t)window.len, gzip,
                              (uint64_t)skip,
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

/* The ranges' int64 starts and lens (buffers of any alignment: copied, never cast) as new arrays at *s and *l,
 * n each, checked: one length, whole int64s, none negative, each range after the one before. -1 with ValueError or
 * MemoryError; the caller frees *s and *l either way. */
static int ranges_from(const Py_buffer *starts, const Py_buffer *lens, int64_t **s, int64_t **l, Py_ssize_t *n) {
    *n = starts->len / (Py_ssize_t)sizeof(int64_t);
    int ok = starts->len == lens->len && starts->len % (Py_ssize_t)sizeof(int64_t) == 0;
    *s = malloc((*n ? (size_t)*n : 1) * sizeof(int64_t));
    *l = malloc((*n ? (size_t)*n : 1) * sizeof(int64_t));
    if (!*s || !*l) {
        PyErr_NoMemory();
        return -1;
    }
    if (ok) {
        memcpy(*s, starts->buf, (size_t)*n * sizeof(int64_t));
        memcpy(*l, lens->buf, (size_t)*n * sizeof(int64_t));
    }
    for (Py_ssize_t i = 0; ok && i < *n; i++) /* each range after the one before, none negative */
        ok = (*s)[i] >= 0 && (*l)[i] >= 0 && (*l)[i] <= PY_SSIZE_T_MAX &&
             (i == 0 || (*s)[i] - (*l)[i - 1] >= (*s)[i - 1]);
    if (!ok)
        PyErr_SetString(PyExc_ValueError, "seek_extract_ranges: starts and lens must be int64 buffers of one length, "
                                          "ranges in increasing order and apart, bits 0..7 and the window at most "
                                          "32768 bytes");
    return ok ? 0 : -1;
}

/* Each range's bytes object cut to what was inflated into it: ranges are filled in order, `got` bytes in all, and
 * the rest of a bytes object was never written (it must not reach Python: shorter or empty, as the reference). */
static int ranges_cut(PyObject *list, const int64_t *l, Py_ssize_t n, size_t got) {
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t len = (size_t)l[i], fill = got < len ? got : len;
        got -= fill;
        if (fill == len) continue;
        PyObject *item = PyBytes_FromStringAndSize(PyBytes_AS_STRING(PyList_GET_ITEM(list, i)), (Py_ssize_t)fill);
        if (!item || PyList_SetItem(list, i, item) < 0) return -1;
    }
    return 0;
}

/* seek_extract_ranges(data, bits, window, gzip, starts, lens) -> (status, list of bytes, got): restart inflation
 * at a seek point once and inflate the ranges (int64 buffers: starts[i] decompressed bytes after the point, lens[i]
 * long; in increasing order, apart) straight into their bytes objects, made before inflation starts. `got` is how
 * many bytes were inflated into them in all: less than the sum of lens when the stream ends first (the ranges from
 * there are then shorter, or empty). */
PyObject *py_seek_extract_ranges(PyObject *self, PyObject *args) {
    Py_buffer data, window, starts, lens;
    int bits, gzip;
    if (!PyArg_ParseTuple(args, "y*iy*py*y*:seek_extract_ranges", &data, &bits, &window, &gzip, &starts, &lens))
        return NULL;
    PyObject *list = NULL, *result = NULL;
    uint8_t **outs = NULL;
    int64_t *s = NULL, *l = NULL;
    Py_ssize_t n;
    if (ranges_from(&starts, &lens, &s, &l, &n) < 0) goto done;
    if (bits < 0 || bits > 7 || window.len > (Py_ssize_t)TFR_SEEK_WINDOW) {
        PyErr_SetString(PyExc_ValueError, "seek_extract_ranges: bits 0..7 and the window at most 32768 bytes");
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
    status = tfr_seek_extract_ranges(data.buf, (size_t)data.len, (unsigned)bits, window.buf, (size_t)window.len, gzip,
                                     (const uint64_t *)s, (const uint64_t *)l, (size_t)n, outs, &got);
    Py_END_ALLOW_THREADS
    if (status == TFR_SEEK_NOMEM) {
        PyErr_NoMemory();
        goto done;
    }
    if (ranges_cut(list, l, n, got) == 0) result = Py_BuildValue("(iOK)", status, list, (unsigned long long)got);
done:
    Py_XDECREF(list);
    free(outs);
    free(s);
    free(l);
    PyBuffer_Release(&data);
    PyBuffer_Release(&window);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&lens);
    return result;
}
#endif
