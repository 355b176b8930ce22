/* Bytes values kept as spans of their records (ExampleDecoder.decode(records, True); tfr_torch/decode/spans.py):
 * each span is three int64, (record index, start in the record, length), 24 bytes, in native byte order. */
#ifndef TFR_SPANS_H
#define TFR_SPANS_H

#include <stddef.h>
#include <stdint.h>

#define TFR_SPAN_BYTES 24

/* Resolve `total` spans at `at` (unaligned) against the records: record r is recs[r] (rec_lens[r] bytes), or NULL
 * when it is not a record a span may name. Each span must lie inside its record; its bytes go to ptrs[j] and
 * lens[j], their sum to *sum. Returns -1 when all do, else the index of the first span that does not. */
int64_t tfr_resolve_spans(const uint8_t *at, size_t total, const char *const *recs, const size_t *rec_lens,
                          size_t nrec, const char **ptrs, size_t *lens, size_t *sum);

/* Span j of the `total` spans at `at`, as (record, start, length). */
void tfr_span_at(const uint8_t *at, size_t j, int64_t span[3]);

#endif
