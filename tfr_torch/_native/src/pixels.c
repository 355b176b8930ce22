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

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static inline uint32_t pixel_word(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

#if defined(__SSE2__)
/* Four pixels' words from p, in reverse order when flip */
static inline __m128i four_pixels(const uint8_t *p, int flip) {
    __m128i px = _mm_loadu_si128((const __m128i *)(const void *)p);
    return flip ? _mm_shuffle_epi32(px, _MM_SHUFFLE(0, 1, 2, 3)) : px;
}
#endif

/* n pixels of 4 bytes from `src` (backwards when flip: output i from pixel n - 1 - i; whole words, so never a row's
 * last pixel) as three byte planes. With SSE2 (every x86-64), 16 pixels at a time: four 16-byte loads, each channel
 * masked out and packed to bytes (a backwards loop of byte stores does not vectorize: 94 against 19 us for a 224 x
 * 224 image); the rest, and elsewhere, one 32-bit load a pixel (forwards, compilers vectorize it). */
static void rgb4_planes_u8(uint8_t *restrict d0, uint8_t *restrict d1, uint8_t *restrict d2,
                           const uint8_t *restrict src, size_t n, int flip) {
    size_t i = 0;
#if defined(__SSE2__)
    const __m128i bytes = _mm_set1_epi32(255);
    for (; i + 16 <= n; i += 16) {
        const uint8_t *from = src + 4 * (flip ? n - 16 - i : i);
        __m128i q[4];
        for (int k = 0; k < 4; k++) q[k] = four_pixels(from + 16 * (flip ? 3 - k : k), flip);
        uint8_t *planes[3] = {d0 + i, d1 + i, d2 + i};
        for (int c = 0; c < 3; c++) {
            __m128i v[4];
            for (int k = 0; k < 4; k++) v[k] = _mm_and_si128(_mm_srli_epi32(q[k], 8 * c), bytes);
            __m128i packed = _mm_packus_epi16(_mm_packs_epi32(v[0], v[1]), _mm_packs_epi32(v[2], v[3]));
            _mm_storeu_si128((__m128i *)(void *)planes[c], packed);
        }
    }
#endif
    if (flip) {
        for (; i < n; i++) {
            uint32_t v = pixel_word(src + 4 * (n - 1 - i));
            d0[i] = (uint8_t)v, d1[i] = (uint8_t)(v >> 8), d2[i] = (uint8_t)(v >> 16);
        }
    } else {
        for (; i < n; i++) {
            uint32_t v = pixel_word(src + 4 * i);
            d0[i] = (uint8_t)v, d1[i] = (uint8_t)(v >> 8), d2[i] = (uint8_t)(v >> 16);
        }
    }
}

/* Three planes from 4 bytes a pixel (RGB with a padding byte, Pillow's and the resize's 4-channel layout); the last
 * pixel of a row is read byte by byte, as its padding byte may lie past the pixels' extent. */
static void planes_3of4(uint8_t *dst, const uint8_t *src, size_t h, size_t w, size_t row, int flip) {
    size_t plane = h * w, last = w - 1, at = flip ? 0 : last; /* the output column of the row's last pixel */
    size_t skip = flip ? 1 : 0;                                /* the output column of the segment's first */
    for (size_t y = 0; y < h; y++) {
        const uint8_t *line = src + y * row;
        uint8_t *d0 = dst + y * w, *d1 = d0 + plane, *d2 = d1 + plane;
        rgb4_planes_u8(d0 + skip, d1 + skip, d2 + skip, line, last, flip);
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

/* RGB at 4 bytes a pixel (the resize's 4-channel layout) into normalized float32 or bfloat16 planes or pixels.
 * Each row goes through branch-free loops over whole segments, which compilers vectorize (SSE2 is enough): n
 * pixels read as unaligned 32-bit words, forwards or, for a flip, backwards (output i from pixel n - 1 - i);
 * bfloat16 is made from float32 values computed a chunk at a time into a stack buffer. The row's last pixel is read
 * byte by byte, as its padding byte may lie past the pixels' extent. (One loop a pixel with a branch in it, as
 * before, was 4-6x slower: 150-330 us for a 224 x 224 image.) */
typedef struct {
    float s0, s1, s2, m0, m1, m2;
} rgb_factors;

#define NORM(v, shift, s, m) (((float)(((v) >> (shift)) & 255u) - (s)) * (m))

/* n pixels from `src` (backwards when flip) as three float32 planes */
static void rgb4_planes_f32(float *restrict d0, float *restrict d1, float *restrict d2, const uint8_t *restrict src,
                            size_t n, int flip, rgb_factors f) {
    if (flip) {
        for (size_t i = 0; i < n; i++) {
            uint32_t v = pixel_word(src + 4 * (n - 1 - i));
            d0[i] = NORM(v, 0, f.s0, f.m0), d1[i] = NORM(v, 8, f.s1, f.m1), d2[i] = NORM(v, 16, f.s2, f.m2);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            uint32_t v = pixel_word(src + 4 * i);
            d0[i] = NORM(v, 0, f.s0, f.m0), d1[i] = NORM(v, 8, f.s1, f.m1), d2[i] = NORM(v, 16, f.s2, f.m2);
        }
    }
}

/* n pixels from `src` (backwards when flip) as n float32 pixels of 3 values. With SSE2 (every x86-64), four
 * pixels at a time: one 16-byte load, their values as three vectors of a channel each, interleaved by shuffles
 * (compilers do not vectorize three values a pixel as stores); elsewhere, and for the last n % 4, value by value. */
#if defined(__SSE2__)
static size_t rgb4_pixels_f32_sse2(float *restrict d, const uint8_t *restrict src, size_t n, int flip,
                                   rgb_factors f) {
    const __m128i bytes = _mm_set1_epi32(255);
    const __m128 s0 = _mm_set1_ps(f.s0), s1 = _mm_set1_ps(f.s1), s2 = _mm_set1_ps(f.s2);
    const __m128 m0 = _mm_set1_ps(f.m0), m1 = _mm_set1_ps(f.m1), m2 = _mm_set1_ps(f.m2);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        /* output pixels i .. i + 3 read pixels i .. i + 3, or n - 1 - i down to n - 4 - i when flipped (whole words:
         * the segment never holds a row's last pixel) */
        __m128i px = four_pixels(src + 4 * (flip ? n - 4 - i : i), flip);
        /* the same float32 subtraction and multiplication a value as NORM */
        __m128 R = _mm_mul_ps(_mm_sub_ps(_mm_cvtepi32_ps(_mm_and_si128(px, bytes)), s0), m0);
        __m128 G = _mm_mul_ps(_mm_sub_ps(_mm_cvtepi32_ps(_mm_and_si128(_mm_srli_epi32(px, 8), bytes)), s1), m1);
        __m128 B = _mm_mul_ps(_mm_sub_ps(_mm_cvtepi32_ps(_mm_and_si128(_mm_srli_epi32(px, 16), bytes)), s2), m2);
        __m128 rg01 = _mm_unpacklo_ps(R, G); /* r0 g0 r1 g1 */
        __m128 rg23 = _mm_unpackhi_ps(R, G); /* r2 g2 r3 g3 */
        __m128 b0r1 = _mm_shuffle_ps(B, rg01, _MM_SHUFFLE(2, 2, 0, 0));  /* b0 b0 r1 r1 */
        __m128 g1b1 = _mm_shuffle_ps(rg01, B, _MM_SHUFFLE(1, 1, 3, 3));  /* g1 g1 b1 b1 */
        __m128 b2r3 = _mm_shuffle_ps(B, rg23, _MM_SHUFFLE(2, 2, 2, 2));  /* b2 b2 r3 r3 */
        __m128 g3b3 = _mm_shuffle_ps(rg23, B, _MM_SHUFFLE(3, 3, 3, 3));  /* g3 g3 b3 b3 */
        _mm_storeu_ps(d + 3 * i, _mm_shuffle_ps(rg01, b0r1, _MM_SHUFFLE(2, 0, 1, 0)));      /* r0 g0 b0 r1 */
        _mm_storeu_ps(d + 3 * i + 4, _mm_shuffle_ps(g1b1, rg23, _MM_SHUFFLE(1, 0, 2, 0))); /* g1 b1 r2 g2 */
        _mm_storeu_ps(d + 3 * i + 8, _mm_shuffle_ps(b2r3, g3b3, _MM_SHUFFLE(2, 0, 2, 0))); /* b2 r3 g3 b3 */
    }
    return i;
}
#endif

static void rgb4_pixels_f32(float *restrict d, const uint8_t *restrict src, size_t n, int flip, rgb_factors f) {
    size_t i = 0;
#if defined(__SSE2__)
    i = rgb4_pixels_f32_sse2(d, src, n, flip, f);
#endif
    for (; i < n; i++) {
        uint32_t v = pixel_word(src + 4 * (flip ? n - 1 - i : i));
        d[3 * i] = NORM(v, 0, f.s0, f.m0), d[3 * i + 1] = NORM(v, 8, f.s1, f.m1);
        d[3 * i + 2] = NORM(v, 16, f.s2, f.m2);
    }
}

static void bf16_from_f32(uint16_t *restrict d, const float *restrict s, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = to_bf16(s[i]);
}

#define RGB_CHUNK 256 /* pixels a bfloat16 segment goes through float32 in (3 KB of stack) */

/* n pixels (backwards when flip) of one row segment into dst at output pixel `at` of a row (planes `plane` values
 * apart, or interleaved) */
static void rgb4_segment(void *dst, int bf16, int interleaved, size_t plane, const uint8_t *src, size_t n, int flip,
                         rgb_factors f) {
    if (!bf16) {
        float *d = dst;
        if (interleaved) rgb4_pixels_f32(d, src, n, flip, f);
        else rgb4_planes_f32(d, d + plane, d + 2 * plane, src, n, flip, f);
        return;
    }
    uint16_t *d = dst;
    float tmp[3 * RGB_CHUNK];
    for (size_t done = 0; done < n;) {
        size_t m = n - done < RGB_CHUNK ? n - done : RGB_CHUNK;
        const uint8_t *from = src + 4 * (flip ? n - done - m : done); /* output [done, done + m) reads these */
        if (interleaved) {
            rgb4_pixels_f32(tmp, from, m, flip, f);
            bf16_from_f32(d + 3 * done, tmp, 3 * m);
        } else {
            rgb4_planes_f32(tmp, tmp + RGB_CHUNK, tmp + 2 * RGB_CHUNK, from, m, flip, f);
            for (int k = 0; k < 3; k++) bf16_from_f32(d + k * plane + done, tmp + k * RGB_CHUNK, m);
        }
        done += m;
    }
}

static void normalize_rgb4(void *dst, int bf16, int interleaved, const uint8_t *src, size_t h, size_t w, size_t row,
                           int flip, const float *sub, const float *mul) {
    size_t plane = h * w, last = w - 1, size = bf16 ? sizeof(uint16_t) : sizeof(float);
    rgb_factors f = {sub[0], sub[1], sub[2], mul[0], mul[1], mul[2]};
    for (size_t y = 0; y < h; y++) {
        const uint8_t *line = src + y * row;
        size_t first = y * w * (interleaved ? 3 : 1); /* the row's first value */
        size_t step = interleaved ? 3 : 1;            /* values from one output pixel to the next */
        /* pixels 0 .. w - 2 as words: output columns 0 .. w - 2, or 1 .. w - 1 when flipped */
        size_t into = first + (flip ? step : 0);
        if (last) rgb4_segment((char *)dst + into * size, bf16, interleaved, plane, line, last, flip, f);
        /* the last pixel byte by byte, at output column w - 1, or 0 when flipped */
        const uint8_t *p = line + 4 * last;
        size_t at = first + (flip ? 0 : last * step), apart = interleaved ? 1 : plane;
        float v[3] = {((float)p[0] - f.s0) * f.m0, ((float)p[1] - f.s1) * f.m1, ((float)p[2] - f.s2) * f.m2};
        for (int k = 0; k < 3; k++) {
            if (bf16) ((uint16_t *)dst)[at + k * apart] = to_bf16(v[k]);
            else ((float *)dst)[at + k * apart] = v[k];
        }
    }
}

void tfr_normalize_pixels(void *dst, int bf16, int interleaved, const uint8_t *src, size_t h, size_t w, size_t c,
                          size_t step, size_t row, int flip, const float *sub, const float *mul) {
    if (!h || !w || !c) return;
    if (c == 3 && step == 4) {
        normalize_rgb4(dst, bf16, interleaved, src, h, w, row, flip, sub, mul);
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
