/* PNG images decoded straight into the rows of a caller's array, for the image sequences of a record (an RLDS
 * episode's steps; tfr_torch/tfds/image_steps.py, whose Pillow path is the reference). Only the plain case: 8-bit,
 * not interlaced, gray / RGB / gray+alpha / RGBA, every chunk's CRC right, one zlib stream in consecutive IDAT
 * chunks that ends exactly at the last row, IEND at the end. Anything else is refused (the caller then decodes with
 * Pillow, which gives its own pixels or errors): never more lenient than Pillow. Needs zlib (TFR_HAVE_ZLIB). */
#ifndef TFR_PNG_H
#define TFR_PNG_H

#include <stddef.h>
#include <stdint.h>

/* Why an image was refused (0: decoded). */
enum {
    TFR_PNG_OK = 0,
    TFR_PNG_SIGNATURE = 1, /* no PNG signature, or a chunk that runs past the end */
    TFR_PNG_HEADER = 2,    /* IHDR missing, or not the width, height, depth, colour type asked for, or interlaced */
    TFR_PNG_CRC = 3,       /* a chunk's CRC does not match */
    TFR_PNG_CHUNK = 4,     /* a chunk that could change what Pillow gives (tRNS, APNG, unknown critical), or IDATs
                              that are not consecutive, or bytes after IEND */
    TFR_PNG_DATA = 5,      /* the zlib stream fails, is short, or holds more than the rows */
    TFR_PNG_FILTER = 6,    /* a row's filter type is not 0-4 */
    TFR_PNG_MEMORY = 7,
};

/* Decode `count` PNGs (data[i], lens[i]) of `width` x `height` pixels and PNG colour type `colour` (0 gray, 2 RGB,
 * 4 gray+alpha, 6 RGBA) into out: count * height * width * channels bytes, image after image, rows top-down.
 * Returns -1 when all decoded, else the index of the first refused image, its reason at *reason. */
ptrdiff_t tfr_png_decode_many(const unsigned char *const *data, const size_t *lens, size_t count, uint32_t width,
                              uint32_t height, int colour, unsigned char *out, int *reason);

#endif
