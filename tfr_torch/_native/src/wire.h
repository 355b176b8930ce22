/* Protocol-buffer wire format primitives (https://protobuf.dev/programming-guides/encoding/). Every read is
 * bounded by `end`; a function that cannot complete returns 0 and leaves its outputs unspecified. */
#ifndef TFR_WIRE_H
#define TFR_WIRE_H

#include <stddef.h>
#include <stdint.h>

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_I32 = 5 };

/* A base-128 varint: at most 10 bytes, little-endian groups of 7 bits; bits past 64 are dropped, as protobuf's
 * parsers do for int64 fields. */
static inline int wire_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t value = 0;
    for (int shift = 0; shift <= 63 && p < end; shift += 7) {
        uint8_t byte = *p++;
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *pp = p;
            *out = value;
            return 1;
        }
    }
    return 0;
}

/* A length-delimited field's payload (wire type 2): the length varint, then that many bytes, which must all be
 * there. */
static inline int wire_bytes(const uint8_t **pp, const uint8_t *end, const uint8_t **start, size_t *len) {
    uint64_t n;
    if (!wire_varint(pp, end, &n)) return 0;
    if (n > (uint64_t)(end - *pp)) return 0; /* a length longer than what remains */
    *start = *pp;
    *len = (size_t)n;
    *pp += n;
    return 1;
}

/* Skip one field's payload of wire type `wt` (not groups: callers send those to the reference parser). */
static inline int wire_skip(const uint8_t **pp, const uint8_t *end, unsigned wt) {
    uint64_t ignored;
    const uint8_t *start;
    size_t len;
    switch (wt) {
    case WT_VARINT:
        return wire_varint(pp, end, &ignored);
    case WT_I64:
        if (end - *pp < 8) return 0;
        *pp += 8;
        return 1;
    case WT_LEN:
        return wire_bytes(pp, end, &start, &len);
    case WT_I32:
        if (end - *pp < 4) return 0;
        *pp += 4;
        return 1;
    default:
        return 0;
    }
}

#endif
