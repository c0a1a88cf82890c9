/* tests/test_pool.c - pooling against PyTorch's semantics (python3-torch is
 * not needed: the expected sizes come from PyTorch's pooling_output_shape
 * and shape check, transcribed below, and the expected values are worked
 * out by hand from MaxPool2d / AvgPool2d's definitions): output sizes for
 * every small configuration, ceil_mode's last-window rule, the average's
 * divisor with ceil_mode and count_include_pad, dilation, and the old
 * square entry points equal the _ex ones. Gradients (finite differences)
 * and fast kernels against the reference: test_ops.c's pool cases. */
#include "test.h"

/* aten/src/ATen/native/Pool.h, pooling_output_shape_pad_lr + pool2d_shape_check */
static int64_t torch_div_rtn(int64_t x, int64_t y) {
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) --q;
    return q;
}
static int64_t torch_out(int64_t in, int64_t k, int64_t pad, int64_t s, int64_t dil, int ceil_mode) {
    int64_t out = torch_div_rtn(in + pad + pad - dil * (k - 1) - 1 + (ceil_mode ? s - 1 : 0), s) + 1;
    if (ceil_mode && (out - 1) * s >= in + pad) --out;
    return out;
}
/* valid for PyTorch: pad <= half the effective kernel and output >= 1 */
static int torch_valid(int64_t in, int64_t k, int64_t pad, int64_t s, int64_t dil, int ceil_mode) {
    return pad <= ((k - 1) * dil + 1) / 2 && torch_out(in, k, pad, s, dil, ceil_mode) >= 1;
}

static ct_pool2d_opts opts(int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw, int ceil_mode, int inc) {
    ct_pool2d_opts o;
    ct_pool2d_opts_default(&o, 1);
    o.kernel_h = kh; o.kernel_w = kw; o.stride_h = sh; o.stride_w = sw;
    o.pad_h = ph; o.pad_w = pw; o.dilation_h = dh; o.dilation_w = dw;
    o.ceil_mode = ceil_mode;
    o.count_include_pad = inc;
    return o;
}

TEST(output_sizes_follow_pytorch) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    int checked = 0, rejected = 0;
    for (int H = 1; H <= 9; H++) {
        ct_node x;
        CHECK_OK(ctx, ct_input(g, "x", CT_F32, 4, (int64_t[]){1, 2, H, 3}, &x));
        for (int k = 1; k <= 4; k++)
            for (int s = 1; s <= 3; s++)
                for (int d = 1; d <= 2; d++)
                    for (int p = 0; p <= 3; p++)
                        for (int cm = 0; cm <= 1; cm++)
                            for (int avg = 0; avg <= 1; avg++) {
                                /* H axis varies; W axis fixed: kernel 1, stride 1 */
                                ct_pool2d_opts o = opts(k, 1, s, 1, p, 0, d, 1, cm, 1);
                                ct_node y;
                                ct_status st = avg ? ct_avgpool2d_ex(g, x, &o, &y) : ct_maxpool2d_ex(g, x, &o, &y);
                                if (!torch_valid(H, k, p, s, d, cm)) {
                                    CHECK_MSG(st != CT_OK, "H %d k %d s %d p %d d %d ceil %d: accepted, PyTorch rejects",
                                              H, k, s, p, d, cm);
                                    rejected++;
                                    continue;
                                }
                                CHECK_MSG(st == CT_OK, "H %d k %d s %d p %d d %d ceil %d: %s", H, k, s, p, d, cm,
                                          ct_context_last_error(ctx));
                                int nd;
                                int64_t sh[CT_MAX_DIMS];
                                CHECK_OK(ctx, ct_node_shape(g, y, &nd, sh));
                                CHECK_MSG(sh[2] == torch_out(H, k, p, s, d, cm) && sh[3] == 3,
                                          "H %d k %d s %d p %d d %d ceil %d: OH %lld, PyTorch %lld", H, k, s, p, d, cm,
                                          (long long)sh[2], (long long)torch_out(H, k, p, s, d, cm));
                                checked++;
                            }
    }
    /* ceil_mode's rule: in 5, kernel 3, stride 3, pad 1 -> 2 windows (the
     * third would start at 6 >= 5 + 1) */
    CHECK(torch_out(5, 3, 1, 3, 1, 1) == 2 && torch_out(6, 3, 1, 2, 1, 1) == 4 && torch_out(6, 3, 1, 2, 1, 0) == 3);
    printf("    %d configurations sized as PyTorch, %d rejected as PyTorch does\n", checked, rejected);
    ct_graph_free(g);
    ct_context_free(ctx);
}

/* y = pool(x) for x (1, 1, H, W) given row-major, through a forward-only plan */
static ct_status run_pool(ct_context *ctx, int avg, const ct_pool2d_opts *o, int H, int W, const float *xv, float *y,
                          int64_t *ow) {
    ct_graph *g;
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    ct_node x, out;
    ct_plan *p = NULL;
    s = ct_input(g, "x", CT_F32, 4, (int64_t[]){1, 1, H, W}, &x);
    if (s == CT_OK) s = avg ? ct_avgpool2d_ex(g, x, o, &out) : ct_maxpool2d_ex(g, x, o, &out);
    if (s == CT_OK) s = ct_compile(g, CT_NONE, 1, &out, NULL, &p);
    ct_tensor t;
    if (s == CT_OK) s = ct_plan_tensor(p, x, &t);
    if (s == CT_OK) memcpy(t.data, xv, (size_t)(H * W) * sizeof(float));
    if (s == CT_OK) s = ct_plan_forward(p, 0);
    if (s == CT_OK) s = ct_plan_tensor(p, out, &t);
    if (s == CT_OK) {
        memcpy(y, t.data, ct_tensor_nbytes(&t));
        *ow = ct_tensor_numel(&t);
    }
    ct_plan_free(p);
    ct_graph_free(g);
    return s;
}

static int near_all(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (fabsf(a[i] - b[i]) > 1e-6f * fmaxf(1.0f, fabsf(b[i]))) return 0;
    return 1;
}

#define EXPECT(avg, o, H, W, xv, ...)                                                                           \
    do {                                                                                                        \
        const float want_[] = {__VA_ARGS__};                                                                    \
        const int64_t nw_ = (int64_t)(sizeof want_ / sizeof want_[0]);                                          \
        float got_[64];                                                                                         \
        int64_t n_ = 0;                                                                                         \
        CHECK_OK(ctx, run_pool(ctx, avg, &(o), H, W, xv, got_, &n_));                                           \
        CHECK_MSG(n_ == nw_ && near_all(got_, want_, nw_), "%s line %d: got %lld values, first %g", #o, __LINE__, \
                  (long long)n_, (double)got_[0]);                                                              \
    } while (0)

TEST(values_match_pytorch_semantics_by_hand) {
    for (int isa = CT_ISA_REF; isa <= CT_ISA_AVX512; isa++) {
        ct_context *ctx = test_ctx(isa, 0);
        const float row[6] = {1, 2, 3, 4, 5, 6};
        /* AvgPool2d((1,3), stride (1,2), padding (0,1), ceil_mode=True): the 4th
         * window covers 5, pad, (past the padding): divisor 2, as PyTorch */
        ct_pool2d_opts a = opts(1, 3, 1, 2, 0, 1, 1, 1, 1, 1);
        EXPECT(1, a, 1, 6, row, 1.0f, 3.0f, 5.0f, 3.0f);
        /* count_include_pad=False: divide by the taps inside the input */
        ct_pool2d_opts b = opts(1, 3, 1, 2, 0, 1, 1, 1, 1, 0);
        EXPECT(1, b, 1, 6, row, 1.5f, 3.0f, 5.0f, 6.0f);
        /* floor mode: 3 windows, all full */
        ct_pool2d_opts c = opts(1, 3, 1, 2, 0, 1, 1, 1, 0, 1);
        EXPECT(1, c, 1, 6, row, 1.0f, 3.0f, 5.0f);
        /* MaxPool2d((1,3), (1,2), (0,1), ceil_mode=True) */
        ct_pool2d_opts d = opts(1, 3, 1, 2, 0, 1, 1, 1, 1, 1);
        EXPECT(0, d, 1, 6, row, 2.0f, 4.0f, 6.0f, 6.0f);
        /* MaxPool2d((1,2), stride 1, dilation (1,2)): taps w, w+2 */
        const float mixed[6] = {3, -1, 0, 7, 2, -5};
        ct_pool2d_opts e = opts(1, 2, 1, 1, 0, 0, 1, 2, 0, 1);
        EXPECT(0, e, 1, 6, mixed, 3.0f, 7.0f, 2.0f, 7.0f);
        /* 2-D: x = arange(12) as (3, 4), AvgPool2d((2,3), stride (1,1)) ->
         * (2, 2) means of 2x3 blocks */
        float ar[12];
        for (int i = 0; i < 12; i++) ar[i] = (float)i;
        ct_pool2d_opts f = opts(2, 3, 1, 1, 0, 0, 1, 1, 0, 1);
        EXPECT(1, f, 3, 4, ar, 3.0f, 4.0f, 7.0f, 8.0f);
        /* MaxPool2d(2, stride 2, ceil_mode=True) on (3, 4): rows {0,1}, {2} */
        ct_pool2d_opts h = opts(2, 2, 2, 2, 0, 0, 1, 1, 1, 1);
        EXPECT(0, h, 3, 4, ar, 5.0f, 7.0f, 9.0f, 11.0f);
        /* AvgPool2d(2, stride 2, ceil_mode=True) on (3, 4): the last row of
         * windows holds one input row and no padding: divisor 2 */
        EXPECT(1, h, 3, 4, ar, 2.5f, 4.5f, 8.5f, 10.5f);
        ct_context_free(ctx);
    }
}

TEST(old_entry_points_equal_ex_and_errors_are_clear) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node x, a, b;
    CHECK_OK(ctx, ct_input(g, "x", CT_F32, 4, (int64_t[]){2, 3, 9, 8}, &x));
    CHECK_OK(ctx, ct_maxpool2d(g, x, 3, 2, 1, &a));
    ct_pool2d_opts o = opts(3, 3, 2, 2, 1, 1, 1, 1, 0, 1);
    CHECK_OK(ctx, ct_maxpool2d_ex(g, x, &o, &b));
    int na, nb;
    int64_t sa[CT_MAX_DIMS], sb[CT_MAX_DIMS];
    CHECK_OK(ctx, ct_node_shape(g, a, &na, sa));
    CHECK_OK(ctx, ct_node_shape(g, b, &nb, sb));
    CHECK(na == 4 && nb == 4 && !memcmp(sa, sb, 4 * sizeof(int64_t)) && sa[2] == 5 && sa[3] == 4);
    /* stride 0 in _ex: the kernel size (PyTorch's stride=None) */
    ct_pool2d_opts_default(&o, 2);
    CHECK_OK(ctx, ct_avgpool2d_ex(g, x, &o, &b));
    CHECK_OK(ctx, ct_node_shape(g, b, &nb, sb));
    CHECK(sb[2] == 4 && sb[3] == 4);
    /* errors */
    CHECK(ct_maxpool2d(g, x, 2, 2, 2, &a) == CT_E_INVALID_ARG); /* pad > kernel/2 */
    CHECK(strstr(ct_context_last_error(ctx), "half the effective kernel"));
    CHECK(ct_maxpool2d(g, x, 2, 0, 0, &a) == CT_E_INVALID_ARG);
    o = opts(3, 2, 1, 1, 2, 0, 2, 1, 0, 1); /* effective kernel 5: pad 2 allowed */
    CHECK_OK(ctx, ct_maxpool2d_ex(g, x, &o, &a));
    o.pad_h = 3;
    CHECK(ct_maxpool2d_ex(g, x, &o, &a) == CT_E_INVALID_ARG);
    o = opts(10, 1, 1, 1, 0, 0, 1, 1, 0, 1); /* larger than the input */
    CHECK(ct_avgpool2d_ex(g, x, &o, &a) == CT_E_SHAPE);
    o = opts(2, 2, 1, 1, 0, 0, 0, 1, 0, 1); /* dilation 0 */
    CHECK(ct_avgpool2d_ex(g, x, &o, &a) == CT_E_INVALID_ARG);
    CHECK(ct_avgpool2d_ex(g, x, NULL, &a) == CT_E_INVALID_ARG);
    ct_graph_free(g);
    ct_context_free(ctx);
}

TEST_MAIN(T(output_sizes_follow_pytorch), T(values_match_pytorch_semantics_by_hand),
          T(old_entry_points_equal_ex_and_errors_are_clear))
