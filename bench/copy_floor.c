// The floor of a full-stripe write onto memory members on one core: what any implementation
// that computes parity and then copies every chunk into member memory can reach, with none
// of raidd's bookkeeping. Used to judge the memory rows of bench/fastpath.py (docs/BENCHMARKS.md,
// "What the memory rows can reach").
//
//   gcc -O2 -mavx512f -mavx512bw -o /tmp/copy_floor bench/copy_floor.c
//   taskset -c 0 /tmp/copy_floor LEVEL MEMBERS [DST_OFFSET [SECONDS]]     (LEVEL 0, 5 or 6)
//
// Each request is four whole stripes of 64 KiB chunks from one of eight client buffers (as
// `raidd bench io --qd 8` reuses one buffer per slot); members are 256 MiB, written once
// before the clock starts, and written sequentially. Parity: P is the XOR of the data
// chunks, Q by Horner's rule (RAID6's generator 2, polynomial 0x11d). DST_OFFSET moves every
// member's memory off its page boundary by that many bytes (0-4095); SECONDS is how long the
// clock runs (2). Prints MiB/s of client data.
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHUNK (64 << 10)
#define MSIZE (256UL << 20)
#define STRIPES 4

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static __m512i mul2(__m512i x) {
    __mmask64 top = _mm512_movepi8_mask(x);
    return _mm512_xor_si512(_mm512_add_epi8(x, x), _mm512_maskz_mov_epi8(top, _mm512_set1_epi8(0x1d)));
}

// p = XOR of data[0..k]; with q, q = sum 2^i data[i].
static void parity(uint8_t *const *data, int k, uint8_t *p, uint8_t *q) {
    for (size_t off = 0; off < CHUNK; off += 64) {
        __m512i pv = _mm512_loadu_si512(data[k - 1] + off), qv = pv;
        for (int i = k - 2; i >= 0; i--) {
            __m512i d = _mm512_loadu_si512(data[i] + off);
            pv = _mm512_xor_si512(pv, d);
            if (q) qv = _mm512_xor_si512(mul2(qv), d);
        }
        _mm512_storeu_si512(p + off, pv);
        if (q) _mm512_storeu_si512(q + off, qv);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: copy_floor LEVEL(0|5|6) MEMBERS [DST_OFFSET [SECONDS]]\n");
        return 2;
    }
    int level = atoi(argv[1]), n = atoi(argv[2]), shift = argc > 3 ? atoi(argv[3]) : 0;
    double seconds = argc > 4 ? atof(argv[4]) : 2.0;
    int par = level == 0 ? 0 : level == 5 ? 1 : 2, k = n - par;
    if ((level != 0 && level != 5 && level != 6) || n < 2 + par || n > 16 || shift < 0 ||
        shift > 4095 || !(seconds > 0)) {
        fprintf(stderr, "bad level, member count, offset or seconds\n");
        return 2;
    }
    uint8_t *mem[16], *cli[8], *pbuf[STRIPES], *qbuf[STRIPES];
    for (int m = 0; m < n; m++) {
        mem[m] = (uint8_t *)aligned_alloc(4096, MSIZE + 4096) + shift;
        memset(mem[m], 1, MSIZE);
    }
    size_t req = (size_t)STRIPES * k * CHUNK;
    for (int i = 0; i < 8; i++) {
        cli[i] = aligned_alloc(4096, req);
        memset(cli[i], i + 1, req);
    }
    for (int s = 0; s < STRIPES; s++) {
        pbuf[s] = aligned_alloc(4096, CHUNK);
        qbuf[s] = aligned_alloc(4096, CHUNK);
    }
    size_t pos = 0;
    long reqs = 0;
    double t0 = now(), t;
    do {
        for (int it = 0; it < 16; it++, reqs++) {
            uint8_t *c = cli[reqs & 7];
            if (pos + STRIPES * CHUNK > MSIZE) pos = 0;
            for (int s = 0; par && s < STRIPES; s++) {
                uint8_t *data[16];
                for (int d = 0; d < k; d++) data[d] = c + ((size_t)s * k + d) * CHUNK;
                parity(data, k, pbuf[s], par == 2 ? qbuf[s] : NULL);
            }
            // Member by member, its chunk of each stripe (one vectored write per member).
            for (int m = 0; m < n; m++)
                for (int s = 0; s < STRIPES; s++) {
                    int pm = (n - 1 - s % n + n) % n, qm = (pm + 1) % n;   // rotating parity
                    int d = (m - pm - par + 2 * n) % n;                    // data index after P (and Q)
                    const uint8_t *src = m == pm && par ? pbuf[s]
                                       : par == 2 && m == qm ? qbuf[s]
                                       : c + ((size_t)s * k + (par ? d : m)) * CHUNK;
                    memcpy(mem[m] + pos + (size_t)s * CHUNK, src, CHUNK);
                }
            pos += STRIPES * CHUNK;
        }
        t = now() - t0;
    } while (t < seconds);
    printf("level %d members %d offset %d: %.0f MiB/s of data\n", level, n, shift,
           reqs * (double)req / (1 << 20) / t);
    return 0;
}
