/* tf.train.Example batch decoding kernels (see example.h). */
#include "example.h"

#include <stdlib.h>
#include <string.h>

#include "wire.h"

/* Tags (field number << 3 | wire type) of the fields the kernel reads */
#define TAG_EXAMPLE_FEATURES 0x0A /* Example.features, LEN */
#define TAG_MAP_ENTRY 0x0A        /* Features.feature, LEN */
#define TAG_ENTRY_KEY 0x0A        /* map entry key, LEN */
#define TAG_ENTRY_VALUE 0x12      /* map entry value, LEN */
#define TAG_LIST_PACKED 0x0A      /* *List.value, LEN: packed numbers, or one bytes value */
#define TAG_INT64_VARINT 0x08     /* Int64List.value unpacked */
#define TAG_FLOAT_FIXED32 0x0D    /* FloatList.value unpacked */

static const uint8_t KIND_TAGS[3] = {0x0A, 0x12, 0x1A}; /* Feature.bytes_list, float_list, int64_list */

static uint32_t hash_key(const uint8_t *p, size_t n) { /* FNV-1a */
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

int tfr_plan_init(tfr_plan *plan, size_t nkeys, const uint8_t *const *keys, const size_t *lens, const uint8_t *kinds) {
    memset(plan, 0, sizeof(*plan));
    size_t total = 0, size = 4;
    for (size_t k = 0; k < nkeys; k++) total += lens[k];
    while (size < 2 * nkeys) size *= 2;
    plan->nkeys = nkeys;
    plan->key_data = malloc(total ? total : 1);
    plan->key_start = malloc((nkeys ? nkeys : 1) * sizeof(size_t));
    plan->key_len = malloc((nkeys ? nkeys : 1) * sizeof(size_t));
    plan->kinds = malloc(nkeys ? nkeys : 1);
    plan->table = calloc(size, sizeof(int32_t));
    plan->table_mask = size - 1;
    if (!plan->key_data || !plan->key_start || !plan->key_len || !plan->kinds || !plan->table) {
        tfr_plan_free(plan);
        return -1;
    }
    size_t at = 0;
    for (size_t k = 0; k < nkeys; k++) {
        memcpy(plan->key_data + at, keys[k], lens[k]);
        plan->key_start[k] = at;
        plan->key_len[k] = lens[k];
        plan->kinds[k] = kinds[k];
        at += lens[k];
        size_t slot = hash_key(keys[k], lens[k]) & plan->table_mask;
        while (plan->table[slot]) slot = (slot + 1) & plan->table_mask;
        plan->table[slot] = (int32_t)(k + 1);
    }
    return 0;
}

void tfr_plan_free(tfr_plan *plan) {
    free(plan->key_data);
    free(plan->key_start);
    free(plan->key_len);
    free(plan->kinds);
    free(plan->table);
    memset(plan, 0, sizeof(*plan));
}

static int same_key(const tfr_plan *plan, size_t k, const uint8_t *key, size_t n) {
    if (plan->key_len[k] != n) return 0;
    const uint8_t *planned = plan->key_data + plan->key_start[k];
    for (size_t i = 0; i < n; i++) /* keys are short: a loop beats a call to memcmp */
        if (planned[i] != key[i]) return 0;
    return 1;
}

static long find_key(const tfr_plan *plan, const uint8_t *key, size_t n) {
    size_t slot = hash_key(key, n) & plan->table_mask;
    for (;;) {
        int32_t k = plan->table[slot];
        if (!k) return -1;
        if (same_key(plan, (size_t)(k - 1), key, n)) return k - 1;
        slot = (slot + 1) & plan->table_mask;
    }
}

/* find_key, first trying the key that the entry at this position of the map held in the last record (*hint: its
 * index + 1, 0 for none): a writer emits every record's keys in one order, so the hash is rarely needed. */
static long find_key_hinted(const tfr_plan *plan, const uint8_t *key, size_t n, int32_t *hint) {
    if (hint && *hint && same_key(plan, (size_t)(*hint - 1), key, n)) return *hint - 1;
    long k = find_key(plan, key, n);
    if (hint) *hint = (int32_t)(k + 1);
    return k;
}

/* A tag: a minimally encoded varint (TensorFlow's parser compares tags byte for byte, so a padded tag reads
 * differently there than in protobuf) with a field number of 1..2^29-1 and a wire type other than a group (groups
 * anywhere in a record make it invalid: the reference parser says so). */
static int read_tag(const uint8_t **pp, const uint8_t *end, uint64_t *tag) {
    const uint8_t *start = *pp;
    if (!wire_varint(pp, end, tag)) return 0;
    if (*pp - start > 1 && (*pp)[-1] == 0) return 0; /* a trailing zero byte: not minimal */
    unsigned wt = (unsigned)(*tag & 7);
    return *tag >> 3 != 0 && *tag <= 0xFFFFFFFFu && wt != WT_SGROUP && wt != WT_EGROUP && wt <= WT_I32;
}

/* Whether a map key is valid UTF-8 (protobuf's string fields must be): ASCII at once, else the full rules
 * (no overlong forms, no surrogates, nothing above U+10FFFF). */
static int valid_utf8(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
        else return 0;
        if (n - i < len) return 0;
        for (size_t j = 1; j < len; j++) {
            if ((p[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += len;
    }
    return 1;
}

/* One map entry in the layout every writer emits: exactly `key` then `value` (other legal orders go to the
 * reference). */
static int map_entry(const uint8_t *p, const uint8_t *end, tfr_slice *key, tfr_slice *value) {
    if (p >= end || *p++ != TAG_ENTRY_KEY || !wire_bytes(&p, end, &key->ptr, &key->len)) return -1;
    if (p >= end || *p++ != TAG_ENTRY_VALUE || !wire_bytes(&p, end, &value->ptr, &value->len)) return -1;
    return p == end ? 0 : -1;
}

/* One Features map entry: a planned key's value goes to its slot; any other key must be valid UTF-8 (as a
 * protobuf string). With no plan (NULL), every key is checked and nothing is kept. */
static int scan_entry(const tfr_plan *plan, const uint8_t *p, const uint8_t *end, tfr_slice *slots, int32_t *hint) {
    tfr_slice key, value;
    if (map_entry(p, end, &key, &value) < 0) return -1;
    /* planned keys came from Python str: valid UTF-8 */
    long k = plan ? find_key_hinted(plan, key.ptr, key.len, hint) : -1;
    if (k >= 0) slots[k] = value;
    else if (!valid_utf8(key.ptr, key.len)) return -1;
    return 0;
}

/* Features: map entries only (TensorFlow's parser rejects anything else here). */
static int scan_features(const tfr_plan *plan, const uint8_t *p, const uint8_t *end, tfr_slice *slots,
                         int32_t *hints) {
    for (size_t j = 0; p < end; j++) {
        const uint8_t *entry;
        size_t len;
        int32_t *hint = hints && j < TFR_KEY_HINTS ? &hints[j] : NULL;
        if (*p++ != TAG_MAP_ENTRY || !wire_bytes(&p, end, &entry, &len) ||
            scan_entry(plan, entry, entry + len, slots, hint) < 0)
            return -1;
    }
    return 0;
}

int tfr_scan_example(const tfr_plan *plan, const uint8_t *rec, size_t n, tfr_slice *slots, int32_t *hints) {
    const uint8_t *p = rec, *end = rec + n;
    while (p < end) { /* several `features` fields merge, as protobuf merges a repeated message field */
        uint64_t tag;
        if (!read_tag(&p, end, &tag)) return -1;
        if (tag == TAG_EXAMPLE_FEATURES) {
            const uint8_t *features;
            size_t len;
            if (!wire_bytes(&p, end, &features, &len) || scan_features(plan, features, features + len, slots, hints) < 0)
                return -1;
        } else if (!wire_skip(&p, end, (unsigned)(tag & 7))) {
            return -1;
        }
    }
    return 0;
}

/* The list message inside a Feature: exactly one field of the Feature, covering all of it. */
static int feature_list(int kind, tfr_slice feature, const uint8_t **list, const uint8_t **list_end, int *present) {
    if (feature.len == 0) { /* no kind set: counts as absent */
        *present = 0;
        return TFR_F_OK;
    }
    const uint8_t *p = feature.ptr, *end = feature.ptr + feature.len;
    uint8_t tag = *p++;
    size_t len;
    if (tag != KIND_TAGS[0] && tag != KIND_TAGS[1] && tag != KIND_TAGS[2]) return TFR_F_UNCOMMON;
    if (!wire_bytes(&p, end, list, &len)) return TFR_F_UNCOMMON; /* the reference parser says what is wrong */
    if (p != end) return TFR_F_UNCOMMON;                          /* several kinds or unknown fields */
    if (tag != KIND_TAGS[kind]) return TFR_F_MISMATCH;
    *list_end = *list + len;
    *present = 1;
    return TFR_F_OK;
}

/* Count the varints of a packed run; 0 when one is cut off or longer than 10 bytes. */
static int count_varints(const uint8_t *p, const uint8_t *end, uint64_t *count) {
    uint64_t n = 0, ignored;
    while (p < end) {
        if (!wire_varint(&p, end, &ignored)) return 0;
        n++;
    }
    *count += n;
    return 1;
}

/* One packed run of `kind` values (field 1, length-delimited): its value count. */
static int count_packed(int kind, const uint8_t *run, size_t len, uint64_t *count) {
    if (kind == TFR_FLOAT) {
        if (len % 4) return TFR_F_MALFORMED;
        *count = len / 4;
        return TFR_F_OK;
    }
    *count = 0;
    return count_varints(run, run + len, count) ? TFR_F_OK : TFR_F_MALFORMED;
}

/* A list in one of the forms that TensorFlow's parser and protobuf read alike (anything else goes to the reference
 * parser, which accepts or rejects it): BytesList: values (field 1) only; FloatList / Int64List: exactly one packed
 * run, or unpacked values only. */
int tfr_count_feature(int kind, tfr_slice feature, uint64_t *count, int *present) {
    const uint8_t *p, *end;
    int status = feature_list(kind, feature, &p, &end, present);
    *count = 0;
    if (status != TFR_F_OK || !*present || p == end) return status;
    uint64_t unpacked = kind == TFR_INT64 ? TAG_INT64_VARINT : TAG_FLOAT_FIXED32;
    if (kind != TFR_BYTES && *p == TAG_LIST_PACKED) {
        const uint8_t *run;
        size_t len;
        p++;
        if (!wire_bytes(&p, end, &run, &len)) return TFR_F_MALFORMED;
        if (p != end) return TFR_F_UNCOMMON; /* more after the run */
        return count_packed(kind, run, len, count);
    }
    while (p < end) {
        uint64_t tag, ignored;
        const uint8_t *value;
        size_t len;
        if (!read_tag(&p, end, &tag)) return TFR_F_UNCOMMON;
        if (kind == TFR_BYTES && tag == TAG_LIST_PACKED) {
            if (!wire_bytes(&p, end, &value, &len)) return TFR_F_MALFORMED;
        } else if (tag == unpacked && kind == TFR_INT64) {
            if (!wire_varint(&p, end, &ignored)) return TFR_F_MALFORMED;
        } else if (tag == unpacked && kind == TFR_FLOAT) {
            if (end - p < 4) return TFR_F_MALFORMED;
            p += 4;
        } else {
            return TFR_F_UNCOMMON; /* packed after unpacked values, or unknown fields */
        }
        *count += 1;
    }
    return TFR_F_OK;
}

static void copy_floats(float *out, const uint8_t *p, size_t n) {
    memcpy(out, p, 4 * n);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    uint32_t *words = (uint32_t *)out;
    for (size_t i = 0; i < n; i++) words[i] = __builtin_bswap32(words[i]);
#endif
}

/* The number of varints in a packed run counted by their last bytes (those below 0x80), 8 bytes at a time; 0 when
 * the run's last varint is cut off. A varint longer than 10 bytes is not seen here: decode_varints finds it. */
static int count_terminators(const uint8_t *p, size_t n, uint64_t *count) {
    if (n && p[n - 1] >= 0x80) return 0;
    uint64_t c = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        /* one bit per byte that ends a varint, moved to the byte's low bit, then summed over the 8 bytes */
        c += (((~w & 0x8080808080808080ULL) >> 7) * 0x0101010101010101ULL) >> 56;
    }
    for (; i < n; i++) c += p[i] < 0x80;
    *count = c;
    return 1;
}

int tfr_count_run(int kind, tfr_slice feature, uint64_t *count, int *present, tfr_slice *run) {
    run->ptr = NULL;
    run->len = 0;
    if (kind == TFR_BYTES) return tfr_count_feature(kind, feature, count, present);
    const uint8_t *p, *end;
    int status = feature_list(kind, feature, &p, &end, present);
    *count = 0;
    if (status != TFR_F_OK || !*present) return status;
    if (p == end) { /* an empty list */
        run->ptr = p;
        return TFR_F_OK;
    }
    if (*p == TAG_LIST_PACKED) { /* numeric from here: bytes lists returned above */
        const uint8_t *q = p + 1, *values;
        size_t len;
        if (wire_bytes(&q, end, &values, &len) && q == end) {
            if (kind == TFR_FLOAT) {
                if (len % 4) return TFR_F_MALFORMED;
                *count = len / 4;
            } else if (!count_terminators(values, len, count)) {
                return TFR_F_MALFORMED;
            }
            run->ptr = values;
            run->len = len;
            return TFR_F_OK;
        }
    }
    return tfr_count_feature(kind, feature, count, present); /* every other form, checked value by value */
}

/* The varints of a packed run as int64 into `out`; the number decoded, which is short of the run's terminating
 * bytes when a varint is longer than 10 bytes. */
static size_t decode_varints(const uint8_t *p, const uint8_t *end, int64_t *out) {
    size_t n = 0;
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* 8 bytes at a time: the first byte below 0x80 ends the varint, and its 7-bit groups are gathered without a
     * branch per byte (a mix of 1- to 3-byte values mispredicts the byte loop's branches) */
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t stop = ~w & 0x8080808080808080ULL;
        if (!stop) break; /* 9 bytes or more: the byte loop below */
        unsigned bits = (unsigned)__builtin_ctzll(stop) + 1; /* 8 x the varint's length */
        uint64_t x = bits == 64 ? w : w & ((1ULL << bits) - 1);
        x = (x & 0x7F) | ((x >> 1) & (0x7FULL << 7)) | ((x >> 2) & (0x7FULL << 14)) | ((x >> 3) & (0x7FULL << 21)) |
            ((x >> 4) & (0x7FULL << 28)) | ((x >> 5) & (0x7FULL << 35)) | ((x >> 6) & (0x7FULL << 42)) |
            ((x >> 7) & (0x7FULL << 49));
        out[n++] = (int64_t)x;
        p += bits >> 3;
    }
#endif
    while (p < end) {
        if (*p < 0x80) { /* one byte: most small values */
            out[n++] = *p++;
            continue;
        }
        uint64_t value;
        if (!wire_varint(&p, end, &value)) break;
        out[n++] = (int64_t)value;
    }
    return n;
}

size_t tfr_fill_run(int kind, tfr_slice run, void *out) {
    if (kind == TFR_FLOAT) {
        copy_floats(out, run.ptr, run.len / 4);
        return run.len / 4;
    }
    return decode_varints(run.ptr, run.ptr + run.len, out);
}

size_t tfr_fill_numeric(int kind, tfr_slice feature, void *out) {
    const uint8_t *p, *end;
    int present;
    size_t n = 0;
    if (feature_list(kind, feature, &p, &end, &present) != TFR_F_OK || !present) return 0;
    while (p < end) { /* counted before, so every read succeeds; still, stop at the first one that does not */
        uint64_t tag = 0, value = 0;
        const uint8_t *run = NULL;
        size_t len = 0;
        if (!wire_varint(&p, end, &tag)) break;
        if (tag == TAG_LIST_PACKED) {
            if (!wire_bytes(&p, end, &run, &len)) break;
            if (kind == TFR_FLOAT) {
                copy_floats((float *)out + n, run, len / 4);
                n += len / 4;
            } else {
                const uint8_t *q = run, *run_end = run + len;
                while (q < run_end && wire_varint(&q, run_end, &value)) ((int64_t *)out)[n++] = (int64_t)value;
            }
        } else if (tag == TAG_INT64_VARINT) {
            if (!wire_varint(&p, end, &value)) break;
            ((int64_t *)out)[n++] = (int64_t)value;
        } else { /* TAG_FLOAT_FIXED32 */
            if (end - p < 4) break;
            copy_floats((float *)out + n, p, 1);
            p += 4;
            n++;
        }
    }
    return n;
}

size_t tfr_fill_bytes(tfr_slice feature, tfr_slice *out_slices) {
    const uint8_t *p, *end;
    int present;
    size_t n = 0;
    if (feature_list(TFR_BYTES, feature, &p, &end, &present) != TFR_F_OK || !present) return 0;
    while (p < end) {
        uint64_t tag;
        if (!wire_varint(&p, end, &tag) || !wire_bytes(&p, end, &out_slices[n].ptr, &out_slices[n].len)) break;
        n++;
    }
    return n;
}

/* The wire pieces sequence.c shares, as functions of their own (the static ones above stay inlined in the hot
 * loops of this file). */
long tfr_plan_find(const tfr_plan *plan, const uint8_t *key, size_t n) { return find_key(plan, key, n); }

int tfr_map_entry(const uint8_t *p, const uint8_t *end, tfr_slice *key, tfr_slice *value) {
    return map_entry(p, end, key, value);
}

int tfr_valid_utf8(const uint8_t *p, size_t n) { return valid_utf8(p, n); }

int tfr_check_features(const uint8_t *p, const uint8_t *end) { return scan_features(NULL, p, end, NULL, NULL); }

size_t tfr_fill_bytes_column(const tfr_slice *features, size_t n, size_t stride, tfr_slice *out_slices) {
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        tfr_slice feature = features[i * stride];
        if (feature.ptr) at += tfr_fill_bytes(feature, out_slices + at);
    }
    return at;
}
