/* A batch of tf.train.Example records decoded column by column (ExampleDecoder.decode in bind_example.c): every
 * record's planned Features found and counted (tfr_batch_count), the columns laid out in one arena
 * (tfr_batch_layout) and filled (tfr_batch_fill), a bytes column's values found as slices of the records (so that
 * the binding only makes their bytes objects). No Python objects: all of it runs without the GIL, the batch's
 * own arrays allocated there too (tfr_batch_alloc after tfr_batch_init).
 *
 * Which problem a batch reports first is defined once, by the reference decoder (ExamplePlan.parse in
 * tfr_torch/decode/plan.py, "Error order"). The kernel never reports a problem itself: at the first record or
 * Feature that is malformed, uncommon or of another kind it stops, and the caller decodes the whole batch with the
 * reference, which then names the first problem in that order. */
#ifndef TFR_BATCH_H
#define TFR_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "example.h"

/* The state of one decode call: k planned keys over b records */
typedef struct {
    size_t b, k;
    const uint8_t **data; /* [b]: each record's bytes */
    size_t *size;         /* [b] */
    tfr_slice *slots;     /* [b * k]: each record's Feature of each key */
    uint64_t *counts;     /* [k * b] */
    tfr_slice *runs;      /* [k * b]: where each numeric Feature's values are (tfr_count_run) */
    uint8_t *present;     /* [k * b] */
    uint8_t *uncommon;    /* [k]: decode this column with the reference parser */
    uint64_t *totals;     /* [k] */
    tfr_slice *strings;   /* [nstrings]: the values of the bytes columns not given as spans, column after column */
    size_t nstrings;
} tfr_batch;

/* What the columns hold beyond presence and counts: per key, 1 where a numeric column also gets its sparse COO
 * indices (`indices`), 1 where a bytes column is given as spans of the records (`spans`, NULL: none is). The
 * dense columns: `ndense` numeric keys (`dense_order`) whose values are laid out back to back, in that order, at
 * the arena's start when every record holds each of them with its `dense_count` ([k], -1 for the other keys)
 * values (tfr_batch_dense), so that a run of them of one kind and count is one array */
typedef struct {
    const uint8_t *indices;
    const uint8_t *spans;
    const int64_t *dense_count;
    const size_t *dense_order;
    size_t ndense;
} tfr_batch_wants;

/* Where one column's arrays lie in the arena (byte offsets), where a bytes column's values start in the batch's
 * `strings`, and the longest row */
typedef struct {
    size_t present, counts, values, indices, strings;
    uint64_t longest;
} tfr_column_layout;

/* Why a batch goes to the reference decoder */
enum tfr_batch_why { TFR_WHY_RECORD = 1, TFR_WHY_FEATURE = 2 };

/* The records' pointers and sizes for b records and k keys (filled by the caller, with the GIL); then
 * tfr_batch_alloc, which needs no GIL, the rest. Each returns 0, or -1 when out of memory; tfr_batch_free frees
 * whatever was allocated. */
int tfr_batch_init(tfr_batch *s, size_t b, size_t k);
int tfr_batch_alloc(tfr_batch *s);
void tfr_batch_free(tfr_batch *s);

/* Find and count every planned Feature, record by record; returns -1 when all is well, else the record that needs
 * the reference (*why: TFR_WHY_RECORD or TFR_WHY_FEATURE). */
int64_t tfr_batch_count(const tfr_plan *plan, tfr_batch *s, int *why);

/* 1 when every record of a counted batch holds each dense column of `wants` with its count (so that
 * tfr_batch_layout lays them out together), else 0 */
int tfr_batch_dense(const tfr_batch *s, tfr_batch_wants wants);

/* The arena's size for every common column of a counted batch, each column's place in `layout` ([k]) and the
 * number of bytes values kept as slices (s->nstrings); (size_t)-1 when the sizes overflow. */
size_t tfr_batch_layout(const tfr_plan *plan, tfr_batch *s, tfr_batch_wants wants, tfr_column_layout *layout);

/* Fill the laid-out arena: presence, counts, numeric values, COO indices and spans where wanted; and s->strings,
 * the slices of every other bytes column's values. Returns -1, the first record found malformed while filling (an
 * int64 varint longer than 10 bytes), or -2 when out of memory or when the bytes values found are not those
 * counted. */
int64_t tfr_batch_fill(const tfr_plan *plan, tfr_batch *s, tfr_batch_wants wants, tfr_column_layout *layout,
                       char *arena);

/* The count every record has for `key` when all have the feature with the same count (a dense column), else -1 */
int64_t tfr_batch_uniform(const tfr_batch *s, size_t key);

/* COO indices of per-row counts: the row of each value at row_of, its position in the row at pos_of. `counts`
 * holds `rows` int64 (unaligned), each >= 0. */
void tfr_coo_indices(const void *counts, size_t rows, int64_t *row_of, int64_t *pos_of);

#endif
