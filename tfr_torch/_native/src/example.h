/* tf.train.Example batch decoding: the features a plan asks for, column by column.
 *
 *   Example  { Features features = 1; }
 *   Features { map<string, Feature> feature = 1; }      map entry: { string key = 1; Feature value = 2; }
 *   Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
 *   BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1 [packed]; }
 *   Int64List { repeated int64 value = 1 [packed]; }
 *
 * The kernel handles the encodings writers use (each message's fields as above, packed or unpacked lists, several
 * runs, unknown fields outside the Feature); anything else is reported so that the caller takes the reference
 * parser for that record or column, which defines the answer. */
#ifndef TFR_EXAMPLE_H
#define TFR_EXAMPLE_H

#include <stddef.h>
#include <stdint.h>

enum tfr_kind { TFR_BYTES = 0, TFR_FLOAT = 1, TFR_INT64 = 2 };

typedef struct {
    const uint8_t *ptr; /* NULL: the record has no such key */
    size_t len;
} tfr_slice;

typedef struct {
    size_t nkeys;
    uint8_t *key_data; /* every key's bytes, back to back */
    size_t *key_start, *key_len;
    uint8_t *kinds;
    int32_t *table; /* open addressing: key index + 1, 0 for empty */
    size_t table_mask;
} tfr_plan;

/* Outcome of looking at one record's Feature for one key */
enum tfr_feature_status {
    TFR_F_OK = 0,        /* counted (present or, for a Feature with no kind set, absent) */
    TFR_F_UNCOMMON = 1,  /* a legal but uncommon encoding: decode this column with the reference parser */
    TFR_F_MISMATCH = 2,  /* another kind than the plan's */
    TFR_F_MALFORMED = 3  /* not a valid Feature */
};

int tfr_plan_init(tfr_plan *plan, size_t nkeys, const uint8_t *const *keys, const size_t *lens, const uint8_t *kinds);
void tfr_plan_free(tfr_plan *plan);

/* Find each planned key's Feature in one serialized Example (the last entry wins, as in a map). Returns 0, or -1
 * when the record is malformed or uncommon (groups, map entries other than key-then-value): use the reference.
 * `hints` (NULL, or TFR_KEY_HINTS zeroed int32 kept from record to record of a batch) remembers which key each of
 * the map's first entries held, the first guess for the next record. */
#define TFR_KEY_HINTS 64
int tfr_scan_example(const tfr_plan *plan, const uint8_t *rec, size_t n, tfr_slice *slots, int32_t *hints);

/* Count the values of one Feature of kind `kind`; `*present` is 0 for a Feature with no kind set. */
int tfr_count_feature(int kind, tfr_slice feature, uint64_t *count, int *present);

/* tfr_count_feature for the batch decoder, with where the values are: for a numeric list in one packed run (the
 * common encoding) or an empty list, *run is that run's bytes, so that filling reads them straight (tfr_fill_run);
 * else run->ptr is NULL (bytes lists, unpacked values, no kind set). A packed int64 run is counted by its varints'
 * last bytes only: tfr_fill_run finds a varint longer than 10 bytes. */
int tfr_count_run(int kind, tfr_slice feature, uint64_t *count, int *present, tfr_slice *run);

/* The values of a run found by tfr_count_run as float32 / int64 at `out`: returns the number written, fewer than
 * counted when an int64 varint is longer than 10 bytes (the record is then malformed). */
size_t tfr_fill_run(int kind, tfr_slice run, void *out);

/* Write the values of a Feature counted OK: floats as float32 and int64s as int64 at `out`, or for bytes the
 * (pointer, length) of each value at `out_slices`. Returns the number written. */
size_t tfr_fill_numeric(int kind, tfr_slice feature, void *out);
size_t tfr_fill_bytes(tfr_slice feature, tfr_slice *out_slices);

/* A column of bytes values: every value of the bytes_list Features features[0], features[stride], ... (n of them;
 * absent ones have a NULL ptr) as (pointer, length) at `out_slices`, which must hold all that were counted.
 * Returns the number written. */
size_t tfr_fill_bytes_column(const tfr_slice *features, size_t n, size_t stride, tfr_slice *out_slices);

/* Wire pieces the SequenceExample kernel (sequence.c) shares. */

/* The index of a planned key, or -1. */
long tfr_plan_find(const tfr_plan *plan, const uint8_t *key, size_t n);

/* One map entry in the layout every writer emits: exactly `key` (field 1) then `value` (field 2), both
 * length-delimited, nothing after them. Returns 0, or -1 for anything else (other legal orders go to the
 * reference). */
int tfr_map_entry(const uint8_t *p, const uint8_t *end, tfr_slice *key, tfr_slice *value);

/* Whether a string field's bytes are valid UTF-8 (protobuf's proto3 string rule). */
int tfr_valid_utf8(const uint8_t *p, size_t n);

/* Whether a Features message holds map entries only, each well formed with a UTF-8 key: 0, else -1. */
int tfr_check_features(const uint8_t *p, const uint8_t *end);

#endif
