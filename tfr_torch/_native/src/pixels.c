/* Pixel layout changes for the image transforms (see pixels.h). */
#include "pixels.h"

#include <string.h>

size_t tfr_pixels_extent(size_t h, size_t w, size_t c, size_t step, size_t row) {
    if (step < c) return SIZE_MAX;
    if (!h || !w || !c) return 0;
    size_t down = h - 1, across = w - 1;
    if (row && down > (SIZE_MAX - c) / row) return SIZE_MAX;
    size_t rows = down * row;
    if (step && across > (SIZE_MAX - c - rows) / step) return SIZE_MAX;
    return rows + across * step + c;
}

/* Three planes from 4 bytes a pixel (RGB with a padding byte, Pillow's and the resize's 4-channel layout): one
 * unaligned 32-bit load a pixel, which compilers vectorize; the last pixel of a row is read byte by byte, as its
 * padding byte may lie past the pixels' extent. */
static void planes_3of4(uint8_t *dst, const uint8_t *src, size_t h, size_t w, size_t row, int flip) {
    size_t plane = h * w;
    for (size_t y = 0; y < h; y++) {
        const uint8_t *line = src + y * row;
        uint8_t *d0 = dst + y * w, *d1 = d0 + plane, *d2 = d1 + plane;
        size_t last = w - 1, at = flip ? 0 : last; /* the output column of the row's last pixel */
        if (flip) {
            for (size_t x = 1; x < w; x++) {
                uint32_t v;
                memcpy(&v, line + 4 * (last - x), 4);
                d0[x] = (uint8_t)v, d1[x] = (uint8_t)(v >> 8), d2[x] = (uint8_t)(v >> 16);
            }
        } else {
            for (size_t x = 0; x < last; x++) {
                uint32_t v;
                memcpy(&v, line + 4 * x, 4);
                d0[x] = (uint8_t)v, d1[x] = (uint8_t)(v >> 8), d2[x] = (uint8_t)(v >> 16);
            }
        }
        const uint8_t *p = line + 4 * last;
        d0[at] = p[0], d1[at] = p[1], d2[at] = p[2];
    }
}

void tfr_planes_from_pixels(uint8_t *dst, const uint8_t *src, size_t h, size_t w, size_t c, size_t step, size_t row,
                            int flip) {
    if (!h || !w) return;
    if (c == 3 && step == 4) {
        planes_3of4(dst, src, h, w, row, flip);
        return;
    }
    size_t plane = h * w;
    for (size_t k = 0; k < c; k++) {
        for (size_t y = 0; y < h; y++) {
            const uint8_t *line = src + y * row + k;
            uint8_t *out = dst + k * plane + y * w;
            for (size_t x = 0; x < w; x++) out[x] = line[(flip ? w - 1 - x : x) * step];
        }
    }
}

/* float32 to bfloat16, rounded to nearest even (no NaN reaches here: values are finite) */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* RGB at 4 bytes a pixel (the resize's 4-channel layout), into float32 or bfloat16 planes or pixels: the channel
 * count fixed so that compilers unroll and vectorize the row; the last pixel read byte by byte (its padding byte
 * may lie past the pixels' extent). */
#define NORMALIZE_RGB4(NAME, TYPE, STORE)                                                                         \
    static void NAME(TYPE *dst, int interleaved, const uint8_t *src, size_t h, size_t w, size_t row, int flip,   \
                     const float *sub, const float *mul) {                                                        \
        size_t plane = h * w;                                                                                     \
        const float s0 = sub[0], s1 = sub[1], s2 = sub[2], m0 = mul[0], m1 = mul[1], m2 = mul[2];                 \
        for (size_t y = 0; y < h; y++) {                                                                          \
            const uint8_t *line = src + y * row;                                                                  \
            for (size_t x = 0; x < w; x++) {                                                                      \
                size_t from = flip ? w - 1 - x : x;                                                               \
                uint8_t r, g, b;                                                                                  \
                if (from + 1 < w) {                                                                               \
                    uint32_t v;                                                                                   \
                    memcpy(&v, line + 4 * from, 4);                                                               \
                    r = (uint8_t)v, g = (uint8_t)(v >> 8), b = (uint8_t)(v >> 16);                                \
                } else {                                                                                          \
                    r = line[4 * from], g = line[4 * from + 1], b = line[4 * from + 2];                           \
                }                                                                                                 \
                float f0 = ((float)r - s0) * m0, f1 = ((float)g - s1) * m1, f2 = ((float)b - s2) * m2;            \
                if (interleaved) {                                                                                \
                    TYPE *d = dst + (y * w + x) * 3;                                                              \
                    d[0] = STORE(f0), d[1] = STORE(f1), d[2] = STORE(f2);                                         \
                } else {                                                                                          \
                    size_t at = y * w + x;                                                                        \
                    dst[at] = STORE(f0), dst[plane + at] = STORE(f1), dst[2 * plane + at] = STORE(f2);            \
                }                                                                                                 \
            }                                                                                                     \
        }                                                                                                         \
    }
#define AS_FLOAT(f) (f)
NORMALIZE_RGB4(normalize_rgb4_f32, float, AS_FLOAT)
NORMALIZE_RGB4(normalize_rgb4_bf16, uint16_t, to_bf16)

void tfr_normalize_pixels(void *dst, int bf16, int interleaved, const uint8_t *src, size_t h, size_t w, size_t c,
                          size_t step, size_t row, int flip, const float *sub, const float *mul) {
    if (!h || !w || !c) return;
    if (c == 3 && step == 4) {
        if (bf16) normalize_rgb4_bf16(dst, interleaved, src, h, w, row, flip, sub, mul);
        else normalize_rgb4_f32(dst, interleaved, src, h, w, row, flip, sub, mul);
        return;
    }
    size_t plane = h * w;
    /* a value's place in dst: planes (k * plane + y * w + x) or pixels (y * w * c + x * c + k) */
    size_t along = interleaved ? c : 1, across_k = interleaved ? 1 : plane;
    float *f32 = dst;
    uint16_t *b16 = dst;
    for (size_t y = 0; y < h; y++) {
        const uint8_t *line = src + y * row;
        size_t base = y * w * along;
        for (size_t x = 0; x < w; x++) {
            const uint8_t *p = line + (flip ? w - 1 - x : x) * step;
            size_t at = base + x * along;
            for (size_t k = 0; k < c; k++) {
                float v = ((float)p[k] - sub[k]) * mul[k];
                if (bf16) b16[at + k * across_k] = to_bf16(v);
                else f32[at + k * across_k] = v;
            }
        }
    }
}
