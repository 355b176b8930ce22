#include "jpeg.h"

#include <string.h>

size_t tfr_jpeg_next_marker(const unsigned char *data, size_t len, size_t start) {
    size_t pos = start;
    while (pos + 1 < len) {
        const unsigned char *ff = memchr(data + pos, 0xFF, len - 1 - pos); /* a 0xFF with a byte after it */
        if (!ff) return (size_t)-1;
        pos = (size_t)(ff - data);
        unsigned char next = data[pos + 1];
        if (next != 0x00 && next != 0xFF && (next < 0xD0 || next > 0xD7)) return pos;
        pos += 1;
    }
    return (size_t)-1;
}
