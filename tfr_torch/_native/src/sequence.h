/* tf.train.SequenceExample feature lists, decoded for a batch (decode_feature_lists in bind_sequence.c).
 *
 *   SequenceExample { Features context = 1; FeatureLists feature_lists = 2; }
 *   FeatureLists { map<string, FeatureList> feature_list = 1; }   FeatureList { repeated Feature feature = 1; }
 *
 * The context is read by the Example kernel (its field number is Example.features'); each step of a list is a
 * Feature, counted and filled by the Example kernel's Feature functions (example.h). Only the layout writers emit
 * is taken; anything else (malformed or uncommon) is reported by record, and the caller decodes the batch with the
 * reference parser, which defines the answer and the error. No Python objects: all of it runs without the GIL. */
#ifndef TFR_SEQUENCE_H
#define TFR_SEQUENCE_H

#include <stddef.h>
#include <stdint.h>

#include "example.h"

/* Find each planned key's FeatureList in one serialized SequenceExample: at most one context then at most one
 * feature_lists, no other fields, map entries key-then-value, no planned key twice, every FeatureList (planned or
 * not) only Features, the context's Features well formed. Returns 0, or -1 for anything else. */
int tfr_scan_sequence(const tfr_plan *plan, const uint8_t *rec, size_t n, tfr_slice *lists);

/* The steps (Features) of one FeatureList: their number at *count and, when `steps` is not NULL, their slices.
 * Returns 0, or -1 when the list holds anything but its Features. */
int tfr_list_steps(tfr_slice list, tfr_slice *steps, uint64_t *count);

/* The state of one decode_feature_lists call: k planned keys over b records */
typedef struct {
    size_t b, k;
    const uint8_t **data;     /* [b]: each record's bytes */
    size_t *size;             /* [b] */
    tfr_slice *lists;         /* [b * k]: each record's FeatureList of each key (NULL ptr: absent) */
    uint64_t *steps;          /* [k * b]: its step count */
    uint64_t *total_steps;    /* [k]: all records' steps of the key */
    uint64_t *total_values;   /* [k] */
    tfr_slice **step_slices;  /* [k][total_steps]: each step's Feature */
    uint64_t **step_counts;   /* [k][total_steps]: its value count */
    uint8_t **step_present;   /* [k][total_steps]: 1 where the step's Feature has a kind set */
} tfr_seq_batch;

int tfr_seq_alloc(tfr_seq_batch *s, size_t b, size_t k);
void tfr_seq_free(tfr_seq_batch *s);

/* Why a batch goes to the reference decoder */
enum tfr_seq_why { TFR_SEQ_RECORD = 1, TFR_SEQ_STEP = 2 };

/* Find every record's planned lists and count their steps, then every step's values. Returns -1 when all is well,
 * -2 when out of memory, else the record that needs the reference (*why: TFR_SEQ_RECORD when the record is
 * malformed or uncommon, TFR_SEQ_STEP when a step's Feature is malformed, uncommon or of another kind); records
 * are checked first, steps after. */
int64_t tfr_seq_count(const tfr_plan *plan, tfr_seq_batch *s, int *why);

/* Per record, 1 where it has the list of `key` (b bytes at `out`). */
void tfr_seq_has(const tfr_seq_batch *s, size_t key, uint8_t *out);

/* Every step's count when all steps of `key` have a kind set and one count, else -1. */
int64_t tfr_seq_uniform(const tfr_seq_batch *s, size_t key);

/* The numeric values of every step of `key`, in order, as float32 or int64 at `out`. */
void tfr_seq_fill(int kind, const tfr_seq_batch *s, size_t key, void *out);

#endif
