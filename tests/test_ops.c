/* tests/test_ops.c - every op, generated from one case table:
 *  1. the backward of every op against 4-point finite differences (reference
 *     kernels, loss = sum(op(...) * R) for a fixed random R);
 *  2. every fast path (AVX2, AVX-512 where the CPU has it, oneDNN) against
 *     the reference kernels: forward output and every gradient;
 *  3. the fast context really ran a fast kernel for the op's node;
 *  4. coverage: every op of the op table (forward and backward) runs in the
 *     compiled plan of some case, so a new op fails here until it has a case.
 *     Backward ops are covered through their forward op's case (its finite
 *     difference check runs them); exempt are the leaves (input, param,
 *     buffer), tp_copy and tp_reduce, which exist only with a tensor group
 *     (tests/test_tp_mpi.c), and cast, which only the autocast pass inserts (test_amp.c and
 *     test_convert.c cover it).
 * A case builds its op from parameters (so every float input gets a
 * gradient) and returns the op's output node. */
#include "test.h"
#include "graph/plan.h" /* the ops of a compiled plan's nodes, for the coverage check */

#ifndef CT_TRY /* core/internal.h (through graph/plan.h) has the same one */
#define CT_TRY(expr)                      \
    do {                                  \
        ct_status s_ = (expr);            \
        if (s_ != CT_OK) return s_;       \
    } while (0)
#endif

typedef ct_status (*build_fn)(ct_graph *g, ct_node *out);

/* uniform(-1, 1) parameters of a given shape */
static ct_status P(ct_graph *g, const char *name, int nd, const int64_t *s, ct_node *o) {
    return ct_param(g, name, nd, s, CT_INIT_KAIMING_UNIFORM, 1, o);
}
#define S(...) (int64_t[]){__VA_ARGS__}
#define ND(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

#define CASE(name, ...)                                    \
    static ct_status name(ct_graph *g, ct_node *out) {     \
        ct_node a, b, c, d, e;                             \
        (void)a; (void)b; (void)c; (void)d; (void)e;       \
        __VA_ARGS__;                                       \
        return CT_OK;                                      \
    }

CASE(c_linear, CT_TRY(P(g, "x", ND(3, 4, 7), &a)); CT_TRY(P(g, "w", ND(5, 7), &b)); CT_TRY(P(g, "b", ND(5), &c));
     CT_TRY(ct_linear(g, a, b, c, out)))
CASE(c_linear_nobias, CT_TRY(P(g, "x", ND(6, 9), &a)); CT_TRY(P(g, "w", ND(3, 9), &b)); CT_TRY(ct_linear(g, a, b, CT_NONE, out)))
CASE(c_matmul_nn, CT_TRY(P(g, "a", ND(5, 7), &a)); CT_TRY(P(g, "b", ND(7, 3), &b)); CT_TRY(ct_matmul(g, a, b, 0, 0, out)))
CASE(c_matmul_tn, CT_TRY(P(g, "a", ND(7, 5), &a)); CT_TRY(P(g, "b", ND(7, 3), &b)); CT_TRY(ct_matmul(g, a, b, 1, 0, out)))
CASE(c_matmul_nt, CT_TRY(P(g, "a", ND(5, 7), &a)); CT_TRY(P(g, "b", ND(3, 7), &b)); CT_TRY(ct_matmul(g, a, b, 0, 1, out)))
CASE(c_matmul_tt, CT_TRY(P(g, "a", ND(7, 5), &a)); CT_TRY(P(g, "b", ND(3, 7), &b)); CT_TRY(ct_matmul(g, a, b, 1, 1, out)))
CASE(c_matmul_batched, CT_TRY(P(g, "a", ND(2, 3, 4, 5), &a)); CT_TRY(P(g, "b", ND(2, 3, 5, 6), &b));
     CT_TRY(ct_matmul(g, a, b, 0, 0, out)))
CASE(c_matmul_bcast, CT_TRY(P(g, "a", ND(3, 4, 5), &a)); CT_TRY(P(g, "b", ND(6, 5), &b)); CT_TRY(ct_matmul(g, a, b, 0, 1, out)))
CASE(c_matmul_bcast_ta, CT_TRY(P(g, "a", ND(3, 5, 4), &a)); CT_TRY(P(g, "b", ND(5, 6), &b)); CT_TRY(ct_matmul(g, a, b, 1, 0, out)))
CASE(c_conv, CT_TRY(P(g, "x", ND(2, 3, 7, 6), &a)); CT_TRY(P(g, "w", ND(4, 3, 3, 3), &b)); CT_TRY(P(g, "b", ND(4), &c));
     CT_TRY(ct_conv2d(g, a, b, c, 1, 1, 1, 1, out)))
/* 1-2 input channels, stride 1: the weight gradient runs the direct SIMD kernel
 * (simd/conv.c): 3x3 with a bias; 5x5 dilated over two channels; 7 wide with
 * rows longer than a vector; 6 wide (the per-tap path) */
CASE(c_conv_c1, CT_TRY(P(g, "x", ND(2, 1, 7, 9), &a)); CT_TRY(P(g, "w", ND(4, 1, 3, 3), &b)); CT_TRY(P(g, "b", ND(4), &c));
     CT_TRY(ct_conv2d(g, a, b, c, 1, 1, 1, 1, out)))
CASE(c_conv_c2_d2, CT_TRY(P(g, "x", ND(3, 2, 9, 11), &a)); CT_TRY(P(g, "w", ND(3, 2, 5, 5), &b));
     CT_TRY(ct_conv2d(g, a, b, CT_NONE, 1, 3, 2, 1, out)))
CASE(c_conv_c1_k7, CT_TRY(P(g, "x", ND(2, 1, 9, 37), &a)); CT_TRY(P(g, "w", ND(5, 1, 7, 7), &b));
     CT_TRY(ct_conv2d(g, a, b, CT_NONE, 1, 2, 1, 1, out)))
CASE(c_conv_c1_k6, CT_TRY(P(g, "x", ND(2, 1, 8, 22), &a)); CT_TRY(P(g, "w", ND(3, 1, 2, 6), &b));
     CT_TRY(ct_conv2d(g, a, b, CT_NONE, 1, 0, 1, 1, out)))
CASE(c_conv_s2_d2_g2, CT_TRY(P(g, "x", ND(2, 4, 9, 8), &a)); CT_TRY(P(g, "w", ND(6, 2, 3, 3), &b));
     CT_TRY(ct_conv2d(g, a, b, CT_NONE, 2, 2, 2, 2, out)))
CASE(c_maxpool, CT_TRY(P(g, "x", ND(2, 3, 6, 6), &a)); CT_TRY(ct_maxpool2d(g, a, 2, 2, 0, out)))
CASE(c_maxpool_pad, CT_TRY(P(g, "x", ND(2, 2, 7, 7), &a)); CT_TRY(ct_maxpool2d(g, a, 3, 2, 1, out)))
CASE(c_avgpool, CT_TRY(P(g, "x", ND(2, 3, 7, 7), &a)); CT_TRY(ct_avgpool2d(g, a, 3, 2, 1, out)))
/* per-axis kernel / stride / padding / dilation, ceil_mode (last windows run
 * past the padding), count_include_pad on and off */
static ct_status pool_ex(ct_graph *g, int avg, const int k[8], int ceil_mode, int include_pad, ct_node x, ct_node *out) {
    ct_pool2d_opts o;
    ct_pool2d_opts_default(&o, 1);
    o.kernel_h = k[0]; o.kernel_w = k[1]; o.stride_h = k[2]; o.stride_w = k[3];
    o.pad_h = k[4]; o.pad_w = k[5]; o.dilation_h = k[6]; o.dilation_w = k[7];
    o.ceil_mode = ceil_mode;
    o.count_include_pad = include_pad;
    return avg ? ct_avgpool2d_ex(g, x, &o, out) : ct_maxpool2d_ex(g, x, &o, out);
}
CASE(c_maxpool_ex, CT_TRY(P(g, "x", ND(2, 2, 7, 8), &a)); CT_TRY(pool_ex(g, 0, (int[]){3, 2, 2, 1, 1, 0, 1, 2}, 1, 1, a, out)))
CASE(c_maxpool_ceil, CT_TRY(P(g, "x", ND(2, 3, 6, 6), &a)); CT_TRY(pool_ex(g, 0, (int[]){3, 3, 2, 2, 1, 1, 1, 1}, 1, 1, a, out)))
CASE(c_avgpool_ceil, CT_TRY(P(g, "x", ND(2, 2, 6, 7), &a)); CT_TRY(pool_ex(g, 1, (int[]){3, 3, 2, 2, 1, 1, 1, 1}, 1, 1, a, out)))
CASE(c_avgpool_ex_nopad, CT_TRY(P(g, "x", ND(2, 2, 7, 9), &a)); CT_TRY(pool_ex(g, 1, (int[]){2, 3, 2, 2, 1, 1, 2, 1}, 1, 0, a, out)))
/* channels-last pooling (ct_pool2d_opts.channels_last): x (N, H, W, C), C not
 * a multiple of the vector width (3, 17, 20) and wider than one (32, 64);
 * the window configurations above (a 16x16 window, 256 taps with an int32
 * argmax, is in pool_channels_last_equals_nchw: its finite differences meet
 * near ties) */
static ct_status pool_cl(ct_graph *g, int avg, const int k[8], int ceil_mode, int include_pad, ct_node x, ct_node *out) {
    ct_pool2d_opts o;
    ct_pool2d_opts_default(&o, 1);
    o.kernel_h = k[0]; o.kernel_w = k[1]; o.stride_h = k[2]; o.stride_w = k[3];
    o.pad_h = k[4]; o.pad_w = k[5]; o.dilation_h = k[6]; o.dilation_w = k[7];
    o.ceil_mode = ceil_mode;
    o.count_include_pad = include_pad;
    o.channels_last = 1;
    return avg ? ct_avgpool2d_ex(g, x, &o, out) : ct_maxpool2d_ex(g, x, &o, out);
}
CASE(c_maxpool_cl, CT_TRY(P(g, "x", ND(2, 6, 6, 3), &a)); CT_TRY(pool_cl(g, 0, (int[]){2, 2, 2, 2, 0, 0, 1, 1}, 0, 1, a, out)))
CASE(c_maxpool_cl_pad, CT_TRY(P(g, "x", ND(1, 7, 9, 17), &a)); CT_TRY(pool_cl(g, 0, (int[]){3, 3, 2, 2, 1, 1, 1, 1}, 0, 1, a, out)))
CASE(c_maxpool_cl_ex, CT_TRY(P(g, "x", ND(2, 7, 8, 32), &a)); CT_TRY(pool_cl(g, 0, (int[]){3, 2, 2, 1, 1, 0, 1, 2}, 1, 1, a, out)))
CASE(c_maxpool_cl_ceil, CT_TRY(P(g, "x", ND(1, 6, 7, 64), &a)); CT_TRY(pool_cl(g, 0, (int[]){3, 3, 2, 2, 1, 1, 1, 1}, 1, 1, a, out)))
CASE(c_avgpool_cl, CT_TRY(P(g, "x", ND(2, 7, 7, 17), &a)); CT_TRY(pool_cl(g, 1, (int[]){3, 3, 2, 2, 1, 1, 1, 1}, 0, 1, a, out)))
CASE(c_avgpool_cl_s1, CT_TRY(P(g, "x", ND(2, 5, 6, 3), &a)); CT_TRY(pool_cl(g, 1, (int[]){3, 3, 1, 1, 1, 1, 1, 1}, 0, 0, a, out)))
CASE(c_avgpool_cl_ceil, CT_TRY(P(g, "x", ND(2, 6, 7, 3), &a)); CT_TRY(pool_cl(g, 1, (int[]){3, 3, 2, 2, 1, 1, 1, 1}, 1, 1, a, out)))
CASE(c_avgpool_cl_ex_nopad, CT_TRY(P(g, "x", ND(2, 7, 9, 20), &a)); CT_TRY(pool_cl(g, 1, (int[]){2, 3, 2, 2, 1, 1, 2, 1}, 1, 0, a, out)))
CASE(c_gap, CT_TRY(P(g, "x", ND(2, 3, 5, 4), &a)); CT_TRY(ct_global_avgpool(g, a, out)))
CASE(c_batchnorm, CT_TRY(P(g, "x", ND(4, 3, 5, 5), &a)); CT_TRY(P(g, "g", ND(3), &b)); CT_TRY(P(g, "b", ND(3), &c));
     CT_TRY(ct_buffer(g, "rm", ND(3), CT_INIT_ZEROS, &d)); CT_TRY(ct_buffer(g, "rv", ND(3), CT_INIT_ONES, &e));
     CT_TRY(ct_batchnorm(g, a, b, c, d, e, 0.1f, 1e-5f, out)))
CASE(c_batchnorm_2d, CT_TRY(P(g, "x", ND(8, 5), &a)); CT_TRY(P(g, "g", ND(5), &b)); CT_TRY(P(g, "b", ND(5), &c));
     CT_TRY(ct_buffer(g, "rm", ND(5), CT_INIT_ZEROS, &d)); CT_TRY(ct_buffer(g, "rv", ND(5), CT_INIT_ONES, &e));
     CT_TRY(ct_batchnorm(g, a, b, c, d, e, 0.1f, 1e-5f, out)))
/* 2-D inputs with M in the thousands: the SIMD rows path (simd/norm.c: fixed row pieces, the last ragged;
   C below and above the vector widths) */
#define BN2D(name, M, C)                                                                                        \
    CASE(name, CT_TRY(P(g, "x", ND(M, C), &a)); CT_TRY(P(g, "g", ND(C), &b)); CT_TRY(P(g, "b", ND(C), &c));   \
         CT_TRY(ct_buffer(g, "rm", ND(C), CT_INIT_ZEROS, &d)); CT_TRY(ct_buffer(g, "rv", ND(C), CT_INIT_ONES, &e)); \
         CT_TRY(ct_batchnorm(g, a, b, c, d, e, 0.1f, 1e-5f, out)))
BN2D(c_batchnorm_rows_c1, 2500, 1)
BN2D(c_batchnorm_rows_c17, 1300, 17)
BN2D(c_batchnorm_rows_c100, 730, 100)
CASE(c_layernorm, CT_TRY(P(g, "x", ND(3, 4, 9), &a)); CT_TRY(P(g, "g", ND(9), &b)); CT_TRY(P(g, "b", ND(9), &c));
     CT_TRY(ct_layernorm(g, a, b, c, 1e-5f, out)))
CASE(c_relu, CT_TRY(P(g, "x", ND(5, 13), &a)); CT_TRY(ct_relu(g, a, out)))
CASE(c_gelu, CT_TRY(P(g, "x", ND(5, 13), &a)); CT_TRY(ct_gelu(g, a, 0, out)))
CASE(c_gelu_tanh, CT_TRY(P(g, "x", ND(5, 13), &a)); CT_TRY(ct_gelu(g, a, 1, out)))
CASE(c_silu, CT_TRY(P(g, "x", ND(5, 13), &a)); CT_TRY(ct_silu(g, a, out)))
CASE(c_sigmoid, CT_TRY(P(g, "x", ND(5, 13), &a)); CT_TRY(ct_sigmoid(g, a, out)))
CASE(c_tanh, CT_TRY(P(g, "x", ND(5, 13), &a)); CT_TRY(ct_tanh(g, a, out)))
CASE(c_scale, CT_TRY(P(g, "x", ND(5, 13), &a)); CT_TRY(ct_scale(g, a, -2.5f, out)))
CASE(c_add_bias, CT_TRY(P(g, "x", ND(4, 19), &a)); CT_TRY(P(g, "b", ND(19), &b)); CT_TRY(ct_add(g, a, b, out)))
CASE(c_sub_same, CT_TRY(P(g, "x", ND(4, 19), &a)); CT_TRY(P(g, "y", ND(4, 19), &b)); CT_TRY(ct_sub(g, a, b, out)))
CASE(c_mul_col, CT_TRY(P(g, "x", ND(4, 3, 5), &a)); CT_TRY(P(g, "y", ND(4, 1, 5), &b)); CT_TRY(ct_mul(g, a, b, out)))
CASE(c_div, CT_TRY(P(g, "x", ND(3, 7), &a)); CT_TRY(P(g, "y", ND(3, 7), &b)); CT_TRY(ct_scale(g, b, 0.25f, &c));
     CT_TRY(ct_relu(g, b, &d)); CT_TRY(ct_add(g, d, c, &e)); /* keep |y| away from 0: y' = relu(y) + y/4 + 2 */
     CT_TRY(ct_param(g, "two", ND(1), CT_INIT_ONES, 1, &d)); CT_TRY(ct_add(g, e, d, &c)); CT_TRY(ct_add(g, c, d, &e));
     CT_TRY(ct_div(g, a, e, out)))
CASE(c_sum_rows, CT_TRY(P(g, "x", ND(6, 11), &a)); CT_TRY(ct_sum(g, a, 1u, 0, out)))
CASE(c_mean_last_keep, CT_TRY(P(g, "x", ND(3, 4, 5), &a)); CT_TRY(ct_mean(g, a, 4u, 1, out)))
CASE(c_sum_nchw, CT_TRY(P(g, "x", ND(2, 3, 4, 5), &a)); CT_TRY(ct_sum(g, a, 1u | 4u | 8u, 0, out)))
CASE(c_reshape_transpose, CT_TRY(P(g, "x", ND(2, 3, 4), &a)); CT_TRY(ct_reshape(g, a, ND(6, 4), &b));
     CT_TRY(ct_transpose(g, b, (int[]){1, 0}, out)))
CASE(c_transpose3, CT_TRY(P(g, "x", ND(2, 3, 4, 5), &a)); CT_TRY(ct_transpose(g, a, (int[]){2, 0, 3, 1}, out)))
CASE(c_concat, CT_TRY(P(g, "x", ND(2, 3, 4), &a)); CT_TRY(P(g, "y", ND(2, 1, 4), &b)); CT_TRY(P(g, "z", ND(2, 2, 4), &c));
     CT_TRY(ct_concat(g, 3, (ct_node[]){a, b, c}, 1, out)))
CASE(c_slice, CT_TRY(P(g, "x", ND(3, 8, 2), &a)); CT_TRY(ct_slice(g, a, 1, 2, 7, out)))
/* zeros around (Swin's padding to the window); the loss weights every output, the zeros included */
CASE(c_pad, CT_TRY(P(g, "x", ND(2, 5, 3, 4), &a)); CT_TRY(ct_pad(g, a, 1, 0, 2, &b)); CT_TRY(ct_pad(g, b, 2, 1, 3, &c));
     CT_TRY(ct_scale(g, c, 1.25f, out)))
CASE(c_flatten, CT_TRY(P(g, "x", ND(2, 3, 2, 2), &a)); CT_TRY(ct_flatten(g, a, &b)); CT_TRY(ct_scale(g, b, 1.5f, out)))
CASE(c_softmax, CT_TRY(P(g, "x", ND(4, 10), &a)); CT_TRY(ct_softmax(g, a, out)))
CASE(c_log_softmax, CT_TRY(P(g, "x", ND(4, 10), &a)); CT_TRY(ct_log_softmax(g, a, out)))
CASE(c_dropout, CT_TRY(P(g, "x", ND(6, 40), &a)); CT_TRY(ct_dropout(g, a, 0.3f, out)))
CASE(c_drop_path, CT_TRY(P(g, "x", ND(8, 3, 5, 7), &a)); CT_TRY(ct_drop_path(g, a, 0.4f, out)))
CASE(c_drop_path_rows, CT_TRY(P(g, "x", ND(16, 19), &a)); CT_TRY(ct_drop_path(g, a, 0.5f, out)))
CASE(c_conv_depthwise, CT_TRY(P(g, "x", ND(2, 6, 9, 8), &a)); CT_TRY(P(g, "w", ND(6, 1, 5, 5), &b));
     CT_TRY(P(g, "b", ND(6), &c)); CT_TRY(ct_conv2d(g, a, b, c, 2, 2, 1, 6, out)))
/* channels-last convolutions (ct_conv2d_ex, x and y NHWC): each "_cl" case
 * is its NCHW partner (same parameters: x (N, C, H, W), w, b) with x
 * transposed to NHWC, the convolution run channels last and its output
 * transposed back, so TEST(conv_channels_last_matches_nchw) compares them */
static ct_status conv_cl(ct_graph *g, ct_node x, ct_node w, ct_node b, int s, int p, int d, int gr, ct_node *out) {
    ct_node xt, y;
    ct_conv2d_opts o = {.stride = s, .pad = p, .dilation = d, .groups = gr, .channels_last = 1};
    CT_TRY(ct_transpose(g, x, (int[]){0, 2, 3, 1}, &xt));
    CT_TRY(ct_conv2d_ex(g, xt, w, b, &o, &y));
    return ct_transpose(g, y, (int[]){0, 3, 1, 2}, out);
}
CASE(c_conv_cl, CT_TRY(P(g, "x", ND(2, 3, 7, 6), &a)); CT_TRY(P(g, "w", ND(4, 3, 3, 3), &b)); CT_TRY(P(g, "b", ND(4), &c));
     CT_TRY(conv_cl(g, a, b, c, 1, 1, 1, 1, out)))
CASE(c_conv_s2_d2_g2_cl, CT_TRY(P(g, "x", ND(2, 4, 9, 8), &a)); CT_TRY(P(g, "w", ND(6, 2, 3, 3), &b));
     CT_TRY(conv_cl(g, a, b, CT_NONE, 2, 2, 2, 2, out)))
CASE(c_conv_c1_cl, CT_TRY(P(g, "x", ND(2, 1, 7, 9), &a)); CT_TRY(P(g, "w", ND(4, 1, 3, 3), &b)); CT_TRY(P(g, "b", ND(4), &c));
     CT_TRY(conv_cl(g, a, b, c, 1, 1, 1, 1, out)))
CASE(c_conv_depthwise_cl, CT_TRY(P(g, "x", ND(2, 6, 9, 8), &a)); CT_TRY(P(g, "w", ND(6, 1, 5, 5), &b));
     CT_TRY(P(g, "b", ND(6), &c)); CT_TRY(conv_cl(g, a, b, c, 2, 2, 1, 6, out)))
CASE(c_window_bias, CT_TRY(P(g, "t", ND(9, 2), &a)); CT_TRY(ct_window_bias(g, a, 2, 0, 1, 2, out)))
CASE(c_window_bias_shift, CT_TRY(P(g, "t", ND(25, 3), &a)); CT_TRY(ct_window_bias(g, a, 3, 1, 2, 3, &b));
     CT_TRY(ct_softmax(g, b, out))) /* as in Swin: the -100 mask would drown finite differences of a sum */
CASE(c_embedding, CT_TRY(P(g, "w", ND(11, 6), &a)); CT_TRY(ct_input(g, "ids", CT_I32, 2, S(3, 4), &b));
     CT_TRY(ct_embedding(g, a, b, out)))
CASE(c_layernorm_nobias, CT_TRY(P(g, "x", ND(3, 4, 9), &a)); CT_TRY(P(g, "g", ND(9), &b));
     CT_TRY(ct_layernorm(g, a, b, CT_NONE, 1e-5f, out)))
CASE(c_attention_causal, CT_TRY(P(g, "qkv", ND(2, 5, 24), &a)); CT_TRY(ct_attention(g, a, 2, 1, CT_NONE, out)))
CASE(c_attention_mask, CT_TRY(P(g, "qkv", ND(2, 5, 18), &a)); CT_TRY(ct_input(g, "key_valid", CT_I32, 2, S(2, 5), &b));
     CT_TRY(ct_attention(g, a, 3, 0, b, out)))
/* cross entropy is a scalar loss itself: the harness multiplies by R[0] */
CASE(c_cross_entropy, CT_TRY(P(g, "x", ND(6, 7), &a)); CT_TRY(ct_input(g, "labels", CT_I32, 1, S(6), &b));
     CT_TRY(ct_cross_entropy(g, a, b, 0.1f, 3, out)))
/* vocabulary-parallel cross entropy without a tensor group: 9 columns, the
 * last 2 padding (vocab 7); embedding_rows: rows [3, 8) of an 11-row table,
 * the other ids give zero rows */
CASE(c_cross_entropy_vp, CT_TRY(P(g, "x", ND(6, 9), &a)); CT_TRY(ct_input(g, "labels", CT_I32, 1, S(6), &b));
     CT_TRY(ct_cross_entropy_vp(g, a, b, 0.1f, 3, 7, out)))
CASE(c_embedding_rows, CT_TRY(P(g, "w", ND(5, 6), &a)); CT_TRY(ct_input(g, "ids", CT_I32, 2, S(3, 4), &b));
     CT_TRY(ct_embedding_rows(g, a, b, 3, out)))
/* N-D logits (B, T, V), classes last, labels (B, T) */
CASE(c_cross_entropy_3d, CT_TRY(P(g, "x", ND(2, 3, 7), &a)); CT_TRY(ct_input(g, "labels", CT_I32, 2, S(2, 3), &b));
     CT_TRY(ct_cross_entropy(g, a, b, 0.1f, 3, out)))

/* fused ops (src/graph/fusion.c): the harness compiles at fusion level 2, so
 * these cases run batchnorm+relu, conv2d/linear with a bias add folded in,
 * and a linear with a layernorm / gelu prologue (forward and backward) */
CASE(c_bn_relu, CT_TRY(P(g, "x", ND(4, 2, 2, 2), &a)); CT_TRY(P(g, "g", ND(2), &b)); CT_TRY(P(g, "b", ND(2), &c));
     CT_TRY(ct_buffer(g, "rm", ND(2), CT_INIT_ZEROS, &d)); CT_TRY(ct_buffer(g, "rv", ND(2), CT_INIT_ONES, &e));
     CT_TRY(ct_batchnorm(g, a, b, c, d, e, 0.1f, 1e-5f, &a)); CT_TRY(ct_relu(g, a, out)))
CASE(c_bn_relu_2d, CT_TRY(P(g, "x", ND(1500, 32), &a)); CT_TRY(P(g, "g", ND(32), &b)); CT_TRY(P(g, "b", ND(32), &c));
     CT_TRY(ct_buffer(g, "rm", ND(32), CT_INIT_ZEROS, &d)); CT_TRY(ct_buffer(g, "rv", ND(32), CT_INIT_ONES, &e));
     CT_TRY(ct_batchnorm(g, a, b, c, d, e, 0.1f, 1e-5f, &a)); CT_TRY(ct_relu(g, a, out)))
CASE(c_conv_bias_add, CT_TRY(P(g, "x", ND(2, 3, 6, 5), &a)); CT_TRY(P(g, "w", ND(4, 3, 3, 3), &b));
     CT_TRY(P(g, "b", ND(4, 1, 1), &c)); CT_TRY(ct_conv2d(g, a, b, CT_NONE, 1, 1, 1, 1, &d)); CT_TRY(ct_add(g, d, c, out)))
CASE(c_linear_bias_add, CT_TRY(P(g, "x", ND(3, 4, 7), &a)); CT_TRY(P(g, "w", ND(5, 7), &b)); CT_TRY(P(g, "b", ND(5), &c));
     CT_TRY(ct_linear(g, a, b, CT_NONE, &d)); CT_TRY(ct_add(g, d, c, out)))
CASE(c_linear_ln_pro, CT_TRY(P(g, "x", ND(3, 4, 9), &a)); CT_TRY(P(g, "g", ND(9), &b)); CT_TRY(P(g, "b", ND(9), &c));
     CT_TRY(ct_layernorm(g, a, b, c, 1e-5f, &d)); CT_TRY(P(g, "w", ND(6, 9), &b)); CT_TRY(P(g, "wb", ND(6), &c));
     CT_TRY(ct_linear(g, d, b, c, out)))
CASE(c_dropout_add, CT_TRY(P(g, "x", ND(6, 40), &a)); CT_TRY(P(g, "r", ND(6, 40), &b)); CT_TRY(ct_dropout(g, a, 0.3f, &c));
     CT_TRY(ct_add(g, b, c, out)))
CASE(c_conv_relu, CT_TRY(P(g, "x", ND(2, 3, 5, 4), &a)); CT_TRY(P(g, "w", ND(4, 3, 3, 3), &b)); CT_TRY(P(g, "b", ND(4), &c));
     CT_TRY(ct_conv2d(g, a, b, c, 1, 1, 1, 1, &d)); CT_TRY(ct_relu(g, d, out)))
/* channels last: the bias add over the last dim folds into the conv; relu on its output */
CASE(c_conv_cl_bias_add, CT_TRY(P(g, "x", ND(2, 6, 5, 3), &a)); CT_TRY(P(g, "w", ND(4, 3, 3, 3), &b));
     CT_TRY(P(g, "b", ND(4), &c)); ct_conv2d_opts o; ct_conv2d_opts_default(&o); o.pad = 1; o.channels_last = 1;
     CT_TRY(ct_conv2d_ex(g, a, b, CT_NONE, &o, &d)); CT_TRY(ct_add(g, d, c, out)))
CASE(c_conv_cl_relu, CT_TRY(P(g, "x", ND(2, 5, 4, 3), &a)); CT_TRY(P(g, "w", ND(4, 3, 3, 3), &b)); CT_TRY(P(g, "b", ND(4), &c));
     ct_conv2d_opts o; ct_conv2d_opts_default(&o); o.pad = 1; o.channels_last = 1;
     CT_TRY(ct_conv2d_ex(g, a, b, c, &o, &d)); CT_TRY(ct_relu(g, d, out)))
CASE(c_linear_relu, CT_TRY(P(g, "x", ND(6, 9), &a)); CT_TRY(P(g, "w", ND(5, 9), &b)); CT_TRY(P(g, "b", ND(5), &c));
     CT_TRY(ct_linear(g, a, b, c, &d)); CT_TRY(ct_relu(g, d, out)))
CASE(c_add_relu, CT_TRY(P(g, "x", ND(6, 21), &a)); CT_TRY(P(g, "y", ND(6, 21), &b)); CT_TRY(ct_add(g, a, b, &c));
     CT_TRY(ct_relu(g, c, out)))
CASE(c_eltwise_chain, CT_TRY(P(g, "x", ND(6, 33), &a)); CT_TRY(P(g, "y", ND(6, 33), &b)); CT_TRY(P(g, "z", ND(6, 33), &c));
     CT_TRY(ct_scale(g, a, 1.5f, &d)); CT_TRY(ct_add(g, d, b, &d)); CT_TRY(ct_sub(g, c, d, &d));
     CT_TRY(ct_dropout(g, d, 0.25f, &d)); CT_TRY(ct_relu(g, d, out)))
CASE(c_linear_gelu_pro, CT_TRY(P(g, "x", ND(3, 4, 9), &a)); CT_TRY(ct_gelu(g, a, 0, &d)); CT_TRY(P(g, "w", ND(5, 9), &b));
     CT_TRY(ct_linear(g, d, b, CT_NONE, out)))
/* a residual around a layernorm: the backward adds the residual gradient to the layernorm's dx
   (layernorm_bwd+add: LAYERNORM_BWD_DATA with a 5th input); the square makes dy differ from it */
CASE(c_ln_bwd_add, CT_TRY(P(g, "x", ND(3, 4, 9), &a)); CT_TRY(P(g, "g", ND(9), &b)); CT_TRY(P(g, "b", ND(9), &c));
     CT_TRY(ct_layernorm(g, a, b, c, 1e-5f, &d)); CT_TRY(ct_mul(g, d, d, &d)); CT_TRY(ct_add(g, a, d, out)))

/* a residual add read by a layernorm and again later (add+layernorm: ADD_LAYERNORM writes the sum into the add's
   buffer, ADD_LN_SUM, which the last add and the layernorm's backward read); rows of 9: the kernels' tails */
CASE(c_add_ln, CT_TRY(P(g, "x", ND(3, 4, 9), &a)); CT_TRY(P(g, "r", ND(3, 4, 9), &b)); CT_TRY(ct_add(g, a, b, &c));
     CT_TRY(P(g, "g", ND(9), &a)); CT_TRY(P(g, "b", ND(9), &b)); CT_TRY(ct_layernorm(g, c, a, b, 1e-5f, &d));
     CT_TRY(ct_mul(g, d, d, &d)); CT_TRY(ct_add(g, c, d, out)))
/* the column sums in their producer's row pass (layernorm_bwd+colsum, unary_bwd+colsum): 150 rows, two
   pieces (ct_colsum_pieces) of 75, so the float runs (8 and 32 rows) end inside them and at their ends.
   ln_colsum: the layernorm's dgamma and dbeta and the bias gradient of the linear in front of it (the
   column sum of the layernorm_bwd+add output); gelu_colsum: the bias gradient from the GELU's backward */
CASE(c_ln_colsum, CT_TRY(P(g, "x", ND(5, 30, 20), &a)); CT_TRY(P(g, "w", ND(24, 20), &b)); CT_TRY(P(g, "b", ND(24), &c));
     CT_TRY(ct_linear(g, a, b, c, &a)); CT_TRY(P(g, "g", ND(24), &b)); CT_TRY(P(g, "be", ND(24), &c));
     CT_TRY(ct_layernorm(g, a, b, c, 1e-5f, &d)); CT_TRY(ct_mul(g, d, d, &d)); CT_TRY(ct_add(g, a, d, out)))
CASE(c_gelu_colsum, CT_TRY(P(g, "x", ND(5, 30, 20), &a)); CT_TRY(P(g, "w", ND(24, 20), &b)); CT_TRY(P(g, "b", ND(24), &c));
     CT_TRY(ct_linear(g, a, b, c, &d)); CT_TRY(ct_gelu(g, d, 0, out)))

typedef struct {
    const char *name;
    build_fn build;
    int may_decline; /* the fast path may fall back to reference for this configuration */
} op_case;

/* Cases without the finite-difference check: a relu after a batchnorm over thousands of rows, where a step of
 * gamma or beta moves some outputs across the kink (c_bn_relu checks that backward on a small input). */
static int no_fd(const char *name) { return !strcmp(name, "bn_relu_2d"); }

/* matmul, linear and conv have oneDNN as their fast path (no hand-written
 * GEMM): in contexts without oneDNN they run the reference. */
static int onednn_only(const char *name) {
    return !strncmp(name, "linear", 6) || !strncmp(name, "matmul", 6) || !strncmp(name, "conv", 4);
}

static const op_case k_cases[] = {
    {"linear", c_linear, 0}, {"linear_nobias", c_linear_nobias, 0}, {"matmul_nn", c_matmul_nn, 0},
    {"matmul_tn", c_matmul_tn, 0}, {"matmul_nt", c_matmul_nt, 0}, {"matmul_tt", c_matmul_tt, 0},
    {"matmul_batched", c_matmul_batched, 0}, {"matmul_bcast", c_matmul_bcast, 0},
    {"matmul_bcast_ta", c_matmul_bcast_ta, 0}, {"conv", c_conv, 0}, {"conv_s2_d2_g2", c_conv_s2_d2_g2, 0},
    {"conv_c1", c_conv_c1, 0}, {"conv_c2_d2", c_conv_c2_d2, 0}, {"conv_c1_k7", c_conv_c1_k7, 0}, {"conv_c1_k6", c_conv_c1_k6, 0},
    {"maxpool", c_maxpool, 0}, {"maxpool_pad", c_maxpool_pad, 0}, {"avgpool", c_avgpool, 0}, {"gap", c_gap, 0},
    {"maxpool_ex", c_maxpool_ex, 0}, {"maxpool_ceil", c_maxpool_ceil, 0}, {"avgpool_ceil", c_avgpool_ceil, 0},
    {"avgpool_ex_nopad", c_avgpool_ex_nopad, 0}, {"maxpool_cl", c_maxpool_cl, 0}, {"maxpool_cl_pad", c_maxpool_cl_pad, 0},
    {"maxpool_cl_ex", c_maxpool_cl_ex, 0}, {"maxpool_cl_ceil", c_maxpool_cl_ceil, 0},
    {"avgpool_cl", c_avgpool_cl, 0}, {"avgpool_cl_s1", c_avgpool_cl_s1, 0}, {"avgpool_cl_ceil", c_avgpool_cl_ceil, 0},
    {"avgpool_cl_ex_nopad", c_avgpool_cl_ex_nopad, 0},
    {"batchnorm", c_batchnorm, 0}, {"batchnorm_2d", c_batchnorm_2d, 0},
    {"batchnorm_rows_c1", c_batchnorm_rows_c1, 0}, {"batchnorm_rows_c17", c_batchnorm_rows_c17, 0},
    {"batchnorm_rows_c100", c_batchnorm_rows_c100, 0}, {"layernorm", c_layernorm, 0},
    {"relu", c_relu, 0}, {"gelu", c_gelu, 0}, {"gelu_tanh", c_gelu_tanh, 0}, {"silu", c_silu, 0},
    {"sigmoid", c_sigmoid, 0}, {"tanh", c_tanh, 0}, {"scale", c_scale, 0}, {"add_bias", c_add_bias, 0},
    {"sub_same", c_sub_same, 0}, {"mul_col", c_mul_col, 1}, {"div", c_div, 0}, {"sum_rows", c_sum_rows, 0},
    {"mean_last_keep", c_mean_last_keep, 1}, {"sum_nchw", c_sum_nchw, 0},
    {"reshape_transpose", c_reshape_transpose, 0}, {"transpose3", c_transpose3, 0}, {"concat", c_concat, 0},
    {"slice", c_slice, 0}, {"pad", c_pad, 0}, {"flatten", c_flatten, 0}, {"softmax", c_softmax, 0},
    {"log_softmax", c_log_softmax, 0}, {"dropout", c_dropout, 0}, {"embedding", c_embedding, 0},
    {"window_bias", c_window_bias, 1}, {"window_bias_shift", c_window_bias_shift, 1}, /* reference only: a gather */
    {"drop_path", c_drop_path, 0}, {"drop_path_rows", c_drop_path_rows, 0}, {"conv_depthwise", c_conv_depthwise, 0},
    {"cross_entropy", c_cross_entropy, 0}, {"cross_entropy_3d", c_cross_entropy_3d, 0}, {"layernorm_nobias", c_layernorm_nobias, 0},
    {"attention_causal", c_attention_causal, 0}, {"attention_mask", c_attention_mask, 0},
    {"bn_relu", c_bn_relu, 0}, {"bn_relu_2d", c_bn_relu_2d, 0}, {"conv_bias_add", c_conv_bias_add, 0}, {"linear_bias_add", c_linear_bias_add, 0},
    {"linear_ln_pro", c_linear_ln_pro, 0}, {"linear_gelu_pro", c_linear_gelu_pro, 0}, {"dropout_add", c_dropout_add, 0},
    {"conv_relu", c_conv_relu, 0}, {"linear_relu", c_linear_relu, 0}, {"add_relu", c_add_relu, 0},
    {"conv_cl", c_conv_cl, 0}, {"conv_s2_d2_g2_cl", c_conv_s2_d2_g2_cl, 0}, {"conv_c1_cl", c_conv_c1_cl, 0},
    {"conv_depthwise_cl", c_conv_depthwise_cl, 0}, {"conv_cl_bias_add", c_conv_cl_bias_add, 0},
    {"conv_cl_relu", c_conv_cl_relu, 0},
    {"eltwise_chain", c_eltwise_chain, 0}, {"ln_bwd_add", c_ln_bwd_add, 0}, {"add_ln", c_add_ln, 0},
    {"ln_colsum", c_ln_colsum, 0}, {"gelu_colsum", c_gelu_colsum, 0},
    {"cross_entropy_vp", c_cross_entropy_vp, 1}, {"embedding_rows", c_embedding_rows, 0}, /* vp: reference only */
};
#define N_CASES (int)(sizeof k_cases / sizeof k_cases[0])

typedef struct {
    ct_context *ctx;
    ct_plan *plan;
    ct_node out, loss, r;
} harness;

/* loss = sum(out * R) with R a fixed random input (scalars: out * R[0]) */
static ct_status harness_build(ct_context *ctx, const op_case *c, harness *h) {
    ct_graph *g;
    h->ctx = ctx;
    CT_TRY(ct_graph_create(ctx, &g));
    ct_status s = c->build(g, &h->out);
    int nd = 0;
    int64_t shape[CT_MAX_DIMS];
    ct_node m;
    if (s == CT_OK) s = ct_node_shape(g, h->out, &nd, shape);
    if (s == CT_OK && nd == 0) {
        nd = 1;
        shape[0] = 1;
    }
    if (s == CT_OK) s = ct_input(g, "R", CT_F32, nd, shape, &h->r);
    if (s == CT_OK) s = ct_mul(g, h->out, h->r, &m);
    if (s == CT_OK) s = ct_sum(g, m, (1u << nd) - 1, 0, &h->loss);
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    co.fusion_level = 2; /* the fused cases' ops; the others have nothing to fuse */
    if (s == CT_OK) s = ct_compile(g, h->loss, 1, &h->out, &co, &h->plan);
    if (s == CT_OK) { /* inputs: R, ids and labels */
        for (int i = 0; i < ct_graph_num_nodes(g); i++) {
            const char *nm = ct_node_name(g, i);
            ct_tensor t;
            if (strcmp(ct_node_op_name(g, i), "input")) continue;
            if (ct_plan_tensor(h->plan, i, &t) != CT_OK) continue;
            int64_t n = ct_tensor_numel(&t);
            if (!strcmp(nm, "R")) test_fill_uniform(t.data, (size_t)n, 9, -1, 1);
            else if (t.dtype == CT_I32)
                for (int64_t j = 0; j < n; j++) ((int32_t *)t.data)[j] = (int32_t)((j * 5 + 2) % (strcmp(nm, "ids") ? 7 : 11));
        }
    }
    ct_graph_free(g);
    return s;
}

/* Keeps parameters away from kinks (relu/maxpool) and ties. */
static void spread_params(ct_plan *p) {
    float *w;
    size_t n;
    ct_plan_param_arena(p, &w, NULL, &n);
    for (size_t i = 0; i < n; i++) {
        if (w[i] == 1.0f || w[i] == 0.0f) continue; /* ones/zeros init (e.g. 'two') */
        if (fabsf(w[i]) < 0.05f) w[i] = w[i] < 0 ? -0.05f - 0.01f * (float)(i % 7) : 0.05f + 0.01f * (float)(i % 7);
        w[i] += 1e-4f * (float)(i % 13);
    }
}

static ct_status run(harness *h, float *loss) {
    CT_TRY(ct_plan_forward(h->plan, 1));
    CT_TRY(ct_plan_backward(h->plan));
    return ct_plan_loss(h->plan, loss);
}

static double loss_at(harness *h) {
    ct_plan_forward(h->plan, 1);
    float l;
    ct_plan_loss(h->plan, &l);
    return l;
}

/* The node whose kernel a case is about: its output, or for the "_cl"
 * cases (the output transposed back to NCHW) the channels-last conv2d. */
static int kernel_node(const harness *h) {
    const ct_graph *g = &h->plan->g;
    if (g->nodes[h->out].op != CT_OP_TRANSPOSE) return h->out;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == CT_OP_CONV2D && g->nodes[i].ia[4]) return i;
    return h->out;
}

TEST(backward_matches_finite_differences) {
    for (int ci = 0; ci < N_CASES; ci++) {
        const op_case *c = &k_cases[ci];
        if (no_fd(c->name)) {
            printf("    fd %-18s skipped (a relu kink within a step)\n", c->name);
            continue;
        }
        ct_context *ctx = test_ctx(CT_ISA_REF, 0);
        harness h;
        CHECK_OK(ctx, harness_build(ctx, c, &h));
        spread_params(h.plan);
        float l0;
        CHECK_OK(ctx, run(&h, &l0));
        double worst = 0;
        for (int pi = 0; pi < ct_plan_num_params(h.plan); pi++) {
            ct_tensor val, grad;
            const char *pname;
            ct_plan_param_info(h.plan, pi, &pname, &val, &grad);
            int64_t n = ct_tensor_numel(&val);
            float *gcopy = malloc((size_t)n * sizeof(float));
            memcpy(gcopy, grad.data, (size_t)n * sizeof(float));
            int64_t stride = n > 24 ? n / 24 : 1;
            for (int64_t i = 0; i < n; i += stride) {
                float *x = (float *)val.data + i, x0 = *x;
                const float hstep = 1e-2f;
                double f[4];
                const float offs[4] = {2, 1, -1, -2};
                for (int k = 0; k < 4; k++) {
                    *x = x0 + offs[k] * hstep;
                    f[k] = loss_at(&h);
                }
                *x = x0;
                double fd = (-f[0] + 8 * f[1] - 8 * f[2] + f[3]) / (12.0 * hstep);
                double err = fabs(fd - gcopy[i]) / fmax(fabs(fd), 0.05);
                if (err > worst) worst = err;
                if (err > 2e-2) {
                    fprintf(stderr, "  %s: d/d %s[%lld]: analytic %.6g, finite difference %.6g\n", c->name, pname,
                            (long long)i, (double)gcopy[i], fd);
                    free(gcopy);
                    ct_test_failed_checks++;
                    ct_plan_free(h.plan);
                    ct_context_free(ctx);
                    return;
                }
            }
            free(gcopy);
        }
        printf("    fd %-18s worst rel err %.2e\n", c->name, worst);
        ct_plan_free(h.plan);
        ct_context_free(ctx);
    }
}

static double tensor_rel(const float *a, const float *b, int64_t n) {
    double md = 0, mb = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md || d != d) md = d != d ? INFINITY : d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return md / fmax(mb, 1e-6);
}

/* Compare a fast context against the reference context for every case. */
static void compare_fast(int isa, int onednn, const char *label) {
    ct_context *probe = test_ctx(isa, onednn);
    int lowered = (isa >= 0 && ct_context_isa(probe) != (ct_isa)isa) || (onednn && !ct_context_use_onednn(probe)) ||
                  (isa < 0 && ct_context_isa(probe) == CT_ISA_REF && !ct_context_use_onednn(probe));
    ct_context_free(probe);
    if (lowered) {
        printf("    skipped %s: CT_ISA/CT_ONEDNN in the environment lowered the kernels\n", label);
        return;
    }
    for (int ci = 0; ci < N_CASES; ci++) {
        const op_case *c = &k_cases[ci];
        ct_context *cr = test_ctx(CT_ISA_REF, 0), *cf = test_ctx(isa, onednn);
        harness hr, hf;
        CHECK_OK(cr, harness_build(cr, c, &hr));
        CHECK_OK(cf, harness_build(cf, c, &hf));
        spread_params(hr.plan);
        spread_params(hf.plan);
        float lr, lf;
        CHECK_OK(cr, run(&hr, &lr));
        CHECK_OK(cf, run(&hf, &lf));
        ct_tensor orr, of;
        ct_plan_tensor(hr.plan, hr.out, &orr);
        ct_plan_tensor(hf.plan, hf.out, &of);
        double worst = tensor_rel(of.data, orr.data, ct_tensor_numel(&orr));
        CHECK_MSG(worst <= 1e-4, "%s %s: forward output differs from reference by %.3g", label, c->name, worst);
        for (int pi = 0; pi < ct_plan_num_params(hr.plan); pi++) {
            ct_tensor gr, gf;
            const char *pname;
            ct_plan_param_info(hr.plan, pi, &pname, NULL, &gr);
            ct_plan_param_info(hf.plan, pi, NULL, NULL, &gf);
            double e = tensor_rel(gf.data, gr.data, ct_tensor_numel(&gr));
            CHECK_MSG(e <= 1e-4, "%s %s: gradient of %s differs from reference by %.3g", label, c->name, pname, e);
            if (e > worst) worst = e;
        }
        const char *kn = ct_plan_kernel_name(hf.plan, kernel_node(&hf));
        printf("    %-7s %-18s kernel %-7s worst rel err %.2e\n", label, c->name, kn, worst);
        int is_ref = !strcmp(kn, "ref");
        int is_view = !strcmp(kn, "none"); /* reshape alias */
        CHECK_MSG(!is_ref || c->may_decline || (!onednn && onednn_only(c->name)),
                  "%s %s: the op ran the reference kernel, not a fast path", label, c->name);
        CHECK_MSG(!onednn || !onednn_only(c->name) || !strcmp(kn, "onednn"), "%s %s: ran '%s', not oneDNN", label,
                  c->name, kn);
        (void)is_view;
        ct_plan_free(hr.plan);
        ct_plan_free(hf.plan);
        ct_context_free(cr);
        ct_context_free(cf);
    }
}

TEST(avx2_matches_reference) {
    ct_context *ctx = test_ctx(-1, 0);
    int ok = ct_context_cpu(ctx)->avx2 && ct_context_cpu(ctx)->fma;
    ct_context_free(ctx);
    if (!ok) {
        printf("    skipped: this CPU has no AVX2/FMA\n");
        return;
    }
    compare_fast(CT_ISA_AVX2, 0, "avx2");
}

TEST(avx512_matches_reference) {
    ct_context *ctx = test_ctx(-1, 0);
    int ok = ct_context_isa(ctx) >= CT_ISA_AVX512;
    ct_context_free(ctx);
    if (!ok) {
        printf("    skipped: this CPU (or CT_ISA) does not allow AVX-512\n");
        return;
    }
    compare_fast(CT_ISA_AVX512, 0, "avx512");
}

TEST(onednn_matches_reference) { compare_fast(-1, 1, "best"); }

/* The weight gradient of a convolution with 1-2 input channels (stride 1, one
 * group) runs the direct SIMD kernel even where oneDNN is on (the op table's
 * simd_first), every other one oneDNN; the direct kernel's result does not
 * depend on the thread count (bit for bit). */
TEST(conv_direct_weight_gradient) {
    static const struct {
        const char *cs;
        int direct;
    } want[] = {{"conv_c1", 1}, {"conv_c2_d2", 1}, {"conv_c1_k7", 1}, {"conv_c1_k6", 1}, {"conv", 0}, {"conv_s2_d2_g2", 0}};
    ct_context *probe = test_ctx(-1, 1);
    int simd = ct_context_isa(probe) >= CT_ISA_AVX2, dnnl = ct_context_use_onednn(probe);
    ct_context_free(probe);
    if (!simd || !dnnl) {
        printf("    skipped: needs AVX2 and oneDNN (CT_ISA / CT_ONEDNN lowered them)\n");
        return;
    }
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        const op_case *c = NULL;
        for (int ci = 0; ci < N_CASES; ci++)
            if (!strcmp(k_cases[ci].name, want[w].cs)) c = &k_cases[ci];
        CHECK(c != NULL);
        if (!c) continue;
        float *grad[2] = {NULL, NULL};
        size_t n = 0;
        for (int nt = 1; nt <= 2; nt++) {
            ct_context_opts o;
            ct_context_opts_default(&o);
            o.num_threads = nt;
            o.seed = 1234;
            ct_context *ctx = NULL;
            CHECK(ct_context_create(&o, &ctx) == CT_OK);
            harness h;
            CHECK_OK(ctx, harness_build(ctx, c, &h));
            spread_params(h.plan);
            float l;
            CHECK_OK(ctx, run(&h, &l));
            int found = 0;
            for (int i = 0; i < h.plan->g.n; i++) {
                if (!h.plan->pn[i].live || h.plan->g.nodes[i].op != CT_OP_CONV2D_BWD_WEIGHT) continue;
                const char *kn = ct_plan_kernel_name(h.plan, i);
                found = 1;
                CHECK_MSG(want[w].direct ? !strncmp(kn, "avx", 3) : !strcmp(kn, "onednn"),
                          "%s, %d thread(s): the weight gradient ran '%s', want %s", c->name, nt, kn,
                          want[w].direct ? "the direct SIMD kernel" : "oneDNN");
                if (nt == 1) printf("    %-14s weight gradient kernel %s\n", c->name, kn);
            }
            CHECK_MSG(found, "%s: no conv2d_bwd_weight node", c->name);
            ct_tensor gw;
            ct_plan_param_info(h.plan, 1, NULL, NULL, &gw); /* w: the second param */
            n = (size_t)ct_tensor_numel(&gw);
            grad[nt - 1] = malloc(n * sizeof(float));
            memcpy(grad[nt - 1], gw.data, n * sizeof(float));
            ct_plan_free(h.plan);
            ct_context_free(ctx);
        }
        if (want[w].direct) /* oneDNN's own sums do depend on the thread count */
            CHECK_MSG(!memcmp(grad[0], grad[1], n * sizeof(float)),
                      "%s: the weight gradient differs between 1 and 2 threads", c->name);
        free(grad[0]);
        free(grad[1]);
    }
}

/* A channels-last convolution (its "_cl" case: transpose, conv2d_ex NHWC,
 * transpose back) gives its NCHW partner's output, loss and gradients (x, w,
 * b: the same parameters, initialized alike), in the reference and with
 * the best kernels (oneDNN: nhwc vs its blocked or plain NCHW path) */
static void cl_vs_nchw(int isa, int dnnl, const char *label) {
    static const char *pairs[][2] = {{"conv", "conv_cl"}, {"conv_s2_d2_g2", "conv_s2_d2_g2_cl"},
                                     {"conv_c1", "conv_c1_cl"}, {"conv_depthwise", "conv_depthwise_cl"}};
    for (size_t pi = 0; pi < sizeof pairs / sizeof pairs[0]; pi++) {
        ct_context *ctx[2];
        harness h[2];
        float loss[2];
        for (int v = 0; v < 2; v++) {
            const op_case *c = NULL;
            for (int ci = 0; ci < N_CASES; ci++)
                if (!strcmp(k_cases[ci].name, pairs[pi][v])) c = &k_cases[ci];
            ctx[v] = test_ctx(isa, dnnl);
            CHECK_OK(ctx[v], harness_build(ctx[v], c, &h[v]));
            spread_params(h[v].plan);
            CHECK_OK(ctx[v], run(&h[v], &loss[v]));
        }
        double worst = fabs((double)loss[0] - loss[1]) / (1 + fabs((double)loss[0]));
        ct_tensor o[2];
        CHECK_OK(ctx[0], ct_plan_tensor(h[0].plan, h[0].out, &o[0]));
        CHECK_OK(ctx[1], ct_plan_tensor(h[1].plan, h[1].out, &o[1]));
        CHECK(ct_tensor_numel(&o[0]) == ct_tensor_numel(&o[1]));
        for (int64_t i = 0; i < ct_tensor_numel(&o[0]); i++) {
            double a = ((const float *)o[0].data)[i], b = ((const float *)o[1].data)[i];
            worst = fmax(worst, fabs(a - b) / (1 + fabs(a)));
        }
        int np = ct_plan_num_params(h[0].plan);
        CHECK(np == ct_plan_num_params(h[1].plan));
        for (int i = 0; i < np; i++) {
            ct_tensor g0, g1;
            ct_plan_param_info(h[0].plan, i, NULL, NULL, &g0);
            ct_plan_param_info(h[1].plan, i, NULL, NULL, &g1);
            CHECK(ct_tensor_numel(&g0) == ct_tensor_numel(&g1));
            for (int64_t j = 0; j < ct_tensor_numel(&g0); j++) {
                double a = ((const float *)g0.data)[j], b = ((const float *)g1.data)[j];
                worst = fmax(worst, fabs(a - b) / (1 + fabs(a)));
            }
        }
        printf("    %-6s %-18s vs %-22s worst rel diff %.2e\n", label, pairs[pi][0], pairs[pi][1], worst);
        CHECK_MSG(worst < 1e-5, "%s: %s vs %s differ by %.3g", label, pairs[pi][0], pairs[pi][1], worst);
        for (int v = 0; v < 2; v++) {
            ct_plan_free(h[v].plan);
            ct_context_free(ctx[v]);
        }
    }
}

TEST(conv_channels_last_matches_nchw) {
    cl_vs_nchw(CT_ISA_REF, 0, "ref");
    cl_vs_nchw(-1, 1, "best");
    /* a bad flag or an input that is not NHWC with channels_last: errors naming it */
    ct_context *ctx = test_ctx(-1, 1);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node x, w, y;
    CHECK_OK(ctx, ct_param(g, "x", 4, S(2, 3, 8, 8), CT_INIT_ZEROS, 1, &x));
    CHECK_OK(ctx, ct_param(g, "w", 4, S(4, 3, 3, 3), CT_INIT_ZEROS, 1, &w));
    ct_conv2d_opts o;
    ct_conv2d_opts_default(&o);
    o.channels_last = 1; /* x (2, 3, 8, 8) read as NHWC has 8 channels, the weight wants 3 */
    CHECK(ct_conv2d_ex(g, x, w, CT_NONE, &o, &y) == CT_E_SHAPE);
    CHECK(strstr(ct_context_last_error(ctx), "(N, H, W, C)") != NULL);
    o.channels_last = 2;
    CHECK(ct_conv2d_ex(g, x, w, CT_NONE, &o, &y) == CT_E_INVALID_ARG);
    CHECK(ct_conv2d_ex(g, x, w, CT_NONE, NULL, &y) == CT_E_INVALID_ARG);
    ct_graph_free(g);
    ct_context_free(ctx);
}

/* ---- channels-last pooling against the (N, C, H, W) layout -------------------------------------
 * The same x (N, C, H, W) pooled directly, and transposed to (N, H, W, C),
 * pooled channels-last and transposed back: max pooling's output and dx
 * bit for bit, average pooling's dx bit for bit and its output within FP32
 * rounding (the SIMD CL forward sums in FP32); the reference both ways bit
 * for bit. x has ties in most windows (and NaNs for max pooling: they
 * propagate). Then the CL plan on 1 and 2 threads bit for bit (shapes above the
 * kernels' threading threshold; N = 1 splits the backward into channel
 * blocks). */
typedef struct {
    int avg, k[8], ceil_mode, include_pad;
    int64_t n, c, h, w;
} cl_cfg;

static ct_status cl_build(ct_graph *g, const cl_cfg *f, int cl, ct_node *out) {
    ct_node x, t, y;
    CT_TRY(P(g, "x", ND(f->n, f->c, f->h, f->w), &x));
    if (!cl) return f->avg ? pool_ex(g, 1, f->k, f->ceil_mode, f->include_pad, x, out)
                           : pool_ex(g, 0, f->k, f->ceil_mode, f->include_pad, x, out);
    CT_TRY(ct_transpose(g, x, (int[]){0, 2, 3, 1}, &t));
    CT_TRY(pool_cl(g, f->avg, f->k, f->ceil_mode, f->include_pad, t, &y));
    return ct_transpose(g, y, (int[]){0, 3, 1, 2}, out);
}

static const cl_cfg *g_cl_cfg;
static int g_cl_layout;
static ct_status cl_case_build(ct_graph *g, ct_node *out) { return cl_build(g, g_cl_cfg, g_cl_layout, out); }

/* runs cfg f in layout cl on ctx with x = xv (NCHW); copies y and dx out */
static void cl_run(ct_context *ctx, const cl_cfg *f, int cl, const float *xv, float **y, float **dx, int64_t *ny,
                   int64_t *nx) {
    g_cl_cfg = f;
    g_cl_layout = cl;
    op_case c = {"pool_layout", cl_case_build, 0};
    harness h;
    CHECK_OK(ctx, harness_build(ctx, &c, &h));
    ct_tensor val, grad, o;
    ct_plan_param_info(h.plan, 0, NULL, &val, &grad);
    *nx = ct_tensor_numel(&val);
    memcpy(val.data, xv, (size_t)*nx * sizeof(float));
    float l;
    CHECK_OK(ctx, run(&h, &l));
    ct_plan_tensor(h.plan, h.out, &o);
    *ny = ct_tensor_numel(&o);
    *y = malloc((size_t)*ny * sizeof(float));
    *dx = malloc((size_t)*nx * sizeof(float));
    memcpy(*y, o.data, (size_t)*ny * sizeof(float));
    memcpy(*dx, grad.data, (size_t)*nx * sizeof(float));
    ct_plan_free(h.plan);
}

static ct_context *ctx_threads(int isa, int nt) {
    ct_context_opts o;
    ct_context_opts_default(&o);
    o.num_threads = nt;
    o.seed = 1234;
    if (isa >= 0) o.isa = (ct_isa)isa;
    ct_context *ctx = NULL;
    return ct_context_create(&o, &ctx) == CT_OK ? ctx : NULL;
}

TEST(pool_channels_last_equals_nchw) {
    static const cl_cfg cfgs[] = {
        {0, {2, 2, 2, 2, 0, 0, 1, 1}, 0, 1, 3, 17, 9, 10},  {0, {3, 3, 2, 2, 1, 1, 1, 1}, 0, 1, 2, 64, 11, 11},
        {0, {3, 2, 2, 1, 1, 0, 1, 2}, 1, 1, 2, 5, 7, 8},    {0, {16, 16, 1, 1, 0, 0, 1, 1}, 0, 1, 1, 3, 17, 18},
        {1, {3, 3, 2, 2, 1, 1, 1, 1}, 0, 1, 2, 17, 7, 7},   {1, {3, 3, 1, 1, 1, 1, 1, 1}, 0, 0, 2, 32, 6, 5},
        {1, {2, 3, 2, 2, 1, 1, 2, 1}, 1, 0, 2, 20, 7, 9},   {1, {3, 3, 2, 2, 1, 1, 1, 1}, 1, 1, 2, 3, 6, 7},
        /* above the threading threshold (16384 inputs) */
        {0, {3, 3, 2, 2, 1, 1, 1, 1}, 0, 1, 3, 48, 20, 20}, {1, {3, 3, 1, 1, 1, 1, 1, 1}, 0, 1, 3, 48, 20, 20},
        {0, {3, 3, 2, 2, 1, 1, 1, 1}, 0, 1, 1, 40, 24, 24}, {1, {3, 3, 1, 1, 1, 1, 1, 1}, 0, 0, 1, 40, 24, 24},
        {0, {2, 2, 2, 2, 0, 0, 1, 1}, 0, 1, 1, 40, 24, 24},
    };
    ct_context *probe = test_ctx(-1, 0);
    const int best = ct_context_isa(probe);
    ct_context_free(probe);
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        const cl_cfg *f = &cfgs[i];
        int64_t nx = f->n * f->c * f->h * f->w, ny, nx2;
        float *xv = malloc((size_t)nx * sizeof(float));
        test_fill_uniform(xv, (size_t)nx, 77 + (unsigned)i, -1, 1);
        for (int64_t j = 0; j < nx; j++) xv[j] = roundf(xv[j] * 4) / 4; /* 9 levels: ties in most windows */
        if (!f->avg)
            for (int64_t j = 5; j < nx; j += 97) xv[j] = NAN; /* NaN propagates */
        float *y[2][2], *dx[2][2]; /* [ref, best][nchw, cl] */
        for (int fast = 0; fast < 2; fast++)
            for (int cl = 0; cl < 2; cl++) {
                ct_context *ctx = fast ? test_ctx(-1, 0) : test_ctx(CT_ISA_REF, 0);
                cl_run(ctx, f, cl, xv, &y[fast][cl], &dx[fast][cl], &ny, &nx2);
                ct_context_free(ctx);
            }
        for (int fast = 0; fast < 2; fast++) {
            const char *lb = fast ? "best" : "ref";
            int y_exact = !f->avg || !fast || best == CT_ISA_REF;
            if (y_exact)
                CHECK_MSG(!memcmp(y[fast][0], y[fast][1], (size_t)ny * 4), "cfg %zu (%s): CL forward differs from NCHW", i, lb);
            else
                CHECK_MSG(test_rel_to_max(y[fast][1], y[fast][0], (size_t)ny) <= 1e-6,
                          "cfg %zu (%s): CL avg forward differs from NCHW by %.3g", i, lb,
                          test_rel_to_max(y[fast][1], y[fast][0], (size_t)ny));
            CHECK_MSG(!memcmp(dx[fast][0], dx[fast][1], (size_t)nx * 4), "cfg %zu (%s): CL dx differs from NCHW", i, lb);
        }
        /* the fast CL kernels against the reference CL kernels */
        CHECK_MSG(!memcmp(dx[0][1], dx[1][1], (size_t)nx * 4), "cfg %zu: CL dx (best) differs from CL dx (ref)", i);
        if (!f->avg) CHECK_MSG(!memcmp(y[0][1], y[1][1], (size_t)ny * 4), "cfg %zu: CL y (best) differs from ref", i);
        /* 1 vs 2 threads, the fast CL kernels */
        float *yt[2], *dxt[2];
        for (int nt = 1; nt <= 2; nt++) {
            ct_context *ctx = ctx_threads(-1, nt);
            CHECK(ctx != NULL);
            if (!ctx) continue;
            cl_run(ctx, f, 1, xv, &yt[nt - 1], &dxt[nt - 1], &ny, &nx2);
            ct_context_free(ctx);
        }
        CHECK_MSG(!memcmp(yt[0], yt[1], (size_t)ny * 4) && !memcmp(dxt[0], dxt[1], (size_t)nx * 4),
                  "cfg %zu: CL results differ between 1 and 2 threads", i);
        printf("    cfg %zu %s (%lld, %lld, %lld, %lld): CL = NCHW, 1 thread = 2 threads\n", i, f->avg ? "avg" : "max",
               (long long)f->n, (long long)f->c, (long long)f->h, (long long)f->w);
        for (int a = 0; a < 2; a++) {
            free(yt[a]);
            free(dxt[a]);
            for (int b = 0; b < 2; b++) {
                free(y[a][b]);
                free(dx[a][b]);
            }
        }
        free(xv);
    }
}

/* Ops no case needs to produce (see the header). */
static int exempt_op(ct_op op) {
    /* tp_copy / tp_reduce exist only in a graph with a tensor group of more
     * than one rank (without one they are no node): tests/test_tp_mpi.c */
    return op == CT_OP_INPUT || op == CT_OP_PARAM || op == CT_OP_BUFFER || op == CT_OP_CAST || op == CT_OP_TP_COPY ||
           op == CT_OP_TP_REDUCE;
}

TEST(every_op_has_a_case) {
    ct_context *ctx = test_ctx(CT_ISA_REF, 0);
    int seen[CT_OP_COUNT] = {0};
    for (int ci = 0; ci < N_CASES; ci++) {
        harness h;
        CHECK_OK(ctx, harness_build(ctx, &k_cases[ci], &h));
        if (!h.plan) continue;
        for (int i = 0; i < h.plan->g.n; i++)
            if (h.plan->pn[i].live) seen[h.plan->g.nodes[i].op] = 1;
        if (!strcmp(k_cases[ci].name, "ln_bwd_add")) /* its case runs the fused node (a 5-input layernorm_bwd_data) */
            CHECK(ct_plan_fusion_count(h.plan, "layernorm_bwd+add") == 1);
        if (!strcmp(k_cases[ci].name, "add_ln")) /* ADD_LAYERNORM and ADD_LN_SUM */
            CHECK(ct_plan_fusion_count(h.plan, "add+layernorm") == 1);
        if (!strcmp(k_cases[ci].name, "ln_colsum")) { /* dgamma, dbeta and the bias gradient from the row pass */
            int cs = 0;
            for (int i = 0; i < h.plan->g.n; i++) cs += h.plan->pn[i].live && h.plan->g.nodes[i].op == CT_OP_COLSUM;
            CHECK(ct_plan_fusion_count(h.plan, "layernorm_bwd+colsum") == 1 && cs == 3);
        }
        if (!strcmp(k_cases[ci].name, "gelu_colsum"))
            CHECK(ct_plan_fusion_count(h.plan, "unary_bwd+colsum") == 1);
        ct_plan_free(h.plan);
    }
    for (int op = 0; op < CT_OP_COUNT; op++) {
        const char *name = ct_op_table((ct_op)op)->name;
        if (!name || !strcmp(name, "invalid")) {
            fprintf(stderr, "  op %d has no row in the op table (src/graph/op_table.c)\n", op);
            CHECK(0);
            continue;
        }
        if (exempt_op((ct_op)op) || seen[op]) continue;
        fprintf(stderr, "  op '%s' (%d) runs in no case: add one to k_cases in tests/test_ops.c\n", name, op);
        CHECK(0);
    }
    ct_context_free(ctx);
}

/* cross_entropy on (B, T, V) logits equals the same values reshaped to
 * (B*T, V) / (B*T), bit for bit: loss and gradient, in every kernel slot. */
static ct_status ce_plan(ct_context *ctx, int flat, ct_plan **p, ct_node *logits, ct_node *labels) {
    ct_graph *g;
    CT_TRY(ct_graph_create(ctx, &g));
    ct_node x, loss, l2 = CT_NONE, y2 = CT_NONE;
    ct_status s = P(g, "logits", ND(3, 5, 37), &x);
    if (s == CT_OK) s = ct_input(g, "labels", CT_I32, 2, S(3, 5), labels);
    if (s == CT_OK && flat) s = ct_reshape(g, x, ND(15, 37), &l2);
    if (s == CT_OK && flat) s = ct_reshape(g, *labels, ND(15), &y2);
    if (s == CT_OK) s = flat ? ct_cross_entropy(g, l2, y2, 0.05f, 4, &loss) : ct_cross_entropy(g, x, *labels, 0.05f, 4, &loss);
    if (s == CT_OK) s = ct_compile(g, loss, 0, NULL, NULL, p);
    *logits = x;
    ct_graph_free(g);
    return s;
}

static void ce_nd_vs_flat(int isa, int onednn, const char *label) {
    ct_context *ctx = test_ctx(isa, onednn);
    ct_plan *pn, *pf;
    ct_node xn, yn, xf, yf;
    CHECK_OK(ctx, ce_plan(ctx, 0, &pn, &xn, &yn));
    CHECK_OK(ctx, ce_plan(ctx, 1, &pf, &xf, &yf));
    ct_tensor t;
    ct_plan *ps[2] = {pn, pf};
    ct_node ys[2] = {yn, yf};
    for (int k = 0; k < 2; k++) {
        float *w;
        size_t n;
        ct_plan_param_arena(ps[k], &w, NULL, &n);
        test_fill_uniform(w, n, 21, -4, 4);
        CHECK_OK(ctx, ct_plan_tensor(ps[k], ys[k], &t));
        for (int i = 0; i < 15; i++) ((int32_t *)t.data)[i] = (i * 11 + 3) % 37; /* 4 is ignore_index: hit once */
        CHECK_OK(ctx, ct_plan_forward(ps[k], 1));
        CHECK_OK(ctx, ct_plan_backward(ps[k]));
    }
    float ln, lf;
    CHECK_OK(ctx, ct_plan_loss(pn, &ln));
    CHECK_OK(ctx, ct_plan_loss(pf, &lf));
    CHECK_MSG(!memcmp(&ln, &lf, sizeof ln), "%s: loss (B,T,V) %.9g != (B*T,V) %.9g", label, (double)ln, (double)lf);
    ct_tensor gn, gf;
    CHECK_OK(ctx, ct_plan_grad(pn, xn, &gn));
    CHECK_OK(ctx, ct_plan_grad(pf, xf, &gf));
    CHECK_MSG(!memcmp(gn.data, gf.data, ct_tensor_nbytes(&gn)), "%s: gradients differ", label);
    printf("    %-7s (3, 5, 37) == (15, 37) bit for bit, loss %.6f\n", label, (double)ln);
    ct_plan_free(pn);
    ct_plan_free(pf);
    ct_context_free(ctx);
}

TEST(cross_entropy_nd_equals_flattened_bit_for_bit) {
    ce_nd_vs_flat(CT_ISA_REF, 0, "ref");
    ct_context *probe = test_ctx(-1, 0);
    int isa = ct_context_isa(probe);
    ct_context_free(probe);
    if (isa >= CT_ISA_AVX2) ce_nd_vs_flat(CT_ISA_AVX2, 0, "avx2");
    if (isa >= CT_ISA_AVX512) ce_nd_vs_flat(CT_ISA_AVX512, 0, "avx512");
    /* shape errors name both operands */
    ct_context *ctx = test_ctx(-1, 1);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node x, y, l;
    CHECK_OK(ctx, ct_input(g, "x", CT_F32, 3, S(2, 3, 4), &x));
    CHECK_OK(ctx, ct_input(g, "y", CT_I32, 2, S(3, 2), &y));
    CHECK(ct_cross_entropy(g, x, y, 0, -100, &l) == CT_E_SHAPE);
    CHECK(strstr(ct_context_last_error(ctx), "(..., C)"));
    CHECK_OK(ctx, ct_input(g, "y1", CT_I32, 1, S(6), &y));
    CHECK(ct_cross_entropy(g, x, y, 0, -100, &l) == CT_E_SHAPE);
    ct_graph_free(g);
    ct_context_free(ctx);
}

TEST_MAIN(T(every_op_has_a_case), T(cross_entropy_nd_equals_flattened_bit_for_bit), T(backward_matches_finite_differences), T(avx2_matches_reference), T(avx512_matches_reference),
          T(onednn_matches_reference), T(conv_direct_weight_gradient), T(conv_channels_last_matches_nchw),
          T(pool_channels_last_equals_nchw))
