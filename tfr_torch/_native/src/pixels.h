/* Pixel layout changes the image transforms need (tfr_torch/images/transforms.py). */
#ifndef TFR_PIXELS_H
#define TFR_PIXELS_H

#include <stddef.h>
#include <stdint.h>

/* Planes from interleaved pixels: dst holds `c` planes of h * w bytes back to back (channel k, row y, column x at
 * dst[k * h * w + y * w + x]); channel k of pixel (y, x) is src[y * row + x * step + k], or, with `flip`, of pixel
 * (y, w - 1 - x). The caller checks that both extents lie in their buffers (tfr_pixels_extent). */
void tfr_planes_from_pixels(uint8_t *dst, const uint8_t *src, size_t h, size_t w, size_t c, size_t step, size_t row,
                            int flip);

/* The bytes src must hold for tfr_planes_from_pixels: (h - 1) * row + (w - 1) * step + c, or 0 when h or w is 0;
 * SIZE_MAX when that overflows or step < c. */
size_t tfr_pixels_extent(size_t h, size_t w, size_t c, size_t step, size_t row);

#endif
