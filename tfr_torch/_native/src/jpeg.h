/* JPEG entropy-coded data skipped at C speed for the structure check of GPU batches (tfr_torch/images/_jpeg.py,
 * whose regular expression _NEXT_MARKER is the reference). */
#ifndef TFR_JPEG_H
#define TFR_JPEG_H

#include <stddef.h>

/* The offset of the 0xFF of the first marker at or after `start` in data[0, len): 0xFF followed by a byte that is
 * not 0x00 (a stuffed zero), 0xD0-0xD7 (a restart marker) or 0xFF (a fill byte). (size_t)-1 when there is none. */
size_t tfr_jpeg_next_marker(const unsigned char *data, size_t len, size_t start);

#endif
