/* TFRecord framing kernels: scanning a buffer of records and framing records into one. */
#include "framing.h"

#include <string.h>

#include "crc32c.h"

static uint64_t load_u64(const uint8_t *p) { /* little-endian, unaligned */
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void store_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static int header_ok(const uint8_t *p) {
    return tfr_mask_crc(tfr_crc32c(0, p, 8)) == load_u32(p + 8);
}

int tfr_scan_records(const uint8_t *buf, size_t lo, size_t hi, size_t limit, int verify, tfr_span *spans,
                     size_t max_spans, size_t *count, size_t *stop) {
    size_t pos = lo, n = 0;
    int status;
    for (;;) {
        if (n == max_spans) {
            status = TFR_SCAN_FULL;
            break;
        }
        if (pos >= limit) {
            status = TFR_SCAN_LIMIT;
            break;
        }
        if (hi - pos < TFR_HEADER) {
            status = TFR_SCAN_MORE;
            break;
        }
        if (!header_ok(buf + pos)) {
            status = TFR_SCAN_BAD_HEADER;
            break;
        }
        uint64_t length = load_u64(buf + pos);
        /* the whole record must be in the buffer; compare without overflow (length is untrusted) */
        if (length > (uint64_t)(hi - pos - TFR_HEADER) || hi - pos - TFR_HEADER - (size_t)length < TFR_FOOTER) {
            status = TFR_SCAN_MORE;
            break;
        }
        const uint8_t *data = buf + pos + TFR_HEADER;
        if (verify && tfr_mask_crc(tfr_crc32c(0, data, (size_t)length)) != load_u32(data + length)) {
            status = TFR_SCAN_BAD_DATA;
            break;
        }
        spans[n].offset = pos + TFR_HEADER;
        spans[n].length = (size_t)length;
        n++;
        pos += TFR_HEADER + (size_t)length + TFR_FOOTER;
    }
    *count = n;
    *stop = pos;
    return status;
}

size_t tfr_find_header(const uint8_t *buf, size_t lo, size_t hi) {
    if (hi < TFR_HEADER) return (size_t)-1;
    for (size_t pos = lo; pos + TFR_HEADER <= hi; pos++)
        if (header_ok(buf + pos)) return pos;
    return (size_t)-1;
}

size_t tfr_check_framed(const uint8_t *headers, uint8_t *const *datas, const size_t *lens, size_t n, int verify) {
    for (size_t i = 0; i < n; i++) {
        const uint8_t *header = headers + 4 + 16 * i, *footer = headers + 16 * (i + 1);
        if (!header_ok(header) || load_u64(header) != (uint64_t)lens[i]) return i;
        if (verify && tfr_mask_crc(tfr_crc32c(0, datas[i], lens[i])) != load_u32(footer)) return i;
    }
    return n;
}

void tfr_frame(uint8_t *out, const uint8_t *data, size_t n) {
    uint64_t length = (uint64_t)n;
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(length >> (8 * i));
    store_u32(out + 8, tfr_mask_crc(tfr_crc32c(0, out, 8)));
    if (n) memcpy(out + TFR_HEADER, data, n);
    store_u32(out + TFR_HEADER + n, tfr_mask_crc(tfr_crc32c(0, data, n)));
}
