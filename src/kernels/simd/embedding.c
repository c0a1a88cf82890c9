/* src/kernels/simd/embedding.c - SIMD embedding lookup (row gather) and its
 * gradient (scatter-add into the weight's shape).
 *
 * Ids are validated first, in order, with the reference's message for the
 * first one out of range. The gradient is deterministic and equal to the
 * reference's bit for bit: threads own disjoint column ranges of the embedding
 * dim D and each walks all positions in order, so every dW element receives
 * its additions in the reference's order, without atomics.
 *
 * BF16 / FP16 I/O (simd_lowp.h): the weight and the output of the lookup
 * may be 16-bit (rows copied as they are, or converted in registers when
 * the dtypes differ); the gradient reads a 16-bit dy, converted in
 * registers, into the FP32 dW.
 *
 * Rows mode (node ia[1] = 1, ct_embedding_rows): the weight holds rows
 * [row0 = ia[0], row0 + V) of the whole table; an id outside gives a zero
 * row and no gradient (no id is an error). */
#include <stdint.h>
#include <string.h>

#include "simd_lowp.h"

static ct_status em_check_ids(ct_kargs *k, const int32_t *ids, int64_t n, int64_t V) {
    if (k->node->ia[1]) return CT_OK; /* rows mode: every id is valid */
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return ct_set_error(k->ctx, CT_E_INVALID_ARG,
                                "embedding: id %d at position %lld is outside the vocabulary [0, %lld); check the "
                                "tokenizer or vocab_size",
                                (int)ids[i], (long long)i, (long long)V);
    return CT_OK;
}

static inline int em_threads(const ct_kargs *k, int64_t work) {
    return work >= 32768 && k->nthreads > 1 ? k->nthreads : 1;
}

ct_status CT_FN(embedding)(ct_kargs *k) {
    const ct_tensor *W = &k->in[0], *Y = &k->out;
    const ct_dtype low = ct_lowp_io(k, 1); /* W and Y (in[1]: the ids) */
    if (low == CT_F32 && (W->dtype != CT_F32 || Y->dtype != CT_F32)) return CT_E_UNSUPPORTED;
    const float *w = k->in[0].data;
    const int32_t *ids = k->in[1].data;
    int64_t V = k->in[0].shape[0], D = k->in[0].shape[1], n = ct_tensor_numel(&k->in[1]);
    float *y = k->out.data;
    CT_TRY(em_check_ids(k, ids, n, V));
    int nt = em_threads(k, n * D);
    if (low != CT_F32) {
        int64_t es = (int64_t)ct_dtype_size(Y->dtype);
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            int64_t r = ct_embedding_row(k->node, ids[i], V) * D;
            if (r < 0) memset((char *)Y->data + i * D * es, 0, (size_t)(D * es)); /* +0 in every float dtype */
            else if (W->dtype == Y->dtype)
                memcpy((char *)Y->data + i * D * es, (const char *)W->data + r * es, (size_t)(D * es));
            else if (Y->dtype == low)
                ct_f32_to_lp(w + r, (uint16_t *)Y->data + i * D, (size_t)D, low);
            else
                ct_lp_to_f32((const uint16_t *)W->data + r, y + i * D, (size_t)D, low);
        }
        return CT_OK;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        int64_t r = ct_embedding_row(k->node, ids[i], V);
        if (r < 0) memset(y + i * D, 0, (size_t)D * sizeof *y);
        else memcpy(y + i * D, w + r * D, (size_t)D * sizeof *y);
    }
    return CT_OK;
}

/* One position's row dy[i, d0:d1] into dw's row: stored over it (0 + dy, the first position of the
 * row: its sum starts from zero, as after the unfused kernel's memset) or added. */
static void em_put_cols(float *o, const float *g, const uint16_t *gl, ct_dtype dt, int first, int64_t d0, int64_t d1) {
    int64_t d = d0;
    for (; d + VW <= d1; d += VW) {
        vf x = gl ? vload_lp(gl + d, dt) : vload(g + d);
        vstore(o + d, vadd(first ? vzero() : vload(o + d), x));
    }
    if (d < d1) {
        int t = (int)(d1 - d);
        vf x = gl ? vtail_load_lp(gl + d, t, dt) : vtail_load(g + d, t);
        vtail_store(o + d, vadd(first ? vzero() : vtail_load(o + d, t), x), t);
    }
}

/* dw[row(id), d0:d1] += dy[i, d0:d1] for all positions i in order; dy FP32, or (dyl) BF16 / FP16 of dtype
 * dt, converted in registers */
static void em_scatter_cols(const ct_kargs *k, float *dw, const float *dy, const uint16_t *dyl, ct_dtype dt,
                            const int32_t *ids, int64_t n, int64_t V, int64_t D, int64_t d0, int64_t d1) {
    for (int64_t i = 0; i < n; i++) {
        int64_t row = ct_embedding_row(k->node, ids[i], V);
        if (row < 0) continue;
        em_put_cols(dw + row * D, dyl ? NULL : dy + i * D, dyl ? dyl + i * D : NULL, dt, 0, d0, d1);
    }
}

/* o[d0:d1] = e + x (e_first) or x + e: the add's operand order */
static void em_add_cols(float *o, const float *e, const float *x, int e_first, int64_t d0, int64_t d1) {
    int64_t d = d0;
    for (; d + VW <= d1; d += VW)
        vstore(o + d, e_first ? vadd(vload(e + d), vload(x + d)) : vadd(vload(x + d), vload(e + d)));
    if (d < d1) {
        int t = (int)(d1 - d);
        vf ev = vtail_load(e + d, t), xv = vtail_load(x + d, t);
        vtail_store(o + d, e_first ? vadd(ev, xv) : vadd(xv, ev), t);
    }
}

/* With an addend a (in[2], fusion embedding_bwd+add): dW = a + the scatter (ia[2] = 1: scatter + a, the add's
 * operand order). Bit for bit the unfused pair's: every touched row's sum starts from zero at its first
 * position (the scratch marks it), adds the later ones in position order, and only then meets a. Apart, the
 * rows are a's, copied, and the sums are made in dW's touched rows; in place (ia[3]: dW is a's buffer) they
 * are made in the scratch's accumulators, one per distinct row, and added to a's rows. Threads own column
 * ranges as in the plain kernel. */
static ct_status em_bwd_add(ct_kargs *k, int nt) {
    const float *a = k->in[2].data;
    const int32_t *ids = k->in[1].data;
    const ct_dtype dt = k->in[0].dtype;
    int64_t V = k->out.shape[0], D = k->out.shape[1], n = ct_tensor_numel(&k->in[1]);
    float *dw = k->out.data;
    const int inplace = k->node->ia[3] != 0, e_first = k->node->ia[2] != 0;
    const ct_emb_ws L = ct_embedding_bwd_ws(n, V, D, inplace);
    if (k->in[2].dtype != CT_F32 || !k->ws || k->ws_bytes < L.total || (dw == a) != inplace) return CT_E_UNSUPPORTED;
    const int64_t u = ct_embedding_bwd_marks(k->node, ids, n, V, k->ws, L);
    const uint8_t *first = k->ws;
    const int32_t *slot = (const int32_t *)(const void *)((const char *)k->ws + L.slot);
    const int64_t *rows = (const int64_t *)(const void *)((const char *)k->ws + L.rows);
    float *acc = (float *)(void *)((char *)k->ws + L.acc);
    int64_t nvec = (D + VW - 1) / VW;
    int nparts = (int)CT_MIN((int64_t)nt, nvec);
    if (nparts < 1) nparts = 1;
#pragma omp parallel num_threads(nt)
    {
        if (!inplace) {
#pragma omp for schedule(static)
            for (int64_t v = 0; v < V; v++) memcpy(dw + v * D, a + v * D, (size_t)D * sizeof *dw);
            /* implicit barrier: every row holds a before any scatter */
        }
#pragma omp for schedule(static)
        for (int p = 0; p < nparts; p++) {
            int64_t d0 = nvec * p / nparts * VW, d1 = CT_MIN(D, nvec * (p + 1) / nparts * VW);
            for (int64_t i = 0; i < n; i++) {
                if (first[i] == CT_EMB_SKIP) continue;
                float *o = inplace ? acc + (int64_t)slot[i] * D : dw + ct_embedding_row(k->node, ids[i], V) * D;
                if (dt == CT_F32) em_put_cols(o, (const float *)k->in[0].data + i * D, NULL, dt, first[i], d0, d1);
                else em_put_cols(o, NULL, (const uint16_t *)k->in[0].data + i * D, dt, first[i], d0, d1);
            }
            if (inplace)
                for (int64_t j = 0; j < u; j++) em_add_cols(dw + rows[j] * D, acc + j * D, a + rows[j] * D, e_first, d0, d1);
            else
                for (int64_t i = 0; i < n; i++) {
                    if (first[i] != CT_EMB_FIRST) continue;
                    int64_t r = ct_embedding_row(k->node, ids[i], V) * D;
                    em_add_cols(dw + r, dw + r, a + r, e_first, d0, d1);
                }
        }
    }
    return CT_OK;
}

/* in: dy, ids[, a] -> dW (V, D), FP32 (a parameter's gradient); with a: a + dW (em_bwd_add) */
ct_status CT_FN(embedding_bwd)(ct_kargs *k) {
    if ((k->in[0].dtype != CT_F32 && !ct_dtype_is_low(k->in[0].dtype)) || k->out.dtype != CT_F32) return CT_E_UNSUPPORTED;
    const float *dy = k->in[0].data;
    const int32_t *ids = k->in[1].data;
    int64_t V = k->out.shape[0], D = k->out.shape[1], n = ct_tensor_numel(&k->in[1]);
    float *dw = k->out.data;
    CT_TRY(em_check_ids(k, ids, n, V));
    int nt = em_threads(k, CT_MAX(n, V) * D);
    if (k->node->n_in > 2) return em_bwd_add(k, nt);
    /* column ranges: multiples of VW, at most one per thread */
    int64_t nvec = (D + VW - 1) / VW;
    int nparts = (int)CT_MIN((int64_t)nt, nvec);
    if (nparts < 1) nparts = 1;
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(static)
        for (int64_t v = 0; v < V; v++) memset(dw + v * D, 0, (size_t)D * sizeof *dw);
        /* implicit barrier: all of dW is zero before any scatter */
#pragma omp for schedule(static)
        for (int p = 0; p < nparts; p++) {
            int64_t d0 = nvec * p / nparts * VW, d1 = CT_MIN(D, nvec * (p + 1) / nparts * VW);
            em_scatter_cols(k, dw, dy, k->in[0].dtype != CT_F32 ? (const uint16_t *)k->in[0].data : NULL, k->in[0].dtype,
                            ids, n, V, D, d0, d1);
        }
    }
    return CT_OK;
}
