/* tfr_torch._native._core: the Python face of the kernels, and nothing else. Each function converts its Python
 * arguments into buffers, releases the GIL while the kernel runs, and returns buffers or lists plus positions;
 * Python turns positions into messages. This file holds the module's method table and its initialization; the
 * bindings live in one file per concern (declared in bindings.h):
 *   bind_framing.c  CRC-32C, scan / find / frame records, read_framed   bind_image.c  JPEG markers, PNG, pixels
 *   bind_example.c  ExampleDecoder, Arena, decode_free_ns               bind_batch.c  plans, records, bytes values
 *   bind_sequence.c decode_feature_lists, sparse_indices                bind_bytes.c  pack / unpack bytes, spans
 *   bind_seek.c     seek points in GZIP / ZLIB streams (with zlib)
 * The kernels live beside them, one concern each, and touch no Python object:
 *   crc32c.c    CRC-32C                          framing.c   TFRecord framing (scan, find, frame, check)
 *   fileread.c  framed records read from a file  example.c   one Example's Features: scan, count, fill
 *   batch.c     a batch of Examples, by column   sequence.c  SequenceExample feature lists of a batch
 *   spans.c     bytes values as spans of records transport.c the worker transport's copies
 *   seek.c      seek points in GZIP / ZLIB streams (with zlib)
 *   png.c       PNG image sequences decoded into one array (with zlib)
 *   pixels.c    pixel layout changes for the image transforms */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "bindings.h"
#include "crc32c.h"
#include "framing.h"

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
    {"jpeg_sound_many", py_jpeg_sound_many, METH_O,
     "jpeg_sound_many(items) -> bytes: 1 for each item that is bytes holding a structurally sound JPEG, else 0"},
    {"jpeg_headers_many", py_jpeg_headers_many, METH_O,
     "jpeg_headers_many(items) -> list: (components, precision, orientation, height, width, frame, rgb) for each "
     "item that is bytes starting like a JPEG, else None"},
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
