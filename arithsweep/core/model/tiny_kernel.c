/* The tiny-model training kernel: loss and every gradient of a one-block transformer in one
 * pass, for models whose widths are a handful of numbers (the AdderBoard frontier).
 *
 * Built and loaded by arithsweep/core/model/tiny_layout.py (C with GCC/Clang vector
 * extensions; no Python or torch headers: the caller hands raw float32/int32 buffers). Lanes
 * are sequences: a `vf` holds one number of VL sequences, every activation is an array of
 * them, so each operation of the model is one VL-wide vector operation whatever the widths,
 * and a tile of L = 16 sequences (one or two `vf`s wide, VL below) stays in L1/L2 from the
 * embedding to the last gradient (the reference layout streams every intermediate through
 * memory once per PyTorch op). scripts/kernel_ab.py compares two versions of this file (bits
 * and time). A change that moves its bits is a new arithmetic (core/arithmetic.py): 4 made its
 * multiply-accumulates fused (vfma), and must stay the same bits for AVX2, AVX-512 and Clang.
 *
 * Inputs are the *effective* weights (after ties, low-rank products and derived tables), so
 * this file knows one architecture: pre-norm RMS or LayerNorm (or no norm), H query heads over Hkv K/V
 * heads, optional QK-norm and RoPE, a ReLU, GELU or SwiGLU MLP (or none), a final norm (or
 * none), an unembedding U, cross entropy on the answer positions [s, Ti). The gradient of
 * sum(mask * ce) is added for every weight; the caller divides by the mask's sum.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef L
#define L 16
#endif
/* VL: the lanes of one vector, L / VL vectors side by side per tile row. An AVX2 build takes
 * a tile of 16 as two halves of 8, one after the other: GCC 12 keeps 64-byte vectors in
 * memory when the target's registers hold 32 bytes. Each lane's arithmetic is the same, and
 * the lanes' sums at the end run over l = 0 .. L - 1 in order, so the bits do not change. */
#ifndef VL
#if L == 16 && defined(__AVX__) && !defined(__AVX512F__)
#define VL 8
#else
#define VL L
#endif
#endif
#define NH (L / VL)
typedef float vf __attribute__((vector_size(4 * VL)));
typedef int32_t vi __attribute__((vector_size(4 * VL)));
/* the caller's tokens and masks need not be vector-aligned */
typedef vi vi_in __attribute__((aligned(4)));
typedef vf vf_in __attribute__((aligned(4)));

enum { F_POS = 1, F_NORM = 2, F_QKNORM = 4, F_ROPE = 8, F_ROPE_IL = 16, F_FINAL = 32,
       F_RELU = 64, F_SWIGLU = 128, F_GELU = 256, F_LAYER = 512, F_NBIAS = 1024 };

/* forced inlining: a tile specialised for fixed widths (see `run`) must see them in every
 * helper, where its small loops unroll and its accumulators stay in registers */
#define INLINE inline __attribute__((always_inline))
/* A width known at compile time (a specialised tile) and at most ACC is accumulated in
 * local arrays, which then live in registers; each sum still adds its terms in the same
 * order, so the bits do not change. Runtime widths keep the plain loops (faster there). */
#define ACC 16
#define FIXED(w) (__builtin_constant_p(w) && (w) <= ACC)

/* vbcast: x in every lane (what `v * x` does to a scalar x). max(a, b) = a > b ? a : b and
 * min(a, b) = a < b ? a : b lane by lane (b where either is NaN): x86's maxps and minps
 * exactly. GCC does not see them in the selects of the generic path, and for AVX2 it splits a
 * 64-byte compare into 16 scalar ones and builds a 64-byte splat through 16 stores to memory,
 * so the x86 builds (AVX-512 at 16 lanes, AVX2 at 8) call them by name (the same bits) */
#if defined(__AVX512F__) && VL == 16
#include <immintrin.h>
static inline vf vbcast(float x) { return (vf)_mm512_set1_ps(x); }
/* lane l: entry id[l] (0 .. 15) of the 16 numbers lo (0 .. 15; hi unused at 16 lanes) */
#define HAVE_PERMUTE 1
static inline vf vlookup16(vf lo, vf hi, vi id) {
    (void)hi;
    return (vf)_mm512_permutexvar_ps((__m512i)id, (__m512)lo);
}
static inline vf vmax(vf a, vf b) { return (vf)_mm512_max_ps((__m512)a, (__m512)b); }
static inline vf vmin(vf a, vf b) { return (vf)_mm512_min_ps((__m512)a, (__m512)b); }
#elif defined(__AVX__) && VL == 8
#include <immintrin.h>
static inline vf vbcast(float x) { return (vf)_mm256_set1_ps(x); }
/* lane l: entry id[l] (0 .. 15) of the 16 numbers lo (0 .. 7) then hi (8 .. 15) */
#define HAVE_PERMUTE 1
static inline vf vlookup16(vf lo, vf hi, vi id) {
    const __m256 a = _mm256_permutevar8x32_ps((__m256)lo, (__m256i)id);
    const __m256 b = _mm256_permutevar8x32_ps((__m256)hi, (__m256i)id);
    return (vf)_mm256_blendv_ps(a, b, (__m256)(id > 7));
}
static inline vf vmax(vf a, vf b) { return (vf)_mm256_max_ps((__m256)a, (__m256)b); }
static inline vf vmin(vf a, vf b) { return (vf)_mm256_min_ps((__m256)a, (__m256)b); }
#else
#define HAVE_PERMUTE 0
static inline vf vlookup16(vf lo, vf hi, vi id) { (void)hi, (void)id; return lo; } /* unused */
static inline vf vbcast(float x) {
    vf r;
    for (int l = 0; l < VL; l++) r[l] = x;
    return r;
}
static inline vf vmax(vf a, vf b) { vi m = a > b; return (vf)((m & (vi)a) | (~m & (vi)b)); }
static inline vf vmin(vf a, vf b) { vi m = a < b; return (vf)((m & (vi)a) | (~m & (vi)b)); }
#endif
static inline vf vsel(vi m, vf a) { return (vf)(m & (vi)a); } /* a where m, else 0 */

/* vfma(a, b, c) = a * b + c rounded once (IEEE fusedMultiplyAdd), lane by lane. Written out,
 * never left to the compiler (contraction stays off): every AVX2 and AVX-512 machine has
 * FMA3, and one correctly rounded result is the same bits on each, whichever compiler and
 * vector width; where the target has no FMA (x86-64 below v3, say), fmaf gives the same
 * bits in software. From arithmetic 4 on, every multiply-accumulate of the model is one. */
#if defined(__AVX512F__) && VL == 16
static inline vf vfma(vf a, vf b, vf c) {
    return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
}
#elif defined(__AVX__) && defined(__FMA__) && VL == 8
static inline vf vfma(vf a, vf b, vf c) {
    return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
}
#else
static inline vf vfma(vf a, vf b, vf c) {
    vf r;
    for (int l = 0; l < VL; l++) r[l] = fmaf(a[l], b[l], c[l]);
    return r;
}
#endif
static inline vf vfmas(vf a, float b, vf c) { return vfma(a, vbcast(b), c); } /* b scalar */

/* e^x, Cephes' expf polynomial after x = n ln2 + r: |rel err| < 2e-7 on [-87, 88]. `neg`: the
 * caller knows x <= 0 or NaN (a softmax's x - max), so the upper clamp is a no-op and z rounds
 * as z - 0.5: the same n and the same bits as the general path, in three fewer operations. */
static INLINE vf vexp_at(vf x, int neg) {
    x = vmax(x, vbcast(-87.0f));
    if (!neg) x = vmin(x, vbcast(88.0f));
    vf z = x * 1.44269504088896341f;
    /* round half away from zero: z + copysign(0.5, z), truncated (the same n as adding
     * -0.5 below zero and 0.5 from zero up; at z = +0 both give 0) */
    vi n = neg ? __builtin_convertvector(z - 0.5f, vi)
               : __builtin_convertvector(z + (vf)(((vi)z & ((vi){0} + INT32_MIN))
                                                  | (vi)vbcast(0.5f)), vi);
    vf nf = __builtin_convertvector(n, vf);
    vf r = vfmas(nf, 2.12194440e-4f, vfmas(nf, -0.693359375f, x));
    vf p = vbcast(1.9875691500e-4f);
    p = vfma(p, r, vbcast(1.3981999507e-3f));
    p = vfma(p, r, vbcast(8.3334519073e-3f));
    p = vfma(p, r, vbcast(4.1665795894e-2f));
    p = vfma(p, r, vbcast(1.6666665459e-1f));
    p = vfma(p, r, vbcast(5.0000001201e-1f));
    vf y = vfma(p * r, r, r) + 1.0f;
    return y * (vf)((n + 127) << 23);
}
static INLINE vf vexp(vf x) { return vexp_at(x, 0); }
static INLINE vf vexp_neg(vf x) { return vexp_at(x, 1); } /* x <= 0 (or NaN) */

/* erf by Abramowitz & Stegun 7.1.26 (|abs err| < 1.5e-7), odd-extended */
static inline vf verf(vf x) {
    vf ax = vmax(x, -x), t = 1.0f / vfmas(ax, 0.3275911f, vbcast(1.0f));
    vf y = vfmas(t, 1.061405429f, vbcast(-1.453152027f));
    y = vfma(y, t, vbcast(1.421413741f));
    y = vfma(y, t, vbcast(-0.284496736f));
    y = vfma(y, t, vbcast(0.254829592f)) * t;
    y = vfma(-y, vexp(-ax * ax), vbcast(1.0f));
    return vsel(x >= 0, y) - vsel(x < 0, y);
}

static inline vf vrsqrt(vf x) { /* 1/sqrt lane by lane: a plain loop the compiler vectorises */
    vf r;
    for (int l = 0; l < VL; l++) r[l] = 1.0f / sqrtf(x[l]);
    return r;
}

static inline vf vlog(vf x) {
    vf r;
    for (int l = 0; l < VL; l++) r[l] = logf(x[l]);
    return r;
}

/* dims: Ti, s, d, H, Hkv, qk, vh, ff, V, flags, K, nT, Trope (the rope tables' row length),
 * then the caller's batch as `run` reads it: B sequences a member, rows of Tt tokens (Ti + 1
 * in training, the last one a target only; Ti for logits) and of Tm mask entries (position t's
 * at t), and shared (1: every member reads member 0's rows, an evaluation's problems) */
typedef struct {
    int Ti, s, d, H, Hkv, qk, vh, ff, V, flags, K, nT, Trope, B, Tt, Tm, shared;
} Dims;

/* Where each weight's gradient starts inside one member's block, and the block size G. */
typedef struct {
    int E, P, g1, Wq, Wk, Wv, qn, kn, Wo, g2, Wg, Wu, Wd, gf, U, b1, b2, bf, G;
} Offs;

static Offs offsets(const Dims *D) {
    Offs o;
    int f = D->flags, n = 0;
    o.E = n; n += D->V * D->d;
    o.P = n; n += (f & F_POS) ? D->Ti * D->d : 0;
    o.g1 = n; n += (f & F_NORM) ? D->d : 0;
    o.Wq = n; n += D->H * D->qk * D->d;
    o.Wk = n; n += D->Hkv * D->qk * D->d;
    o.Wv = n; n += D->Hkv * D->vh * D->d;
    o.qn = n; n += (f & F_QKNORM) ? D->qk : 0;
    o.kn = n; n += (f & F_QKNORM) ? D->qk : 0;
    o.Wo = n; n += D->d * D->H * D->vh;
    o.g2 = n; n += ((f & F_NORM) && D->ff) ? D->d : 0;
    o.Wg = n; n += (f & F_SWIGLU) ? D->ff * D->d : 0;
    o.Wu = n; n += D->ff * D->d;
    o.Wd = n; n += D->d * D->ff;
    o.gf = n; n += ((f & F_NORM) && (f & F_FINAL)) ? D->d : 0;
    o.U = n; n += D->V * D->d;
    int nb = (f & F_NBIAS) ? D->d : 0; /* LayerNorm shifts, beside g1, g2, gf */
    o.b1 = n; n += nb;
    o.b2 = n; n += D->ff ? nb : 0;
    o.bf = n; n += (f & F_FINAL) ? nb : 0;
    o.G = n;
    return o;
}

/* out[19]: the offsets above, then G */
void tiny_offsets(const int *dims, int *out) {
    Offs o = offsets((const Dims *)dims);
    memcpy(out, &o, sizeof o);
}

/* y = x * r, r = 1/sqrt(mean(x^2) + eps), over a vector of width w; `center`: x - mean(x)
 * in place of x (LayerNorm). */
static INLINE void rms_fwd(const vf *x, vf *y, vf *r, int w, float eps, int center) {
    vf acc = {0}, mu = {0};
    if (center) {
        for (int j = 0; j < w; j++) mu += x[j];
        mu /= (float)w;
    }
    for (int j = 0; j < w; j++) acc = vfma(x[j] - mu, x[j] - mu, acc);
    *r = vrsqrt(acc / (float)w + eps);
    for (int j = 0; j < w; j++) y[j] = (x[j] - mu) * *r;
}

/* Backward of rms_fwd: dx += r * (dy - y * mean(dy * y)), and - mean(dy) when centred. */
static INLINE void rms_bwd(const vf *y, vf r, const vf *dy, vf *dx, int w, int center) {
    vf m = {0}, md = {0};
    for (int j = 0; j < w; j++) {
        m = vfma(dy[j], y[j], m);
        md += dy[j];
    }
    m /= (float)w;
    md = center ? md / (float)w : (vf){0};
    for (int j = 0; j < w; j++) dx[j] = vfma(r, vfma(-y[j], m, dy[j] - md), dx[j]);
}

/* A block norm's affine part: h = g * y (+ b). */
static INLINE void affine(const vf *y, vf *h, const float *g, const float *b, int w) {
    for (int j = 0; j < w; j++) h[j] = b ? vfmas(y[j], g[j], vbcast(b[j])) : y[j] * g[j];
}

/* ... and its backward: gg += dh * y, gb += dh, dy = dh * g. */
static INLINE void affine_bwd(const vf *y, const vf *dh, const float *g, vf *gg, vf *gb, vf *dy,
                       int w) {
    for (int j = 0; j < w; j++) {
        gg[j] = vfma(dh[j], y[j], gg[j]);
        if (gb) gb[j] += dh[j];
        dy[j] = dh[j] * g[j];
    }
}

/* out[o] (+)= sum_i W[o][i] in[i], W (no, ni) row-major. */
static INLINE void matvec(const float *W, const vf *in, vf *out, int no, int ni, int acc) {
    for (int o = 0; o < no; o++) {
        vf a = acc ? out[o] : (vf){0};
        for (int i = 0; i < ni; i++) a = vfmas(in[i], W[o * ni + i], a);
        out[o] = a;
    }
}

/* din[i] += sum_o W[o][i] dout[o] (din may be NULL); gW[o][i] += dout[o] in[i] per lane. */
static INLINE void matvec_bwd(const float *W, const vf *in, const vf *dout, vf *din, vf *gW, int no,
                       int ni) {
    if (din && FIXED(ni)) { /* din, in and dout in locals: gW's stores cannot touch them */
        vf a[ACC], x[ACC];
        for (int i = 0; i < ni; i++) a[i] = din[i], x[i] = in[i];
        for (int o = 0; o < no; o++) {
            const vf g = dout[o];
            for (int i = 0; i < ni; i++) {
                gW[o * ni + i] = vfma(g, x[i], gW[o * ni + i]);
                a[i] = vfmas(g, W[o * ni + i], a[i]);
            }
        }
        for (int i = 0; i < ni; i++) din[i] = a[i];
        return;
    }
    for (int o = 0; o < no; o++)
        for (int i = 0; i < ni; i++) {
            gW[o * ni + i] = vfma(dout[o], in[i], gW[o * ni + i]);
            if (din) din[i] = vfmas(dout[o], W[o * ni + i], din[i]);
        }
}

/* RoPE on one head of width w at position t, in place; sign -1 turns back (the backward). */
static INLINE void rope_apply(vf *x, const float *cs, const float *sn, int t, int Trope, int w, int il,
                       float sign) {
    int half = w / 2;
    for (int i = 0; i < half; i++) {
        int a = il ? 2 * i : i, b = il ? 2 * i + 1 : i + half;
        const vf c = vbcast(cs[i * Trope + t]), s = vbcast(sign * sn[i * Trope + t]);
        vf xa = x[a], xb = x[b];
        x[a] = vfma(xa, c, -(xb * s));
        x[b] = vfma(xb, c, xa * s);
    }
}

/* QK-norm then RoPE of one head: raw -> hat (normed, unweighted), r, out (what attention reads) */
static INLINE void qk_fwd(const Dims *D, const vf *raw, vf *hat, vf *r, vf *out, const float *w,
                   const float *cs, const float *sn, int t, float eps) {
    int qk = D->qk;
    if (D->flags & F_QKNORM) {
        rms_fwd(raw, hat, r, qk, eps, 0);
        for (int c = 0; c < qk; c++) out[c] = hat[c] * w[c];
    } else {
        memcpy(out, raw, sizeof(vf) * qk);
    }
    if (D->flags & F_ROPE) rope_apply(out, cs, sn, t, D->Trope, qk, D->flags & F_ROPE_IL, 1.0f);
}

/* ... and back: d (gradient at `out`, overwritten) -> gradient at `raw`; gw += weight grads */
static INLINE void qk_bwd(const Dims *D, vf *d, const vf *hat, vf r, const float *w, vf *gw,
                   const float *cs, const float *sn, int t, vf *scratch) {
    int qk = D->qk;
    if (D->flags & F_ROPE) rope_apply(d, cs, sn, t, D->Trope, qk, D->flags & F_ROPE_IL, -1.0f);
    if (D->flags & F_QKNORM) {
        for (int c = 0; c < qk; c++) {
            gw[c] = vfma(d[c], hat[c], gw[c]);
            scratch[c] = d[c] * w[c];
            d[c] = (vf){0};
        }
        rms_bwd(hat, r, scratch, d, qk, 0);
    }
}

/* One query's softmax-backward term at key u: ds (the score's gradient) into the query's
 * gradient dq and the key's dk[u], each adding its term after the earlier keys' or queries'. */
static INLINE void key_bwd(vf ds, const vf *k, vf *dk, int u, int nk, const vf *q, vf *dq,
                           int qk) {
    const vf *ku = k + u * nk;
    vf *dku = dk + u * nk;
    for (int c = 0; c < qk; c++) {
        dq[c] = vfma(ds, ku[c], dq[c]);
        dku[c] = vfma(ds, q[c], dku[c]);
    }
}

/* Attention backward of one query (at position t) and head: dq (zeroed by the caller) gets
 * the query's gradient; dv[u] and dk[u] of the keys u <= t take its terms. dp: t + 1 scratch.
 * v, dv, k, dk point at the head's first key (strides nv, nk). */
static INLINE void attn_bwd_one(const vf *q, const vf *pp, const vf *doo, vf *dq, const vf *v,
                                vf *dv, const vf *k, vf *dk, vf *dp, int t, int nv, int nk,
                                int qk, int vh, float scale) {
    vf pdp = {0};
    for (int u = 0; u <= t; u++) { /* dp[u] = do . v[u]; dv[u] += p[u] do */
        const vf *vu = v + u * nv;
        vf *dvu = dv + u * nv, a = {0};
        for (int c = 0; c < vh; c++) {
            a = vfma(doo[c], vu[c], a);
            dvu[c] = vfma(pp[u], doo[c], dvu[c]);
        }
        dp[u] = a;
        pdp = vfma(pp[u], a, pdp);
    }
    /* a fixed qk: q and dq in locals, where dk's stores cannot touch them */
    vf qa[ACC], dqa[ACC];
    const vf *qs = q;
    vf *dqs = dq;
    if (FIXED(qk)) {
        for (int c = 0; c < qk; c++) qa[c] = q[c], dqa[c] = dq[c];
        qs = qa, dqs = dqa;
    }
    for (int u = 0; u <= t; u++) /* softmax backward, both score products */
        key_bwd(pp[u] * (dp[u] - pdp) * scale, k, dk, u, nk, qs, dqs, qk);
    if (FIXED(qk))
        for (int c = 0; c < qk; c++) dq[c] = dqa[c];
}

/* The same for queries a (position t) and b (t + 1) of one head, fixed widths only: the same
 * operations in the same order per sum (each key's dv and dk take a's term, then b's), with
 * each key's v, k, dv and dk read once. dp: 2 (t + 2) scratch. */
static INLINE void attn_bwd_pair(const vf *qa_, const vf *qb_, const vf *pa, const vf *pb,
                                 const vf *da, const vf *db, vf *dqa_, vf *dqb_, const vf *v,
                                 vf *dv, const vf *k, vf *dk, vf *dp, int t, int nv, int nk,
                                 int qk, int vh, float scale) {
    vf *dpa = dp, *dpb = dp + t + 2, pdpa = {0}, pdpb = {0};
    vf oa[ACC], ob[ACC];
    for (int c = 0; c < vh; c++) oa[c] = da[c], ob[c] = db[c];
    for (int u = 0; u <= t + 1; u++) {
        const vf *vu = v + u * nv;
        vf *dvu = dv + u * nv, a = {0}, b = {0};
        if (u <= t) {
            for (int c = 0; c < vh; c++) {
                a = vfma(oa[c], vu[c], a);
                b = vfma(ob[c], vu[c], b);
                dvu[c] = vfma(pb[u], ob[c], vfma(pa[u], oa[c], dvu[c]));
            }
            dpa[u] = a;
            pdpa = vfma(pa[u], a, pdpa);
        } else {
            for (int c = 0; c < vh; c++) {
                b = vfma(ob[c], vu[c], b);
                dvu[c] = vfma(pb[u], ob[c], dvu[c]);
            }
        }
        dpb[u] = b;
        pdpb = vfma(pb[u], b, pdpb);
    }
    vf qa[ACC], qb[ACC], ga[ACC], gb[ACC];
    for (int c = 0; c < qk; c++) qa[c] = qa_[c], qb[c] = qb_[c], ga[c] = dqa_[c], gb[c] = dqb_[c];
    for (int u = 0; u <= t; u++) {
        vf dsa = pa[u] * (dpa[u] - pdpa) * scale, dsb = pb[u] * (dpb[u] - pdpb) * scale;
        const vf *ku = k + u * nk;
        vf *dku = dk + u * nk;
        for (int c = 0; c < qk; c++) {
            ga[c] = vfma(dsa, ku[c], ga[c]);
            gb[c] = vfma(dsb, ku[c], gb[c]);
            dku[c] = vfma(dsb, qb[c], vfma(dsa, qa[c], dku[c]));
        }
    }
    key_bwd(pb[t + 1] * (dpb[t + 1] - pdpb) * scale, k, dk, t + 1, nk, qb, gb, qk); /* b only */
    for (int c = 0; c < qk; c++) dqa_[c] = ga[c], dqb_[c] = gb[c];
}

/* A weight's gradient slot gl[o .. o + n) as a loop sums into it: copied into the local `loc`
 * where n is a small constant (a specialised tile), so the loop's sums live in registers and
 * not in memory that the loop's other stores might alias, else gl + o itself. `release`
 * writes it back. Each sum adds the same terms in the same order either way. */
static INLINE vf *held(vf *gl, int o, int n, vf *loc) {
    if (!FIXED(n)) return gl + o;
    for (int j = 0; j < n; j++) loc[j] = gl[o + j];
    return loc;
}
static INLINE void release(vf *gl, int o, int n, const vf *loc) {
    if (FIXED(n))
        for (int j = 0; j < n; j++) gl[o + j] = loc[j];
}

typedef struct {
    const float *E, *P, *g1, *Wq, *Wk, *Wv, *qn, *kn, *Wo, *g2, *Wg, *Wu, *Wd, *gf, *U, *b1,
        *b2, *bf;
} Weights;

static size_t ws_size(const Dims *D) { /* vf count of `tile`'s workspace */
    int Ti = D->Ti, Tq = D->Ti - D->s, d = D->d, nq = D->H * D->qk, nk = D->Hkv * D->qk;
    int nv = D->Hkv * D->vh, no = D->H * D->vh, ff = D->ff;
    return (size_t)Ti * (5 * d + 1 + 3 * nk + D->Hkv + 2 * nv + 1)
         + (size_t)Tq * (2 * nq + D->H + D->H * Ti + no + 6 * d + 2 + 3 * ff + D->V)
         + (size_t)Tq * (no + nq) + (size_t)Ti + 4 * d + 3 * ff + D->qk + nk + nq;
}

/* VL sequences of one member (a tile, or a part of one): loss += sum(mask * ce) per lane,
 * gl[G] += its gradient per lane. tok: Ti + 1 rows, mask: Tq rows, each row L apart (the
 * caller's layout), of which this call reads VL. With `zout` (evaluation) only the forward
 * runs: the answer positions' logits go to zout (Tq, V, L) and nothing else is written
 * (mask, gl and loss are not read). */
static INLINE void tile(const Dims *D, const Offs *O, const Weights *W, const int32_t *tok,
                 const float *mask, const float *cs, const float *sn, float eps, float scale,
                 vf *gl, vf *loss, vf *ws, float *zout) {
    const int Ti = D->Ti, s = D->s, Tq = Ti - D->s, d = D->d, H = D->H, Hkv = D->Hkv;
    const int qk = D->qk, vh = D->vh, ff = D->ff, V = D->V, f = D->flags, g = H / Hkv;
    const int nq = H * qk, nk = Hkv * qk, nv = Hkv * vh, no = H * vh, norm = f & F_NORM;
    const int ctr = f & F_LAYER; /* LayerNorm: centre before scaling */
    vf *gb1 = (f & F_NBIAS) ? gl + O->b1 : NULL, *gb2 = (f & F_NBIAS) ? gl + O->b2 : NULL;
    vf *gbf = (f & F_NBIAS) ? gl + O->bf : NULL;
    vf *p = ws;
#define TAKE(name, n) vf *name = p; p += (n)
    TAKE(x0, Ti * d); TAKE(r1, Ti); TAKE(y1, Ti * d); TAKE(h1, Ti * d);
    TAKE(khat, Ti * nk); TAKE(rk, Ti * Hkv); TAKE(kr, Ti * nk);
    TAKE(vv, Ti * nv);
    TAKE(qhat, Tq * nq); TAKE(rq, Tq * H); TAKE(qr, Tq * nq);
    TAKE(pr, Tq * H * Ti); TAKE(o, Tq * no);
    TAKE(x1, Tq * d); TAKE(r2, Tq); TAKE(y2, Tq * d); TAKE(h2, Tq * d);
    TAKE(gt, Tq * ff); TAKE(up, Tq * ff); TAKE(act, Tq * ff);
    TAKE(x2, Tq * d); TAKE(rf, Tq); TAKE(yf, Tq * d); TAKE(hf, Tq * d);
    TAKE(pz, Tq * V);
    TAKE(dx0, Ti * d); TAKE(dh1, Ti * d); TAKE(dkr, Ti * nk); TAKE(dv, Ti * nv);
    TAKE(dp, 2 * Ti);
    TAKE(d_hf, d); TAKE(d_x, d); TAKE(d_y, d); TAKE(d_act, ff); TAKE(d_gt, ff); TAKE(d_up, ff);
    TAKE(d_oq, Tq * no); TAKE(d_qq, Tq * nq); TAKE(d_h, d); TAKE(d_qh, qk);
    /* one position's raw q and k projections: the backward reads only the normed ones (hat,
     * r), so these need not stay per position (a smaller workspace: 1.01-1.05x, same bits) */
    TAKE(kraw, nk); TAKE(qraw, nq);
#undef TAKE

    /* ---- embedding x0[t] = E[tok[t]] + P[t]: a gather, lane by lane; or, for a small
     * vocabulary and width, each of E's columns in one register and a permute by token */
    if (FIXED(d) && V <= 16 && HAVE_PERMUTE) {
        vf col[2 * ACC];
        for (int j = 0; j < d; j++)
            for (int h = 0; h < 2; h++)
                for (int l = 0; l < VL; l++) {
                    const int v = h * VL + l;
                    col[2 * j + h][l] = v < V ? W->E[v * d + j] : 0.0f;
                }
        for (int t = 0; t < Ti; t++) {
            const vi id = *(const vi_in *)(tok + t * L);
            for (int j = 0; j < d; j++) {
                vf x = vlookup16(col[2 * j], col[2 * j + 1], id);
                x0[t * d + j] = (f & F_POS) ? x + W->P[t * d + j] : x;
            }
        }
    } else {
        for (int t = 0; t < Ti; t++)
            for (int j = 0; j < d; j++) {
                vf x;
                for (int l = 0; l < VL; l++) x[l] = W->E[tok[t * L + l] * d + j];
                x0[t * d + j] = (f & F_POS) ? x + W->P[t * d + j] : x;
            }
    }
    /* ---- norm1; k and v at every position, q from s on */
    for (int t = 0; t < Ti; t++) {
        vf *h = h1 + t * d;
        if (norm) {
            rms_fwd(x0 + t * d, y1 + t * d, r1 + t, d, eps, ctr);
            affine(y1 + t * d, h, W->g1, W->b1, d);
        } else {
            memcpy(h, x0 + t * d, sizeof(vf) * d);
        }
        matvec(W->Wk, h, kraw, nk, d, 0);
        matvec(W->Wv, h, vv + t * nv, nv, d, 0);
        for (int hh = 0; hh < Hkv; hh++) {
            int c0 = t * nk + hh * qk;
            qk_fwd(D, kraw + hh * qk, khat + c0, rk + t * Hkv + hh, kr + c0, W->kn, cs, sn, t, eps);
        }
    }
    for (int i = 0; i < Tq; i++) {
        int t = s + i;
        matvec(W->Wq, h1 + t * d, qraw, nq, d, 0);
        for (int hh = 0; hh < H; hh++) {
            int c0 = i * nq + hh * qk;
            qk_fwd(D, qraw + hh * qk, qhat + c0, rq + i * H + hh, qr + c0, W->qn, cs, sn, t, eps);
        }
    }
    /* ---- causal attention of the answer queries, then the rest of the block */
    for (int i = 0; i < Tq; i++) {
        int t = s + i;
        for (int hh = 0; hh < H; hh++) {
            const vf *q = qr + i * nq + hh * qk;
            const int hk = hh / g;
            vf *pp = pr + (i * H + hh) * Ti, mx = vbcast(-INFINITY), sum = {0};
            for (int u = 0; u <= t; u++) {
                const vf *k = kr + u * nk + hk * qk;
                vf a = {0};
                for (int c = 0; c < qk; c++) a = vfma(q[c], k[c], a);
                pp[u] = a * scale;
                mx = vmax(mx, pp[u]);
            }
            for (int u = 0; u <= t; u++) { pp[u] = vexp_neg(pp[u] - mx); sum += pp[u]; }
            sum = 1.0f / sum;
            for (int u = 0; u <= t; u++) pp[u] *= sum;
            vf *oo = o + i * no + hh * vh;
            if (FIXED(vh)) { /* the vh sums side by side, each over u in order */
                vf a[ACC];
                for (int c = 0; c < vh; c++) a[c] = (vf){0};
                for (int u = 0; u <= t; u++)
                    for (int c = 0; c < vh; c++) a[c] = vfma(pp[u], vv[u * nv + hk * vh + c], a[c]);
                for (int c = 0; c < vh; c++) oo[c] = a[c];
            } else {
                for (int c = 0; c < vh; c++) {
                    vf a = {0};
                    for (int u = 0; u <= t; u++) a = vfma(pp[u], vv[u * nv + hk * vh + c], a);
                    oo[c] = a;
                }
            }
        }
        vf *xa = x1 + i * d, *xb = x2 + i * d, *hff = hf + i * d;
        memcpy(xa, x0 + t * d, sizeof(vf) * d);
        matvec(W->Wo, o + i * no, xa, d, no, 1);
        memcpy(xb, xa, sizeof(vf) * d);
        if (ff) {
            vf *h = h2 + i * d;
            if (norm) {
                rms_fwd(xa, y2 + i * d, r2 + i, d, eps, ctr);
                affine(y2 + i * d, h, W->g2, W->b2, d);
            } else {
                memcpy(h, xa, sizeof(vf) * d);
            }
            matvec(W->Wu, h, up + i * ff, ff, d, 0);
            if (f & F_SWIGLU) {
                matvec(W->Wg, h, gt + i * ff, ff, d, 0);
                for (int c = 0; c < ff; c++) {
                    vf z = gt[i * ff + c];
                    act[i * ff + c] = z / (1.0f + vexp(-z)) * up[i * ff + c];
                }
            } else if (f & F_GELU) { /* exact (erf) GELU, as torch's default */
                for (int c = 0; c < ff; c++) {
                    vf u = up[i * ff + c];
                    act[i * ff + c] = 0.5f * u * (1.0f + verf(u * 0.70710678118654752f));
                }
            } else {
                for (int c = 0; c < ff; c++) act[i * ff + c] = vmax(up[i * ff + c], (vf){0});
            }
            matvec(W->Wd, act + i * ff, xb, d, ff, 1);
        }
        if (norm && (f & F_FINAL)) {
            rms_fwd(xb, yf + i * d, rf + i, d, eps, ctr);
            affine(yf + i * d, hff, W->gf, W->bf, d);
        } else {
            memcpy(hff, xb, sizeof(vf) * d);
        }
        /* logits, softmax, cross entropy against tok[t + 1]; pz becomes dL/dz */
        vf *z = pz + i * V, mx = vbcast(-INFINITY), sum = {0}, zt = {0};
        const vi target = *(const vi_in *)(tok + (t + 1) * L);
        matvec(W->U, hff, z, V, d, 0);
        if (zout) {
            for (int v = 0; v < V; v++) memcpy(zout + ((size_t)i * V + v) * L, z + v, sizeof(vf));
            continue;
        }
        for (int v = 0; v < V; v++) {
            mx = vmax(mx, z[v]);
            zt += vsel(target == v, z[v]);
        }
        for (int v = 0; v < V; v++) { z[v] = vexp_neg(z[v] - mx); sum += z[v]; }
        const vf m = *(const vf_in *)(mask + i * L);
        *loss = vfma(m, mx + vlog(sum) - zt, *loss);
        sum = m / sum;
        for (int v = 0; v < V; v++) z[v] = vfma(z[v], sum, -vsel(target == v, m));
    }

    if (zout) return;
    /* ================================ backward ================================ */
    memset(dx0, 0, sizeof(vf) * Ti * d);
    memset(dh1, 0, sizeof(vf) * Ti * d);
    memset(dkr, 0, sizeof(vf) * Ti * nk);
    memset(dv, 0, sizeof(vf) * Ti * nv);
    for (int i = 0; i < Tq; i++) {
        int t = s + i;
        memset(d_hf, 0, sizeof(vf) * d);
        matvec_bwd(W->U, hf + i * d, pz + i * V, d_hf, gl + O->U, V, d);
        /* final norm -> d_x = dL/dx2 */
        memset(d_x, 0, sizeof(vf) * d);
        if (norm && (f & F_FINAL)) {
            affine_bwd(yf + i * d, d_hf, W->gf, gl + O->gf, gbf, d_y, d);
            rms_bwd(yf + i * d, rf[i], d_y, d_x, d, ctr);
        } else {
            memcpy(d_x, d_hf, sizeof(vf) * d);
        }
        /* MLP: through the residual d_x also becomes dL/dx1 */
        if (ff) {
            memset(d_act, 0, sizeof(vf) * ff);
            matvec_bwd(W->Wd, act + i * ff, d_x, d_act, gl + O->Wd, d, ff);
            for (int c = 0; c < ff; c++) {
                int ix = i * ff + c;
                if (f & F_SWIGLU) {
                    vf z = gt[ix], sg = 1.0f / (1.0f + vexp(-z));
                    d_up[c] = d_act[c] * z * sg;
                    d_gt[c] = d_act[c] * up[ix] * sg * vfma(z, 1.0f - sg, vbcast(1.0f));
                } else if (f & F_GELU) {
                    vf u = up[ix], cdf = 0.5f * (1.0f + verf(u * 0.70710678118654752f));
                    d_up[c] = d_act[c] * vfma(u * 0.39894228040143268f, vexp(-0.5f * u * u), cdf);
                } else {
                    d_up[c] = vsel(up[ix] > 0.0f, d_act[c]);
                }
            }
            memset(d_h, 0, sizeof(vf) * d);
            matvec_bwd(W->Wu, h2 + i * d, d_up, d_h, gl + O->Wu, ff, d);
            if (f & F_SWIGLU) matvec_bwd(W->Wg, h2 + i * d, d_gt, d_h, gl + O->Wg, ff, d);
            if (norm) {
                affine_bwd(y2 + i * d, d_h, W->g2, gl + O->g2, gb2, d_y, d);
                rms_bwd(y2 + i * d, r2[i], d_y, d_x, d, ctr);
            } else {
                for (int j = 0; j < d; j++) d_x[j] += d_h[j];
            }
        }
        /* the residual carries dL/dx1 to x0[t]; Wo to the attention output */
        for (int j = 0; j < d; j++) dx0[t * d + j] += d_x[j];
        vf *d_o = d_oq + i * no;
        memset(d_o, 0, sizeof(vf) * no);
        matvec_bwd(W->Wo, o + i * no, d_x, d_o, gl + O->Wo, d, no);
    }
    /* attention, query by query in order (heads inside, as each query's own backward ran
     * them); two queries at a time where the widths are fixed and no K/V head is shared:
     * each key's dv and dk take query i's term and then i + 1's, as one at a time adds them,
     * but are read and written once for both */
    memset(d_qq, 0, sizeof(vf) * Tq * nq);
    for (int i = 0; i < Tq;) {
        const int t = s + i, pair = FIXED(qk) && FIXED(vh) && g == 1 && i + 1 < Tq;
        for (int hh = 0; hh < H; hh++) {
            const int hk = hh / g, c0 = i * nq + hh * qk, o0 = i * no + hh * vh;
            const vf *pp = pr + (i * H + hh) * Ti;
            if (pair)
                attn_bwd_pair(qr + c0, qr + c0 + nq, pp, pp + H * Ti, d_oq + o0,
                              d_oq + o0 + no, d_qq + c0, d_qq + c0 + nq, vv + hk * vh,
                              dv + hk * vh, kr + hk * qk, dkr + hk * qk, dp, t, nv, nk, qk, vh,
                              scale);
            else
                attn_bwd_one(qr + c0, pp, d_oq + o0, d_qq + c0, vv + hk * vh, dv + hk * vh,
                             kr + hk * qk, dkr + hk * qk, dp, t, nv, nk, qk, vh, scale);
        }
        i += pair ? 2 : 1;
    }
    /* the queries back to norm1's output, then every position's key and value: each loop's
     * weight gradients held in registers (`held`), the keys and values in two passes so each
     * pass's fit (dh1[u] takes the same terms in the same order, Wk's before Wv's) */
    const int nqn = (f & F_QKNORM) ? qk : 0, ng1 = norm ? d : 0;
    vf la[ACC], lb[ACC];
    vf *ga = held(gl, O->Wq, nq * d, la), *gb = held(gl, O->qn, nqn, lb);
    for (int i = 0; i < Tq; i++) {
        int t = s + i;
        for (int hh = 0; hh < H; hh++) {
            int c0 = i * nq + hh * qk;
            qk_bwd(D, d_qq + c0, qhat + c0, rq[i * H + hh], W->qn, gb, cs, sn, t, d_qh);
        }
        matvec_bwd(W->Wq, h1 + t * d, d_qq + i * nq, dh1 + t * d, ga, nq, d);
    }
    release(gl, O->Wq, nq * d, la), release(gl, O->qn, nqn, lb);
    ga = held(gl, O->Wk, nk * d, la), gb = held(gl, O->kn, nqn, lb);
    for (int u = 0; u < Ti; u++) { /* keys back to their raw projection, then through Wk */
        for (int hh = 0; hh < Hkv; hh++) {
            int c0 = u * nk + hh * qk;
            qk_bwd(D, dkr + c0, khat + c0, rk[u * Hkv + hh], W->kn, gb, cs, sn, u, d_qh);
        }
        matvec_bwd(W->Wk, h1 + u * d, dkr + u * nk, dh1 + u * d, ga, nk, d);
    }
    release(gl, O->Wk, nk * d, la), release(gl, O->kn, nqn, lb);
    ga = held(gl, O->Wv, nv * d, la), gb = held(gl, O->g1, ng1, lb);
    for (int u = 0; u < Ti; u++) { /* values through Wv, then norm1, the embedding */
        vf *dh = dh1 + u * d, *dx = dx0 + u * d;
        matvec_bwd(W->Wv, h1 + u * d, dv + u * nv, dh, ga, nv, d);
        if (norm) {
            affine_bwd(y1 + u * d, dh, W->g1, gb, gb1, d_y, d);
            rms_bwd(y1 + u * d, r1[u], d_y, dx, d, ctr);
        } else {
            for (int j = 0; j < d; j++) dx[j] += dh[j];
        }
        if (f & F_POS)
            for (int j = 0; j < d; j++) gl[O->P + u * d + j] += dx[j];
        /* the token rows: a scatter, lane by lane (lane l's row is its own token's) */
        for (int l = 0; l < VL; l++) {
            float *ge = (float *)(gl + O->E) + (size_t)tok[u * L + l] * d * VL + l;
            for (int j = 0; j < d; j++) ge[j * VL] += dx[j][l];
        }
    }
    release(gl, O->Wv, nv * d, la), release(gl, O->g1, ng1, lb);
}

typedef void (*TileFn)(const Dims *, const Offs *, const Weights *, const int32_t *,
                       const float *, const float *, const float *, float, float, vf *, vf *,
                       vf *, float *);

static void tile_any(const Dims *D, const Offs *O, const Weights *W, const int32_t *tok,
                     const float *mask, const float *cs, const float *sn, float eps,
                     float scale, vf *gl, vf *loss, vf *ws, float *zout) {
    tile(D, O, W, tok, mask, cs, sn, eps, scale, gl, loss, ws, zout);
}

/* The same tile with its widths (d, one head of qk and vh, ff) as constants: the compiler
 * unrolls every loop over a width and keeps those vectors in registers. The arithmetic and
 * its order are tile's, so the numbers are the same bits as tile_any's. */
#define TILE_FIXED(name, d_, qk_, vh_, ff_)                                                  \
    static void name(const Dims *D, const Offs *O, const Weights *W, const int32_t *tok,    \
                     const float *mask, const float *cs, const float *sn, float eps,         \
                     float scale, vf *gl, vf *loss, vf *ws, float *zout) {                   \
        Dims C = *D;                                                                         \
        C.d = d_, C.qk = qk_, C.vh = vh_, C.ff = ff_, C.H = 1, C.Hkv = 1;                    \
        tile(&C, O, W, tok, mask, cs, sn, eps, scale, gl, loss, ws, zout);                   \
    }
/* the AdderBoard frontier's widths: the 36-, 44- and 87-p adders (d 3, head 4, d_ff 2) and
 * the 60-p one (d_ff 4) */
TILE_FIXED(tile_d3_h4_ff2, 3, 4, 4, 2)
TILE_FIXED(tile_d3_h4_ff4, 3, 4, 4, 4)

static TileFn pick_tile(const Dims *D) {
    if (D->d == 3 && D->qk == 4 && D->vh == 4 && D->H == 1 && D->Hkv == 1) {
        if (D->ff == 2) return tile_d3_h4_ff2;
        if (D->ff == 4) return tile_d3_h4_ff4;
    }
    return tile_any;
}

/* One tile's tokens (Ti + 1 rows of L lanes) and answer mask (Tq rows) in the layout `tile`
 * reads, from the caller's rows (B, Tt) and (B, Tm) of bytes: lane l is sequence b0 + l, a
 * lane past B is padding (token 0, mask 0: it weighs nothing), a row past Tt reads token 0. */
static void tile_inputs(const Dims *D, const uint8_t *tok, const uint8_t *mask, int b0,
                        int32_t *ttok, float *tmask) {
    const int Ti = D->Ti, s = D->s, Tq = D->Ti - D->s;
    for (int l = 0; l < L; l++) {
        const int b = b0 + l, in = b < D->B;
        const uint8_t *tr = in ? tok + (size_t)b * D->Tt : NULL;
        const uint8_t *mr = in && mask ? mask + (size_t)b * D->Tm + s : NULL;
        for (int t = 0; t <= Ti; t++) ttok[t * L + l] = tr && t < D->Tt ? tr[t] : 0;
        if (mask)
            for (int i = 0; i < Tq; i++) tmask[i * L + l] = mr && mr[i] ? 1.0f : 0.0f;
    }
}

/* Chunks[0 .. n) of work, each (member, first tile, end tile, slot): grad[slot][G] = the
 * gradient of sum(mask * ce) over those tiles, loss[slot] = that sum. A chunk's result does
 * not depend on which thread ran it or what else ran, so the caller's fixed-order sum of a
 * member's chunks is the same in any pack and on any thread count. Weights are (K, ...)
 * contiguous, w[j] NULL where absent; tok (K, B, Tt) and mask (K, B, Tm) bytes (the batch as
 * training draws it; (1, B, ...) when shared); cs/sn (qk/2, Trope). */
static void run(const int *dims, float eps, float scale, const int32_t *chunks, int n,
                const uint8_t *tok, const uint8_t *mask, const float *const *w, const float *cs,
                const float *sn, float *grad, double *loss, float *logits) {
    const Dims *D = (const Dims *)dims;
    const Offs O = offsets(D);
    const int Ti = D->Ti, Tq = Ti - D->s, d = D->d, ff = D->ff, V = D->V;
    const int nq = D->H * D->qk, nk = D->Hkv * D->qk, nv = D->Hkv * D->vh, no = D->H * D->vh;
    const int sz[18] = {V * d, Ti * d, d, nq * d, nk * d, nv * d, D->qk, D->qk, d * no,
                        d, ff * d, ff * d, d * ff, d, V * d, d, d, d};
    /* the thread's workspace, kept between calls: a fresh 100-KB-plus block would be mapped
     * anew on every call, and each page fault costs microseconds */
    static _Thread_local vf *keep = NULL;
    static _Thread_local size_t kept = 0;
    /* after the tile's workspace and gradients: its tokens and mask, L lanes (NH vectors) a row */
    size_t need = ws_size(D) + (size_t)NH * (O.G + Ti + 1 + Tq) + 1;
    if (need > kept) {
        free(keep);
        keep = aligned_alloc(sizeof(vf), sizeof(vf) * need);
        kept = keep ? need : 0;
        if (!keep) return; /* out of memory: the caller sees a NaN loss (its buffers are NaN) */
    }
    vf *ws = keep, *gl = keep + ws_size(D);
    int32_t *ttok = (int32_t *)(gl + (size_t)O.G * NH);
    float *tmask = (float *)(gl + (size_t)NH * (O.G + Ti + 1));
    const TileFn tile_fn = pick_tile(D);
    for (int c = 0; c < n; c++) {
        const int k = chunks[4 * c], slot = chunks[4 * c + 3];
        const float *wk[18];
        for (int j = 0; j < 18; j++) wk[j] = w[j] ? w[j] + (size_t)k * sz[j] : NULL;
        const Weights Wt = {wk[0], wk[1], wk[2], wk[3], wk[4], wk[5], wk[6], wk[7], wk[8],
                            wk[9], wk[10], wk[11], wk[12], wk[13], wk[14], wk[15], wk[16],
                            wk[17]};
        vf lossl[NH] = {{0}}; /* per part of a tile: its lanes' sums over the chunk's tiles */
        memset(gl, 0, sizeof(vf) * (size_t)O.G * NH);
        const size_t kb = D->shared ? 0 : (size_t)k * D->B; /* the member's first row */
        for (int t = chunks[4 * c + 1]; t < chunks[4 * c + 2]; t++) {
            size_t it = (size_t)k * D->nT + t;
            tile_inputs(D, tok + kb * D->Tt, mask ? mask + kb * D->Tm : NULL, t * L, ttok,
                        tmask);
            for (int h = 0; h < NH; h++)
                tile_fn(D, &O, &Wt, ttok + h * VL, mask ? tmask + h * VL : NULL, cs, sn, eps,
                        scale, gl + (size_t)h * O.G, &lossl[h], ws,
                        logits ? logits + it * Tq * V * L + h * VL : NULL);
        }
        if (logits) continue;
        float *gk = grad + (size_t)slot * O.G;
        for (int j = 0; j < O.G; j++) { /* lanes 0 .. L - 1 in order, whatever VL */
            float a = 0.0f;
            for (int h = 0; h < NH; h++)
                for (int l = 0; l < VL; l++) a += gl[(size_t)h * O.G + j][l];
            gk[j] = a;
        }
        double a = 0.0;
        for (int h = 0; h < NH; h++)
            for (int l = 0; l < VL; l++) a += lossl[h][l];
        loss[slot] = a;
    }
}

void tiny_fwd_bwd(const int *dims, float eps, float scale, const int32_t *chunks, int n,
                  const uint8_t *tok, const uint8_t *mask, const float *const *w,
                  const float *cs, const float *sn, float *grad, double *loss) {
    run(dims, eps, scale, chunks, n, tok, mask, w, cs, sn, grad, loss, NULL);
}

/* The forward alone, for evaluation: logits (K, nT, Tq, V, L) of the answer positions. */
void tiny_logits(const int *dims, float eps, float scale, const int32_t *chunks, int n,
                 const uint8_t *tok, const float *const *w, const float *cs, const float *sn,
                 float *logits) {
    run(dims, eps, scale, chunks, n, tok, NULL, w, cs, sn, NULL, NULL, logits);
}
