/* tests/test_fpenv.c - subnormals flushed to zero while ctrain computes
 * (ct_context_opts.flush_subnormals, src/core/fpenv.c): a forward over 2^20
 * subnormal inputs gives zeros in every element (the caller's thread and the
 * OpenMP workers flush), the same forward with flushing off keeps the exact
 * subnormal products, the environment variable overrides the option, and the
 * caller's and the workers' own MXCSR are what they were when the call
 * returns (FTZ/DAZ set by the caller stay set; unset stay unset). */
#include <omp.h>
#include <stdlib.h>

#include "test.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FLUSH_BITS 0x8040u
/* MXCSR without its sticky exception flags (bits 0-5: the test's own compares with subnormals set DE) */
static unsigned csr(void) { return _mm_getcsr() & ~0x3fu; }

enum { N = 1 << 20 };
static const float SUB = 1e-40f; /* subnormal: below FLT_MIN 1.18e-38 */

/* y = 2 x over N elements; how many outputs are 0 and how many are exactly 2 * SUB */
static void run_scale(ct_context *ctx, int64_t *zeros, int64_t *kept) {
    ct_graph *g = NULL;
    ct_node x, y;
    ct_plan *p = NULL;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    CHECK_OK(ctx, ct_input(g, "x", CT_F32, 1, (int64_t[]){N}, &x));
    CHECK_OK(ctx, ct_scale(g, x, 2.0f, &y));
    CHECK_OK(ctx, ct_compile(g, CT_NONE, 1, &y, NULL, &p));
    ct_tensor tx, ty;
    CHECK_OK(ctx, ct_plan_tensor(p, x, &tx));
    for (int64_t i = 0; i < N; i++) ((float *)tx.data)[i] = SUB;
    CHECK_OK(ctx, ct_plan_forward(p, 0));
    CHECK_OK(ctx, ct_plan_tensor(p, y, &ty));
    *zeros = *kept = 0;
    for (int64_t i = 0; i < N; i++) {
        float v = ((const float *)ty.data)[i];
        *zeros += v == 0.0f;
        *kept += v == 2.0f * SUB;
    }
    ct_plan_free(p);
    ct_graph_free(g);
}

static ct_context *ctx_flush(int flush) {
    ct_context_opts o;
    ct_context_opts_default(&o);
    o.num_threads = 2;
    if (flush >= 0) o.flush_subnormals = flush;
    ct_context *ctx = NULL;
    if (ct_context_create(&o, &ctx) != CT_OK) return NULL;
    return ctx;
}

/* how many of the n OpenMP threads have both bits set */
static int workers_flushing(int n) {
    int cnt = 0;
#pragma omp parallel num_threads(n) reduction(+ : cnt)
    cnt += (_mm_getcsr() & FLUSH_BITS) == FLUSH_BITS;
    return cnt;
}

TEST(default_flushes_in_every_thread) {
    unsetenv("CT_FLUSH_SUBNORMALS");
    ct_context *ctx = ctx_flush(-1);
    CHECK(ctx != NULL);
    CHECK(ct_context_flush_subnormals(ctx) == 1);
    unsigned before = csr();
    int64_t zeros, kept;
    run_scale(ctx, &zeros, &kept);
    CHECK_MSG(zeros == N, "%lld of %d outputs flushed to zero (the rest kept: %lld)", (long long)zeros, N, (long long)kept);
    CHECK_MSG(csr() == before, "the caller's MXCSR %#x came back as %#x", before, csr());
    CHECK_MSG(workers_flushing(2) == 0, "%d OpenMP threads still flush after the call", workers_flushing(2));
    ct_context_free(ctx);
}

TEST(off_keeps_subnormals) {
    unsetenv("CT_FLUSH_SUBNORMALS");
    ct_context *ctx = ctx_flush(0);
    CHECK(ctx != NULL);
    int64_t zeros, kept;
    run_scale(ctx, &zeros, &kept);
    CHECK_MSG(kept == N, "%lld of %d outputs kept 2e-40 exactly (%lld zeros)", (long long)kept, N, (long long)zeros);
    ct_context_free(ctx);
}

TEST(environment_overrides) {
    setenv("CT_FLUSH_SUBNORMALS", "0", 1);
    ct_context *off = ctx_flush(1);
    setenv("CT_FLUSH_SUBNORMALS", "1", 1);
    ct_context *on = ctx_flush(0);
    unsetenv("CT_FLUSH_SUBNORMALS");
    CHECK(off && on);
    CHECK(ct_context_flush_subnormals(off) == 0 && ct_context_flush_subnormals(on) == 1);
    int64_t zeros, kept;
    run_scale(off, &zeros, &kept);
    CHECK_MSG(kept == N, "CT_FLUSH_SUBNORMALS=0: %lld kept", (long long)kept);
    run_scale(on, &zeros, &kept);
    CHECK_MSG(zeros == N, "CT_FLUSH_SUBNORMALS=1: %lld zeros", (long long)zeros);
    ct_context_free(off);
    ct_context_free(on);
}

/* a value that is not 0 or 1 is refused with a message naming the variable, not ignored */
TEST(invalid_environment_refused) {
    static const char *vars[] = {"CT_ISA", "CT_FLUSH_SUBNORMALS", "CT_ONEDNN", "CT_BF16_NATIVE", "CT_HUGE_PAGES",
                                 "CT_ATTENTION_AMX", "CT_MATMUL_AMX"};
    for (int v = 0; v < (int)(sizeof vars / sizeof vars[0]); v++) {
        setenv(vars[v], "yes", 1);
        char msg[256];
        ct_context *ctx = NULL;
        ct_context_opts o;
        ct_context_opts_default(&o);
        ct_status s = ct_context_create(&o, &ctx);
        ct_status c = ct_context_env_check(msg, sizeof msg);
        unsetenv(vars[v]);
        CHECK_MSG(s == CT_E_CONFIG && ctx == NULL, "%s=yes: context status %d", vars[v], (int)s);
        CHECK(c == CT_E_CONFIG);
        CHECK_MSG(strstr(msg, vars[v]) && strstr(msg, "'yes'") && strstr(msg, v == 0 ? "ref, avx2 or avx512" : "0 or 1"),
                  "message: %s", msg);
        ct_context_free(ctx);
    }
    char msg[64] = "x";
    CHECK(ct_context_env_check(msg, sizeof msg) == CT_OK && msg[0] == 0);
}

/* a caller that flushes already: its bits stay, and a context that keeps subnormals does not clear them */
TEST(caller_mxcsr_restored_as_it_was) {
    unsetenv("CT_FLUSH_SUBNORMALS");
    unsigned orig = csr();
    _mm_setcsr(orig | FLUSH_BITS);
    ct_context *ctx = ctx_flush(1);
    CHECK(ctx != NULL);
    int64_t zeros, kept;
    run_scale(ctx, &zeros, &kept);
    CHECK(zeros == N);
    CHECK_MSG(csr() == (orig | FLUSH_BITS), "MXCSR %#x, want %#x", csr(), orig | FLUSH_BITS);
    _mm_setcsr(orig);
    run_scale(ctx, &zeros, &kept);
    CHECK_MSG(csr() == orig, "MXCSR %#x, want %#x", csr(), orig);
    ct_context_free(ctx);
}

TEST_MAIN(T(default_flushes_in_every_thread), T(off_keeps_subnormals), T(environment_overrides),
          T(invalid_environment_refused), T(caller_mxcsr_restored_as_it_was))
#else
TEST(not_x86) { CHECK(1); }
TEST_MAIN(T(not_x86))
#endif
