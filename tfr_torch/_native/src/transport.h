/* The worker transport's copies (tfr_torch/data/transport.py): a batch's bytes values written back to back into
 * shared memory, and read back out into their own buffers. The binding gathers where each value lies; these
 * copies run without the GIL and touch no Python object. */
#ifndef TFR_TRANSPORT_H
#define TFR_TRANSPORT_H

#include <stddef.h>

/* Copy the n values srcs[i] (lens[i] bytes each) back to back from `out`, which must hold their sum. */
void tfr_gather(char *out, const char *const *srcs, const size_t *lens, size_t n);

/* Copy n values that lie back to back from `src` out into dsts[i] (lens[i] bytes each). */
void tfr_scatter(const char *src, char *const *dsts, const size_t *lens, size_t n);

#endif
