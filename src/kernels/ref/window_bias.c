/* src/kernels/ref/window_bias.c - Swin's relative position bias with the
 * shifted-window mask (CT_OP_WINDOW_BIAS) and its table gradient. */
#include <string.h>

#include "kernels/kernels.h"

/* Region (0..8) of the shifted map position (ph, pw) of an H x W map: per axis,
 * 0 before the last `w` positions, 1 up to the last `s`, 2 after
 * (torchvision's slices (0, -w), (-w, -s), (-s, None)). */
static int region(int64_t ph, int64_t pw, int64_t H, int64_t W, int64_t w, int64_t s) {
    int rh = ph < H - w ? 0 : ph < H - s ? 1 : 2, rw = pw < W - w ? 0 : pw < W - s ? 1 : 2;
    return rh * 3 + rw;
}

/* Runs BODY for every (window win, token i, token j) with the table `row` of
 * their relative position, `masked` (shifted-window regions differ) and `at`,
 * the output index of head 0 (`heads` must be in scope). */
#define FOR_WINDOW_PAIRS(k, BODY)                                                               \
    do {                                                                                        \
        int64_t w_ = (k)->node->ia[0], s_ = (k)->node->ia[1], nh_ = (k)->node->ia[2];          \
        int64_t nw_ = (k)->node->ia[3], n_ = w_ * w_, H_ = nh_ * w_, W_ = nw_ * w_;             \
        for (int64_t win = 0; win < nh_ * nw_; win++) {                                         \
            int64_t oh_ = win / nw_ * w_, ow_ = win % nw_ * w_;                                 \
            for (int64_t i = 0; i < n_; i++) {                                                  \
                int64_t ri = i / w_, ci = i % w_;                                               \
                int gi = s_ > 0 ? region(oh_ + ri, ow_ + ci, H_, W_, w_, s_) : 0;               \
                for (int64_t j = 0; j < n_; j++) {                                              \
                    int64_t rj = j / w_, cj = j % w_;                                           \
                    int64_t row = (ri - rj + w_ - 1) * (2 * w_ - 1) + (ci - cj + w_ - 1);       \
                    int masked = s_ > 0 && region(oh_ + rj, ow_ + cj, H_, W_, w_, s_) != gi;    \
                    int64_t at = (win * heads * n_ + i) * n_ + j; /* + h * n_ * n_ */            \
                    (void)masked;                                                               \
                    BODY                                                                        \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
    } while (0)

ct_status ct_k_window_bias_ref(ct_kargs *k) {
    const float *t = k->in[0].data;
    float *y = k->out.data;
    int64_t heads = k->in[0].shape[1], nn = k->out.shape[2] * k->out.shape[3];
    FOR_WINDOW_PAIRS(k, {
        for (int64_t h = 0; h < heads; h++) y[at + h * nn] = t[row * heads + h] + (masked ? -100.0f : 0.0f);
    });
    return CT_OK;
}

/* d_table[row, h] = sum of dy over the (window, i, j) reading that row (double sums). */
ct_status ct_k_window_bias_bwd_ref(ct_kargs *k) {
    const float *dy = k->in[0].data;
    float *dt = k->out.data;
    int64_t heads = k->out.shape[1], L = k->out.shape[0], nn = k->in[0].shape[2] * k->in[0].shape[3];
    double *acc = k->ws; /* L * heads doubles (ct_ws_sum) */
    memset(acc, 0, sizeof *acc * (size_t)(L * heads));
    FOR_WINDOW_PAIRS(k, {
        for (int64_t h = 0; h < heads; h++) acc[row * heads + h] += dy[at + h * nn];
    });
    for (int64_t e = 0; e < L * heads; e++) dt[e] = (float)acc[e];
    return CT_OK;
}
