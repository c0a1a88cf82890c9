/* src/kernels/simd/attention.c - SIMD fused multi-head attention and its
 * gradient (the math of src/kernels/ref/attention.c).
 *
 * One (batch, head) per task, tasks in parallel; each thread works in its own
 * slice of the workspace (ct_attention_ws_per_thread, att_slice): the T x T
 * scores (and in backward the T x T dP / dS, rows padded to an odd number of
 * lines), K^T and V^T gathered in panels of NB keys, the key mask as 0 / -inf
 * per key, and contiguous FP32 copies of the head's rows that are B operands.
 * Every product is one register-blocked micro-kernel (MR rows x NV vectors:
 * 6 x 2 on AVX2, 6 x 4 on AVX-512; A broadcast with any strides, so P^T and
 * dS^T are read in place; B rows contiguous). Queries go in row blocks of RB:
 * a block's scores, softmax (or P, dP, dS) and its row products (P V, dS K)
 * run while its rows are in L1; dV = P^T dO and dK = dS^T Q follow over the
 * whole of P and dS. With a causal mask the kernels skip the blocks above the
 * diagonal. The head's rows in qkv (and dy, y) are 3 D floats apart and come
 * from L3 / DRAM: a task prefetches its own rows ahead of its first pass and
 * the rows of the task this thread likely runs next into L2. A task's results
 * do not depend on the thread that runs it (prefetches change no value).
 *
 * BF16 / FP16 I/O (simd_lowp.h): qkv, dy, the forward output and the
 * outputs may be BF16 or FP16. A task then converts its head's q, k, v (and
 * dy, y) into FP32 rows in its workspace slice
 * (ct_attention_ws_per_thread_bf16), computes as for FP32 and rounds its
 * output rows to the 16-bit dtype: the products and the softmax run in FP32
 * and no T x T tensor is stored. Where oneDNN runs BF16 in hardware
 * (AMX, AVX512-BF16), BF16 plans run onednn/attention.c instead: its
 * products on BF16 matmuls, its rows through the helpers at the end.
 *
 * Fusion attention_bwd+colsum (ia[7] = CT_COLSUM_OUT, graph/fusion.c): the
 * backward also leaves the column sums of d_qkv (the qkv linear's bias
 * gradient) in its aux as sum's column path would make them (colsum.h):
 * each task sums its head's dQ rows block by block as they are made (in L1)
 * and dK, dV once made, over the pieces of rows inside its batch, instead of
 * a pass that reads d_qkv back from memory; the pieces that straddle two
 * batches (none when T is a multiple of the piece) are summed at the end. */
#include <math.h>
#include <omp.h>

#include "colsum.h"
#include "simd_lowp.h"

/* Micro-kernel shape per ISA: MR rows x NV vectors of accumulators. AVX2's
 * 16 registers hold 6 x 2 (+ 2 B vectors + the broadcast); AVX-512's 32 hold
 * 6 x 4 (+ 4 B vectors), so that one call covers a 64-wide head and reads its
 * A element once per product. */
#if VW == 16
#define MR 6
#define NV 4
#else
#define MR 6
#define NV 2
#endif
#define NB (NV * VW) /* columns of one micro-kernel call: the width of the K^T / V^T panels */

/* which part of K / N a lower-triangular operand lets a row block [i0, i1) skip */
enum { CM_NONE = 0, CM_N_UPTO, CM_K_UPTO, CM_K_FROM };

/* C[r][0..n) = alpha rs[r] * sum_{k0 <= kk < k1} A(r, kk) B[kk][0..n), r < m <= MR (rs NULL: 1),
 * (nv - 1) VW < n <= nv VW; A(r, kk) = a[r*rsa + kk*csa], B row kk at b + kk*ldb.
 * nv is a constant at every call (ukernel's switch): the loops over vectors
 * unroll and the accumulators stay in registers. */
static inline __attribute__((always_inline)) void ukern(const int nv, int m, int n, int64_t k0, int64_t k1,
                                                        const float *a, int64_t rsa, int64_t csa, const float *b,
                                                        int64_t ldb, float *c, int64_t ldc, float alpha,
                                                        const float *rs) {
    vf acc[MR][NV];
    const float *ar[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        ar[r] = a + (r < m ? r : m - 1) * rsa; /* rows past m repeat the last one, never stored */
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) acc[r][v] = vzero();
    }
    const int tail = n - (nv - 1) * VW; /* lanes of the last vector */
    if (tail == VW) {
        for (int64_t kk = k0; kk < k1; kk++) {
            const float *bk = b + kk * ldb;
            vf bv[NV];
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) bv[v] = vload(bk + v * VW);
#pragma GCC unroll 8
            for (int r = 0; r < MR; r++) {
                vf x = vset1(ar[r][kk * csa]);
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++) acc[r][v] = vfma(x, bv[v], acc[r][v]);
            }
        }
    } else { /* a ragged right edge (N not a multiple of VW): the last vector masked */
        for (int64_t kk = k0; kk < k1; kk++) {
            const float *bk = b + kk * ldb;
            vf bv[NV];
#pragma GCC unroll 4
            for (int v = 0; v < nv - 1; v++) bv[v] = vload(bk + v * VW);
            bv[nv - 1] = vtail_load(bk + (nv - 1) * VW, tail);
#pragma GCC unroll 8
            for (int r = 0; r < MR; r++) {
                vf x = vset1(ar[r][kk * csa]);
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++) acc[r][v] = vfma(x, bv[v], acc[r][v]);
            }
        }
    }
    vf va = vset1(alpha);
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) { /* constant r: acc stays in registers (a loop to m spilled it) */
        if (r >= m) break;
        float *cr = c + r * ldc;
        if (rs) va = vset1(alpha * rs[r]);
#pragma GCC unroll 4
        for (int v = 0; v < nv - 1; v++) vstore(cr + v * VW, vmul(acc[r][v], va));
        if (tail == VW) vstore(cr + (nv - 1) * VW, vmul(acc[r][nv - 1], va));
        else vtail_store(cr + (nv - 1) * VW, vmul(acc[r][nv - 1], va), tail);
    }
}

static void ukernel(int m, int n, int64_t k0, int64_t k1, const float *a, int64_t rsa, int64_t csa, const float *b,
                    int64_t ldb, float *c, int64_t ldc, float alpha, const float *rs) {
    switch ((n + VW - 1) / VW) {
    case 1: ukern(1, m, n, k0, k1, a, rsa, csa, b, ldb, c, ldc, alpha, rs); break;
    case 2: ukern(2, m, n, k0, k1, a, rsa, csa, b, ldb, c, ldc, alpha, rs); break;
#if NV > 2
    case 3: ukern(3, m, n, k0, k1, a, rsa, csa, b, ldb, c, ldc, alpha, rs); break;
    case 4: ukern(4, m, n, k0, k1, a, rsa, csa, b, ldb, c, ldc, alpha, rs); break;
#endif
    default: break;
    }
}

/* Rows [r0, r1) of C (M x N) = alpha * A (M x K) B (K x N), row i also
 * times rs[i] where rs is not NULL (the forward's softmax normalization), A with strides
 * (rsa, csa), C row-major with leading dim ldc; B's columns [j0, j0 + NB)
 * start at b + (j0 / NB) * bps, rows ldb apart (bps = NB: a row-major B;
 * bps = K * NB, ldb = NB: B packed in panels). r0 a multiple of MR. mode
 * (CM_*): the row block [i0, i1) computes only columns < i1 rounded up to
 * whole vectors (N_UPTO: the extra columns are finite, never read), or sums
 * only k < i1 (K_UPTO) or k >= i0 (K_FROM): the operand that is zero outside
 * a lower triangle. */
static void gemm(int64_t r0, int64_t r1, int64_t N, int64_t K, const float *a, int64_t rsa, int64_t csa,
                 const float *b, int64_t ldb, int64_t bps, float *c, int64_t ldc, float alpha, const float *rs,
                 int mode) {
    for (int64_t i0 = r0; i0 < r1; i0 += MR) {
        int m = (int)CT_MIN((int64_t)MR, r1 - i0);
        int64_t i1 = i0 + m;
        int64_t nn = mode == CM_N_UPTO ? CT_MIN(N, (i1 + VW - 1) / VW * VW) : N;
        int64_t k0 = mode == CM_K_FROM ? CT_MIN(i0, K) : 0, k1 = mode == CM_K_UPTO ? CT_MIN(K, i1) : K;
        for (int64_t j0 = 0, jb = 0; j0 < nn; j0 += NB, jb++) {
            int n = (int)CT_MIN((int64_t)NB, nn - j0);
            ukernel(m, n, k0, k1, a + i0 * rsa, rsa, csa, b + jb * bps, ldb, c + i0 * ldc + j0, ldc, alpha,
                    rs ? rs + i0 : NULL);
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

/* one thread's slice of the workspace (ct_attention_ws_per_thread): the
 * scores / P and dP / dS (T x ct_attention_ld(T)), K^T and V^T in panels,
 * the key bias, the rows' softmax factors, then T x Dh FP32 rows: row buffer
 * i at rows + i T Dh */
typedef struct {
    float *s, *ds, *kt, *vt, *kb, *inv, *rows;
} att_ws;

static att_ws att_slice(const att *a, void *ws) {
    const int64_t T = a->T, ld = ct_attention_ld(T), tp = ct_attention_tp(T);
    att_ws w;
    w.s = (float *)((char *)ws + (size_t)omp_get_thread_num() * a->per_thread);
    w.ds = w.s + T * ld;
    w.kt = w.ds + T * ld;
    w.vt = w.kt + a->Dh * tp;
    w.kb = w.vt + a->Dh * tp;
    w.inv = w.kb + T;
    w.rows = w.inv + T;
    return w;
}

/* A head's rows in one of its (B, T, ld) inputs: row j at p + j ld bytes,
 * `bytes` long. The rows are 3 D (or D) floats apart, one to four lines each
 * and mostly L3 / DRAM misses: no hardware prefetcher follows them, so the
 * task's first pass over them (gather_t) prefetches every input's rows a
 * tile ahead; the copies and products after it find them cached. */
typedef struct {
    const char *p;
    int64_t ld, bytes;
} head_rows;

static head_rows head_of(const ct_tensor *t, const att *a, int64_t b, int64_t c0, int64_t ld) {
    const size_t es = t->dtype == CT_F32 ? sizeof(float) : sizeof(uint16_t);
    head_rows r = {(const char *)t->data + (size_t)(b * a->T * ld + c0) * es, ld * (int64_t)es, a->Dh * (int64_t)es};
    return r;
}

/* rows [j0, j1) of each of hr[0, n) into L1, or into L2 (l2: the next
 * task's). always_inline: as a function of its own GCC's pure-const pass saw
 * no side effect in it (prefetches only) and dropped every call. */
static inline __attribute__((always_inline)) void prefetch_rows(const head_rows *hr, int n, int64_t j0, int64_t j1,
                                                                int l2) {
    for (int i = 0; i < n; i++)
        for (int64_t j = j0; j < j1; j++) {
            const char *r = hr[i].p + j * hr[i].ld;
            for (int64_t o = 0; o <= hr[i].bytes; o += 64) { /* the last: a row that straddles one more line */
                const char *x = r + CT_MIN(o, hr[i].bytes - 1);
                if (l2) _mm_prefetch(x, _MM_HINT_T1);
                else _mm_prefetch(x, _MM_HINT_T0);
            }
        }
}

/* the head rows task bh reads: q, k, v of qkv (in[qkv]), and for the
 * backward (bwd) dy (in[0]) and y (in[2]); returns how many */
static int task_rows(const ct_kargs *k, const att *a, int qkv, int bwd, int64_t bh, head_rows *hr) {
    const int64_t b = bh / a->H, h = bh % a->H, Dh = a->Dh, D = a->D;
    for (int p = 0; p < 3; p++) hr[p] = head_of(&k->in[qkv], a, b, p * D + h * Dh, 3 * D);
    if (!bwd) return 3;
    hr[3] = head_of(&k->in[0], a, b, h * Dh, D);
    hr[4] = head_of(&k->in[2], a, b, h * Dh, D);
    return 5;
}

/* dst (8 x 8, rows ldd apart) = src (8 x 8, rows lds apart) transposed, in
 * registers (AVX in both builds): the tile's columns one float at a time
 * were half of gather_t's time */
static inline void tr8x8(const float *src, int64_t lds, float *dst, int64_t ldd) {
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * lds);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]); /* a(i,0) a(i+1,0) a(i,1) a(i+1,1) | the same for 4, 5 */
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) { /* u[i + c]: column c (low half) and c + 4 (high) of rows i..i+3 */
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int c = 0; c < 4; c++) {
        _mm256_storeu_ps(dst + c * ldd, _mm256_permute2f128_ps(u[c], u[c + 4], 0x20));
        _mm256_storeu_ps(dst + (c + 4) * ldd, _mm256_permute2f128_ps(u[c], u[c + 4], 0x31));
    }
}

/* gathers part (1 k, 2 v) of head h, batch b as K^T / V^T packed for the
 * micro-kernel's B: keys [j0, j0 + NB) as a panel of Dh rows of NB floats at
 * xt + (j0 / NB) Dh NB, so that one call streams 8-16 KiB of consecutive
 * floats (the rows of a (Dh, T) K^T were T floats apart: with T = 256 the
 * B loads missed L1 and stalled the products). 16 x 16 tiles: vector loads
 * of 16 rows' segments into an L1 tile, then its columns out. Prefetches the
 * rows of pf[0, npf) (the task's inputs) 16 keys ahead. */
static void gather_t(const att *a, int part, int64_t b, int64_t h, float *xt, const head_rows *pf, int npf) {
    const int64_t T = a->T, Dh = a->Dh, ld = 3 * a->D, o = b * T * ld + part * a->D + h * Dh;
    const ct_dtype dt = a->tqkv->dtype;
    const int bf = dt != CT_F32;
    const uint16_t *xh = (const uint16_t *)a->tqkv->data + o;
    const float *xf = a->qkv + o;
    float tile[16][16];
    prefetch_rows(pf, npf, 0, CT_MIN(T, 16), 0);
    for (int64_t j0 = 0; j0 < T; j0 += 16) {
        prefetch_rows(pf, npf, CT_MIN(T, j0 + 16), CT_MIN(T, j0 + 32), 0);
        float *pan = xt + (j0 / NB) * Dh * NB + j0 % NB; /* NB is a multiple of 16: a tile lies in one panel */
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
            if (jn == 16 && dn == 16)
                for (int jj = 0; jj < 16; jj += 8)
                    for (int dd = 0; dd < 16; dd += 8) tr8x8(&tile[jj][dd], 16, pan + (d0 + dd) * NB + jj, NB);
            else
                for (int dd = 0; dd < dn; dd++)
                    for (int j = 0; j < jn; j++) pan[(d0 + dd) * NB + j] = tile[j][dd];
        }
    }
}

/* Rows [0, T) of head h of a (B, T, ld) tensor at column c0 as FP32 (T, Dh)
 * rows in buf, ld Dh (*ldo gets the leading dim): 16-bit I/O converted, and
 * FP32 copied where `copy` (a B operand: its rows then lie back to back
 * instead of 3 D floats apart, a few L1 sets); else the FP32 tensor's own. */
static const float *rows_in(const ct_tensor *t, const att *a, int64_t b, int64_t c0, int64_t ld, float *buf,
                            int64_t *ldo, int copy) {
    int64_t o = b * a->T * ld + c0;
    if (t->dtype == CT_F32 && !copy) {
        *ldo = ld;
        return (const float *)t->data + o;
    }
    const head_rows hr = head_of(t, a, b, c0, ld);
    for (int64_t j = 0; j < a->T; j++) {
        if (j % 8 == 0) prefetch_rows(&hr, 1, CT_MIN(a->T, j + 16), CT_MIN(a->T, j + 24), 0);
        if (t->dtype == CT_F32) memcpy(buf + j * a->Dh, (const float *)t->data + o + j * ld, (size_t)a->Dh * sizeof *buf);
        else ct_lp_to_f32((const uint16_t *)t->data + o + j * ld, buf + j * a->Dh, (size_t)a->Dh, t->dtype);
    }
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

/* the first r < VW lanes of p, the rest `fill` (lane masks: filling a stack
 * array one float at a time and loading it stalled on store forwarding) */
static inline vf load_fill(const float *p, int r, float fill) {
    const unsigned lo = (1u << r) - 1;
    return vor(vand(ct_vmask_bits(lo), vtail_load(p, r)), vand(ct_vmask_bits(~lo & ((1u << VW) - 1)), vset1(fill)));
}

/* e^(x - c) for x > -inf, else exactly 0 */
static inline vf exp_masked(vf x, vf c) {
    return vselect_gt(x, vset1(-INFINITY), vexp(vsub(x, c)), vzero());
}

static void zero_range(float *p, int64_t from, int64_t to) {
    if (to > from) memset(p + from, 0, (size_t)(to - from) * sizeof *p);
}

/* Row i of the scores (s[0..n) valid, n = keys visible to this query; kb the
 * key bias, NULL: no padding) -> probabilities in place, zeros in [n, zt);
 * returns the log-sum-exp (-inf: every key masked, the row is all zeros up
 * to zt). inv not NULL: the row is left as e^(s - max) and *inv gets the
 * factor that normalizes it (0 for a masked row): the forward applies it to
 * the row of P V, one pass over the row less. */
static float softmax_row(float *s, const float *kb, int64_t n, int64_t zt, float *inv) {
    vf vm = vset1(-INFINITY);
    int64_t j = 0;
    const int r = (int)(n % VW);
    if (kb) {
        for (; j + VW <= n; j += VW) {
            vf x = vadd(vload(s + j), vload(kb + j));
            vstore(s + j, x);
            vm = vmax(vm, x);
        }
        if (r) {
            vf x = vadd(load_fill(s + j, r, -INFINITY), load_fill(kb + j, r, 0.0f));
            vtail_store(s + j, x, r);
            vm = vmax(vm, x);
        }
    } else {
        for (; j + VW <= n; j += VW) vm = vmax(vm, vload(s + j));
        if (r) vm = vmax(vm, load_fill(s + j, r, -INFINITY));
    }
    float m = vhmax(vm);
    if (m == -INFINITY) {
        zero_range(s, 0, zt);
        if (inv) *inv = 0.0f;
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
    zero_range(s, n, zt);
    if (inv) {
        *inv = 1.0f / tot;
    } else {
        vf vr = vset1(1.0f / tot);
        for (j = 0; j + VW <= n; j += VW) vstore(s + j, vmul(vload(s + j), vr));
        if (r) vtail_store(s + j, vmul(vtail_load(s + j, r), vr), r);
    }
    return m + logf(tot);
}

/* Row blocks of RB queries: a block's scores, probabilities and dS stay in
 * L1 between the products and the row passes. */
#define RB (4 * MR)

/* where row i of P / dS must hold zeros past its visible keys: up to the end
 * of its MR-row block, the last column a causal product reads (K_UPTO: row
 * block [i0, i1) of P V reads P[i][0, i1); K_FROM: row block [i0, i1) of
 * P^T dO reads P[kk][i0, i1) for kk >= i0) */
static int64_t zeros_to(const att *a, int64_t i) { return a->causal ? CT_MIN(a->T, (i / MR + 1) * MR) : a->T; }

/* in: qkv[, key_valid] -> out (B, T, D); aux: lse (B, H, T) */
ct_status CT_FN(attention)(ct_kargs *k) {
    att a;
    CT_TRY(att_init(&a, k, &k->in[0], 1));
    const int64_t T = a.T, Dh = a.Dh, D3 = 3 * a.D, ld = ct_attention_ld(T);
    float *lse = k->aux;
#pragma omp parallel for num_threads(a.nt) schedule(dynamic, 1) if (a.nt > 1)
    for (int64_t bh = 0; bh < a.B * a.H; bh++) {
        int64_t b = bh / a.H, h = bh % a.H;
        att_ws w = att_slice(&a, k->ws);
        float *s = w.s, *qb = w.rows, *vb = qb + T * Dh, *ob = vb + T * Dh;
        int64_t ldq, ldv, ldo;
        /* this task's rows, then the next one's (the task this thread runs next while all take as long) */
        head_rows pf[3], pn[3];
        task_rows(k, &a, 0, 0, bh, pf);
        const int nn = bh + a.nt < a.B * a.H ? task_rows(k, &a, 0, 0, bh + a.nt, pn) : 0;
        gather_t(&a, 1, b, h, w.kt, pf + 1, 1);
        const float *q = rows_in(&k->in[0], &a, b, h * Dh, D3, qb, &ldq, 0);
        const float *v = rows_in(&k->in[0], &a, b, 2 * a.D + h * Dh, D3, vb, &ldv, 1);
        float *o = rows_at(&k->out, &a, b, h * Dh, a.D, ob, &ldo);
        const float *kb = a.kv ? w.kb : NULL;
        if (a.kv) key_bias(&a, b, w.kb);
        for (int64_t i0 = 0; i0 < T; i0 += RB) {
            const int64_t i1 = CT_MIN(T, i0 + RB);
            prefetch_rows(pn, nn, i0, i1, 1);
            gemm(i0, i1, T, Dh, q, ldq, 1, w.kt, NB, Dh * NB, s, ld, a.scale, NULL, a.causal ? CM_N_UPTO : CM_NONE);
            for (int64_t i = i0; i < i1; i++)
                lse[bh * T + i] = softmax_row(s + i * ld, kb, a.causal ? i + 1 : T, zeros_to(&a, i), w.inv + i);
            gemm(i0, i1, Dh, T, s, ld, 1, v, ldv, NB, o, ldo, 1.0f, w.inv, a.causal ? CM_K_UPTO : CM_NONE);
        }
        rows_out(&k->out, &a, b, h * Dh, a.D, ob);
    }
    return CT_OK;
}

/* P = exp(s + kb - l) over the n visible keys of a score row (in place; kb
 * NULL: no padding), zeros past them up to zt and in a row whose keys are all
 * masked (l = -inf) */
static void prob_row(float *pr, const float *kb, float l, int64_t n, int64_t zt) {
    if (l == -INFINITY) n = 0;
    int64_t j = 0;
    vf vl = vset1(l);
    for (; j + VW <= n; j += VW) vstore(pr + j, exp_masked(kb ? vadd(vload(pr + j), vload(kb + j)) : vload(pr + j), vl));
    if (j < n) {
        int r = (int)(n - j);
        vf x = kb ? vadd(vtail_load(pr + j, r), vtail_load(kb + j, r)) : vtail_load(pr + j, r);
        vtail_store(pr + j, exp_masked(x, vl), r);
    }
    zero_range(pr, n, zt);
}

static float dot_row(const float *x, const float *y, int64_t n) {
    vf s = vzero();
    int64_t j = 0;
    for (; j + VW <= n; j += VW) s = vfma(vload(x + j), vload(y + j), s);
    if (j < n) s = vfma(vtail_load(x + j, (int)(n - j)), vtail_load(y + j, (int)(n - j)), s);
    return vhsum(s);
}

/* di[i] = rowsum(dO * O) for every query, in one pass that prefetches y's
 * rows (hr) ahead: in the row blocks each was a miss waited on */
static void row_dots(const float *g, int64_t ldg, const float *y, int64_t ldy, const head_rows *hr, int64_t T,
                     int64_t Dh, float *di) {
    for (int64_t i = 0; i < T; i++) {
        if (i % 8 == 0) prefetch_rows(hr, 1, CT_MIN(T, i + 16), CT_MIN(T, i + 24), 0);
        di[i] = dot_row(g + i * ldg, y + i * ldy, Dh);
    }
}

/* attention_bwd+colsum: rows [lo, hi) of one head's part (q, k or v: columns c0.. c0 + Dh of d_qkv) of
 * batch b, the values at src (row t at src + t lds elements of dtype sdt: the output tensor, or the
 * task's FP32 rows before they are rounded to it) rounded to rdt, added to the pieces' partials in
 * k->aux in sum's order (colsum.h): float run sums of CS_RB rows from each piece's start, carried in
 * fo (Dh floats) from one call to the next, flushed into the piece's doubles. A part's rows must come
 * in order, each once; a task sums the pieces inside its batch, att_colsum_cross those across two.
 * The run sums stay in registers over a call's rows, 4 vectors of columns at a time. */
static inline __attribute__((always_inline)) void cs_rows_t(float *fo, const void *src, ct_dtype sdt, int64_t lds,
                                                            int64_t t0, int64_t t1, int64_t Dh, ct_dtype rdt) {
    int64_t c = 0;
    for (; c + 4 * VW <= Dh; c += 4 * VW) { /* four run sums in registers */
        vf a0 = vload(fo + c), a1 = vload(fo + c + VW), a2 = vload(fo + c + 2 * VW), a3 = vload(fo + c + 3 * VW);
        for (int64_t t = t0; t < t1; t++) {
            const int64_t o = t * lds + c;
            a0 = vadd(a0, cs_round(cs_ld(src, sdt, o, VW), rdt));
            a1 = vadd(a1, cs_round(cs_ld(src, sdt, o + VW, VW), rdt));
            a2 = vadd(a2, cs_round(cs_ld(src, sdt, o + 2 * VW, VW), rdt));
            a3 = vadd(a3, cs_round(cs_ld(src, sdt, o + 3 * VW, VW), rdt));
        }
        vstore(fo + c, a0), vstore(fo + c + VW, a1), vstore(fo + c + 2 * VW, a2), vstore(fo + c + 3 * VW, a3);
    }
    for (; c < Dh; c += VW) {
        const int n = (int)CT_MIN((int64_t)VW, Dh - c);
        vf a0 = n == VW ? vload(fo + c) : vtail_load(fo + c, n);
        for (int64_t t = t0; t < t1; t++) a0 = vadd(a0, cs_round(cs_ld(src, sdt, t * lds + c, n), rdt));
        if (n == VW) vstore(fo + c, a0);
        else vtail_store(fo + c, a0, n);
    }
}
static void cs_rows(float *fo, const void *src, ct_dtype sdt, int64_t lds, int64_t t0, int64_t t1, int64_t Dh,
                    ct_dtype rdt) {
    if (rdt == sdt) rdt = CT_F32; /* stored so: no rounding */
    if (sdt == CT_F32 && rdt == CT_F32) cs_rows_t(fo, src, CT_F32, lds, t0, t1, Dh, CT_F32);
    else if (sdt == CT_F32 && rdt == CT_BF16) cs_rows_t(fo, src, CT_F32, lds, t0, t1, Dh, CT_BF16);
    else if (sdt == CT_F32) cs_rows_t(fo, src, CT_F32, lds, t0, t1, Dh, CT_F16);
    else if (sdt == CT_BF16) cs_rows_t(fo, src, CT_BF16, lds, t0, t1, Dh, CT_F32);
    else cs_rows_t(fo, src, CT_F16, lds, t0, t1, Dh, CT_F32);
}
/* piece p of R rows in P pieces holds rows of two batches of T */
static inline int piece_crosses(int64_t R, int64_t P, int64_t T, int64_t p) {
    return (R * p / P) / T != (R * (p + 1) / P - 1) / T;
}
/* cross 0: the pieces inside one batch (a task's), 1: those across two batches (att_colsum_cross) */
static void cs_part(const ct_kargs *k, int64_t b, int part, int64_t h, const void *src, ct_dtype sdt, int64_t lds,
                    int64_t lo, int64_t hi, float *fo, int cross) {
    const ct_tensor *Y = &k->out;
    const int64_t T = Y->shape[1], D3 = Y->shape[2], Dh = D3 / 3 / k->node->ia[0], R = Y->shape[0] * T;
    const int64_t P = ct_colsum_pieces(R, D3), c0 = part * (D3 / 3) + h * Dh;
    const ct_dtype rdt = (ct_dtype)k->node->ia[6];
    for (int64_t t = lo; t < hi;) {
        const int64_t g = b * T + t;
        int64_t p = g * P / R;
        while (p + 1 < P && R * (p + 1) / P <= g) p++;
        while (p > 0 && R * p / P > g) p--;
        const int64_t r0 = R * p / P, r1 = R * (p + 1) / P, run0 = r0 + (g - r0) / CS_RB * CS_RB;
        if (piece_crosses(R, P, T, p) != cross) { /* the other kind of piece */
            t = CT_MIN(r1, b * T + hi) - b * T;
            continue;
        }
        const int64_t run1 = CT_MIN(run0 + CS_RB, r1), end = CT_MIN(run1, b * T + hi);
        double *ao = cs_set(k->aux, k->node->ia[7], CT_COLSUM_OUT, P, p, D3) + c0;
        if (g == r0)
            for (int64_t c = 0; c < Dh; c++) ao[c] = 0;
        if (g == run0) memset(fo, 0, (size_t)Dh * sizeof(float));
        cs_rows(fo, src, sdt, lds, t, end - b * T, Dh, rdt);
        if (end == run1) cs_flush(ao, fo, Dh);
        t = end - b * T;
    }
}
void CT_FN(att_colsum_rows)(const ct_kargs *k, int64_t b, int part, int64_t h, const void *src, ct_dtype sdt,
                            int64_t lds, int64_t lo, int64_t hi, float *fo) {
    cs_part(k, b, part, h, src, sdt, lds, lo, hi, fo, 0);
}
/* After every task: the pieces of rows that straddle two batches (no task has all their rows), summed
 * from the stored d_qkv, each column in sum's order; in parallel over the pieces and the heads' parts
 * (every piece straddles when T is below the piece's rows). */
void CT_FN(att_colsum_cross)(const ct_kargs *k) {
    const ct_tensor *Y = &k->out;
    const int64_t T = Y->shape[1], D3 = Y->shape[2], H = k->node->ia[0], Dh = D3 / 3 / H, R = Y->shape[0] * T;
    const size_t es = Y->dtype == CT_F32 ? sizeof(float) : sizeof(uint16_t);
    const int64_t P = ct_colsum_pieces(R, D3);
    int64_t cross[64], nc = 0; /* ct_colsum_pieces: at most 64 */
    for (int64_t p = 0; p < P && nc < 64; p++)
        if (piece_crosses(R, P, T, p)) cross[nc++] = p;
    if (!nc) return; /* T a multiple of the pieces' rows */
    const int64_t jobs = nc * 3 * H;
    int nt = jobs > 1 && nc * (R / P) * D3 >= 32768 ? k->nthreads : 1;
    if (nt > jobs) nt = (int)jobs;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        float fo[CT_COLSUM_MAX_D / 3 + 1];
#pragma omp for schedule(static)
        for (int64_t j = 0; j < jobs; j++) {
            const int64_t p = cross[j / (3 * H)], ph = j % (3 * H), h = ph % H;
            const int part = (int)(ph / H);
            /* rows as global rows: batch 0, t = the row */
            cs_part(k, 0, part, h, (const char *)Y->data + (size_t)(part * (D3 / 3) + h * Dh) * es, Y->dtype, D3,
                    R * p / P, R * (p + 1) / P, fo, 1);
        }
    }
}

/* in: dy (B, T, D), qkv, fwd (out and lse)[, key_valid] -> d_qkv (B, T, 3D) */
ct_status CT_FN(attention_bwd)(ct_kargs *k) {
    att a;
    CT_TRY(att_init(&a, k, &k->in[1], 3));
    if (!a.lowp && (k->in[0].dtype != CT_F32 || k->in[2].dtype != CT_F32)) return CT_E_UNSUPPORTED;
    const int cs = (k->node->ia[7] & CT_COLSUM_OUT) != 0; /* attention_bwd+colsum */
    if (cs && (!k->aux || 3 * a.D > CT_COLSUM_MAX_D)) return CT_E_UNSUPPORTED;
    const int64_t T = a.T, Dh = a.Dh, D = a.D, D3 = 3 * a.D, ld = ct_attention_ld(T);
    const float *lse = k->in_aux[2];
#pragma omp parallel for num_threads(a.nt) schedule(dynamic, 1) if (a.nt > 1)
    for (int64_t bh = 0; bh < a.B * a.H; bh++) {
        int64_t b = bh / a.H, h = bh % a.H;
        att_ws w = att_slice(&a, k->ws);
        float *p = w.s, *ds = w.ds;
        /* FP32 rows of q, k, dy (B operands), and with 16-bit I/O y, dq, dk, dv */
        float *qb = w.rows, *kbuf = qb + T * Dh, *gb = kbuf + T * Dh, *yb = gb + T * Dh, *dqb = yb + T * Dh,
              *dkb = dqb + T * Dh, *dvb = dkb + T * Dh;
        int64_t ldq, ldk, ldg, ldy, lq, lk, lv;
        head_rows pf[5], pn[5];
        task_rows(k, &a, 1, 1, bh, pf);
        const int nn = bh + a.nt < a.B * a.H ? task_rows(k, &a, 1, 1, bh + a.nt, pn) : 0;
        gather_t(&a, 1, b, h, w.kt, pf + 1, 1);
        gather_t(&a, 2, b, h, w.vt, pf + 2, 1);
        const float *q = rows_in(&k->in[1], &a, b, h * Dh, D3, qb, &ldq, 1);
        const float *kk = rows_in(&k->in[1], &a, b, D + h * Dh, D3, kbuf, &ldk, 1);
        const float *g = rows_in(&k->in[0], &a, b, h * Dh, D, gb, &ldg, 1);
        const float *o = rows_in(&k->in[2], &a, b, h * Dh, D, yb, &ldy, 0);
        float *dq = rows_at(&k->out, &a, b, h * Dh, D3, dqb, &lq);
        float *dk = rows_at(&k->out, &a, b, D + h * Dh, D3, dkb, &lk);
        float *dv = rows_at(&k->out, &a, b, 2 * D + h * Dh, D3, dvb, &lv);
        const float *kb = a.kv ? w.kb : NULL;
        if (a.kv) key_bias(&a, b, w.kb);
        float fo[CT_COLSUM_MAX_D / 3 + 1]; /* attention_bwd+colsum: one part's run sums */
        row_dots(g, ldg, o, ldy, &pf[4], T, Dh, w.inv); /* the forward's row factors' place */
        for (int64_t i0 = 0; i0 < T; i0 += RB) {
            const int64_t i1 = CT_MIN(T, i0 + RB);
            prefetch_rows(pn + 1, nn ? 2 : 0, i0, i1, 1);
            /* P = exp(scale q k^T + mask - lse), zero where masked */
            gemm(i0, i1, T, Dh, q, ldq, 1, w.kt, NB, Dh * NB, p, ld, a.scale, NULL, a.causal ? CM_N_UPTO : CM_NONE);
            for (int64_t i = i0; i < i1; i++)
                prob_row(p + i * ld, kb, lse[bh * T + i], a.causal ? i + 1 : T, zeros_to(&a, i));
            /* dP = dO V^T, then dS = P (dP - rowsum(dO * O)) in place */
            gemm(i0, i1, T, Dh, g, ldg, 1, w.vt, NB, Dh * NB, ds, ld, 1.0f, NULL, a.causal ? CM_N_UPTO : CM_NONE);
            for (int64_t i = i0; i < i1; i++) {
                float *dr = ds + i * ld;
                const float *pr = p + i * ld;
                int64_t n = a.causal ? i + 1 : T, j = 0;
                vf di = vset1(w.inv[i]);
                for (; j + VW <= n; j += VW) vstore(dr + j, vmul(vload(pr + j), vsub(vload(dr + j), di)));
                if (j < n) {
                    int r = (int)(n - j);
                    vtail_store(dr + j, vmul(vtail_load(pr + j, r), vsub(vtail_load(dr + j, r), di)), r);
                }
                zero_range(dr, n, zeros_to(&a, i));
            }
            /* dQ = scale dS K */
            gemm(i0, i1, Dh, T, ds, ld, 1, kk, ldk, NB, dq, lq, a.scale, NULL, a.causal ? CM_K_UPTO : CM_NONE);
            if (cs) CT_FN(att_colsum_rows)(k, b, 0, h, dq, CT_F32, lq, i0, i1, fo); /* while in L1 */
        }
        /* dV = P^T dO, dK = scale dS^T Q: every row block of P / dS done */
        gemm(0, T, Dh, T, p, 1, ld, g, ldg, NB, dv, lv, 1.0f, NULL, a.causal ? CM_K_FROM : CM_NONE);
        gemm(0, T, Dh, T, ds, 1, ld, q, ldq, NB, dk, lk, a.scale, NULL, a.causal ? CM_K_FROM : CM_NONE);
        if (cs) { /* the values as stored: the 16-bit outputs' rounding is rdt's (ia[6] = the output's dtype) */
            CT_FN(att_colsum_rows)(k, b, 1, h, dk, CT_F32, lk, 0, T, fo);
            CT_FN(att_colsum_rows)(k, b, 2, h, dv, CT_F32, lv, 0, T, fo);
        }
        rows_out(&k->out, &a, b, h * Dh, D3, dqb);
        rows_out(&k->out, &a, b, D + h * Dh, D3, dkb);
        rows_out(&k->out, &a, b, 2 * D + h * Dh, D3, dvb);
    }
    if (cs) CT_FN(att_colsum_cross)(k);
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
        lse[r] = softmax_row(s + r * ld, kb, visible(i0, r, ld, causal), ld, NULL);
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
