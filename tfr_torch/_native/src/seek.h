/* Seek points in a GZIP or ZLIB stream (RFC 1951 deflate inside RFC 1952 / RFC 1950 framing), as zlib's zran.c
 * describes them: at the start of a deflate block, the compressed byte offset and bit (the block may start inside a
 * byte), the decompressed offset, and the last 32 KiB of output before it (the most a back-reference can reach,
 * RFC 1951 section 3.2.5). Inflation can restart there with inflatePrime (the bits of the shared byte) and
 * inflateSetDictionary (the window). Buffers in, buffers out: the file's bytes are given whole. */
#ifndef TFR_SEEK_H
#define TFR_SEEK_H

#include <stddef.h>
#include <stdint.h>

#define TFR_SEEK_WINDOW 32768u

/* One point; its window (dict bytes, at most TFR_SEEK_WINDOW) is kept apart. */
typedef struct {
    uint64_t out;  /* decompressed offset of the block's first byte */
    uint64_t in;   /* file offset of the first whole compressed byte of the block */
    uint32_t bits; /* 0..7: how many high bits of byte in - 1 belong to the block */
    uint32_t dict; /* window bytes that precede it in its member (0 at a member's start) */
} tfr_seek_point;

typedef struct {
    tfr_seek_point *points;
    uint8_t *windows; /* TFR_SEEK_WINDOW bytes per point, the point's window at the end of its slot */
    size_t count, capacity;
    uint64_t total_out; /* decompressed bytes of the whole file */
    uint64_t error_in;  /* on failure: the compressed bytes used before it */
} tfr_seek_index;

/* Status codes (0 is success). */
enum { TFR_SEEK_OK = 0, TFR_SEEK_CORRUPT = 1, TFR_SEEK_TRUNCATED = 2, TFR_SEEK_NOMEM = 3, TFR_SEEK_TRAILING = 4 };

/* Inflate the whole file (`gzip`: every member; else one zlib stream that must end the file) and record a point
 * after each member's header and at the end of every non-last block once `span` or more decompressed bytes have
 * passed since the last point. On failure, ix->error_in says where; tfr_seek_free releases ix either way. */
int tfr_seek_build(const uint8_t *in, size_t in_len, int gzip, uint64_t span, tfr_seek_index *ix);
void tfr_seek_free(tfr_seek_index *ix);

/* Restart at a point: `in` starts at the point's shared byte when bits > 0 (else at its first byte) and holds the
 * compressed bytes from there; inflate, drop `skip` bytes, then write up to `want` bytes to `out` (*got says how
 * many; fewer when the input or the stream ends). In a GZIP file, member trailers and headers met on the way are
 * passed over (their CRC-32 cannot be checked from a point: the caller checks each record's CRCs). */
int tfr_seek_extract(const uint8_t *in, size_t in_len, unsigned bits, const uint8_t *window, size_t dict, int gzip,
                     uint64_t skip, uint8_t *out, size_t want, size_t *got);

/* Several ranges from one restart: range i is lens[i] bytes from starts[i] decompressed bytes after the point
 * (in increasing order, apart), written to outs[i]; the bytes between ranges are inflated and dropped. *got says
 * how many bytes were written in all (fewer than the sum of lens when the input or the stream ends first). One
 * pass over an interval for all the records wanted in it, instead of one restart per record. */
int tfr_seek_extract_ranges(const uint8_t *in, size_t in_len, unsigned bits, const uint8_t *window, size_t dict,
                            int gzip, const uint64_t *starts, const uint64_t *lens, size_t n, uint8_t *const *outs,
                            size_t *got);

#endif
