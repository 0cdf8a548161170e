/* The tiny layout's ties in one call each way: a pack's owned numbers -> the effective weights
 * the kernel reads (ties_forward), and the kernel's gradients of those -> the owned numbers'
 * gradients (ties_backward), for the rules of the tbukic family (tiny_ties.py lists them).
 *
 * Built and loaded by arithsweep/core/model/tiny_ties.py with the kernel's flags (contraction
 * off: every a*b + c is two roundings as written, so AVX2 and AVX-512 builds give the same
 * bits). No Python or torch headers. Every tensor is (K, ...) contiguous float32, member k's
 * block at k times its size; each member is computed alone, its sums in a fixed order, so a
 * member's numbers are the same bits alone and in any pack. cos and sin are libm's double
 * ones rounded to float (correctly rounded but for astronomically rare arguments, so every
 * machine agrees, where a float cosf's last bit may depend on the library's build).
 */
#include <math.h>
#include <stdint.h>

enum { D_K, D_V, D_D, D_TOK, D_N, D_QK, D_FF, D_EMBED, D_TIEK, D_PAIRS, D_QKN, D_NORMW,
       D_GATE, D_DOWN, D_NDIMS };
enum { EMB_ARC, EMB_ARC2 };
enum { TK_Q, TK_ROT, TK_SCALED };
enum { QKN_NONE, QKN_HEAD, QKN_SHARED, QKN_SCALAR };
enum { GATE_NONE, GATE_OWN, GATE_UP, GATE_SCALAR, GATE_VECTOR };
enum { DOWN_NONE, DOWN_OWN, DOWN_UP_T, DOWN_UP_T_ROT };
/* owned tensors (raw[]) and effective weights (eff[]), in tiny_ties.py's order */
enum { R_ARC, R_EXTRA, R_Q, R_K, R_QN, R_KN, R_NORM, R_GATE, R_UP, R_DOWN, R_N };
enum { W_E, W_G, W_Q, W_K, W_O, W_QN, W_KN, W_GATE, W_UP, W_DOWN, W_N };
/* the kernel's gradient slots (tiny_layout.effective_weights' order) */
enum { S_E, S_P, S_G1, S_Q, S_K, S_V, S_QN, S_KN, S_O, S_G2, S_GATE, S_UP, S_DOWN, S_GF, S_U,
       S_N = 18 };

static void turn(float a, float b, float c, float s, float *x, float *y) {
    *x = a * c - b * s;
    *y = a * s + b * c;
}

/* the index of pair p's first and second element along a dim of n (heads of width w) */
static void pair_at(int p, int w, int split, int *i, int *j) {
    if (!split) {
        *i = 2 * p;
        *j = 2 * p + 1;
    } else {
        int h = p / (w / 2), q = p % (w / 2);
        *i = h * w + q;
        *j = h * w + w / 2 + q;
    }
}

static float fcos(float x) { return (float)cos((double)x); }
static float fsin(float x) { return (float)sin((double)x); }

void ties_forward(const int64_t *dm, float radius, const float *pattern, float *const *raw,
                  float *const *eff) {
    const int64_t K = dm[D_K], V = dm[D_V], d = dm[D_D], tok = dm[D_TOK], n = dm[D_N],
                  qk = dm[D_QK], ff = dm[D_FF];
    const int arc3 = dm[D_EMBED] == EMB_ARC, nx = arc3 ? 3 : 2;
    for (int64_t k = 0; k < K; k++) {
        const float *arc = raw[R_ARC] + k * nx, *q = raw[R_Q] + k * d * n;
        float *E = eff[W_E] + k * V * d;
        float r = arc3 ? arc[0] : radius, start = arc[nx - 2], stride = arc[nx - 1];
        for (int64_t i = 0; i < V * d; i++)
            E[i] = 0.0f;
        for (int j = 0; j < 10 && j < V; j++) {
            float ang = start + stride * (float)j;
            E[j * d] = r * fcos(ang);
            E[j * d + 1] = r * fsin(ang);
        }
        for (int64_t j = 10; j < V; j++)
            for (int64_t t = 0; t < tok; t++)
                E[j * d + t] = raw[R_EXTRA][(k * (V - 10) + j - 10) * tok + t];
        float *G = eff[W_G] + k * d;
        for (int64_t i = 0; i < d; i++)
            G[i] = dm[D_NORMW] ? raw[R_NORM][k] : raw[R_NORM][k * d + i];
        float *WQ = eff[W_Q] + k * n * d, *WK = eff[W_K] + k * n * d, *WO = eff[W_O] + k * d * n;
        for (int64_t o = 0; o < n; o++)
            for (int64_t i = 0; i < d; i++)
                WQ[o * d + i] = q[i * n + o];
        for (int64_t i = 0; i < d * n; i++)
            WO[i] = q[i];
        if (dm[D_TIEK] == TK_ROT) {
            float c = fcos(raw[R_K][k]), s = fsin(raw[R_K][k]);
            for (int p = 0; p < n / 2; p++) {
                int a, b;
                pair_at(p, (int)qk, (int)dm[D_PAIRS], &a, &b);
                for (int64_t i = 0; i < d; i++)
                    turn(WQ[a * d + i], WQ[b * d + i], c, s, &WK[a * d + i], &WK[b * d + i]);
            }
        } else {
            float ks = dm[D_TIEK] == TK_SCALED ? raw[R_K][k] : 1.0f;
            for (int64_t i = 0; i < n * d; i++)
                WK[i] = dm[D_TIEK] == TK_SCALED ? WQ[i] * ks : WQ[i];
        }
        if (dm[D_QKN] != QKN_NONE) {
            float *QN = eff[W_QN] + k * qk, *KN = eff[W_KN] + k * qk;
            for (int64_t i = 0; i < qk; i++) {
                switch (dm[D_QKN]) {
                case QKN_HEAD:
                    QN[i] = raw[R_QN][k * qk + i];
                    KN[i] = raw[R_KN][k * qk + i];
                    break;
                case QKN_SHARED:
                    QN[i] = KN[i] = raw[R_QN][k * qk + i];
                    break;
                default:
                    QN[i] = KN[i] = raw[R_QN][k] * pattern[i];
                }
            }
        }
        if (!ff)
            continue;
        const float *up = raw[R_UP] + k * d * ff;
        float *WU = eff[W_UP] + k * ff * d, *WD = eff[W_DOWN] + k * d * ff;
        for (int64_t f = 0; f < ff; f++)
            for (int64_t i = 0; i < d; i++)
                WU[f * d + i] = up[i * ff + f];
        if (dm[D_GATE] != GATE_NONE) {
            float *WG = eff[W_GATE] + k * ff * d;
            for (int64_t f = 0; f < ff; f++)
                for (int64_t i = 0; i < d; i++) {
                    float u = WU[f * d + i];
                    switch (dm[D_GATE]) {
                    case GATE_OWN:
                        WG[f * d + i] = raw[R_GATE][k * d * ff + i * ff + f];
                        break;
                    case GATE_UP:
                        WG[f * d + i] = u;
                        break;
                    case GATE_SCALAR:
                        WG[f * d + i] = u * raw[R_GATE][k];
                        break;
                    default:
                        WG[f * d + i] = u * raw[R_GATE][k * ff + f];
                    }
                }
        }
        if (dm[D_DOWN] == DOWN_OWN) {
            for (int64_t i = 0; i < d; i++)
                for (int64_t f = 0; f < ff; f++)
                    WD[i * ff + f] = raw[R_DOWN][k * ff * d + f * d + i];
        } else if (dm[D_DOWN] == DOWN_UP_T) {
            for (int64_t i = 0; i < d * ff; i++)
                WD[i] = up[i];
        } else {
            float c = fcos(raw[R_DOWN][k]), s = fsin(raw[R_DOWN][k]);
            for (int64_t i = 0; i < d; i++)
                for (int64_t p = 0; p < ff / 2; p++)
                    turn(up[i * ff + 2 * p], up[i * ff + 2 * p + 1], c, s, &WD[i * ff + 2 * p],
                         &WD[i * ff + 2 * p + 1]);
        }
    }
}

/* g: the kernel's (K, gsize) gradients, slot s of member k at k * gsize + off[s] (-1: none);
 * eff: the forward's weights; grad[]: the owned tensors' gradients, written whole */
void ties_backward(const int64_t *dm, float radius, const float *pattern, float *const *raw,
                   float *const *eff, const float *g, int64_t gsize, const int64_t *off,
                   float *const *grad) {
    const int64_t K = dm[D_K], V = dm[D_V], d = dm[D_D], tok = dm[D_TOK], n = dm[D_N],
                  qk = dm[D_QK], ff = dm[D_FF];
    const int arc3 = dm[D_EMBED] == EMB_ARC, nx = arc3 ? 3 : 2;
    for (int64_t k = 0; k < K; k++) {
        const float *gk = g + k * gsize;
        /* the tied embedding: the input table and the unembedding */
        const float *gE = gk + off[S_E], *gU = gk + off[S_U];
        const float *arc = raw[R_ARC] + k * nx;
        float r = arc3 ? arc[0] : radius, start = arc[nx - 2], stride = arc[nx - 1];
        float dr = 0.0f, dstart = 0.0f, dstride = 0.0f;
        for (int j = 0; j < 10 && j < V; j++) {
            float ang = start + stride * (float)j, c = fcos(ang), s = fsin(ang);
            float d0 = gE[j * d] + gU[j * d], d1 = gE[j * d + 1] + gU[j * d + 1];
            float da = (d1 * c - d0 * s) * r;
            dr += d0 * c + d1 * s;
            dstart += da;
            dstride += da * (float)j;
        }
        float *ga = grad[R_ARC] + k * nx;
        if (arc3)
            ga[0] = dr;
        ga[nx - 2] = dstart;
        ga[nx - 1] = dstride;
        for (int64_t j = 10; j < V; j++)
            for (int64_t t = 0; t < tok; t++)
                grad[R_EXTRA][(k * (V - 10) + j - 10) * tok + t] = gE[j * d + t] + gU[j * d + t];
        /* Q, read as Q, V, O^T and K (turned, scaled or as it is) */
        const float *gQ = gk + off[S_Q], *gK = gk + off[S_K], *gV = gk + off[S_V],
                    *gO = gk + off[S_O], *WQ = eff[W_Q] + k * n * d, *WK = eff[W_K] + k * n * d;
        float *gq = grad[R_Q] + k * d * n;
        for (int64_t o = 0; o < n; o++)
            for (int64_t i = 0; i < d; i++)
                gq[i * n + o] = (gQ[o * d + i] + gV[o * d + i]) + gO[i * n + o];
        if (dm[D_TIEK] == TK_ROT) {
            float c = fcos(raw[R_K][k]), s = fsin(raw[R_K][k]), dth = 0.0f;
            for (int p = 0; p < n / 2; p++) {
                int a, b;
                pair_at(p, (int)qk, (int)dm[D_PAIRS], &a, &b);
                for (int64_t i = 0; i < d; i++) {
                    float dA = gK[a * d + i], dB = gK[b * d + i];
                    gq[i * n + a] += dA * c + dB * s;
                    gq[i * n + b] += dB * c - dA * s;
                    dth += dB * WK[a * d + i] - dA * WK[b * d + i];
                }
            }
            grad[R_K][k] = dth;
        } else {
            float ks = dm[D_TIEK] == TK_SCALED ? raw[R_K][k] : 1.0f, dks = 0.0f;
            for (int64_t o = 0; o < n; o++)
                for (int64_t i = 0; i < d; i++) {
                    float x = gK[o * d + i];
                    gq[i * n + o] += dm[D_TIEK] == TK_SCALED ? x * ks : x;
                    dks += x * WQ[o * d + i];
                }
            if (dm[D_TIEK] == TK_SCALED)
                grad[R_K][k] = dks;
        }
        /* QK-norm weights */
        if (dm[D_QKN] != QKN_NONE) {
            const float *gqn = gk + off[S_QN], *gkn = gk + off[S_KN];
            float dsc = 0.0f;
            for (int64_t i = 0; i < qk; i++) {
                switch (dm[D_QKN]) {
                case QKN_HEAD:
                    grad[R_QN][k * qk + i] = gqn[i];
                    grad[R_KN][k * qk + i] = gkn[i];
                    break;
                case QKN_SHARED:
                    grad[R_QN][k * qk + i] = gqn[i] + gkn[i];
                    break;
                default:
                    dsc += (gqn[i] + gkn[i]) * pattern[i];
                }
            }
            if (dm[D_QKN] == QKN_SCALAR)
                grad[R_QN][k] = dsc;
        }
        /* the one norm gain every norm site reads */
        float dsum = 0.0f;
        for (int64_t i = 0; i < d; i++) {
            float x = gk[off[S_G1] + i];
            if (off[S_G2] >= 0)
                x += gk[off[S_G2] + i];
            if (off[S_GF] >= 0)
                x += gk[off[S_GF] + i];
            if (dm[D_NORMW])
                dsum += x;
            else
                grad[R_NORM][k * d + i] = x;
        }
        if (dm[D_NORMW])
            grad[R_NORM][k] = dsum;
        if (!ff)
            continue;
        /* the MLP: up, read as up, the gate (tied) and down (tied) */
        const float *gUp = gk + off[S_UP], *gD = gk + off[S_DOWN], *WU = eff[W_UP] + k * ff * d,
                    *WD = eff[W_DOWN] + k * d * ff;
        float *gu = grad[R_UP] + k * d * ff;
        for (int64_t f = 0; f < ff; f++)
            for (int64_t i = 0; i < d; i++)
                gu[i * ff + f] = gUp[f * d + i];
        if (dm[D_GATE] != GATE_NONE) {
            const float *gG = gk + off[S_GATE];
            float dsc = 0.0f;
            for (int64_t f = 0; f < ff; f++) {
                float dv = 0.0f;
                for (int64_t i = 0; i < d; i++) {
                    float x = gG[f * d + i];
                    switch (dm[D_GATE]) {
                    case GATE_OWN:
                        grad[R_GATE][k * d * ff + i * ff + f] = x;
                        break;
                    case GATE_UP:
                        gu[i * ff + f] += x;
                        break;
                    case GATE_SCALAR:
                        gu[i * ff + f] += x * raw[R_GATE][k];
                        dsc += x * WU[f * d + i];
                        break;
                    default:
                        gu[i * ff + f] += x * raw[R_GATE][k * ff + f];
                        dv += x * WU[f * d + i];
                    }
                }
                if (dm[D_GATE] == GATE_VECTOR)
                    grad[R_GATE][k * ff + f] = dv;
            }
            if (dm[D_GATE] == GATE_SCALAR)
                grad[R_GATE][k] = dsc;
        }
        if (dm[D_DOWN] == DOWN_OWN) {
            for (int64_t i = 0; i < d; i++)
                for (int64_t f = 0; f < ff; f++)
                    grad[R_DOWN][k * ff * d + f * d + i] = gD[i * ff + f];
        } else if (dm[D_DOWN] == DOWN_UP_T) {
            for (int64_t i = 0; i < d * ff; i++)
                gu[i] += gD[i];
        } else {
            float c = fcos(raw[R_DOWN][k]), s = fsin(raw[R_DOWN][k]), dth = 0.0f;
            for (int64_t i = 0; i < d; i++)
                for (int64_t p = 0; p < ff / 2; p++) {
                    int64_t a = i * ff + 2 * p, b = a + 1;
                    float dA = gD[a], dB = gD[b];
                    gu[a] += dA * c + dB * s;
                    gu[b] += dB * c - dA * s;
                    dth += dB * WD[a] - dA * WD[b];
                }
            grad[R_DOWN][k] = dth;
        }
    }
}
