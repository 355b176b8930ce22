/* The image bindings of tfr_torch._native._core (see module.c): finding JPEG markers, decoding PNG sequences
 * (with zlib), and pixel layout changes for the image transforms. The kernels: jpeg.c, png.c, pixels.c. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bindings.h"
#include "jpeg.h"
#include "pixels.h"
#ifdef TFR_HAVE_ZLIB
#include "png.h"
#endif

/* ---- images --------------------------------------------------------------------------------------------------- */

/* jpeg_next_marker(buffer, start) -> offset of the next marker's 0xFF in a JPEG's entropy-coded data, or -1 */
PyObject *py_jpeg_next_marker(PyObject *self, PyObject *args) {
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

/* jpeg_sound_many(items) -> bytes: for each item of the sequence, 1 when it is bytes holding a JPEG the structure
 * check finds sound (tfr_jpeg_sound), else 0; the whole batch checked with the GIL released once. */
PyObject *py_jpeg_sound_many(PyObject *self, PyObject *arg) {
    PyObject *items = PySequence_Tuple(arg); /* ours: its items stay alive while the GIL is released */
    if (!items) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    const unsigned char **srcs = malloc((n ? (size_t)n : 1) * sizeof(char *));
    size_t *lens = malloc((n ? (size_t)n : 1) * sizeof(size_t));
    PyObject *result = PyBytes_FromStringAndSize(NULL, n);
    if (!srcs || !lens || !result) {
        if (result) Py_CLEAR(result);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(items, i);
        srcs[i] = PyBytes_CheckExact(item) ? (const unsigned char *)PyBytes_AS_STRING(item) : NULL;
        lens[i] = srcs[i] ? (size_t)PyBytes_GET_SIZE(item) : 0;
    }
    unsigned char *flags = (unsigned char *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) flags[i] = srcs[i] ? (unsigned char)tfr_jpeg_sound(srcs[i], lens[i]) : 0;
    Py_END_ALLOW_THREADS
done:
    free(srcs);
    free(lens);
    Py_DECREF(items);
    return result;
}

/* jpeg_headers_many(items) -> list: for each item of the sequence, (components, precision, orientation, height,
 * width, frame, rgb) as tfr_torch/images/_formats.py's _jpeg reads them when it is bytes starting FF D8 FF (a
 * JPEG's), else None; the headers read with the GIL released once. */
PyObject *py_jpeg_headers_many(PyObject *self, PyObject *arg) {
    PyObject *items = PySequence_Tuple(arg); /* ours: its items stay alive while the GIL is released */
    if (!items) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    const unsigned char **srcs = malloc((n ? (size_t)n : 1) * sizeof(char *));
    size_t *lens = malloc((n ? (size_t)n : 1) * sizeof(size_t));
    tfr_jpeg_info *infos = malloc((n ? (size_t)n : 1) * sizeof(tfr_jpeg_info));
    PyObject *result = NULL;
    if (!srcs || !lens || !infos) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(items, i);
        srcs[i] = NULL;
        lens[i] = 0;
        if (PyBytes_CheckExact(item) && PyBytes_GET_SIZE(item) >= 3) {
            const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(item);
            if (data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) {
                srcs[i] = data;
                lens[i] = (size_t)PyBytes_GET_SIZE(item);
            }
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        if (srcs[i]) tfr_jpeg_header(srcs[i], lens[i], &infos[i]);
    Py_END_ALLOW_THREADS
    result = PyList_New(n);
    if (!result) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry;
        if (srcs[i]) {
            const tfr_jpeg_info *f = &infos[i];
            entry = Py_BuildValue("(iiiiiiO)", f->components, f->precision, f->orientation, f->height, f->width,
                                  f->frame, f->rgb ? Py_True : Py_False);
            if (!entry) {
                Py_CLEAR(result);
                goto done;
            }
        } else {
            Py_INCREF(Py_None); /* (Py_NewRef is Python 3.10+) */
            entry = Py_None;
        }
        PyList_SET_ITEM(result, i, entry);
    }
done:
    free(srcs);
    free(lens);
    free(infos);
    Py_DECREF(items);
    return result;
}

#ifdef TFR_HAVE_ZLIB
/* png_decode_many(images, out, width, height, colour) -> (index, reason): the PNGs (a sequence of bytes) decoded
 * into the writable `out` (len(images) * height * width * channels bytes); index -1 when all decoded, else the
 * first refused image (an item that is not bytes is refused too, reason 1) and why (png.h's TFR_PNG_*). */
PyObject *py_png_decode_many(PyObject *self, PyObject *args) {
    PyObject *images, *target;
    Py_ssize_t w, h; /* parsed checked ("n"), not masked ("I"): a width of 2**32 + 8 is not a width of 8 */
    int colour;
    if (!PyArg_ParseTuple(args, "OOnni:png_decode_many", &images, &target, &w, &h, &colour)) return NULL;
    if (w < 1 || h < 1 || w > (Py_ssize_t)UINT32_MAX || h > (Py_ssize_t)UINT32_MAX)
        return PyErr_Format(PyExc_ValueError, "png_decode_many: %zd x %zd pixels is not a PNG's size", w, h);
    uint32_t width = (uint32_t)w, height = (uint32_t)h;
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

/* a * b * c, or SIZE_MAX when that overflows */
static size_t product3(size_t a, size_t b, size_t c) {
    if (b && a > SIZE_MAX / b) return SIZE_MAX;
    if (c && a * b > SIZE_MAX / c) return SIZE_MAX;
    return a * b * c;
}

/* A size for a message: its digits, or "2**64 or more" for SIZE_MAX (no signed product that may overflow). */
static const char *size_text(size_t n, char text[24]) {
    if (n == SIZE_MAX) return "2**64 or more";
    snprintf(text, 24, "%zu", n);
    return text;
}

/* planes_from_pixels(out, pixels, height, width, channels, step, row, flip): the writable `out` (exactly channels *
 * height * width bytes) gets the planes of the interleaved pixels in the buffer `pixels` (channel k of pixel (y, x)
 * at byte y * row + x * step + k; with flip, pixel (y, width - 1 - x)). Both extents are checked here. */
PyObject *py_planes_from_pixels(PyObject *self, PyObject *args) {
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
    size_t planes = product3((size_t)c, (size_t)h, (size_t)w),
           need = tfr_pixels_extent((size_t)h, (size_t)w, (size_t)c, (size_t)step, (size_t)row);
    if (planes != (size_t)out.len || need == SIZE_MAX || need > (size_t)in.len) {
        char text[24];
        PyErr_Format(PyExc_ValueError, "planes_from_pixels: %zd x %zd pixels of %zd channels need %s bytes of "
                     "planes (got %zd) and pixels within %zd bytes (the layout needs %s)", h, w, c,
                     size_text(planes, text), out.len, in.len, need == SIZE_MAX ? "more than memory" : "more");
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
PyObject *py_normalize_pixels(PyObject *self, PyObject *args) {
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
    size_t values = product3((size_t)c, (size_t)h, (size_t)w), size = bf16 ? 2 : 4,
           bytes = values == SIZE_MAX ? SIZE_MAX : product3(values, size, 1),
           need = tfr_pixels_extent((size_t)h, (size_t)w, (size_t)c, (size_t)step, (size_t)row);
    if (bytes != (size_t)out.len || need == SIZE_MAX || need > (size_t)in.len) {
        char text[24];
        PyErr_Format(PyExc_ValueError, "normalize_pixels: %zd x %zd pixels of %zd channels need %s bytes of "
                     "output (got %zd) and pixels within %zd bytes (the layout needs %s)", h, w, c,
                     size_text(bytes, text), out.len, in.len, need == SIZE_MAX ? "more than memory" : "more");
        goto done;
    }
    float subs[16], muls[16];
    if (c > 16) { /* first: c * 4 below is then small */
        PyErr_Format(PyExc_ValueError, "normalize_pixels: at most 16 channels, got %zd", c);
        goto done;
    }
    if (sub.len != c * (Py_ssize_t)sizeof(float) || mul.len != c * (Py_ssize_t)sizeof(float)) {
        PyErr_Format(PyExc_ValueError, "normalize_pixels: sub and mul need %zd float32 values each (got %zd and %zd "
                     "bytes)", c, sub.len, mul.len);
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
