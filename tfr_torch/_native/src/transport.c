/* The worker transport's copies (see transport.h). */
#include "transport.h"

#include <string.h>

void tfr_gather(char *out, const char *const *srcs, const size_t *lens, size_t n) {
    for (size_t i = 0; i < n; i++) {
        memcpy(out, srcs[i], lens[i]);
        out += lens[i];
    }
}

void tfr_scatter(const char *src, char *const *dsts, const size_t *lens, size_t n) {
    for (size_t i = 0; i < n; i++) {
        memcpy(dsts[i], src, lens[i]);
        src += lens[i];
    }
}
