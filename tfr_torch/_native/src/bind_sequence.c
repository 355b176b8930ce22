/* The SequenceExample bindings of tfr_torch._native._core (see module.c): decode_feature_lists, and
 * sparse_indices. The kernels: sequence.c, batch.c. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "bindings.h"
#include "example.h"
#include "sequence.h"

/* ---- SequenceExample feature lists (the kernel: sequence.c) -------------------------------------------------- */

static PyObject *new_bytearray(const void *src, size_t n) {
    if (n > (size_t)PY_SSIZE_T_MAX) return PyErr_NoMemory();
    PyObject *out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (out && src && n) memcpy(PyByteArray_AS_STRING(out), src, n);
    return out;
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
PyObject *py_decode_feature_lists(PyObject *self, PyObject *args) {
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
PyObject *py_sparse_indices(PyObject *self, PyObject *arg) {
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
