/* TFRecord framing: uint64 length, uint32 masked CRC-32C of the length, data, uint32 masked CRC-32C of the data. */
#ifndef TFR_FRAMING_H
#define TFR_FRAMING_H

#include <stddef.h>
#include <stdint.h>

#define TFR_HEADER 12
#define TFR_FOOTER 4

typedef struct {
    size_t offset; /* of the record's data, in the scanned buffer */
    size_t length;
} tfr_span;

enum tfr_scan_status {
    TFR_SCAN_MORE = 0,       /* the next header or record does not fit in the buffer: read more (or it is the end) */
    TFR_SCAN_BAD_HEADER = 1, /* the header at *stop fails its length CRC */
    TFR_SCAN_BAD_DATA = 2,   /* the record at *stop fails its data CRC */
    TFR_SCAN_LIMIT = 3,      /* the next record starts at or after `limit` */
    TFR_SCAN_FULL = 4        /* `max_spans` records found: call again from *stop */
};

/* Scan the records of buf[lo:hi): every header CRC checked, data CRCs when `verify`. Good records' spans go to
 * `spans` (at most `max_spans`); `*stop` is the offset of the first record not returned. */
int tfr_scan_records(const uint8_t *buf, size_t lo, size_t hi, size_t limit, int verify, tfr_span *spans,
                     size_t max_spans, size_t *count, size_t *stop);

/* The first offset in [lo, hi - 12] where a header passes its length CRC, or (size_t)-1. */
size_t tfr_find_header(const uint8_t *buf, size_t lo, size_t hi);

/* Check n records read apart from their framing: record i's header (12 bytes) is at headers + 4 + 16 i and its
 * footer (4 bytes) at headers + 16 (i + 1); its data (lens[i] bytes) at datas[i]. Each header must pass its CRC
 * and hold lens[i]; each data CRC must match when `verify`. Returns how many records from the first are good. */
size_t tfr_check_framed(const uint8_t *headers, uint8_t *const *datas, const size_t *lens, size_t n, int verify);

/* Write `data` framed (16 + n bytes) at `out`. */
void tfr_frame(uint8_t *out, const uint8_t *data, size_t n);

#endif
