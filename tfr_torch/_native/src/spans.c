/* Bytes values as spans of their records (see spans.h). */
#include "spans.h"

#include <string.h>

void tfr_span_at(const uint8_t *at, size_t j, int64_t span[3]) { memcpy(span, at + j * TFR_SPAN_BYTES, 24); }

int64_t tfr_resolve_spans(const uint8_t *at, size_t total, const char *const *recs, const size_t *rec_lens,
                          size_t nrec, const char **ptrs, size_t *lens, size_t *sum) {
    *sum = 0;
    for (size_t j = 0; j < total; j++) {
        int64_t span[3];
        tfr_span_at(at, j, span);
        const char *record = span[0] >= 0 && (uint64_t)span[0] < nrec ? recs[span[0]] : NULL;
        if (!record || span[1] < 0 || span[2] < 0) return (int64_t)j;
        size_t size = rec_lens[span[0]];
        if ((uint64_t)span[1] > size || (uint64_t)span[2] > size - (uint64_t)span[1]) return (int64_t)j;
        ptrs[j] = record + span[1];
        lens[j] = (size_t)span[2];
        *sum += lens[j]; /* cannot overflow: each span lies in a record in memory */
    }
    return -1;
}
