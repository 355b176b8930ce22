/* JPEG entropy-coded data skipped at C speed for the structure check of GPU batches (tfr_torch/images/_jpeg.py,
 * whose regular expression _NEXT_MARKER is the reference). */
#ifndef TFR_JPEG_H
#define TFR_JPEG_H

#include <stddef.h>

/* The offset of the 0xFF of the first marker at or after `start` in data[0, len): 0xFF followed by a byte that is
 * not 0x00 (a stuffed zero), 0xD0-0xD7 (a restart marker) or 0xFF (a fill byte). (size_t)-1 when there is none. */
size_t tfr_jpeg_next_marker(const unsigned char *data, size_t len, size_t start);

/* 1 when data[0, len) is a JPEG that tfr_torch/images/_jpeg.py's jpeg_problem (the reference) finds sound (it
 * answers None), 0 otherwise: the same walk of marker segments, the same checks of tables and headers, the
 * entropy-coded data skipped by tfr_jpeg_next_marker. The reference words the problem; this only answers whether
 * there is one, with the GIL released, for a whole GPU batch at once. */
int tfr_jpeg_sound(const unsigned char *data, size_t len);

/* What tfr_torch/images/_formats.py's _jpeg (the reference) reads from a JPEG's headers, up to its first scan. */
typedef struct {
    int components, precision, orientation, height, width, frame, rgb;
} tfr_jpeg_info;

/* Fill `out` as _formats._jpeg does for data[0, len) (which starts with FF D8 FF). */
void tfr_jpeg_header(const unsigned char *data, size_t len, tfr_jpeg_info *out);

#endif
