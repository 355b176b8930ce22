/* Seek points in GZIP / ZLIB streams: built by inflating block by block (zlib's Z_BLOCK), used by restarting raw
 * inflation at one (inflatePrime + inflateSetDictionary). The approach of zlib's examples/zran.c; see seek.h. */
#include "seek.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define FEED_MAX (1u << 30) /* zlib counts input in uInt: a larger buffer is given in pieces */
#define GZIP_TRAILER 8u     /* CRC-32 and ISIZE after a member's deflate data (RFC 1952 section 2.3.1) */

/* Give zlib the next piece of `in` when it has used what it had. */
static void feed(z_stream *s, const uint8_t *in, size_t in_len, size_t *pos) {
    if (s->avail_in || *pos >= in_len) return;
    size_t n = in_len - *pos < FEED_MAX ? in_len - *pos : FEED_MAX;
    s->next_in = (Bytef *)(in + *pos);
    s->avail_in = (uInt)n;
    *pos += n;
}

static int room_for_point(tfr_seek_index *ix) {
    if (ix->count < ix->capacity) return 0;
    size_t cap = ix->capacity ? ix->capacity * 2 : 16;
    if (cap > SIZE_MAX / TFR_SEEK_WINDOW) return -1;
    tfr_seek_point *points = realloc(ix->points, cap * sizeof *points);
    if (!points) return -1;
    ix->points = points;
    uint8_t *windows = realloc(ix->windows, cap * TFR_SEEK_WINDOW);
    if (!windows) return -1;
    ix->windows = windows;
    ix->capacity = cap;
    return 0;
}

/* A point where inflate stopped: `win` is the rotating output buffer, of which s->avail_out bytes are not yet
 * rewritten in this turn; its last `dict` bytes in output order go to the end of the point's slot. */
static int add_point(tfr_seek_index *ix, const z_stream *s, uint64_t in_off, uint64_t out, uint64_t beg,
                     const uint8_t *win) {
    if (room_for_point(ix) < 0) return -1;
    tfr_seek_point *p = &ix->points[ix->count];
    p->out = out;
    p->in = in_off;
    p->bits = (uint32_t)(s->data_type & 7);
    p->dict = out - beg > TFR_SEEK_WINDOW ? TFR_SEEK_WINDOW : (uint32_t)(out - beg);
    uint8_t *slot = ix->windows + ix->count * (size_t)TFR_SEEK_WINDOW;
    size_t recent = TFR_SEEK_WINDOW - s->avail_out; /* written in this turn of the buffer, oldest first */
    size_t newer = recent < p->dict ? recent : p->dict;
    size_t older = p->dict - newer; /* from the end of the buffer: the turn before */
    memcpy(slot + TFR_SEEK_WINDOW - p->dict, win + TFR_SEEK_WINDOW - older, older);
    memcpy(slot + TFR_SEEK_WINDOW - newer, win + recent - newer, newer);
    ix->count++;
    return 0;
}

void tfr_seek_free(tfr_seek_index *ix) {
    free(ix->points);
    free(ix->windows);
    ix->points = NULL;
    ix->windows = NULL;
    ix->count = ix->capacity = 0;
}

static int status_of(int ret) {
    return ret == Z_MEM_ERROR ? TFR_SEEK_NOMEM : ret == Z_BUF_ERROR ? TFR_SEEK_TRUNCATED : TFR_SEEK_CORRUPT;
}

int tfr_seek_build(const uint8_t *in, size_t in_len, int gzip, uint64_t span, tfr_seek_index *ix) {
    memset(ix, 0, sizeof *ix);
    z_stream s;
    memset(&s, 0, sizeof s);
    uint8_t *win = malloc(TFR_SEEK_WINDOW);
    if (!win || inflateInit2(&s, gzip ? 31 : 15) != Z_OK) { /* 31: a gzip header, 15: a zlib header */
        free(win);
        return TFR_SEEK_NOMEM;
    }
    size_t pos = 0;
    uint64_t total = 0, last = 0, beg = 0; /* beg: where the current member's output began */
    int status = TFR_SEEK_OK;
    for (;;) {
        feed(&s, in, in_len, &pos);
        if (s.avail_out == 0) {
            s.next_out = win;
            s.avail_out = TFR_SEEK_WINDOW;
        }
        unsigned before = s.avail_out;
        int ret = inflate(&s, Z_BLOCK);
        total += before - s.avail_out;
        if (ret != Z_OK && ret != Z_STREAM_END) {
            status = status_of(ret == Z_NEED_DICT ? Z_DATA_ERROR : ret);
            break;
        }
        /* 0x80: stopped after a header or at the end of a block; 0x40: that block was the last one */
        if ((s.data_type & 0xc0) == 0x80 && (ix->count == 0 || total - last >= span)) {
            if (add_point(ix, &s, pos - s.avail_in, total, beg, win) < 0) {
                status = TFR_SEEK_NOMEM;
                break;
            }
            last = total;
        }
        if (ret == Z_STREAM_END) {
            int more = s.avail_in || pos < in_len;
            if (!more) break;
            if (!gzip) {
                status = TFR_SEEK_TRAILING; /* bytes after the one ZLIB stream */
                break;
            }
            inflateReset(&s); /* the next member: its header, then its deflate data */
            beg = total;
        }
    }
    ix->total_out = total;
    ix->error_in = pos - s.avail_in;
    inflateEnd(&s);
    free(win);
    return status;
}

/* Pass over a gzip member's trailer and the next member's header, leaving `s` in raw mode at its deflate data.
 * Returns 1 when there is a next member, 0 at the end of the input, or a status negated. */
static int next_member(z_stream *s, const uint8_t *in, size_t in_len, size_t *pos, uint8_t *discard) {
    unsigned drop = GZIP_TRAILER;
    while (drop) {
        feed(s, in, in_len, pos);
        if (!s->avail_in) return -TFR_SEEK_TRUNCATED;
        unsigned n = s->avail_in < drop ? s->avail_in : drop;
        s->next_in += n;
        s->avail_in -= n;
        drop -= n;
    }
    feed(s, in, in_len, pos);
    if (!s->avail_in) return 0;
    if (inflateReset2(s, 31) != Z_OK) return -TFR_SEEK_CORRUPT;
    do {
        feed(s, in, in_len, pos);
        s->next_out = discard;
        s->avail_out = TFR_SEEK_WINDOW;
        int ret = inflate(s, Z_BLOCK); /* stops once the header is read */
        if (ret != Z_OK) return ret == Z_STREAM_END ? -TFR_SEEK_CORRUPT : -status_of(ret);
    } while (!(s->data_type & 0x80));
    return inflateReset2(s, -15) == Z_OK ? 1 : -TFR_SEEK_CORRUPT;
}

/* Inflation restarted at a point: the stream, where it is in `in`, and whether the stream has ended. */
typedef struct {
    z_stream s;
    const uint8_t *in;
    size_t in_len, pos;
    int gzip, ended;
    int member_end; /* a gzip member's deflate data has ended; its trailer and the next header are not read yet */
    uint8_t *discard; /* TFR_SEEK_WINDOW bytes: where dropped output goes */
} restart;

/* Inflate up to `n` more bytes into `dst` (NULL: dropped into r->discard); *made says how many (fewer once the
 * stream ends: r->ended). Returns a status. */
static int produce(restart *r, uint8_t *dst, uint64_t n, uint64_t *made) {
    *made = 0;
    while (*made < n && !r->ended) {
        if (r->member_end) { /* more output is wanted: only now pass into the next member (whose header may be
                              * damaged: the records before it are whole and must not be refused for it) */
            r->member_end = 0;
            int more = next_member(&r->s, r->in, r->in_len, &r->pos, r->discard);
            if (more < 0) return -more;
            r->ended = more == 0; /* the input ends after the member */
            continue;
        }
        feed(&r->s, r->in, r->in_len, &r->pos);
        uint64_t left = n - *made;
        r->s.next_out = dst ? dst + *made : r->discard;
        uint64_t room = dst ? FEED_MAX : TFR_SEEK_WINDOW;
        r->s.avail_out = (uInt)(left < room ? left : room);
        unsigned before = r->s.avail_out;
        int ret = inflate(&r->s, Z_NO_FLUSH);
        *made += before - r->s.avail_out;
        if (ret == Z_STREAM_END) {
            if (!r->gzip) { /* the one ZLIB stream has ended */
                r->ended = 1;
                break;
            }
            r->member_end = 1;
        } else if (ret != Z_OK) {
            return status_of(ret == Z_NEED_DICT ? Z_DATA_ERROR : ret);
        }
    }
    return TFR_SEEK_OK;
}

int tfr_seek_extract_ranges(const uint8_t *in, size_t in_len, unsigned bits, const uint8_t *window, size_t dict,
                            int gzip, const uint64_t *starts, const uint64_t *lens, size_t n, uint8_t *const *outs,
                            size_t *got) {
    *got = 0;
    if (bits > 7 || dict > TFR_SEEK_WINDOW || (bits && in_len < 1)) return TFR_SEEK_TRUNCATED;
    restart r;
    memset(&r, 0, sizeof r);
    r.in = in;
    r.in_len = in_len;
    r.gzip = gzip;
    r.discard = malloc(TFR_SEEK_WINDOW);
    if (!r.discard || inflateInit2(&r.s, -15) != Z_OK) { /* -15: raw deflate, no header */
        free(r.discard);
        return TFR_SEEK_NOMEM;
    }
    if (bits) { /* the block's first bits are the high bits of the shared byte */
        inflatePrime(&r.s, (int)bits, in[0] >> (8 - bits));
        r.pos = 1;
    }
    if (dict) inflateSetDictionary(&r.s, window, (uInt)dict);
    int status = TFR_SEEK_OK;
    uint64_t at = 0; /* decompressed bytes since the point */
    for (size_t i = 0; i < n && status == TFR_SEEK_OK && !r.ended; i++) {
        uint64_t made;
        if (starts[i] < at) { /* ranges must be in order and apart: the caller checks, this guards */
            status = TFR_SEEK_CORRUPT;
            break;
        }
        status = produce(&r, NULL, starts[i] - at, &made); /* the gap before the range, dropped */
        at += made;
        if (status != TFR_SEEK_OK || at < starts[i]) break;
        status = produce(&r, outs[i], lens[i], &made);
        at += made;
        *got += made;
    }
    inflateEnd(&r.s);
    free(r.discard);
    return status;
}

int tfr_seek_extract(const uint8_t *in, size_t in_len, unsigned bits, const uint8_t *window, size_t dict, int gzip,
                     uint64_t skip, uint8_t *out, size_t want, size_t *got) {
    uint64_t len = want;
    return tfr_seek_extract_ranges(in, in_len, bits, window, dict, gzip, &skip, &len, 1, &out, got);
}
