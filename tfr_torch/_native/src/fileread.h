/* Records of known framed sizes (from an index) read from a file straight into their final buffers (POSIX only:
 * preadv). The framing (12-byte header, 4-byte footer) goes to a scratch buffer laid out as tfr_check_framed reads
 * it: header i at scratch + 4 + 16 i, its footer at scratch + 16 (i + 1). */
#ifndef TFR_FILEREAD_H
#define TFR_FILEREAD_H
#ifndef _WIN32

#include <stddef.h>
#include <stdint.h>

/* Where each of n records lies: sizes (n unaligned int64 framed sizes) and either one offset per record (n
 * unaligned int64 at `offsets_raw`) or, when offsets_raw is NULL, records back to back from first_offset. Fills
 * offsets[i] and lens[i] (the data's length) and *placed: how many records from the first lie inside the file's
 * `file_size` bytes (none after the first that does not is placed, so a size that lies never allocates more than
 * the file holds). Returns -1, or the index of the first record whose size is under 16 or offset negative
 * (offsets[i] is then that offset). */
int64_t tfr_place_framed(const uint8_t *sizes, size_t n, const uint8_t *offsets_raw, int64_t first_offset,
                         uint64_t file_size, int64_t *offsets, size_t *lens, size_t *placed);

/* Read n placed records from file `fd`: data i into datas[i] (lens[i] bytes), framing into `scratch` (16 (n + 1)
 * bytes), with `iov` of 2 n + 1 entries. Back to back (`back_to_back`: a few preadv calls for all) or at offsets[i]:
 * one preadv per run of records that lie back to back (one per record where none do). Then checks them
 * (tfr_check_framed). Returns how many records from the first were read whole and are good; the caller's reader says
 * what is wrong with the next. */
size_t tfr_read_framed(int fd, int back_to_back, const int64_t *offsets, uint8_t *const *datas, const size_t *lens,
                       size_t n, uint8_t *scratch, void *iov, int verify);

#endif
#endif
