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
