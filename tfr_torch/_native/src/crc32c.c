/* CRC-32C: SSE4.2's crc32 instruction on x86-64, the ARMv8 CRC extension on aarch64 when the compiler targets it,
 * and a slicing-by-8 table everywhere else. All three give the same values (the tests compare them with the crc32c
 * package). */
#include "crc32c.h"

#include <string.h>

#define POLY 0x82F63B78u /* CRC-32C, reflected */

static uint32_t table[8][256];
static int use_hardware = 0;

static void build_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (POLY & (0u - (c & 1u)));
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xFF];
}

static uint32_t crc_software(uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xFF];
        n--;
    }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= crc;
        crc = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF] ^ table[4][lo >> 24] ^
              table[3][hi & 0xFF] ^ table[2][(hi >> 8) & 0xFF] ^ table[1][(hi >> 16) & 0xFF] ^ table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xFF];
    return ~crc;
}

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define TFR_HAVE_HW 1
#define TFR_HAVE_SHIFT 1
#include <nmmintrin.h>

/* The crc32 instruction has a latency of 3 cycles and a throughput of 1 per cycle: one stream of data waits on
 * each result, so the buffer is cut into three blocks whose CRCs run side by side, then combined. CRC registers
 * are linear: reg(c, A || B) = shift(reg(c, A), |B|) ^ reg(0, B), where shift(x, n) is x advanced through n zero
 * bytes, a 32x32 bit matrix applied with four 256-entry tables (one per byte of x) for each block length used. */
#define LONG_BLOCK 2048
#define SHORT_BLOCK 256

static uint32_t shift_long[4][256], shift_short[4][256];

/* x advanced through n zero bytes, bit by bit (only used to build the tables) */
static uint32_t zeros_slow(uint32_t x, size_t n) {
    for (size_t i = 0; i < 8 * n; i++) x = (x >> 1) ^ (POLY & (0u - (x & 1u)));
    return x;
}

static void build_shift(uint32_t shift[4][256], size_t n) {
    uint32_t basis[32];
    for (int bit = 0; bit < 32; bit++) basis[bit] = zeros_slow(1u << bit, n);
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t x = 0;
            for (int bit = 0; bit < 8; bit++)
                if (b & (1u << bit)) x ^= basis[8 * k + bit];
            shift[k][b] = x;
        }
}

static uint32_t shift_by(uint32_t shift[4][256], uint32_t x) {
    return shift[0][x & 0xFF] ^ shift[1][(x >> 8) & 0xFF] ^ shift[2][(x >> 16) & 0xFF] ^ shift[3][x >> 24];
}

/* Three blocks of `block` bytes each at p, side by side; returns the register after all three. */
__attribute__((target("sse4.2"))) static uint64_t crc_three(uint64_t c0, const uint8_t *p, size_t block,
                                                            uint32_t shift[4][256]) {
    uint64_t c1 = 0, c2 = 0;
    const uint8_t *end = p + block;
    for (; p < end; p += 8) {
        uint64_t w0, w1, w2;
        memcpy(&w0, p, 8);
        memcpy(&w1, p + block, 8);
        memcpy(&w2, p + 2 * block, 8);
        c0 = _mm_crc32_u64(c0, w0);
        c1 = _mm_crc32_u64(c1, w1);
        c2 = _mm_crc32_u64(c2, w2);
    }
    c0 = shift_by(shift, (uint32_t)c0) ^ (uint32_t)c1;
    return shift_by(shift, (uint32_t)c0) ^ (uint32_t)c2;
}

__attribute__((target("sse4.2"))) static uint32_t crc_hardware(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    for (; n >= 3 * LONG_BLOCK; p += 3 * LONG_BLOCK, n -= 3 * LONG_BLOCK) c = crc_three(c, p, LONG_BLOCK, shift_long);
    for (; n >= 3 * SHORT_BLOCK; p += 3 * SHORT_BLOCK, n -= 3 * SHORT_BLOCK)
        c = crc_three(c, p, SHORT_BLOCK, shift_short);
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
        p += 8;
        n -= 8;
    }
    while (n--) c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}

static int cpu_has_hardware(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
}
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#define TFR_HAVE_HW 1
#include <arm_acle.h>

static uint32_t crc_hardware(uint32_t crc, const uint8_t *p, size_t n) {
    uint32_t c = ~crc;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = __crc32cd(c, word);
        p += 8;
        n -= 8;
    }
    while (n--) c = __crc32cb(c, *p++);
    return ~c;
}

static int cpu_has_hardware(void) { return 1; }
#endif

void tfr_crc32c_init(void) {
    build_table();
#ifdef TFR_HAVE_HW
    use_hardware = cpu_has_hardware();
#endif
#ifdef TFR_HAVE_SHIFT
    build_shift(shift_long, LONG_BLOCK);
    build_shift(shift_short, SHORT_BLOCK);
#endif
}

int tfr_crc32c_hardware(void) { return use_hardware; }

uint32_t tfr_crc32c(uint32_t crc, const uint8_t *data, size_t n) {
#ifdef TFR_HAVE_HW
    if (use_hardware) return crc_hardware(crc, data, n);
#endif
    return crc_software(crc, data, n);
}
