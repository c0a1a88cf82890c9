/* src/kernels/simd/attention.c - SIMD fused multi-head attention and its
 * gradient (the math of src/kernels/ref/attention.c).
 *
 * One (batch, head) per task, tasks in parallel; each thread works in its own
 * slice of the workspace (ct_attention_ws_per_thread): the T x T scores (and
 * in backward the T x T dP / dS), K^T and V^T gathered head-major, and the
 * key mask as 0 / -inf per key. Every product is one register-blocked
 * micro-kernel (MR rows x NV vectors, A broadcast with any strides, B rows
 * contiguous), so q, v, dy, the output and d_qkv are used in place with
 * their row strides. With a causal mask the kernels skip the blocks above the
 * diagonal. A task's results do not depend on the thread that runs it.
 *
 * BF16 / FP16 I/O (simd_lowp.h): qkv, dy, the forward output and the
 * outputs may be BF16 or FP16. A task then converts its head's q, k, v (and
 * dy, y) into FP32 rows in its workspace slice
 * (ct_attention_ws_per_thread_bf16), computes as for FP32 and rounds its
 * output rows to the 16-bit dtype: the products and the softmax run in FP32
 * and no T x T tensor is stored. Where oneDNN runs BF16 in hardware
 * (AMX, AVX512-BF16), BF16 plans run onednn/attention.c instead: its
 * products on BF16 matmuls, its rows through the helpers at the end. */
#include <math.h>
#include <omp.h>

#include "simd_lowp.h"

#define MR 6 /* rows of the micro-kernel               */
#define NV 2 /* vectors (of VW floats) per row         */

/* which part of K / N a lower-triangular operand lets a row block [i0, i1) skip */
enum { CM_NONE = 0, CM_N_UPTO, CM_K_UPTO, CM_K_FROM };

/* C[r][0..n) = alpha * sum_{k0 <= kk < k1} A(r, kk) B[kk][0..n),
 * r < m <= MR, n <= NV*VW; A(r, kk) = a[r*rsa + kk*csa], B row kk at b + kk*ldb. */
static inline void ukernel(int m, int n, int64_t k0, int64_t k1, const float *a, int64_t rsa, int64_t csa,
                           const float *b, int64_t ldb, float *c, int64_t ldc, float alpha) {
    vf acc[MR][NV];
    const float *ar[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        ar[r] = a + (r < m ? r : m - 1) * rsa; /* rows past m repeat the last one, never stored */
        acc[r][0] = acc[r][1] = vzero();
    }
    if (n == NV * VW) {
        for (int64_t kk = k0; kk < k1; kk++) {
            const float *bk = b + kk * ldb;
            vf b0 = vload(bk), b1 = vload(bk + VW);
#pragma GCC unroll 8
            for (int r = 0; r < MR; r++) {
                vf x = vset1(ar[r][kk * csa]);
                acc[r][0] = vfma(x, b0, acc[r][0]);
                acc[r][1] = vfma(x, b1, acc[r][1]);
            }
        }
    } else if (n > VW) {
        for (int64_t kk = k0; kk < k1; kk++) {
            const float *bk = b + kk * ldb;
            vf b0 = vload(bk), b1 = vtail_load(bk + VW, n - VW);
#pragma GCC unroll 8
            for (int r = 0; r < MR; r++) {
                vf x = vset1(ar[r][kk * csa]);
                acc[r][0] = vfma(x, b0, acc[r][0]);
                acc[r][1] = vfma(x, b1, acc[r][1]);
            }
        }
    } else {
        for (int64_t kk = k0; kk < k1; kk++) {
            vf b0 = vtail_load(b + kk * ldb, n);
#pragma GCC unroll 8
            for (int r = 0; r < MR; r++) acc[r][0] = vfma(vset1(ar[r][kk * csa]), b0, acc[r][0]);
        }
    }
    vf va = vset1(alpha);
    int n0 = n < VW ? n : VW, n1 = n - n0;
    for (int r = 0; r < m; r++) {
        float *cr = c + r * ldc;
        vf v0 = vmul(acc[r][0], va), v1 = vmul(acc[r][1], va);
        if (n0 == VW) vstore(cr, v0);
        else vtail_store(cr, v0, n0);
        if (n1 == VW) vstore(cr + VW, v1);
        else if (n1 > 0) vtail_store(cr + VW, v1, n1);
    }
}

/* C (M x N) = alpha * A (M x K) B (K x N), A with strides (rsa, csa), B and C
 * row-major with leading dims ldb, ldc. mode (CM_*): the row block [i0, i1)
 * computes only columns < i1 (N_UPTO), or sums only k < i1 (K_UPTO) or
 * k >= i0 (K_FROM): the operand that is zero outside a lower triangle. */
static void gemm(int64_t M, int64_t N, int64_t K, const float *a, int64_t rsa, int64_t csa, const float *b,
                 int64_t ldb, float *c, int64_t ldc, float alpha, int mode) {
    for (int64_t i0 = 0; i0 < M; i0 += MR) {
        int m = (int)CT_MIN((int64_t)MR, M - i0);
        int64_t i1 = i0 + m;
        int64_t nn = mode == CM_N_UPTO ? CT_MIN(N, i1) : N;
        int64_t k0 = mode == CM_K_FROM ? CT_MIN(i0, K) : 0, k1 = mode == CM_K_UPTO ? CT_MIN(K, i1) : K;
        for (int64_t j0 = 0; j0 < nn; j0 += NV * VW) {
            int n = (int)CT_MIN((int64_t)(NV * VW), nn - j0);
            ukernel(m, n, k0, k1, a + i0 * rsa, rsa, csa, b + j0, ldb, c + i0 * ldc + j0, ldc, alpha);
        }
    }
}

/* ---- per-task setup ------------------------------------------------------------------------- */

typedef struct {
    int64_t B, T, D, H, Dh;
    float scale;
    int causal;
    const int32_t *kv;
    const float *qkv;
    const ct_tensor *tqkv;
    int lowp; /* some I/O is BF16 or FP16: heads go through FP32 rows */
    size_t per_thread;
    int nt;
} att;

static ct_status att_init(att *a, const ct_kargs *k, const ct_tensor *qkv, int kv_input) {
    int n_io = k->node->op == CT_OP_ATTENTION ? 1 : 3; /* (qkv) or (dy, qkv, fwd) */
    if (ct_lowp_io(k, n_io) == CT_F32 && (qkv->dtype != CT_F32 || k->out.dtype != CT_F32)) return CT_E_UNSUPPORTED;
    a->lowp = ct_lowp_io(k, n_io) != CT_F32;
    a->tqkv = qkv;
    a->B = qkv->shape[0];
    a->T = qkv->shape[1];
    a->D = qkv->shape[2] / 3;
    a->H = k->node->ia[0];
    a->Dh = a->D / a->H;
    a->scale = k->node->fa[0];
    a->causal = (int)k->node->ia[1];
    a->kv = k->node->n_in > kv_input ? k->in[kv_input].data : NULL;
    a->qkv = qkv->data;
    a->per_thread = a->lowp ? ct_attention_ws_per_thread_bf16(a->T, a->Dh) : ct_attention_ws_per_thread(a->T, a->Dh);
    int64_t tasks = a->B * a->H, nt = a->B * a->T * a->T * a->D >= 32768 ? k->nthreads : 1;
    if (nt > tasks) nt = tasks;
    if ((size_t)nt * a->per_thread > k->ws_bytes) nt = (int64_t)(k->ws_bytes / a->per_thread);
    if (nt < 1) return CT_E_UNSUPPORTED; /* no workspace: the reference's needs are no larger */
    a->nt = (int)nt;
    return CT_OK;
}

/* gathers part (1 k, 2 v) of head h, batch b as (Dh, T) into xt. 16 x 16
 * tiles: vector loads of 16 rows' segments (one line each: the rows are
 * 3 D apart, mostly L2 / L3 misses that scalar loads waited on one by one)
 * into an L1 tile, then its columns out, so that xt's rows (T floats apart,
 * a few L1 sets) stay cached. Was a quarter of gpt-char-small's attention. */
static void gather_t(const att *a, int part, int64_t b, int64_t h, float *xt) {
    const int64_t T = a->T, Dh = a->Dh, ld = 3 * a->D, o = b * T * ld + part * a->D + h * Dh;
    const ct_dtype dt = a->tqkv->dtype;
    const int bf = dt != CT_F32;
    const uint16_t *xh = (const uint16_t *)a->tqkv->data + o;
    const float *xf = a->qkv + o;
    float tile[16][16];
    for (int64_t j0 = 0; j0 < T; j0 += 16)
        for (int64_t d0 = 0; d0 < Dh; d0 += 16) {
            const int jn = (int)CT_MIN((int64_t)16, T - j0), dn = (int)CT_MIN((int64_t)16, Dh - d0);
            for (int j = 0; j < jn; j++)
                for (int dd = 0; dd < dn; dd += VW) {
                    const int w = dn - dd < VW ? dn - dd : VW;
                    const int64_t at = (j0 + j) * ld + d0 + dd;
                    vf v = bf ? (w == VW ? vload_lp(xh + at, dt) : vtail_load_lp(xh + at, w, dt))
                              : (w == VW ? vload(xf + at) : vtail_load(xf + at, w));
                    if (w == VW) vstore(&tile[j][dd], v);
                    else vtail_store(&tile[j][dd], v, w);
                }
            for (int dd = 0; dd < dn; dd++)
                for (int j = 0; j < jn; j++) xt[(d0 + dd) * T + j0 + j] = tile[j][dd];
        }
}

/* BF16 / FP16 I/O: rows [0, T) of head h of a (B, T, ld) tensor at column c0 as
 * FP32 (T, Dh) rows in buf, ld Dh; the FP32 tensor's own rows otherwise (*ldo
 * gets the leading dim). */
static const float *rows_in(const ct_tensor *t, const att *a, int64_t b, int64_t c0, int64_t ld, float *buf,
                            int64_t *ldo) {
    int64_t o = b * a->T * ld + c0;
    if (t->dtype == CT_F32) {
        *ldo = ld;
        return (const float *)t->data + o;
    }
    for (int64_t j = 0; j < a->T; j++)
        ct_lp_to_f32((const uint16_t *)t->data + o + j * ld, buf + j * a->Dh, (size_t)a->Dh, t->dtype);
    *ldo = a->Dh;
    return buf;
}
/* where output rows go: the tensor's own (FP32) or buf (rows_out stores them) */
static float *rows_at(const ct_tensor *t, const att *a, int64_t b, int64_t c0, int64_t ld, float *buf, int64_t *ldo) {
    if (t->dtype == CT_F32) {
        *ldo = ld;
        return (float *)t->data + b * a->T * ld + c0;
    }
    *ldo = a->Dh;
    return buf;
}
static void rows_out(const ct_tensor *t, const att *a, int64_t b, int64_t c0, int64_t ld, const float *buf) {
    if (t->dtype == CT_F32) return;
    int64_t o = b * a->T * ld + c0;
    for (int64_t j = 0; j < a->T; j++)
        ct_f32_to_lp(buf + j * a->Dh, (uint16_t *)t->data + o + j * ld, (size_t)a->Dh, t->dtype);
}

/* kb[j] = 0 for a valid key, -inf for padding */
static void key_bias(const att *a, int64_t b, float *kb) {
    for (int64_t j = 0; j < a->T; j++) kb[j] = a->kv && !a->kv[b * a->T + j] ? -INFINITY : 0.0f;
}

/* the first r lanes of p, the rest `fill` */
static inline vf load_fill(const float *p, int r, float fill) {
    float t[VW];
    for (int i = 0; i < VW; i++) t[i] = i < r ? p[i] : fill;
    return vload(t);
}

/* e^(x - c) for x > -inf, else exactly 0 */
static inline vf exp_masked(vf x, vf c) {
    return vselect_gt(x, vset1(-INFINITY), vexp(vsub(x, c)), vzero());
}

static void zero_from(float *p, int64_t from, int64_t T) {
    for (int64_t j = from; j < T; j++) p[j] = 0.0f;
}

/* Row i of the scores (s[0..n) valid, n = keys visible to this query) ->
 * probabilities in place, zeros in [n, T); returns the log-sum-exp (-inf:
 * every key masked, the row is all zeros). */
static float softmax_row(float *s, const float *kb, int64_t n, int64_t T) {
    vf vm = vset1(-INFINITY);
    int64_t j = 0;
    for (; j + VW <= n; j += VW) {
        vf x = vadd(vload(s + j), vload(kb + j));
        vstore(s + j, x);
        vm = vmax(vm, x);
    }
    int r = (int)(n - j);
    if (r) {
        vf x = vadd(load_fill(s + j, r, -INFINITY), load_fill(kb + j, r, 0.0f));
        vtail_store(s + j, x, r);
        vm = vmax(vm, x);
    }
    float m = vhmax(vm);
    if (m == -INFINITY) {
        zero_from(s, 0, T);
        return -INFINITY;
    }
    vf c = vset1(m), sum = vzero();
    for (j = 0; j + VW <= n; j += VW) {
        vf e = exp_masked(vload(s + j), c);
        vstore(s + j, e);
        sum = vadd(sum, e);
    }
    if (r) {
        vf e = exp_masked(load_fill(s + j, r, -INFINITY), c);
        vtail_store(s + j, e, r);
        sum = vadd(sum, e);
    }
    float tot = vhsum(sum);
    vf inv = vset1(1.0f / tot);
    for (j = 0; j + VW <= n; j += VW) vstore(s + j, vmul(vload(s + j), inv));
    if (r) vtail_store(s + j, vmul(vtail_load(s + j, r), inv), r);
    zero_from(s, n, T);
    return m + logf(tot);
}

/* in: qkv[, key_valid] -> out (B, T, D); aux: lse (B, H, T) */
ct_status CT_FN(attention)(ct_kargs *k) {
    att a;
    CT_TRY(att_init(&a, k, &k->in[0], 1));
    const int64_t T = a.T, Dh = a.Dh, D3 = 3 * a.D;
    float *lse = k->aux;
#pragma omp parallel for num_threads(a.nt) schedule(dynamic, 1) if (a.nt > 1)
    for (int64_t bh = 0; bh < a.B * a.H; bh++) {
        int64_t b = bh / a.H, h = bh % a.H;
        float *s = (float *)((char *)k->ws + (size_t)omp_get_thread_num() * a.per_thread);
        float *kt = s + T * T, *kb = kt + Dh * T;
        float *qb = (float *)((char *)s + ct_attention_ws_per_thread(T, Dh)), *vb = qb + T * Dh, *ob = vb + T * Dh;
        int64_t ldq, ldv, ldo;
        const float *q = rows_in(&k->in[0], &a, b, h * Dh, D3, qb, &ldq);
        const float *v = rows_in(&k->in[0], &a, b, 2 * a.D + h * Dh, D3, vb, &ldv);
        float *o = rows_at(&k->out, &a, b, h * Dh, a.D, ob, &ldo);
        gather_t(&a, 1, b, h, kt);
        key_bias(&a, b, kb);
        gemm(T, T, Dh, q, ldq, 1, kt, T, s, T, a.scale, a.causal ? CM_N_UPTO : CM_NONE);
        for (int64_t i = 0; i < T; i++) lse[bh * T + i] = softmax_row(s + i * T, kb, a.causal ? i + 1 : T, T);
        gemm(T, Dh, T, s, T, 1, v, ldv, o, ldo, 1.0f, a.causal ? CM_K_UPTO : CM_NONE);
        rows_out(&k->out, &a, b, h * Dh, a.D, ob);
    }
    return CT_OK;
}

/* P = exp(s + kb - l) over the n visible keys of a score row (in place),
 * zeros past them and in a row whose keys are all masked (l = -inf) */
static void prob_row(float *pr, const float *kb, float l, int64_t n, int64_t ld) {
    if (l == -INFINITY) n = 0;
    int64_t j = 0;
    vf vl = vset1(l);
    for (; j + VW <= n; j += VW) vstore(pr + j, exp_masked(vadd(vload(pr + j), vload(kb + j)), vl));
    if (j < n) {
        int r = (int)(n - j);
        vtail_store(pr + j, exp_masked(vadd(vtail_load(pr + j, r), vtail_load(kb + j, r)), vl), r);
    }
    zero_from(pr, n, ld);
}

static float dot_row(const float *x, const float *y, int64_t n) {
    vf s = vzero();
    int64_t j = 0;
    for (; j + VW <= n; j += VW) s = vfma(vload(x + j), vload(y + j), s);
    if (j < n) s = vfma(vtail_load(x + j, (int)(n - j)), vtail_load(y + j, (int)(n - j)), s);
    return vhsum(s);
}

/* in: dy (B, T, D), qkv, fwd (out and lse)[, key_valid] -> d_qkv (B, T, 3D) */
ct_status CT_FN(attention_bwd)(ct_kargs *k) {
    att a;
    CT_TRY(att_init(&a, k, &k->in[1], 3));
    if (!a.lowp && (k->in[0].dtype != CT_F32 || k->in[2].dtype != CT_F32)) return CT_E_UNSUPPORTED;
    const int64_t T = a.T, Dh = a.Dh, D = a.D, D3 = 3 * a.D;
    const float *lse = k->in_aux[2];
#pragma omp parallel for num_threads(a.nt) schedule(dynamic, 1) if (a.nt > 1)
    for (int64_t bh = 0; bh < a.B * a.H; bh++) {
        int64_t b = bh / a.H, h = bh % a.H;
        float *p = (float *)((char *)k->ws + (size_t)omp_get_thread_num() * a.per_thread);
        float *ds = p + T * T, *kt = ds + T * T, *vt = kt + Dh * T, *kb = vt + Dh * T;
        /* 16-bit I/O: FP32 rows of q, k, dy, y, dq, dk, dv after the FP32 workspace */
        float *qb = (float *)((char *)p + ct_attention_ws_per_thread(T, Dh)), *kbuf = qb + T * Dh, *gb = kbuf + T * Dh,
              *yb = gb + T * Dh, *dqb = yb + T * Dh, *dkb = dqb + T * Dh, *dvb = dkb + T * Dh;
        int64_t ldq, ldk, ldg, ldy, lq, lk, lv;
        const float *q = rows_in(&k->in[1], &a, b, h * Dh, D3, qb, &ldq);
        const float *kk = rows_in(&k->in[1], &a, b, D + h * Dh, D3, kbuf, &ldk);
        const float *g = rows_in(&k->in[0], &a, b, h * Dh, D, gb, &ldg);
        const float *o = rows_in(&k->in[2], &a, b, h * Dh, D, yb, &ldy);
        float *dq = rows_at(&k->out, &a, b, h * Dh, D3, dqb, &lq);
        float *dk = rows_at(&k->out, &a, b, D + h * Dh, D3, dkb, &lk);
        float *dv = rows_at(&k->out, &a, b, 2 * D + h * Dh, D3, dvb, &lv);
        gather_t(&a, 1, b, h, kt);
        gather_t(&a, 2, b, h, vt);
        key_bias(&a, b, kb);
        /* P = exp(scale q k^T + mask - lse), zero where masked */
        gemm(T, T, Dh, q, ldq, 1, kt, T, p, T, a.scale, a.causal ? CM_N_UPTO : CM_NONE);
        for (int64_t i = 0; i < T; i++) prob_row(p + i * T, kb, lse[bh * T + i], a.causal ? i + 1 : T, T);
        /* dV = P^T dO */
        gemm(T, Dh, T, p, 1, T, g, ldg, dv, lv, 1.0f, a.causal ? CM_K_FROM : CM_NONE);
        /* dP = dO V^T, then dS = P (dP - rowsum(dO * O)) in place */
        gemm(T, T, Dh, g, ldg, 1, vt, T, ds, T, 1.0f, a.causal ? CM_N_UPTO : CM_NONE);
        for (int64_t i = 0; i < T; i++) {
            float *dr = ds + i * T;
            const float *pr = p + i * T;
            int64_t n = a.causal ? i + 1 : T, j = 0;
            vf di = vset1(dot_row(g + i * ldg, o + i * ldy, Dh));
            for (; j + VW <= n; j += VW) vstore(dr + j, vmul(vload(pr + j), vsub(vload(dr + j), di)));
            if (j < n) {
                int r = (int)(n - j);
                vtail_store(dr + j, vmul(vtail_load(pr + j, r), vsub(vtail_load(dr + j, r), di)), r);
            }
            zero_from(dr, n, T);
        }
        /* dQ = scale dS K, dK = scale dS^T Q */
        gemm(T, Dh, T, ds, T, 1, kk, ldk, dq, lq, a.scale, a.causal ? CM_K_UPTO : CM_NONE);
        gemm(T, Dh, T, ds, 1, T, q, ldq, dk, lk, a.scale, a.causal ? CM_K_FROM : CM_NONE);
        rows_out(&k->out, &a, b, h * Dh, D3, dqb);
        rows_out(&k->out, &a, b, D + h * Dh, D3, dkb);
        rows_out(&k->out, &a, b, 2 * D + h * Dh, D3, dvb);
    }
    return CT_OK;
}

/* ---- row helpers of the oneDNN BF16 attention (onednn/attention.c) --------------------------
 * Rows [i0, i0 + m) of a row block whose scores s are FP32 (m, ld): row r
 * sees keys [0, nvis), nvis = i0 + r + 1 when causal (at most ld), else ld. */

static int64_t visible(int64_t i0, int64_t r, int64_t ld, int causal) {
    return causal ? CT_MIN(i0 + r + 1, ld) : ld;
}

/* scores -> probabilities (FP32 in place, zeros past the visible keys) and
 * their BF16 copy p16 (m, ld); lse[r] the row's log-sum-exp */
void CT_FN(att_softmax_rows)(float *s, uint16_t *p16, int64_t ld, int64_t m, int64_t i0, int causal, const float *kb,
                             float *lse) {
    for (int64_t r = 0; r < m; r++) {
        lse[r] = softmax_row(s + r * ld, kb, visible(i0, r, ld, causal), ld);
        CT_CVT(f32_to_bf16)(s + r * ld, p16 + r * ld, (size_t)ld);
    }
}

/* the backward's recompute: P = exp(s + kb - lse) (FP32 in place, zeros
 * past the visible keys and in rows whose keys are all masked) and p16 */
void CT_FN(att_prob_rows)(float *s, uint16_t *p16, int64_t ld, int64_t m, int64_t i0, int causal, const float *kb,
                          const float *lse) {
    for (int64_t r = 0; r < m; r++) {
        prob_row(s + r * ld, kb, lse[r], visible(i0, r, ld, causal), ld);
        CT_CVT(f32_to_bf16)(s + r * ld, p16 + r * ld, (size_t)ld);
    }
}

/* dS = P (dP - di[r]) rounded to BF16 (m, ld), zeros past the visible keys */
void CT_FN(att_dscore_rows)(const float *p, const float *dp, uint16_t *ds16, int64_t ld, int64_t m, int64_t i0,
                            int causal, const float *di) {
    for (int64_t r = 0; r < m; r++) {
        const float *pr = p + r * ld, *dr = dp + r * ld;
        uint16_t *o = ds16 + r * ld;
        int64_t n = visible(i0, r, ld, causal), j = 0;
        vf vd = vset1(di[r]);
        for (; j + VW <= n; j += VW) vstore_bf16(o + j, vmul(vload(pr + j), vsub(vload(dr + j), vd)));
        if (j < n) {
            int t = (int)(n - j);
            vtail_store_bf16(o + j, vmul(vtail_load(pr + j, t), vsub(vtail_load(dr + j, t), vd)), t);
        }
        if (n < ld) memset(o + n, 0, (size_t)(ld - n) * sizeof *o);
    }
}

/* out[r] = sum_d x[r][d] y[r][d] over BF16 rows (len elements, row strides ldx, ldy) */
void CT_FN(att_rowdot_bf16)(const uint16_t *x, int64_t ldx, const uint16_t *y, int64_t ldy, int64_t rows, int64_t len,
                            float *out) {
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *a = x + r * ldx, *b = y + r * ldy;
        vf s = vzero();
        int64_t j = 0;
        for (; j + VW <= len; j += VW) s = vfma(vload_bf16(a + j), vload_bf16(b + j), s);
        if (j < len) s = vfma(vtail_load_bf16(a + j, (int)(len - j)), vtail_load_bf16(b + j, (int)(len - j)), s);
        out[r] = vhsum(s);
    }
}
