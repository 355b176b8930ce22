/* A batch of Examples decoded column by column (see batch.h). */
#include "batch.h"

#include <stdlib.h>
#include <string.h>

void tfr_batch_free(tfr_batch *s) {
    free(s->data);
    free(s->size);
    free(s->slots);
    free(s->counts);
    free(s->runs);
    free(s->present);
    free(s->uncommon);
    free(s->totals);
    free(s->strings);
}

int tfr_batch_init(tfr_batch *s, size_t b, size_t k) {
    memset(s, 0, sizeof(*s));
    s->b = b;
    s->k = k;
    size_t bb = b ? b : 1;
    if (bb > SIZE_MAX / sizeof(tfr_slice)) return -1;
    s->data = malloc(bb * sizeof(*s->data));
    s->size = malloc(bb * sizeof(*s->size));
    return s->data && s->size ? 0 : -1;
}

int tfr_batch_alloc(tfr_batch *s) {
    size_t bb = s->b ? s->b : 1, kk = s->k ? s->k : 1;
    if (bb > SIZE_MAX / kk / sizeof(tfr_slice)) return -1;
    s->slots = calloc(bb * kk, sizeof(tfr_slice));
    s->counts = calloc(bb * kk, sizeof(uint64_t));
    s->runs = calloc(bb * kk, sizeof(tfr_slice));
    s->present = calloc(bb * kk, 1);
    s->uncommon = calloc(kk, 1);
    s->totals = calloc(kk, sizeof(uint64_t));
    return s->slots && s->counts && s->runs && s->present && s->uncommon && s->totals ? 0 : -1;
}

/* Count record i's planned Features (found by tfr_scan_example): a column with an uncommon encoding goes to the
 * reference decoder as a whole; a malformed Feature or one of another kind sends the batch there. Returns 0, or
 * -1 for the latter. */
static int count_record(const tfr_plan *plan, tfr_batch *s, size_t i) {
    const tfr_slice *slots = s->slots + i * s->k;
    for (size_t key = 0; key < s->k; key++) {
        uint64_t count = 0;
        int present = 0;
        if (!slots[key].ptr) continue;
        int status = tfr_count_run(plan->kinds[key], slots[key], &count, &present, &s->runs[key * s->b + i]);
        if (status == TFR_F_UNCOMMON) {
            s->uncommon[key] = 1;
        } else if (status != TFR_F_OK) {
            return -1;
        } else {
            s->counts[key * s->b + i] = count;
            s->present[key * s->b + i] = (uint8_t)present;
            s->totals[key] += count;
        }
    }
    return 0;
}

int64_t tfr_batch_count(const tfr_plan *plan, tfr_batch *s, int *why) {
    /* record by record: a record's Features are counted while its bytes are in cache */
    int32_t hints[TFR_KEY_HINTS] = {0};
    for (size_t i = 0; i < s->b; i++) {
#if defined(__GNUC__)
        /* records are separate objects anywhere in memory: ask for the one after next while this one is read */
        if (i + 2 < s->b)
            for (size_t off = 0; off < s->size[i + 2] && off < 512; off += 64) __builtin_prefetch(s->data[i + 2] + off);
#endif
        if (tfr_scan_example(plan, s->data[i], s->size[i], s->slots + i * s->k, hints) < 0) {
            *why = TFR_WHY_RECORD;
            return (int64_t)i;
        }
        if (count_record(plan, s, i) < 0) {
            *why = TFR_WHY_FEATURE;
            return (int64_t)i;
        }
    }
    return -1;
}

int64_t tfr_batch_uniform(const tfr_batch *s, size_t key) {
    const uint8_t *present = s->present + key * s->b;
    const uint64_t *counts = s->counts + key * s->b;
    if (s->b == 0 || counts[0] > (uint64_t)PTRDIFF_MAX) return -1;
    for (size_t i = 0; i < s->b; i++)
        if (!present[i] || counts[i] != counts[0]) return -1;
    return (int64_t)counts[0];
}

static size_t round8(size_t n) { return (n + 7) & ~(size_t)7; }

int tfr_batch_dense(const tfr_batch *s, tfr_batch_wants wants) {
    for (size_t j = 0; j < wants.ndense; j++) {
        size_t key = wants.dense_order[j];
        if (s->uncommon[key] || tfr_batch_uniform(s, key) != wants.dense_count[key]) return 0;
    }
    return wants.ndense > 0;
}

/* The dense columns' values back to back from the arena's start, in wants' order; padded to 8 bytes only where
 * the kind changes, so that neighbours of one kind are contiguous. Returns the bytes they take (a multiple of 8),
 * or (size_t)-1 when the sizes overflow. */
static size_t layout_dense(const tfr_plan *plan, const tfr_batch *s, tfr_batch_wants wants,
                           tfr_column_layout *layout) {
    size_t at = 0;
    for (size_t j = 0; j < wants.ndense; j++) {
        size_t key = wants.dense_order[j];
        int kind = plan->kinds[key];
        if (s->totals[key] > (uint64_t)(SIZE_MAX / 64) || at > SIZE_MAX / 4) return (size_t)-1;
        if (j && kind != plan->kinds[wants.dense_order[j - 1]]) at = round8(at);
        layout[key].values = at;
        at += (size_t)s->totals[key] * (kind == TFR_FLOAT ? 4 : 8);
    }
    return round8(at);
}

size_t tfr_batch_layout(const tfr_plan *plan, tfr_batch *s, tfr_batch_wants wants, tfr_column_layout *layout) {
    size_t b = s->b, at = layout_dense(plan, s, wants, layout);
    s->nstrings = 0;
    if (at == (size_t)-1) return at;
    for (size_t key = 0; key < s->k; key++) {
        tfr_column_layout *c = &layout[key];
        if (s->uncommon[key]) continue;
        uint64_t total = s->totals[key];
        /* counted values come from the records' bytes (at least one byte each); checked all the same */
        if (total > (uint64_t)(SIZE_MAX / 64) || b > SIZE_MAX / 64 || at > SIZE_MAX / 4) return (size_t)-1;
        c->present = at;
        at += round8(b);
        c->counts = at;
        at += b * sizeof(uint64_t);
        if (plan->kinds[key] != TFR_BYTES) {
            if (!wants.ndense || wants.dense_count[key] < 0) { /* a dense column's values lie in the first block */
                c->values = at;
                at += round8((size_t)total * (plan->kinds[key] == TFR_FLOAT ? 4 : 8));
            }
            if (wants.indices[key]) {
                c->indices = at;
                at += (size_t)total * 2 * sizeof(int64_t);
            }
        } else if (wants.spans && wants.spans[key]) {
            c->values = at;
            at += (size_t)total * 3 * sizeof(int64_t);
        } else {
            if (s->nstrings > SIZE_MAX / 64 - (size_t)total) return (size_t)-1;
            c->strings = s->nstrings;
            s->nstrings += (size_t)total;
        }
    }
    return at;
}

/* A bytes column's values as slices of the records at `out`, which holds the `total` counted. Returns 0, or -1 when
 * the values found are not the values counted. */
static int fill_strings(const tfr_batch *s, size_t key, tfr_slice *out) {
    uint64_t total = s->totals[key];
    size_t at = 0;
    for (size_t i = 0; i < s->b; i++) {
        tfr_slice feature = s->slots[i * s->k + key];
        /* never past `out`: a record's values are written only when its count fits what is left */
        if (!feature.ptr || at + s->counts[key * s->b + i] > total) continue;
        at += tfr_fill_bytes(feature, out + at);
    }
    return at == total ? 0 : -1;
}

/* A bytes column as spans: for each value (record index, start in the record, length), int64 each. Returns -1
 * when out of memory, or when the values found are not the values counted. */
static int fill_spans(const tfr_batch *s, size_t key, int64_t *out) {
    uint64_t total = s->totals[key];
    tfr_slice *values = malloc((total ? (size_t)total : 1) * sizeof(tfr_slice));
    if (!values) return -1;
    size_t at = 0;
    for (size_t i = 0; i < s->b; i++) {
        tfr_slice feature = s->slots[i * s->k + key];
        if (!feature.ptr || at + s->counts[key * s->b + i] > total) continue;
        size_t got = tfr_fill_bytes(feature, values + at);
        for (size_t j = at; j < at + got; j++, out += 3) {
            out[0] = (int64_t)i;
            out[1] = (int64_t)(values[j].ptr - s->data[i]);
            out[2] = (int64_t)values[j].len;
        }
        at += got;
    }
    free(values);
    return at == total ? 0 : -1;
}

/* One numeric column into `out`: each record's run read straight, the rare other encodings through their Feature.
 * Returns -1, or the first record whose values fall short of its count (an int64 varint longer than 10 bytes: the
 * record is malformed). */
static int64_t fill_runs(int kind, const tfr_batch *s, size_t key, char *out) {
    size_t width = kind == TFR_FLOAT ? 4 : 8, at = 0;
    const tfr_slice *runs = s->runs + key * s->b;
    const uint64_t *counts = s->counts + key * s->b;
    for (size_t i = 0; i < s->b; i++) {
        if (!counts[i]) continue;
        size_t got = runs[i].ptr ? tfr_fill_run(kind, runs[i], out + at * width)
                                 : tfr_fill_numeric(kind, s->slots[i * s->k + key], out + at * width);
        if (got != counts[i]) return (int64_t)i;
        at += got;
    }
    return -1;
}

void tfr_coo_indices(const void *counts, size_t rows, int64_t *row_of, int64_t *pos_of) {
    size_t k = 0;
    for (size_t i = 0; i < rows; i++) {
        int64_t c;
        memcpy(&c, (const char *)counts + i * sizeof c, sizeof c);
        for (int64_t j = 0; j < c; j++, k++) {
            row_of[k] = (int64_t)i;
            pos_of[k] = j;
        }
    }
}

/* One common column of the arena: presence, counts and the longest row; then its values (and indices, or spans). */
static int64_t fill_column(const tfr_plan *plan, const tfr_batch *s, tfr_batch_wants wants, size_t key,
                           tfr_column_layout *c, char *arena) {
    size_t b = s->b;
    const uint64_t *counts = s->counts + key * b;
    memcpy(arena + c->present, s->present + key * b, b);
    memcpy(arena + c->counts, counts, b * sizeof(uint64_t));
    for (size_t i = 0; i < b; i++)
        if (counts[i] > c->longest) c->longest = counts[i];
    int kind = plan->kinds[key];
    if (kind == TFR_BYTES) {
        int bad = wants.spans && wants.spans[key] ? fill_spans(s, key, (int64_t *)(arena + c->values))
                                                  : fill_strings(s, key, s->strings + c->strings);
        return bad < 0 ? -2 : -1;
    }
    int64_t bad = fill_runs(kind, s, key, arena + c->values);
    if (bad < 0 && wants.indices[key]) {
        int64_t *row_of = (int64_t *)(arena + c->indices);
        tfr_coo_indices(counts, b, row_of, row_of + s->totals[key]);
    }
    return bad;
}

int64_t tfr_batch_fill(const tfr_plan *plan, tfr_batch *s, tfr_batch_wants wants, tfr_column_layout *layout,
                       char *arena) {
    if (s->nstrings > SIZE_MAX / sizeof(tfr_slice) || !(s->strings = malloc((s->nstrings ? s->nstrings : 1) *
                                                                            sizeof(tfr_slice))))
        return -2;
    for (size_t key = 0; key < s->k; key++) {
        if (s->uncommon[key]) continue;
        int64_t bad = fill_column(plan, s, wants, key, &layout[key], arena);
        if (bad != -1) return bad;
    }
    return -1;
}
