/* src/kernels/ref/cross_entropy_vp.c - the local arithmetic of the
 * vocabulary-parallel cross entropy (CT_OP_CROSS_ENTROPY_VP): this rank's
 * logits (..., Vl) are the global columns [col0, col0 + Vl); global columns
 * >= vocab are padding, absent from the softmax and the loss. The forward
 * kernel (graph/tp_kernels.c) runs the steps below with the tensor group's
 * allreduces between them (kernels never call the communicator); the
 * backward needs no collective and lives here whole.
 *
 * Semantics: exactly ct_cross_entropy's over the vocab real classes (kernels/
 * ref/softmax.c): mean over rows whose label is not ignore_index of
 * (1-e) * (lse - x_label) + e * (lse - mean_c x_c), 0 when every row is
 * ignored. aux of the forward node: 4 arrays of R doubles: the row max (over
 * the group), the sum of exp(x - max) (the log-sum-exp once the loss is
 * computed), the label's logit and the sum of the real logits (summed over
 * the group). */
#include <math.h>

#include "kernels/kernels.h"

typedef struct {
    const float *x;
    const int32_t *t;
    int64_t R, Vl, nreal, col0, vocab, ignore;
} ce_vp;

static ce_vp ce_vp_of(const ct_kargs *k, const ct_tensor *logits, const ct_tensor *labels) {
    ce_vp c;
    c.x = logits->data;
    c.t = labels->data;
    c.Vl = logits->shape[logits->ndim - 1];
    c.R = ct_tensor_numel(labels);
    c.vocab = k->node->ia[1];
    c.col0 = k->node->ia[2];
    c.ignore = k->node->ia[0];
    c.nreal = CT_MAX((int64_t)0, CT_MIN(c.Vl, c.vocab - c.col0)); /* columns [nreal, Vl): padding */
    return c;
}

static ct_status labels_ok(ct_kargs *k, const ce_vp *c, int64_t *count) {
    int64_t n = 0;
    for (int64_t r = 0; r < c->R; r++) {
        if (c->t[r] == c->ignore) continue;
        if (c->t[r] < 0 || c->t[r] >= c->vocab)
            return ct_set_error(k->ctx, CT_E_INVALID_ARG,
                                "cross_entropy_vp: label %d in row %lld is outside [0, %lld) and is not the "
                                "ignore_index %lld; check the labels or the vocabulary size",
                                (int)c->t[r], (long long)r, (long long)c->vocab, (long long)c->ignore);
        n++;
    }
    *count = n;
    return CT_OK;
}

ct_status ct_ce_vp_check_labels(ct_kargs *k, int64_t *count) {
    ce_vp c = ce_vp_of(k, &k->in[0], &k->in[1]);
    return labels_ok(k, &c, count);
}

void ct_ce_vp_local_max(const ct_kargs *k, double *aux) {
    ce_vp c = ce_vp_of(k, &k->in[0], &k->in[1]);
    for (int64_t r = 0; r < c.R; r++) {
        const float *xr = c.x + r * c.Vl;
        float m = -INFINITY;
        for (int64_t j = 0; j < c.nreal; j++) m = xr[j] > m ? xr[j] : m;
        aux[r] = c.t[r] == c.ignore ? 0.0 : (double)m; /* ignored rows: a finite placeholder */
    }
}

void ct_ce_vp_local_sums(const ct_kargs *k, double *aux) {
    ce_vp c = ce_vp_of(k, &k->in[0], &k->in[1]);
    double *s = aux + c.R, *tgt = aux + 2 * c.R, *sum = aux + 3 * c.R;
    for (int64_t r = 0; r < c.R; r++) {
        const float *xr = c.x + r * c.Vl;
        s[r] = tgt[r] = sum[r] = 0;
        if (c.t[r] == c.ignore) continue;
        double m = aux[r]; /* the global max */
        for (int64_t j = 0; j < c.nreal; j++) {
            s[r] += exp((double)xr[j] - m);
            sum[r] += xr[j];
        }
        int64_t lj = (int64_t)c.t[r] - c.col0;
        if (lj >= 0 && lj < c.nreal) tgt[r] = xr[lj];
    }
}

float ct_ce_vp_loss(const ct_kargs *k, double *aux, int64_t count) {
    ce_vp c = ce_vp_of(k, &k->in[0], &k->in[1]);
    double *s = aux + c.R, *tgt = aux + 2 * c.R, *sum = aux + 3 * c.R;
    double eps = k->node->fa[0], total = 0;
    for (int64_t r = 0; r < c.R; r++) {
        if (c.t[r] == c.ignore) continue;
        s[r] = aux[r] + log(s[r]); /* the log-sum-exp, for the backward */
        total += (1.0 - eps) * (s[r] - tgt[r]) + eps * (s[r] - sum[r] / (double)c.vocab);
    }
    return count ? (float)(total / (double)count) : 0.0f;
}

/* in: dloss (scalar), logits, labels, fwd (its aux: the log-sum-exp per row)
 * -> dlogits: (softmax - (1-e) onehot - e/vocab) * dloss / count on the real
 * columns, 0 on padding columns and ignored rows. */
ct_status ct_k_cross_entropy_vp_bwd_ref(ct_kargs *k) {
    ce_vp c = ce_vp_of(k, &k->in[1], &k->in[2]);
    int64_t count;
    CT_TRY(labels_ok(k, &c, &count));
    const double *lse = (const double *)k->in_aux[3] + c.R;
    double eps = k->node->fa[0], scale = count ? *(const float *)k->in[0].data / (double)count : 0.0;
    float *dx = k->out.data;
    for (int64_t r = 0; r < c.R; r++) {
        float *dr = dx + r * c.Vl;
        const float *xr = c.x + r * c.Vl;
        int ign = c.t[r] == c.ignore;
        for (int64_t j = 0; j < c.Vl; j++) {
            if (ign || j >= c.nreal) {
                dr[j] = 0.0f;
                continue;
            }
            double p = exp((double)xr[j] - lse[r]);
            double target = (c.col0 + j == c.t[r] ? 1.0 - eps : 0.0) + eps / (double)c.vocab;
            dr[j] = (float)((p - target) * scale);
        }
    }
    return CT_OK;
}
