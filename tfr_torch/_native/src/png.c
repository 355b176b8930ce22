/* PNG decoding for the plain case (see png.h). Chunk layout, filters and the Paeth predictor follow the PNG
 * specification (ISO/IEC 15948, W3C PNG 2nd edition): sections 5.3 (chunk layout), 11.2.2 (IHDR), 9.2-9.4
 * (filter types). zlib inflates the IDAT stream and computes the chunks' CRC-32. */
#include "png.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static const unsigned char SIGNATURE[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static size_t channels_of(int colour) {
    switch (colour) {
    case 0: return 1;
    case 2: return 3;
    case 4: return 2;
    case 6: return 4;
    default: return 0;
    }
}

/* 11.2.2: width, height (4 bytes each), bit depth, colour type, compression, filter and interlace methods. */
static int header_ok(const unsigned char *body, uint32_t length, uint32_t width, uint32_t height, int colour) {
    return length == 13 && be32(body) == width && be32(body + 4) == height && body[8] == 8 && body[9] == colour &&
           body[10] == 0 && body[11] == 0 && body[12] == 0;
}

/* Ancillary chunks that Pillow reads without effect on the pixels and without a way to fail at these lengths
 * (gAMA, cHRM, sRGB, pHYs); any other ancillary chunk (tRNS, text, APNG, ...) is refused. */
static int harmless(const unsigned char *type, uint32_t length) {
    return (!memcmp(type, "gAMA", 4) && length == 4) || (!memcmp(type, "cHRM", 4) && length == 32) ||
           (!memcmp(type, "sRGB", 4) && length == 1) || (!memcmp(type, "pHYs", 4) && length == 9);
}

/* 9.4: the Paeth predictor of a (left), b (above), c (upper left). */
static unsigned char paeth(int a, int b, int c) {
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    if (pa <= pb && pa <= pc) return (unsigned char)a;
    return (unsigned char)(pb <= pc ? b : c);
}

/* 9.2: one row's filter reversed, from src (stride filtered bytes) into dst, with prev the row above (unfiltered;
 * zeros for the first row) and bpp bytes per pixel. 0, or -1 for an unknown filter type. */
static int unfilter(unsigned char *dst, const unsigned char *src, const unsigned char *prev, size_t stride,
                    size_t bpp, unsigned type) {
    size_t i;
    switch (type) {
    case 0: memcpy(dst, src, stride); return 0;
    case 1:
        for (i = 0; i < stride; i++) dst[i] = (unsigned char)(src[i] + (i >= bpp ? dst[i - bpp] : 0));
        return 0;
    case 2:
        for (i = 0; i < stride; i++) dst[i] = (unsigned char)(src[i] + prev[i]);
        return 0;
    case 3:
        for (i = 0; i < stride; i++)
            dst[i] = (unsigned char)(src[i] + (((i >= bpp ? dst[i - bpp] : 0) + prev[i]) >> 1));
        return 0;
    case 4:
        for (i = 0; i < stride; i++)
            dst[i] = (unsigned char)(src[i] + (i >= bpp ? paeth(dst[i - bpp], prev[i], prev[i - bpp]) : prev[i]));
        return 0;
    default: return -1;
    }
}

/* Feed one IDAT chunk's bytes to the stream. 0 while it goes on or when it ended exactly at the chunk's end, else
 * TFR_PNG_DATA (a zlib error, more data than rows, bytes after the stream's end). */
static int inflate_chunk(z_stream *zs, const unsigned char *body, uint32_t length, int *ended) {
    if (*ended) return length ? TFR_PNG_DATA : 0;
    zs->next_in = (unsigned char *)body;
    zs->avail_in = length;
    while (zs->avail_in > 0) {
        int ret = inflate(zs, Z_NO_FLUSH);
        if (ret == Z_STREAM_END) {
            *ended = 1;
            return zs->avail_in ? TFR_PNG_DATA : 0;
        }
        if (ret != Z_OK) return TFR_PNG_DATA; /* Z_BUF_ERROR here: more data than the rows hold */
    }
    return 0;
}

/* 5.3: walk the chunks of one PNG, inflating its IDAT stream into raw (raw_len bytes: filter byte + row, per row). */
static int read_chunks(const unsigned char *p, size_t len, uint32_t width, uint32_t height, int colour,
                       z_stream *zs, unsigned char *raw, size_t raw_len) {
    if (len < 8 || memcmp(p, SIGNATURE, 8)) return TFR_PNG_SIGNATURE;
    if (inflateReset(zs) != Z_OK) return TFR_PNG_DATA;
    zs->next_out = raw;
    zs->avail_out = (uInt)raw_len;
    size_t pos = 8;
    int idat = 0, ended = 0, first = 1; /* idat: 0 before the IDATs, 1 in them, 2 after */
    for (;;) {
        if (len - pos < 12) return TFR_PNG_SIGNATURE;
        uint32_t length = be32(p + pos);
        if (length > 0x7FFFFFFFu || length > len - pos - 12) return TFR_PNG_SIGNATURE;
        const unsigned char *type = p + pos + 4, *body = p + pos + 8;
        if ((uint32_t)crc32(0L, type, (uInt)length + 4) != be32(body + length)) return TFR_PNG_CRC;
        pos += (size_t)length + 12;
        int is_idat = !memcmp(type, "IDAT", 4);
        if (first) {
            if (memcmp(type, "IHDR", 4) || !header_ok(body, length, width, height, colour)) return TFR_PNG_HEADER;
            first = 0;
            continue;
        }
        if (is_idat) {
            if (idat == 2) return TFR_PNG_CHUNK;
            idat = 1;
            int status = inflate_chunk(zs, body, length, &ended);
            if (status) return status;
            continue;
        }
        if (idat == 1) idat = 2;
        if (!memcmp(type, "IEND", 4)) {
            if (length || pos != len || idat != 2) return TFR_PNG_CHUNK;
            return ended && zs->total_out == raw_len ? 0 : TFR_PNG_DATA;
        }
        if (!memcmp(type, "PLTE", 4) && idat == 0 && (colour == 2 || colour == 6)) continue; /* a suggestion only */
        if (!harmless(type, length)) return TFR_PNG_CHUNK;
    }
}

ptrdiff_t tfr_png_decode_many(const unsigned char *const *data, const size_t *lens, size_t count, uint32_t width,
                              uint32_t height, int colour, unsigned char *out, int *reason) {
    size_t bpp = channels_of(colour);
    *reason = TFR_PNG_HEADER;
    if (!bpp || !width || !height || width > 0x7FFFFFFFu || height > 0x7FFFFFFFu) return count ? 0 : -1;
    size_t stride = (size_t)width * bpp, image = stride * height, raw_len = (stride + 1) * height;
    if (raw_len / height != stride + 1 || raw_len > 0xFFFFFFFFu) return count ? 0 : -1; /* one inflate call's size */
    unsigned char *raw = malloc(raw_len), *zeros = calloc(stride, 1);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    *reason = TFR_PNG_MEMORY;
    if (!raw || !zeros || inflateInit(&zs) != Z_OK) {
        free(raw);
        free(zeros);
        return count ? 0 : -1;
    }
    ptrdiff_t failed = -1;
    *reason = TFR_PNG_OK;
    for (size_t i = 0; i < count && failed < 0; i++) {
        unsigned char *dst = out + i * image;
        int status = read_chunks(data[i], lens[i], width, height, colour, &zs, raw, raw_len);
        for (size_t y = 0; !status && y < height; y++) {
            const unsigned char *row = raw + y * (stride + 1);
            if (unfilter(dst + y * stride, row + 1, y ? dst + (y - 1) * stride : zeros, stride, bpp, row[0]))
                status = TFR_PNG_FILTER;
        }
        if (status) failed = (ptrdiff_t)i, *reason = status;
    }
    inflateEnd(&zs);
    free(raw);
    free(zeros);
    return failed;
}
