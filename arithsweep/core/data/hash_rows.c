/* The hash sampler's hot rows in C: candidate problems of the value and uniform modes, the
 * holdout test, and the tokens of a pad format, row by row.
 *
 * Built and loaded by arithsweep/core/data/native_rows.py (no Python or torch headers: the
 * caller hands raw int64/uint8 buffers). Each function is the integer arithmetic of its torch
 * counterpart (hash_sampling._mode_pair modes 0, 1 and 4; sampling._holdout with the task's
 * edge cases; encoding.encode_fixed) done per row instead of per op over a batch, so
 * its output is the same integers (tests/test_native_rows.py compares them) in one pass over
 * memory instead of ~100.
 */
#include <stdint.h>
#include <string.h>

#define MUL 0x45D9F3Bu  /* degski's hash32 multiplier, as hash_sampling._MUL */
#define GOLD 0x9E3779B9u

static const int64_t P10[19] = {1LL, 10LL, 100LL, 1000LL, 10000LL, 100000LL, 1000000LL,
    10000000LL, 100000000LL, 1000000000LL, 10000000000LL, 100000000000LL, 1000000000000LL,
    10000000000000LL, 100000000000000LL, 1000000000000000LL, 10000000000000000LL,
    100000000000000000LL, 1000000000000000000LL};

/* hash_sampling._mix on a 32-bit word: the products wrap mod 2**32 as its `& _M32` does */
static inline uint32_t mix(uint32_t x) {
    x = ((x >> 16) ^ x) * MUL;
    x = ((x >> 16) ^ x) * MUL;
    return (x >> 16) ^ x;
}

/* hash_sampling._Words: word i of a row's key; `next` advances first, as its __call__ */
typedef struct { uint32_t key, i; } Words;

static inline uint32_t next(Words *w) { w->i++; return mix(w->key ^ (w->i * GOLD)); }

static inline int64_t below(Words *w, int64_t hi) { /* [0, hi), hi <= 10**4 */
    return (int64_t)(((uint64_t)next(w) * (uint64_t)hi) >> 32);
}

static inline int64_t number(Words *w, int width) { /* [0, 10**width) in groups of 4 digits */
    int64_t out = 0;
    for (int lo = 0; lo < width; lo += 4) {
        int k = width - lo < 4 ? width - lo : 4;
        out += below(w, P10[k]) * P10[lo];
    }
    return out;
}

static inline int64_t uniform(Words *w, int64_t cap, int n) { /* hash_sampling._uniform */
    int64_t length = 1 + below(w, cap);
    int64_t lead = below(w, length == 1 ? 10 : 9) + (length > 1);
    int64_t scale = P10[length - 1];
    return lead * scale + number(w, n - 1) % scale;
}

/* One candidate's operands: key in [0, 2**32), mode 0 (uniform), 1 (values) or 4 (values, one
 * length for both), cap in 1..n. */
static inline void draw1(uint32_t key, int64_t m, int64_t c, int n, int64_t *a, int64_t *b) {
    Words w = {key, 0};
    if (m == 0) {
        w.i = 10; /* hash_sampling._UNIFORM_AT */
        *a = uniform(&w, c, n);
        *b = uniform(&w, c, n);
        return;
    }
    w.i = 40; /* hash_sampling._VALUES_AT */
    const int64_t hi = P10[c];
    int64_t x = number(&w, n) % hi, y = number(&w, n) % hi;
    if (m == 4) {
        int64_t len = below(&w, c); /* drawn for every row, used below the cap */
        len = c < n ? 1 + len : c;
        x %= P10[len];
        y %= P10[len];
    }
    *a = x;
    *b = y;
}

/* Operands of candidate rows: key (N,) in [0, 2**32), mode (N,) each 0 (uniform), 1 (values)
 * or 4 (values, one length for both), cap (N,) in 1..n; a, b (N,) out. */
void rows_draw(int64_t N, const int64_t *key, const int64_t *mode, const int64_t *cap, int n,
               int64_t *a, int64_t *b) {
    for (int64_t r = 0; r < N; r++) draw1((uint32_t)key[r], mode[r], cap[r], n, a + r, b + r);
}

static inline uint32_t fmix32(uint32_t h) { /* sampling._fmix32 */
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    return h ^ (h >> 16);
}

/* Task._held of one row: sampling._holdout's keyed hash, or one of the E edge cases (ea, eb,
 * eo) (E, 3) (the op compared only when `ops` > 1); x, y, o non-negative. */
static inline uint8_t held1(int64_t x, int64_t y, int64_t o, int E, const int64_t *edges,
                            int ops) {
    const int64_t K0 = 0x9E3779B, K1 = 0x7F4A7C1, K2 = 0x5BD1E99, K3 = 0x27D4EB3, K4 = 0x165667B;
    const int64_t M32 = 0xFFFFFFFFLL;
    int64_t s = (x & M32) * K0 + (x >> 32) * K1 + (y & M32) * K2 + (y >> 32) * K3 + o * K4;
    uint8_t h = (fmix32((uint32_t)((s & M32) ^ (s >> 32))) & 15) == 0;
    for (int e = 0; e < E && !h; e++)
        h = x == edges[3 * e] && y == edges[3 * e + 1] && (ops < 2 || o == edges[3 * e + 2]);
    return h;
}

/* Task._held of rows a, b, op (N,); held (N,) 0/1 out. */
void rows_held(int64_t N, const int64_t *a, const int64_t *b, const int64_t *op, int E,
               const int64_t *edges, int ops, uint8_t *held) {
    for (int64_t r = 0; r < N; r++) held[r] = held1(a[r], b[r], op[r], E, edges, ops);
}

/* HashSampler._compact's rows in one pass, for a task of one op code `op`: row r of a piece
 * takes candidate 0 (key0[r]) unless it is held out, else the first train-side one of
 * candidates j = 1 .. R-1, keyed mix(skey[r / B] ^ ((r % B) R + j)) (hash_sampling.row_keys);
 * a row whose R candidates are all held out gets pool[r] = 1 (the caller's fallback) and a,
 * b of its candidate 0. The same rows as drawing every candidate and testing each. */
void rows_pick(int64_t N, const int64_t *key0, const int64_t *skey, int64_t B, int R,
               const int64_t *mode, const int64_t *cap, int n, int64_t op, int E,
               const int64_t *edges, int ops, int64_t *a, int64_t *b, uint8_t *pool) {
    for (int64_t r = 0; r < N; r++) {
        draw1((uint32_t)key0[r], mode[r], cap[r], n, a + r, b + r);
        pool[r] = 0;
        if (!held1(a[r], b[r], op, E, edges, ops)) continue;
        int j = 1;
        for (; j < R; j++) {
            const uint32_t k = mix((uint32_t)skey[r / B] ^ (uint32_t)((r % B) * R + j));
            int64_t x, y;
            draw1(k, mode[r], cap[r], n, &x, &y);
            if (!held1(x, y, op, E, edges, ops)) {
                a[r] = x, b[r] = y;
                break;
            }
        }
        pool[r] = j == R;
    }
}

/* n = 0 .. 99 as its two digits, tens first: PAIRS[2 n], PAIRS[2 n + 1] */
static const uint8_t PAIRS[200] = {
    0,0, 0,1, 0,2, 0,3, 0,4, 0,5, 0,6, 0,7, 0,8, 0,9,
    1,0, 1,1, 1,2, 1,3, 1,4, 1,5, 1,6, 1,7, 1,8, 1,9,
    2,0, 2,1, 2,2, 2,3, 2,4, 2,5, 2,6, 2,7, 2,8, 2,9,
    3,0, 3,1, 3,2, 3,3, 3,4, 3,5, 3,6, 3,7, 3,8, 3,9,
    4,0, 4,1, 4,2, 4,3, 4,4, 4,5, 4,6, 4,7, 4,8, 4,9,
    5,0, 5,1, 5,2, 5,3, 5,4, 5,5, 5,6, 5,7, 5,8, 5,9,
    6,0, 6,1, 6,2, 6,3, 6,4, 6,5, 6,6, 6,7, 6,8, 6,9,
    7,0, 7,1, 7,2, 7,3, 7,4, 7,5, 7,6, 7,7, 7,8, 7,9,
    8,0, 8,1, 8,2, 8,3, 8,4, 8,5, 8,6, 8,7, 8,8, 8,9,
    9,0, 9,1, 9,2, 9,3, 9,4, 9,5, 9,6, 9,7, 9,8, 9,9,
};

/* n = 0 .. 9999 as its four digits, most significant first in memory order, filled once (the
 * same bytes every time, so a second thread filling it too writes what is there) */
static uint32_t QUADS[10000];
static int quads_ready;

static void fill_quads(void) {
    for (int n = 0; n < 10000; n++) {
        const uint8_t d[4] = {(uint8_t)(n / 1000), (uint8_t)(n / 100 % 10),
                              (uint8_t)(n / 10 % 10), (uint8_t)(n % 10)};
        memcpy(QUADS + n, d, 4);
    }
    quads_ready = 1;
}

/* encode_fixed's rows (N, T) uint8, written row by row from its layout `prog`: n_parts rows
 * of (kind, value, width, lsd_first), kind 0 the token `value` in one column, kind 1 the
 * digits of x[value] (N,) int64 >= 0 in `width` columns, least significant first or most
 * (digits above width dropped, as _digit_table's). */
void rows_encode(int64_t N, const int64_t *const *x, const int32_t *prog, int n_parts,
                 uint8_t *out, int64_t T) {
    if (!quads_ready)
        fill_quads();
    for (int64_t r = 0; r < N; r++) {
        uint8_t *o = out + r * T;
        for (int p = 0; p < n_parts; p++) {
            const int32_t *q = prog + 4 * p;
            if (q[0] == 0) {
                *o++ = (uint8_t)q[1];
                continue;
            }
            uint64_t v = (uint64_t)x[q[1]][r];
            const int width = q[2];
            int j = 0;
            /* four digits a division (v % 10000 from a table, one 4-byte store): the dependent
             * divisions of a 10-digit number 5 -> 3, the same digits */
            for (; j + 3 < width; j += 4) {
                const uint64_t w = v / 10000;
                uint32_t d = QUADS[v - w * 10000];
                if (q[3]) {
                    d = __builtin_bswap32(d);
                    memcpy(o + j, &d, 4);
                } else {
                    memcpy(o + width - 4 - j, &d, 4);
                }
                v = w;
            }
            /* two digits a division (v % 100 from a table): half the dependent divisions,
             * the same digits */
            for (; j + 1 < width; j += 2) {
                const uint64_t w = v / 100;
                const uint8_t *pr = PAIRS + 2 * (v - w * 100);
                if (q[3]) {
                    o[j] = pr[1], o[j + 1] = pr[0];
                } else {
                    o[width - 1 - j] = pr[1], o[width - 2 - j] = pr[0];
                }
                v = w;
            }
            if (j < width) o[q[3] ? j : 0] = (uint8_t)(v % 10);
            o += width;
        }
    }
}
