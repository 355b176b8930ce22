/* The Python bindings of tfr_torch._native._core, one file per concern (bind_*.c): what module.c registers (the
 * functions of its method table, the types it readies) and the few helpers two binding files share. Include it
 * after Python.h (with PY_SSIZE_T_CLEAN defined). */
#ifndef TFR_BINDINGS_H
#define TFR_BINDINGS_H

#include <Python.h>

#include <stddef.h>
#include <stdint.h>

#include "example.h"

/* Shared between this extension's files only: not exported from the shared library (as when module.c held them
 * all, static), so that no other library's symbol of the same name can stand in for one of them. */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* bind_framing.c: CRC-32C and TFRecord framing */
PyObject *py_crc32c(PyObject *self, PyObject *args);
PyObject *py_masked_crc32c(PyObject *self, PyObject *arg);
PyObject *py_hardware_crc(PyObject *self, PyObject *noargs);
PyObject *py_scan_records(PyObject *self, PyObject *args);
#ifndef _WIN32
PyObject *py_read_framed(PyObject *self, PyObject *args);
#endif
PyObject *py_find_header(PyObject *self, PyObject *args);
PyObject *py_frame_records(PyObject *self, PyObject *arg);

/* bind_image.c: JPEG markers, PNG sequences, pixel layouts */
PyObject *py_jpeg_next_marker(PyObject *self, PyObject *args);
PyObject *py_jpeg_sound_many(PyObject *self, PyObject *arg);
PyObject *py_jpeg_headers_many(PyObject *self, PyObject *arg);
#ifdef TFR_HAVE_ZLIB
PyObject *py_png_decode_many(PyObject *self, PyObject *args);
#endif
PyObject *py_planes_from_pixels(PyObject *self, PyObject *args);
PyObject *py_normalize_pixels(PyObject *self, PyObject *args);

/* bind_example.c: the ExampleDecoder and Arena types, decode_free_ns */
extern PyTypeObject ExampleDecoderType;
extern PyTypeObject ArenaType;
PyObject *py_decode_free_ns(PyObject *self, PyObject *unused);

/* bind_sequence.c: SequenceExample feature lists, sparse indices */
PyObject *py_decode_feature_lists(PyObject *self, PyObject *args);
PyObject *py_sparse_indices(PyObject *self, PyObject *arg);

/* bind_bytes.c: lists of bytes through shared memory, bytes values as spans of their records */
PyObject *py_bytes_total(PyObject *self, PyObject *arg);
PyObject *py_pack_bytes(PyObject *self, PyObject *args);
PyObject *py_unpack_bytes(PyObject *self, PyObject *args);
PyObject *py_pack_spans(PyObject *self, PyObject *args);
PyObject *py_bytes_of_spans(PyObject *self, PyObject *args);

/* bind_seek.c: seek points in GZIP / ZLIB files (with zlib) */
#ifdef TFR_HAVE_ZLIB
PyObject *py_seek_build(PyObject *self, PyObject *args);
PyObject *py_seek_extract(PyObject *self, PyObject *args);
PyObject *py_seek_extract_ranges(PyObject *self, PyObject *args);
#endif

/* bind_batch.c, shared by bind_example.c and bind_sequence.c */

/* A plan from Python keys (a sequence of bytes) and kinds (one byte each: 0 bytes, 1 float, 2 int64). */
int plan_from_python(tfr_plan *plan, PyObject *keys_arg, const Py_buffer *kinds, const char *who);
/* Each record of a tuple as bytes for a kernel: -1 when all are bytes (exactly), else the first that is not. */
Py_ssize_t records_from_tuple(PyObject *seq, const uint8_t **data, size_t *size);
/* A list of new bytes objects, one for each of the `total` slices. */
PyObject *bytes_of_slices(const tfr_slice *slices, size_t total);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
