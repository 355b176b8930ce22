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

/* Pixels as normalized floats: value k of pixel (y, x) (of (y, w - 1 - x) with `flip`; src laid out as for
 * tfr_planes_from_pixels) becomes ((float)v - sub[k]) * mul[k], rounded to float32 as one float32 subtraction and
 * one multiplication (what torch's (pixels - sub) * mul gives), stored as float32 (`bf16` 0) or as bfloat16
 * rounded to nearest even (`bf16` 1, what torch's .to(torch.bfloat16) gives). dst: `c` planes of h * w values
 * (`interleaved` 0) or h * w pixels of c values (`interleaved` 1). The caller checks both extents. */
void tfr_normalize_pixels(void *dst, int bf16, int interleaved, const uint8_t *src, size_t h, size_t w, size_t c,
                          size_t step, size_t row, int flip, const float *sub, const float *mul);

/* The bytes src must hold for tfr_planes_from_pixels: (h - 1) * row + (w - 1) * step + c, or 0 when h or w is 0;
 * SIZE_MAX when that overflows or step < c. */
size_t tfr_pixels_extent(size_t h, size_t w, size_t c, size_t step, size_t row);

#endif
