/* The optimiser tail of a tiny-layout training step in one call: Grokfast-EMA, the per-member
 * NaN guard and global-norm clipping, and AdamW with a per-member lr and weight decay, over
 * every parameter of a pack of K members.
 *
 * Built and loaded by arithsweep/core/model/tiny_step.py, with the kernel's flags (contraction
 * off, so a*b + c is always two roundings: AVX2 and AVX-512 builds give the same bits). No
 * Python or torch headers: the caller hands raw float32 buffers. Each parameter tensor i is
 * (K, n[i]) contiguous, member k's values at k * n[i]; its gradient, AdamW moments and
 * Grokfast average are laid out the same way.
 *
 * Every operation is elementwise within one member, except the clipping norm, which is summed
 * per member in an order set by the member's own parameter sizes (below): so a member's
 * numbers are the same bits alone and in any pack, whatever K and the vector width (the
 * compiler may vectorise these loops; without -ffast-math it may not reorder a sum).
 */
#include <math.h>
#include <stdint.h>

/* hyper[]: the step's constants, float32 as the moments are */
enum { H_ALPHA, H_ONE_MINUS_ALPHA, H_LAMBDA, H_B1, H_ONE_MINUS_B1, H_B2, H_ONE_MINUS_B2, H_EPS,
       H_N };
/* grokfast: 0 off this step, 1 the average moves (ema = alpha ema + (1 - alpha) g), 2 the
 * first step of start "grad" (ema = g, the paper's gradfilter_ema) */
enum { G_OFF, G_EMA, G_INIT };
#define ACC 8 /* the norm's partial sums: term j of a tensor goes to sum j % ACC */

/* b ** t for a whole t >= 0 by squaring, in double: only multiplications, each rounded by
 * IEEE rules, so every machine gets the same bits (libm's pow may differ by build) */
static double pow_whole(double b, uint64_t t) {
    double r = 1.0;
    while (t) {
        if (t & 1)
            r *= b;
        b *= b;
        t >>= 1;
    }
    return r;
}

/* Grokfast on member k's slice of one tensor (g, e: n values each), then its squares into
 * acc. In double, a float's square is exact and cannot overflow. */
static void filter_and_square(float *restrict g, float *restrict e, int64_t n, int mode,
                              const float *h, double *restrict acc) {
    for (int64_t j = 0; j < n; j++) {
        float x = g[j];
        if (mode != G_OFF) {
            float a = mode == G_INIT ? x : h[H_ALPHA] * e[j] + h[H_ONE_MINUS_ALPHA] * x;
            e[j] = a;
            x = x + h[H_LAMBDA] * a;
            g[j] = x;
        }
        acc[j % ACC] += (double)x * (double)x;
    }
}

/* AdamW on member k's slice of one tensor. step = -lr / bc1, keep = 1 - lr * wd (1 where the
 * tensor is not decayed); moving = lr != 0: a member with lr 0 (dead, stopped, or its
 * schedule's 0) keeps its weights to the bit, its moments still move as AdamW's would. */
static void adamw(float *restrict p, float *restrict g, float *restrict m, float *restrict v,
                  int64_t n, float scale, float keep, float step, float bc2s, int moving,
                  const float *h) {
    for (int64_t j = 0; j < n; j++) {
        float x = g[j] * scale; /* scale 0 for a dead member: its NaN/inf were zeroed below */
        if (scale == 0.0f)
            x = 0.0f;
        g[j] = x;
        float mj = h[H_B1] * m[j] + h[H_ONE_MINUS_B1] * x;
        float vj = h[H_B2] * v[j] + h[H_ONE_MINUS_B2] * (x * x);
        m[j] = mj;
        v[j] = vj;
        if (moving) {
            float d = sqrtf(vj) / bc2s + h[H_EPS];
            p[j] = p[j] * keep + step * (mj / d);
        }
    }
}

/* One step for members [0, K): see tiny_step.py (NativeTail) for the arguments' shapes.
 * t: the step count (float32, updated here); lr, wd, clip: (K,); alive (K,) bytes, cleared
 * for a member whose gradient is not finite; running (K,) bytes, 0 for a stopped member. */
void tiny_step(int K, int P, const int64_t *n, const uint8_t *decay, float **param,
               float **grad, float **m, float **v, float **ema, int grokfast, const float *h,
               float *t, const float *lr, const float *wd, const float *clip, uint8_t *alive,
               const uint8_t *running) {
    float tn = *t + 1.0f;
    *t = tn;
    float bc1 = (float)(1.0 - pow_whole((double)h[H_B1], (uint64_t)tn));
    float bc2s = (float)sqrt(1.0 - pow_whole((double)h[H_B2], (uint64_t)tn));
    for (int k = 0; k < K; k++) {
        double acc[ACC] = {0};
        for (int i = 0; i < P; i++)
            filter_and_square(grad[i] + k * n[i], grokfast ? ema[i] + k * n[i] : 0, n[i],
                              grokfast, h, acc);
        /* a fixed tree over the partial sums */
        double sq = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        if (!isfinite(sq))
            alive[k] = 0;
        float scale = 0.0f; /* a dead member's gradient becomes exactly 0 */
        if (alive[k]) {
            scale = 1.0f;
            if (clip[k] > 0.0f) {
                double s = (double)clip[k] / (sqrt(sq) + 1e-6);
                scale = s < 1.0 ? (float)s : 1.0f;
            }
        }
        float lk = alive[k] && running[k] ? lr[k] : 0.0f;
        float step = -lk / bc1;
        for (int i = 0; i < P; i++) {
            float keep = decay[i] ? 1.0f - lk * wd[k] : 1.0f;
            int64_t o = k * n[i];
            adamw(param[i] + o, grad[i] + o, m[i] + o, v[i] + o, n[i], scale, keep, step, bc2s,
                  lk != 0.0f, h);
        }
    }
}
