/* tf.train.SequenceExample feature lists (see sequence.h). */
#include "sequence.h"

#include <stdlib.h>
#include <string.h>

#include "wire.h"

#define TAG_SEQ_CONTEXT 0x0A       /* SequenceExample.context, LEN */
#define TAG_SEQ_FEATURE_LISTS 0x12 /* SequenceExample.feature_lists, LEN */
#define TAG_LISTS_ENTRY 0x0A       /* FeatureLists.feature_list (map entry), LEN */
#define TAG_LIST_FEATURE 0x0A      /* FeatureList.feature, LEN */

/* FeatureLists: map entries only, key then value; a planned key's FeatureList goes to its slot (a planned key twice
 * is left to the reference, which says which one counts), any other key must be UTF-8 and its list only Features. */
static int scan_feature_lists(const tfr_plan *plan, const uint8_t *q, const uint8_t *q_end, tfr_slice *lists) {
    while (q < q_end) {
        const uint8_t *entry;
        size_t entry_len;
        tfr_slice key, value;
        if (*q++ != TAG_LISTS_ENTRY || !wire_bytes(&q, q_end, &entry, &entry_len) ||
            tfr_map_entry(entry, entry + entry_len, &key, &value) < 0)
            return -1;
        long k = tfr_plan_find(plan, key.ptr, key.len);
        if (k >= 0) {
            if (lists[k].ptr) return -1;
            lists[k] = value;
        } else {
            uint64_t steps;
            if (!tfr_valid_utf8(key.ptr, key.len) || tfr_list_steps(value, NULL, &steps) < 0) return -1;
        }
    }
    return 0;
}

int tfr_scan_sequence(const tfr_plan *plan, const uint8_t *rec, size_t n, tfr_slice *lists) {
    const uint8_t *p = rec, *end = rec + n;
    int seen_context = 0, seen_lists = 0;
    while (p < end) {
        const uint8_t *field;
        size_t len;
        uint8_t tag = *p++; /* one-byte tags: fields 1 and 2, wire type 2 (LEN) */
        if (tag == TAG_SEQ_CONTEXT && !seen_context && !seen_lists) {
            /* the context is decoded as an Example (see decode/sequence_plan.py): here its layout is only checked */
            if (!wire_bytes(&p, end, &field, &len) || tfr_check_features(field, field + len) < 0) return -1;
            seen_context = 1;
        } else if (tag == TAG_SEQ_FEATURE_LISTS && !seen_lists) {
            if (!wire_bytes(&p, end, &field, &len) || scan_feature_lists(plan, field, field + len, lists) < 0)
                return -1;
            seen_lists = 1;
        } else {
            return -1; /* another field, or one of these twice / out of order: the reference decides */
        }
    }
    return 0;
}

int tfr_list_steps(tfr_slice list, tfr_slice *steps, uint64_t *count) {
    const uint8_t *p = list.ptr, *end = list.ptr + list.len;
    uint64_t n = 0;
    while (p < end) { /* FeatureList.feature: repeated, length-delimited Features */
        const uint8_t *feature;
        size_t len;
        if (*p++ != TAG_LIST_FEATURE || !wire_bytes(&p, end, &feature, &len)) return -1;
        if (steps) {
            steps[n].ptr = feature;
            steps[n].len = len;
        }
        n++;
    }
    *count = n;
    return 0;
}

void tfr_seq_free(tfr_seq_batch *s) {
    for (size_t key = 0; key < s->k; key++) {
        if (s->step_slices) free(s->step_slices[key]);
        if (s->step_counts) free(s->step_counts[key]);
        if (s->step_present) free(s->step_present[key]);
    }
    free(s->data);
    free(s->size);
    free(s->lists);
    free(s->steps);
    free(s->total_steps);
    free(s->total_values);
    free(s->step_slices);
    free(s->step_counts);
    free(s->step_present);
    memset(s, 0, sizeof(*s));
}

int tfr_seq_alloc(tfr_seq_batch *s, size_t b, size_t k) {
    memset(s, 0, sizeof(*s));
    size_t bb = b ? b : 1, kk = k ? k : 1;
    s->b = b;
    s->k = k;
    s->data = malloc(bb * sizeof(*s->data));
    s->size = malloc(bb * sizeof(*s->size));
    s->lists = bb <= SIZE_MAX / kk / sizeof(tfr_slice) ? calloc(bb * kk, sizeof(tfr_slice)) : NULL;
    s->steps = bb <= SIZE_MAX / kk / sizeof(uint64_t) ? calloc(bb * kk, sizeof(uint64_t)) : NULL;
    s->total_steps = calloc(kk, sizeof(uint64_t));
    s->total_values = calloc(kk, sizeof(uint64_t));
    s->step_slices = calloc(kk, sizeof(tfr_slice *));
    s->step_counts = calloc(kk, sizeof(uint64_t *));
    s->step_present = calloc(kk, sizeof(uint8_t *));
    return s->data && s->size && s->lists && s->steps && s->total_steps && s->total_values && s->step_slices &&
                   s->step_counts && s->step_present
               ? 0
               : -1;
}

/* Every record's planned lists, and their step counts: -1, or the first record that is malformed or uncommon. */
static int64_t count_steps(const tfr_plan *plan, tfr_seq_batch *s) {
    size_t b = s->b, k = s->k;
    for (size_t i = 0; i < b; i++)
        if (tfr_scan_sequence(plan, s->data[i], s->size[i], s->lists + i * k) < 0) return (int64_t)i;
    for (size_t key = 0; key < k; key++)
        for (size_t i = 0; i < b; i++) {
            tfr_slice list = s->lists[i * k + key];
            if (list.ptr && tfr_list_steps(list, NULL, &s->steps[key * b + i]) < 0) return (int64_t)i;
            s->total_steps[key] += s->steps[key * b + i]; /* each step takes 2+ bytes of a record: cannot overflow */
        }
    return -1;
}

static int alloc_steps(tfr_seq_batch *s) {
    for (size_t key = 0; key < s->k; key++) {
        size_t n = s->total_steps[key] ? (size_t)s->total_steps[key] : 1;
        s->step_slices[key] = malloc(n * sizeof(tfr_slice));
        s->step_counts[key] = calloc(n, sizeof(uint64_t));
        s->step_present[key] = calloc(n, 1);
        if (!s->step_slices[key] || !s->step_counts[key] || !s->step_present[key]) return -1;
    }
    return 0;
}

/* Every step's Feature of `key` counted (tfr_count_feature): -1, or the record of the first step that is
 * malformed, uncommon or of another kind. */
static int64_t count_values(const tfr_plan *plan, tfr_seq_batch *s, size_t key) {
    size_t at = 0;
    tfr_slice *slices = s->step_slices[key];
    for (size_t i = 0; i < s->b; i++) {
        tfr_slice list = s->lists[i * s->k + key];
        uint64_t n = 0;
        if (!list.ptr) continue;
        tfr_list_steps(list, slices + at, &n); /* walked before: succeeds */
        for (uint64_t j = 0; j < n; j++, at++) {
            int present = 0;
            if (tfr_count_feature(plan->kinds[key], slices[at], &s->step_counts[key][at], &present) != TFR_F_OK)
                return (int64_t)i;
            s->step_present[key][at] = (uint8_t)present;
            s->total_values[key] += s->step_counts[key][at];
        }
    }
    return -1;
}

int64_t tfr_seq_count(const tfr_plan *plan, tfr_seq_batch *s, int *why) {
    int64_t bad = count_steps(plan, s);
    if (bad >= 0) {
        *why = TFR_SEQ_RECORD;
        return bad;
    }
    if (alloc_steps(s) < 0) return -2;
    for (size_t key = 0; key < s->k; key++) {
        if ((bad = count_values(plan, s, key)) >= 0) {
            *why = TFR_SEQ_STEP;
            return bad;
        }
    }
    return -1;
}

void tfr_seq_has(const tfr_seq_batch *s, size_t key, uint8_t *out) {
    for (size_t i = 0; i < s->b; i++) out[i] = s->lists[i * s->k + key].ptr != NULL;
}

int64_t tfr_seq_uniform(const tfr_seq_batch *s, size_t key) {
    size_t n = (size_t)s->total_steps[key];
    const uint64_t *counts = s->step_counts[key];
    const uint8_t *present = s->step_present[key];
    if (!n || counts[0] > (uint64_t)PTRDIFF_MAX) return -1;
    for (size_t j = 0; j < n; j++)
        if (!present[j] || counts[j] != counts[0]) return -1;
    return (int64_t)counts[0];
}

void tfr_seq_fill(int kind, const tfr_seq_batch *s, size_t key, void *out) {
    size_t at = 0, width = kind == TFR_FLOAT ? 4 : 8;
    const tfr_slice *steps = s->step_slices[key];
    for (size_t j = 0; j < (size_t)s->total_steps[key]; j++)
        if (steps[j].ptr) at += tfr_fill_numeric(kind, steps[j], (char *)out + at * width);
}
