/* Records of known framed sizes read straight into their buffers (see fileread.h). */
#ifndef _WIN32
#include "fileread.h"

#include <errno.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "framing.h"

int64_t tfr_place_framed(const uint8_t *sizes, size_t n, const uint8_t *offsets_raw, int64_t first_offset,
                         uint64_t file_size, int64_t *offsets, size_t *lens, size_t *placed) {
    *placed = n;
    for (size_t i = 0; i < n; i++) {
        int64_t size, offset;
        memcpy(&size, sizes + i * sizeof size, sizeof size);
        if (!offsets_raw) offset = i ? offsets[i - 1] + (int64_t)lens[i - 1] + TFR_HEADER + TFR_FOOTER : first_offset;
        else memcpy(&offset, offsets_raw + i * sizeof offset, sizeof offset);
        offsets[i] = offset;
        if (size < TFR_HEADER + TFR_FOOTER || offset < 0) return (int64_t)i;
        if ((uint64_t)offset > file_size || (uint64_t)size > file_size - (uint64_t)offset) {
            *placed = i; /* past the end of the file */
            return -1;
        }
        lens[i] = (size_t)size - TFR_HEADER - TFR_FOOTER;
    }
    return -1;
}

/* Fill iov[0 .. niov) from byte `pos` of file `fd` (preadv, up to 1024 iovecs a call: IOV_MAX on Linux and macOS).
 * Returns the index of the first iovec not filled whole: niov when all were, less at the end of the file or on a
 * read error. Filled iovecs are left with iov_len 0, a partly filled one shrunk. */
static size_t read_iovecs(int fd, struct iovec *iov, size_t niov, off_t pos) {
    size_t first = 0;
    while (first < niov) {
        int count = niov - first < 1024 ? (int)(niov - first) : 1024;
        ssize_t got = preadv(fd, iov + first, count, pos);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        pos += got;
        while (got > 0 && first < niov) {
            if ((size_t)got >= iov[first].iov_len) {
                got -= (ssize_t)iov[first].iov_len;
                iov[first++].iov_len = 0;
            } else {
                iov[first].iov_base = (char *)iov[first].iov_base + got;
                iov[first].iov_len -= (size_t)got;
                got = 0;
            }
        }
    }
    return first;
}

/* Records first .. first + n - 1 back to back from byte `pos`: header `first`; each record's data, then its footer
 * and the next header (16 adjacent bytes of scratch); the last footer. Scratch keeps the layout tfr_check_framed reads
 * (header i at scratch + 4 + 16 i, its footer at scratch + 16 (i + 1)) whatever `first` is. Returns how many of the
 * n records were read whole. */
static size_t read_back_to_back(int fd, int64_t pos, uint8_t *const *datas, const size_t *lens, size_t first,
                                size_t n, uint8_t *scratch, struct iovec *iov) {
    size_t niov = 0;
    iov[niov].iov_base = scratch + 4 + 16 * first;
    iov[niov++].iov_len = TFR_HEADER;
    for (size_t i = first; i < first + n; i++) {
        iov[niov].iov_base = datas[i];
        iov[niov++].iov_len = lens[i];
        iov[niov].iov_base = scratch + 16 * (i + 1);
        iov[niov++].iov_len = i + 1 < first + n ? 16 : TFR_FOOTER;
    }
    size_t filled = read_iovecs(fd, iov, niov, (off_t)pos);
    return filled >= niov ? n : (filled >= 2 ? (filled - 1) / 2 : 0); /* record i ends with iovec 2 i + 2 */
}

/* Records one offset each, in runs: a record that starts where the one before it ends (its offset is the one before's
 * plus its framed size, as records read in file order are) joins that record's run, and each run is read back to
 * back (one preadv for the run, instead of one per record). Returns how many records from the first were read
 * whole. */
static size_t read_runs(int fd, const int64_t *offsets, uint8_t *const *datas, const size_t *lens, size_t n,
                        uint8_t *scratch, struct iovec *iov) {
    size_t whole = 0;
    while (whole < n) {
        size_t run = 1; /* placed records lie inside the file: these sums cannot overflow */
        while (whole + run < n && offsets[whole + run] == offsets[whole + run - 1] +
                                      (int64_t)(lens[whole + run - 1] + TFR_HEADER + TFR_FOOTER))
            run++;
        size_t got = read_back_to_back(fd, offsets[whole], datas, lens, whole, run, scratch, iov);
        whole += got;
        if (got < run) break;
    }
    return whole;
}

size_t tfr_read_framed(int fd, int back_to_back, const int64_t *offsets, uint8_t *const *datas, const size_t *lens,
                       size_t n, uint8_t *scratch, void *iov, int verify) {
    size_t whole = 0;
    if (back_to_back && n) whole = read_back_to_back(fd, offsets[0], datas, lens, 0, n, scratch, iov);
    else if (!back_to_back) whole = read_runs(fd, offsets, datas, lens, n, scratch, iov);
    if (whole > n) whole = n;
    return tfr_check_framed(scratch, datas, lens, whole, verify);
}
#endif
