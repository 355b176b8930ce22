#include "jpeg.h"

#include <string.h>

size_t tfr_jpeg_next_marker(const unsigned char *data, size_t len, size_t start) {
    size_t pos = start;
    while (pos + 1 < len) {
        const unsigned char *ff = memchr(data + pos, 0xFF, len - 1 - pos); /* a 0xFF with a byte after it */
        if (!ff) return (size_t)-1;
        pos = (size_t)(ff - data);
        unsigned char next = data[pos + 1];
        if (next != 0x00 && next != 0xFF && (next < 0xD0 || next > 0xD7)) return pos;
        pos += 1;
    }
    return (size_t)-1;
}

/* ---- the structure check (tfr_torch/images/_jpeg.py is the reference: each step below is one of its lines) ---- */

typedef struct {
    int frame;                       /* the frame's marker (0: none yet) */
    unsigned char present[256];      /* the frame's components, by id */
    unsigned char table[256];        /* each component's quantization table */
    unsigned char h[256], v[256];    /* each component's sampling factors */
    unsigned char quantization[16];  /* the quantization tables defined (ids 0-15 as read; 0-3 accepted) */
    signed char huffman[2][16];      /* each Huffman table: -1 not defined, 0 sound, 1 with a problem */
} jpeg_tables;

static int is_frame(int m) {  /* _FRAMES */
    return m == 0xC0 || m == 0xC1 || m == 0xC2 || m == 0xC3 || m == 0xC5 || m == 0xC6 || m == 0xC7 || m == 0xC9 ||
           m == 0xCA || m == 0xCB || m == 0xCD || m == 0xCE || m == 0xCF;
}

static int is_known(int m) {  /* _KNOWN */
    return m == 0xC0 || m == 0xC1 || m == 0xC2 || m == 0xC9 || m == 0xCA || m == 0xC4 || m == 0xCC || m == 0xDB ||
           m == 0xDD || m == 0xDC || m == 0xDA || m == 0xFE || (m >= 0xE0 && m <= 0xEF);
}

/* _read_huffman_tables: 0 when the segment is sound (each table it defines noted, sound or not) */
static int huffman_segment(const unsigned char *b, size_t n, jpeg_tables *t) {
    size_t at = 0;
    while (at < n) {
        if (at + 17 > n) return 1;
        int kind = b[at] >> 4, id = b[at] & 15;
        if (kind > 1 || id > 3) return 1;
        size_t total = 0;
        for (int k = 1; k <= 16; k++) total += b[at + k];
        if (total > 256 || at + 17 + total > n) return 1;
        int problem = 0;
        unsigned long code = 0;
        for (int length = 1; length <= 16; length++) {
            code += b[at + length];
            if (code >= (1UL << length)) {
                problem = 1;
                break;
            }
            code <<= 1;
        }
        if (!problem && kind == 0)
            for (size_t k = 0; k < total; k++)
                if (b[at + 17 + k] > 15) problem = 1;
        t->huffman[kind][id] = (signed char)problem;
        at += 17 + total;
    }
    return 0;
}

static int frame_segment(const unsigned char *b, size_t n, jpeg_tables *t) {
    if (n < 6 || n != 6 + 3 * (size_t)b[5]) return 1;
    unsigned height = (unsigned)b[1] << 8 | b[2], width = (unsigned)b[3] << 8 | b[4], count = b[5];
    if (b[0] != 8 && b[0] != 12) return 1;
    if (height == 0 || width == 0 || count == 0) return 1;
    if (height > 65500 || width > 65500) return 1;
    for (unsigned k = 0; k < count; k++) {
        int id = b[6 + 3 * k], sampling = b[7 + 3 * k];
        int h = sampling >> 4, v = sampling & 15;
        if (h < 1 || h > 4 || v < 1 || v > 4) return 1;
        t->present[id] = 1;
        t->table[id] = b[8 + 3 * k];
        t->h[id] = (unsigned char)h;
        t->v[id] = (unsigned char)v;
    }
    int wide = 0, tall = 0;
    for (int id = 0; id < 256; id++)
        if (t->present[id]) {
            if (t->h[id] > wide) wide = t->h[id];
            if (t->v[id] > tall) tall = t->v[id];
        }
    for (int id = 0; id < 256; id++)
        if (t->present[id] && (wide % t->h[id] || tall % t->v[id])) return 1;
    return 0;
}

static int scan_segment(const unsigned char *b, size_t n, const jpeg_tables *t) {
    int count = n ? b[0] : 0;
    if (count < 1 || count > 4 || n != 4 + 2 * (size_t)count) return 1;
    int first = b[1 + 2 * count], last = b[2 + 2 * count], approximation = b[3 + 2 * count] >> 4;
    int low = b[3 + 2 * count] & 15;
    int progressive = t->frame == 0xC2 || t->frame == 0xCA, arithmetic = t->frame == 0xC9 || t->frame == 0xCA;
    if (progressive) {
        int bad_range = first == 0 ? last != 0 : (first > last || last > 63 || count != 1);
        if (bad_range || (approximation != 0 && low != approximation - 1) || low > 13) return 1;
    }
    int blocks = 0;
    unsigned char seen[256] = {0};
    for (int k = 0; k < count; k++) {
        int id = b[1 + 2 * k], huffman = b[2 + 2 * k];
        if (!t->present[id] || seen[id]) return 1;
        seen[id] = 1;
        blocks += t->h[id] * t->v[id];
        if (count > 1 && blocks > 10) return 1;
        int q = t->table[id];
        if (q > 15 || !t->quantization[q]) return 1;
        int kinds[2], ids[2], used = 0;
        if ((first == 0 && approximation == 0) || !progressive) kinds[used] = 0, ids[used++] = huffman >> 4;
        if (last > 0 || !progressive) kinds[used] = 1, ids[used++] = huffman & 15;
        if (arithmetic) continue;
        for (int u = 0; u < used; u++) {
            if (ids[u] > 3) return 1;
            int state = t->huffman[kinds[u]][ids[u]];
            if (state < 0 && (ids[u] > 1 || progressive)) return 1;
            if (state > 0) return 1;
        }
    }
    return 0;
}

static int segment_problem(int marker, const unsigned char *b, size_t n, jpeg_tables *t) {
    if (marker == 0xC4) return huffman_segment(b, n, t);
    if (marker == 0xDB) {
        size_t at = 0;
        while (at < n) {
            int wide = b[at] >> 4, id = b[at] & 15;
            if (id > 3) return 1;
            t->quantization[id] = 1;
            at += 1 + 64 * (wide ? 2 : 1);
        }
        return at != n;
    }
    if (is_frame(marker)) return frame_segment(b, n, t);
    if (marker == 0xDA) return scan_segment(b, n, t);
    if (marker == 0xDD && n != 2) return 1;
    if (marker == 0xCC) {
        if (n % 2) return 1;
        for (size_t at = 0; at < n; at += 2) {
            int table = b[at], value = b[at + 1];
            if (table > 31 || (table < 16 && (value & 15) > (value >> 4))) return 1;
        }
    }
    return 0;
}

int tfr_jpeg_sound(const unsigned char *data, size_t end) {
    if (end < 2 || data[0] != 0xFF || data[1] != 0xD8) return 0;
    jpeg_tables t;
    memset(&t, 0, sizeof t);
    memset(t.huffman, -1, sizeof t.huffman);
    size_t pos = 2;
    int frame = 0, scans = 0;
    for (;;) {
        if (pos >= end) return 0;
        if (data[pos] != 0xFF) { /* _ANY_MARKER: 0xFF followed by neither 0x00 nor 0xFF */
            size_t at = pos;
            for (;;) {
                const unsigned char *ff = at + 1 < end ? memchr(data + at, 0xFF, end - 1 - at) : NULL;
                if (!ff) return 0;
                at = (size_t)(ff - data);
                if (data[at + 1] != 0x00 && data[at + 1] != 0xFF) break;
                at += 1;
            }
            pos = at;
        }
        while (pos + 1 < end && data[pos + 1] == 0xFF) pos++;
        if (pos + 1 >= end) return 0;
        int marker = data[pos + 1];
        if (marker == 0x00) {
            pos += 2;
            continue;
        }
        if (marker == 0xD9) return scans > 0;
        if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
            pos += 2;
            continue;
        }
        if (!is_known(marker)) return 0;
        if (pos + 4 > end) return 0;
        size_t length = (size_t)data[pos + 2] << 8 | data[pos + 3];
        if (length < 2) return 0;
        if (pos + 2 + length > end) return 0;
        if (marker == 0xDA && !frame) return 0;
        if (segment_problem(marker, data + pos + 4, length - 2, &t)) return 0;
        if (is_frame(marker)) {
            if (frame) return 0;
            frame = 1;
            t.frame = marker;
        }
        if (marker != 0xDA) {
            pos += 2 + length;
            continue;
        }
        size_t next = tfr_jpeg_next_marker(data, end, pos + 2 + length);
        if (next == (size_t)-1) return 0;
        pos = next;
        scans++;
    }
}

/* ---- the header read (tfr_torch/images/_formats.py's _jpeg and _exif_orientation are the reference) ---------- */

static unsigned read16(const unsigned char *p, int little) {
    return little ? (unsigned)p[0] | (unsigned)p[1] << 8 : (unsigned)p[0] << 8 | p[1];
}

/* tag 0x0112 of IFD0 of a TIFF-structured EXIF block, 1 when absent or malformed */
static int exif_orientation(const unsigned char *t, size_t n) {
    if (n < 8) return 1;
    int little;
    if (!memcmp(t, "II*\0", 4)) little = 1;
    else if (!memcmp(t, "MM\0*", 4)) little = 0;
    else return 1;
    size_t ifd = little ? (size_t)t[4] | (size_t)t[5] << 8 | (size_t)t[6] << 16 | (size_t)t[7] << 24
                        : (size_t)t[4] << 24 | (size_t)t[5] << 16 | (size_t)t[6] << 8 | (size_t)t[7];
    if (ifd + 2 > n) return 1;
    unsigned count = read16(t + ifd, little);
    for (unsigned k = 0; k < count; k++) {
        size_t entry = ifd + 2 + 12 * (size_t)k;
        if (entry + 12 > n) return 1;
        if (read16(t + entry, little) == 0x0112 && read16(t + entry + 2, little) == 3) {
            unsigned value = read16(t + entry + 8, little);
            return value >= 1 && value <= 8 ? (int)value : 1;
        }
    }
    return 1;
}

void tfr_jpeg_header(const unsigned char *d, size_t end, tfr_jpeg_info *out) {
    size_t pos = 2;
    int components = 0, precision = 0, orientation = 1, height = 0, width = 0, frame = 0;
    int jfif = 0, adobe = -1, rgb_ids = 0;
    while (pos + 4 <= end) {
        if (d[pos] != 0xFF) break;
        int marker = d[pos + 1];
        if (marker == 0xFF) {
            pos += 1;
            continue;
        }
        if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
            pos += 2;
            continue;
        }
        size_t length = (size_t)d[pos + 2] << 8 | d[pos + 3];
        size_t stop = pos + 2 + length < end ? pos + 2 + length : end; /* the slice data[pos + 4: pos + 2 + length] */
        const unsigned char *seg = d + pos + 4;
        size_t n = stop > pos + 4 ? stop - (pos + 4) : 0;
        if (marker == 0xE1 && n >= 6 && !memcmp(seg, "Exif\0\0", 6) && orientation == 1)
            orientation = exif_orientation(seg + 6, n - 6);
        if (marker == 0xE0 && n >= 5 && !memcmp(seg, "JFIF\0", 5)) jfif = 1;
        if (marker == 0xEE && n >= 12 && !memcmp(seg, "Adobe", 5)) adobe = seg[11];
        if (is_frame(marker) && n >= 6) {
            precision = seg[0], components = seg[5], frame = marker;
            height = seg[1] << 8 | seg[2], width = seg[3] << 8 | seg[4];
            /* ids = segment[6: 6 + 3 * components: 3] == b"RGB": exactly three ids */
            size_t last = 6 + 3 * (size_t)components < n ? 6 + 3 * (size_t)components : n;
            size_t count = last > 6 ? (last - 6 + 2) / 3 : 0;
            rgb_ids = count == 3 && seg[6] == 'R' && seg[9] == 'G' && seg[12] == 'B';
        }
        if (marker == 0xDA || marker == 0xD9) break;
        pos += 2 + length;
    }
    out->components = components, out->precision = precision, out->orientation = orientation;
    out->height = height, out->width = width, out->frame = frame;
    out->rgb = components == 3 && !jfif && (adobe >= 0 ? adobe == 0 : rgb_ids);
}
