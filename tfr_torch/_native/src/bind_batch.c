/* What the Example and SequenceExample bindings (bind_example.c, bind_sequence.c) share: a plan of keys and the
 * records of a batch from Python, and bytes values back to it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>

#include "bindings.h"
#include "example.h"

/* ---- batches from Python, bytes values to Python ----------------------------------------------------------- */

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
int plan_from_python(tfr_plan *plan, PyObject *keys_arg, const Py_buffer *kinds, const char *who) {
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

/* Each record of a tuple as bytes for a kernel: -1 when all are bytes (exactly), else the first that is not. */
Py_ssize_t records_from_tuple(PyObject *seq, const uint8_t **data, size_t *size) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); i++) {
        PyObject *item = PyTuple_GET_ITEM(seq, i);
        if (!PyBytes_CheckExact(item)) return i;
        data[i] = (const uint8_t *)PyBytes_AS_STRING(item);
        size[i] = (size_t)PyBytes_GET_SIZE(item);
    }
    return -1;
}

/* A list of new bytes objects, one for each of the `total` slices. */
PyObject *bytes_of_slices(const tfr_slice *slices, size_t total) {
    if (total > (size_t)PY_SSIZE_T_MAX) return PyErr_NoMemory();
    PyObject *values = PyList_New((Py_ssize_t)total);
    for (size_t j = 0; values && j < total; j++) {
        PyObject *item = PyBytes_FromStringAndSize((const char *)slices[j].ptr, (Py_ssize_t)slices[j].len);
        if (!item) Py_CLEAR(values);
        else PyList_SET_ITEM(values, (Py_ssize_t)j, item);
    }
    return values;
}
