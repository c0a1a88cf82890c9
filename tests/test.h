/* tests/test.h - a tiny test framework. Each tests/test_*.c is one binary
 * with TEST(name) functions listed in a TESTS table; main runs them all and
 * prints "N passed, N failed". */
#ifndef CT_TEST_H
#define CT_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/ctrain.h"

extern int ct_test_failed_checks;

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "  CHECK failed %s:%d: %s\n", __FILE__, __LINE__, #cond);    \
            ct_test_failed_checks++;                                                     \
            return;                                                                      \
        }                                                                                \
    } while (0)

#define CHECK_MSG(cond, ...)                                                             \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "  CHECK failed %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                                \
            fprintf(stderr, "\n");                                                       \
            ct_test_failed_checks++;                                                     \
            return;                                                                      \
        }                                                                                \
    } while (0)

/* Checks a ct_status call is CT_OK, printing the context's message if not. */
#define CHECK_OK(ctx, expr)                                                              \
    do {                                                                                 \
        ct_status s_ = (expr);                                                           \
        if (s_ != CT_OK) {                                                               \
            fprintf(stderr, "  CHECK_OK failed %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, \
                    #expr, ct_status_name(s_), ct_context_last_error(ctx));              \
            ct_test_failed_checks++;                                                     \
            return;                                                                      \
        }                                                                                \
    } while (0)

#define TEST(name) static void name(void)

typedef struct {
    const char *name;
    void (*fn)(void);
} ct_test_case;

int ct_test_main(const char *suite, const ct_test_case *cases, int n, int argc, char **argv);

#define TEST_MAIN(...)                                                                   \
    int main(int argc, char **argv) {                                                    \
        static const ct_test_case cases_[] = {__VA_ARGS__};                              \
        return ct_test_main(__FILE__, cases_, (int)(sizeof cases_ / sizeof cases_[0]), argc, argv); \
    }
#define T(fn) {#fn, fn}

/* Helpers shared by tests (tests/util.c) */
/* A whole file, NUL-terminated (*n its bytes, n may be NULL; NULL when it cannot be read whole). The caller
 * frees it. */
unsigned char *test_read_file(const char *path, size_t *n);
/* MPI test binaries (run alone: a world of one): *ctx = test_ctx(-1, 1) and *world; returns 0, or 1 after
 * printing why and "<suite>: 0 passed, 1 failed" when the world cannot be created. test_mpi_finish frees
 * both and returns rc. */
int test_mpi_start(const char *suite, ct_context **ctx, ct_comm **world);
int test_mpi_finish(ct_context *ctx, ct_comm *world, int rc);

/* One forward + backward of a cross entropy over a (rows, cols) logits param set to logits, with labels
 * (rows): vp 1 is cross_entropy_vp (the real classes: vocab; group: the graph's tensor group, may be NULL),
 * vp 0 ct_cross_entropy over every column. The caller frees out->p. */
typedef struct {
    ct_plan *p;
    ct_node x, y, loss;
    float l;
} test_ce_run;
ct_status test_ce_plan(ct_context *ctx, ct_comm *group, int vp, int64_t rows, int64_t cols, int64_t vocab, float eps,
                       int ignore, const float *logits, const int32_t *labels, test_ce_run *out);
ct_context *test_ctx(int isa, int use_onednn); /* isa -1: best */
/* max over i of |a-b| / max(|b|, floor) */
double test_max_rel(const float *a, const float *b, size_t n, double floor);
/* max|a - b| / max|b| (|a - b| where b is all zero; NaN: infinity) */
double test_rel_to_max(const float *a, const float *b, size_t n);
void test_fill_uniform(float *x, size_t n, unsigned seed, float lo, float hi);

/* A plan whose params have the given shapes (every param gets a gradient):
 * loss = sum_i sum(x_i @ reshape(w_i, (numel, 1))). Param i is named w<i>. */
ct_status test_params_plan(ct_context *ctx, int np, const int *nd, const int64_t (*shapes)[4], ct_plan **out);

/* The SIMD kernel slots (CT_KERNEL_AVX2, CT_KERNEL_AVX512) this CPU can run,
 * for tests that call kernels directly; prints which ones are skipped.
 * Returns how many were written to slots[0..1]. */
int test_fast_slots(const ct_context *ctx, int slots[2]);

/* A classifier: x -> ct_model_mlp (xshape 2-D) or ct_model_cnn (4-D) ->
 * cross entropy, compiled with the logits kept; x is filled with U(-1, 1) and
 * the labels with i % classes. Returns the first failing status (the
 * context holds the message); m->plan is NULL then. */
typedef struct {
    ct_plan *plan;
    ct_node x, y, logits, loss;
} test_model;
ct_status test_model_build(ct_context *ctx, int nd, const int64_t *xshape, int n_layers, const int64_t *sizes,
                           int64_t classes, float dropout, float smoothing, test_model *m);
/* A fresh temporary directory /tmp/ct_test_<tag>_XXXXXX (the previous one and,
 * at exit, the last one are removed with their files; exits on failure),
 * a path inside it (4 rotating buffers), and a whole-file writer (exits on
 * failure: test setup, not the code under test). */
const char *test_tmp_make(const char *tag);
const char *test_tmp_dir(void);
const char *test_tmp_path(const char *name);
void test_tmp_remove(void);
void test_write_file(const char *path, const void *buf, size_t n);

/* The same, compiled with `opts` (NULL: defaults). */
ct_status test_model_build_opts(ct_context *ctx, int nd, const int64_t *xshape, int n_layers, const int64_t *sizes,
                                int64_t classes, float dropout, float smoothing, const ct_compile_opts *opts,
                                test_model *m);

/* One op with its operands as parameters (zeros; the caller fills them), for
 * tests that compare kernels on matmul / linear / conv2d configurations
 * (test_onednn, test_bf16_native): *y is the op's output. */
typedef struct {
    int nd_a, nd_b;   /* a: nd_a dims, b: 2 or nd_a dims */
    int64_t batch[2]; /* leading dims of a (and of a batched b) */
    int64_t M, K, N;
    int ta, tb;
} test_mm_cfg;
typedef struct {
    int nd;
    int64_t lead[2];
    int64_t I, O;
    int bias;
} test_lin_cfg;
typedef struct {
    int64_t N, C, H, W, OC, KH, KW;
    int stride, pad, dil, groups, bias;
} test_conv_cfg;
ct_status test_mm_op(ct_graph *g, const test_mm_cfg *c, ct_node *y);
ct_status test_linear_op(ct_graph *g, const test_lin_cfg *c, ct_node *y);
ct_status test_conv_op(ct_graph *g, const test_conv_cfg *c, ct_node *y);
/* "conv2d x[N,C,H,W] oc=.. k=..x.. stride=.. pad=.. dil=.. groups=.. bias=.." */
void test_conv_label(const test_conv_cfg *c, char *buf, size_t len);
/* loss = sum(y * r), r a new FP32 input "r" of y's shape (so dy = r) */
ct_status test_weighted_sum(ct_graph *g, ct_node y, ct_node *r, ct_node *loss);

#endif
