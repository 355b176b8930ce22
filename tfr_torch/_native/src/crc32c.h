/* CRC-32C (Castagnoli), as TFRecord framing uses it: hardware instructions where the CPU has them, a portable
 * slicing-by-8 table otherwise. */
#ifndef TFR_CRC32C_H
#define TFR_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Pick the implementation for this CPU; call once before the others. */
void tfr_crc32c_init(void);
/* 1 when the hardware implementation is in use. */
int tfr_crc32c_hardware(void);
/* Extend `crc` (0 to start) over `n` bytes. */
uint32_t tfr_crc32c(uint32_t crc, const uint8_t *data, size_t n);

/* TFRecord's mask: rotate right by 15 bits and add a constant. */
static inline uint32_t tfr_mask_crc(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

#endif
