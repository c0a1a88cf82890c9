/* tests/test_bucket.c - gradient buckets (ct_buckets, include/ctrain/dist.h;
 * src/comm/bucket.c).
 *
 *   test_bucket                 on a world of one process (planning, no MPI)
 *   mpirun -np N test_bucket    every reduction checked on every rank
 *                               (tests/dist_test.sh runs it at 2 and 4 ranks)
 *
 * Planning (contiguous ranges covering the arena, from its end, the caps,
 * how early each bucket can start), the reduction in the three ways it can
 * run (a progress thread during "backward", the grad-ready hook, all after
 * it) against the exact sum, that with overlap a bucket is started before
 * ct_buckets_finish is called, bf16 / fp16 compression against the rounded
 * values with the residual kept and fed back, an inf on one rank reaching
 * every rank (what the loss scaler's skip decision reads), gradients outside
 * begin..finish sending nothing, and a real plan's backward order. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

static ct_context *g_ctx;
static ct_comm *g_world;

/* 6 parameters of an MLP-like arena: sizes in floats */
static const size_t k_sizes[6] = {4096, 64, 8192, 64, 640, 10};

static size_t offsets(size_t *off) {
    size_t o = 0;
    for (int i = 0; i < 6; i++) off[i] = o, o += (k_sizes[i] + 15) / 16 * 16;
    off[6] = o;
    return o;
}

TEST(plan_covers_the_arena_from_its_end) {
    size_t off[7], n = offsets(off);
    float *g = calloc(n, sizeof *g);
    CHECK(g);
    const int order[6] = {5, 4, 3, 2, 1, 0}; /* backward: the last layer first */
    ct_bucket_opts o;
    ct_bucket_opts_default(&o);
    o.first_bucket_bytes = 2000; /* b5 + w4 (2600 bytes) close the first bucket */
    o.bucket_bytes = 20000;
    ct_buckets *b = NULL;
    ct_status s = ct_buckets_create(g_ctx, g_world, g, n, 6, off, order, 6, &o, &b);
    if (s != CT_OK) free(g);
    CHECK_OK(g_ctx, s);
    int nb = ct_buckets_count(b), ok = nb == 3;
    size_t end = n;
    for (int i = 0; ok && i < nb; i++) {
        ct_bucket_info bi;
        ok = ct_buckets_info(b, i, &bi) == CT_OK && bi.off + bi.n == end && bi.off == off[bi.first_param];
        end = bi.off;
        if (i == 0) ok = ok && bi.first_param == 4 && bi.n_params == 2 && bi.ready_after == 2;
        if (i == 1) ok = ok && bi.first_param == 2 && bi.n_params == 2 && bi.ready_after == 4; /* 32 KiB + 256 B >= 20000 */
        if (i == 2) ok = ok && bi.first_param == 0 && bi.n_params == 2 && bi.ready_after == 6;
        if (!ok) fprintf(stderr, "  bucket %d: off %zu n %zu params %d+%d ready after %d\n", i, bi.off, bi.n,
                         bi.first_param, bi.n_params, bi.ready_after);
    }
    ct_buckets_free(b);
    /* biases finalized after their weights (as the MLP's backward does), and parameter 3 without a gradient:
     * {4, 5} ready after 2, {2} after 3 (3 is not in the order, so 2's bucket cannot reach 1 and 0: not
     * neighbours), {0, 1} after 5, {3} at the end */
    const int order2[5] = {5, 4, 2, 0, 1};
    s = ct_buckets_create(g_ctx, g_world, g, n, 6, off, order2, 5, &o, &b);
    int ok2 = s == CT_OK && ct_buckets_count(b) == 4;
    const int want2[4][3] = {{4, 2, 2}, {2, 1, 3}, {0, 2, 5}, {3, 1, 5}};
    size_t covered = 0;
    for (int i = 0; ok2 && i < 4; i++) {
        ct_bucket_info bi;
        ok2 = ct_buckets_info(b, i, &bi) == CT_OK && bi.first_param == want2[i][0] && bi.n_params == want2[i][1] &&
              bi.ready_after == want2[i][2] && bi.off == off[bi.first_param] &&
              bi.n == off[bi.first_param + bi.n_params] - bi.off;
        covered += bi.n;
        if (!ok2) fprintf(stderr, "  order2 bucket %d: params %d+%d ready after %d\n", i, bi.first_param, bi.n_params,
                          bi.ready_after);
    }
    ok2 = ok2 && covered == n;
    ct_buckets_free(b);
    CHECK(ok2);
    /* bucket_bytes 0: one bucket of everything, without a first bucket of its own */
    o.bucket_bytes = o.first_bucket_bytes = 0;
    s = ct_buckets_create(g_ctx, g_world, g, n, 6, off, order, 6, &o, &b);
    ct_bucket_info bi = {0};
    int one = s == CT_OK && ct_buckets_count(b) == 1 && ct_buckets_info(b, 0, &bi) == CT_OK && bi.off == 0 && bi.n == n;
    ct_buckets_free(b);
    /* ... also when a parameter has no gradient and the order is not the arena's */
    s = ct_buckets_create(g_ctx, g_world, g, n, 6, off, order2, 5, &o, &b);
    one = one && s == CT_OK && ct_buckets_count(b) == 1 && ct_buckets_info(b, 0, &bi) == CT_OK && bi.off == 0 &&
          bi.n == n && bi.n_params == 6 && bi.ready_after == 5;
    ct_buckets_free(b);
    /* a parameter range that is not increasing is refused */
    size_t bad[7];
    memcpy(bad, off, sizeof bad);
    bad[3] = bad[2] - 1;
    ct_status sb = ct_buckets_create(g_ctx, g_world, g, n, 6, bad, order, 6, &o, &b);
    free(g);
    CHECK(ok && one);
    CHECK(sb == CT_E_INVALID_ARG && b == NULL);
    ct_context_clear_error(g_ctx);
}

/* Every rank's verdict: 1 when ok on all of them (so that the ranks fail
 * alike and never leave one another waiting in a collective). */
static int all_ok(int ok) {
    double v = ok ? 1.0 : 0.0;
    if (ct_comm_allreduce_f64(g_world, &v, 1, CT_REDUCE_MIN) != CT_OK) return 0;
    return v == 1.0;
}

/* Random layouts and backward orders (nearly reversed, neighbours swapped, some parameters without a
 * gradient), random caps: the buckets always tile the arena, each range whole parameters, each bucket
 * ready after its last gradient. */
TEST(plan_tiles_the_arena_for_any_order) {
    unsigned seed = 12345;
#define RND() (seed = seed * 1103515245u + 12345u, (seed >> 8) & 0xffffff)
    int bad = 0;
    for (int trial = 0; trial < 300 && !bad; trial++) {
        int np = 1 + (int)(RND() % 40), order[64], n = 0;
        size_t off[65];
        off[0] = 0;
        for (int i = 0; i < np; i++) off[i + 1] = off[i] + 16 * (1 + RND() % 300);
        for (int i = np - 1; i >= 0; i--)
            if (RND() % 8) order[n++] = i;
        for (int i = 0; i + 1 < n; i++)
            if (RND() % 3 == 0) {
                int t = order[i];
                order[i] = order[i + 1], order[i + 1] = t;
            }
        ct_bucket_opts o;
        ct_bucket_opts_default(&o);
        o.overlap = 0;
        o.first_bucket_bytes = 4 * (RND() % 3000);
        o.bucket_bytes = RND() % 5 == 0 ? 0 : 4 * (1 + RND() % 8000);
        float *g = calloc(off[np], sizeof *g);
        ct_buckets *b = NULL;
        if (!g || ct_buckets_create(g_ctx, g_world, g, off[np], np, off, order, n, &o, &b) != CT_OK) {
            fprintf(stderr, "  trial %d: %s\n", trial, ct_context_last_error(g_ctx));
            free(g);
            bad = 1;
            break;
        }
        /* tiling: sorted by offset, each range starts where the last ended */
        int nb = ct_buckets_count(b), covered = 0;
        size_t end = 0;
        for (int pass = 0; pass < nb && !bad; pass++) {
            int found = 0;
            for (int i = 0; i < nb; i++) {
                ct_bucket_info bi;
                ct_buckets_info(b, i, &bi);
                if (bi.off != end) continue;
                found = bi.n > 0 && bi.off == off[bi.first_param] && bi.off + bi.n == off[bi.first_param + bi.n_params];
                int last = 0;
                for (int q = 0; q < n; q++)
                    if (order[q] >= bi.first_param && order[q] < bi.first_param + bi.n_params) last = q + 1;
                found = found && bi.ready_after == (last ? last : n);
                covered += bi.n_params;
                end = bi.off + bi.n;
                break;
            }
            bad = !found;
        }
        bad = bad || end != off[np] || covered != np;
        if (bad) fprintf(stderr, "  trial %d: %d params, %d buckets do not tile the arena (end %zu of %zu)\n", trial, np,
                         nb, end, off[np]);
        ct_buckets_free(b);
        free(g);
    }
#undef RND
    CHECK(!bad);
}

static void spin_us(double us) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) * 1e-3 < us);
}

/* x_r[i] = r + 1 + (i % 7) on rank r: the sum is exact in FP32 (and in bf16 / fp16: small integers). */
static void fill(float *g, size_t n, int rank) {
    for (size_t i = 0; i < n; i++) g[i] = (float)(rank + 1 + (int)(i % 7));
}
static int exact_sum(const float *g, size_t n, int S) {
    for (size_t i = 0; i < n; i++)
        if ((double)g[i] != S * (S + 1) / 2.0 + S * (double)(i % 7)) {
            fprintf(stderr, "  i %zu: %g, want %g\n", i, (double)g[i], S * (S + 1) / 2.0 + S * (double)(i % 7));
            return 0;
        }
    return 1;
}

/* One reduction as the trainer runs it: begin, the gradients ready one by
 * one in backward order with "compute" between them, finish. *started <-
 * the buckets started before finish (waiting up to 5 s for the progress
 * thread to start at least one: a loaded machine may not run it at once). */
static ct_status reduce_like_backward(ct_buckets *b, const int *order, int n, int overlap, int *started) {
    ct_status s = ct_buckets_begin(b);
    for (int q = 0; s == CT_OK && q < n; q++) {
        spin_us(300);
        ct_buckets_grad_ready(b, order[q]);
    }
    for (int t = 0; overlap && t < 5000 && ct_buckets_started(b) == 0; t++) spin_us(1000);
    *started = ct_buckets_started(b);
    return s == CT_OK ? ct_buckets_finish(b, NULL) : s;
}

static void reduce_mode(int overlap, ct_bucket_progress progress, ct_grad_compression comp) {
    const int rank = ct_comm_rank(g_world), S = ct_comm_size(g_world);
    size_t off[7], n = offsets(off);
    float *g = malloc(n * sizeof *g);
    CHECK(g);
    const int order[6] = {5, 4, 3, 2, 1, 0};
    ct_bucket_opts o;
    ct_bucket_opts_default(&o);
    o.first_bucket_bytes = 2000, o.bucket_bytes = 20000;
    o.overlap = overlap, o.progress = progress, o.compression = comp;
    ct_buckets *b = NULL;
    ct_status s = ct_buckets_create(g_ctx, g_world, g, n, 6, off, order, 6, &o, &b);
    if (s != CT_OK) free(g);
    CHECK_OK(g_ctx, s);
    int ok = 1, early = 1;
    for (int rep = 0; rep < 3 && ok && s == CT_OK; rep++) { /* the buckets are reused step after step */
        fill(g, n, rank);
        int started = 0;
        s = reduce_like_backward(b, order, 6, overlap, &started);
        ok = s == CT_OK && exact_sum(g, n, S);
        ct_bucket_info bi;
        /* with overlap the buckets whose gradients were all ready (all of them here) started during "backward";
         * without, none did */
        early = early && (overlap ? started >= 1 : started == 0);
        for (int i = 0; i < ct_buckets_count(b); i++) {
            ct_buckets_info(b, i, &bi);
            ok = ok && bi.ready_us > 0 && bi.start_us >= bi.ready_us && bi.end_us >= bi.start_us;
        }
    }
    size_t nr = 1;
    float *res = ct_buckets_residual(b, &nr);
    int res_ok = comp == CT_GRAD_COMPRESSION_NONE ? res == NULL && nr == 0 : res != NULL && nr == n;
    for (size_t i = 0; res && res_ok && i < nr; i++) res_ok = res[i] == 0.0f; /* small integers round exactly */
    ct_buckets_free(b);
    free(g);
    ok = all_ok(ok), early = all_ok(early), res_ok = all_ok(res_ok);
    CHECK_MSG(s == CT_OK, "%s", ct_context_last_error(g_ctx));
    CHECK_MSG(ok, "overlap %d progress %d compression %d: the sum is wrong or a bucket's times are out of order",
              overlap, (int)progress, (int)comp);
    CHECK_MSG(early, "overlap %d progress %d: buckets started before ct_buckets_finish, or not without overlap", overlap,
              (int)progress);
    CHECK(res_ok);
}

TEST(sum_with_a_progress_thread) { reduce_mode(1, CT_BUCKET_PROGRESS_THREAD, CT_GRAD_COMPRESSION_NONE); }
TEST(sum_from_the_hook) { reduce_mode(1, CT_BUCKET_PROGRESS_HOOK, CT_GRAD_COMPRESSION_NONE); }
TEST(sum_after_backward) { reduce_mode(0, CT_BUCKET_PROGRESS_THREAD, CT_GRAD_COMPRESSION_NONE); }
TEST(sum_in_bf16_and_fp16) {
    reduce_mode(1, CT_BUCKET_PROGRESS_THREAD, CT_GRAD_COMPRESSION_BF16);
    reduce_mode(1, CT_BUCKET_PROGRESS_HOOK, CT_GRAD_COMPRESSION_FP16);
    reduce_mode(0, CT_BUCKET_PROGRESS_THREAD, CT_GRAD_COMPRESSION_BF16);
}

/* Values bf16 cannot hold: every rank sends round(g + residual), keeps what
 * rounding lost and adds it to the next step's gradient. */
static void compression_feedback(ct_grad_compression comp) {
    const int rank = ct_comm_rank(g_world), S = ct_comm_size(g_world);
    const int bf16 = comp == CT_GRAD_COMPRESSION_BF16;
    const size_t n = 1000;
    size_t off[2] = {0, n};
    const int order[1] = {0};
    float *g = malloc(n * sizeof *g), *want_res = calloc(n, sizeof *want_res);
    double *want = malloc(n * sizeof *want);
    CHECK(g && want_res && want);
    ct_bucket_opts o;
    ct_bucket_opts_default(&o);
    o.compression = comp;
    ct_buckets *b = NULL;
    ct_status s = ct_buckets_create(g_ctx, g_world, g, n, 1, off, order, 1, &o, &b);
    int ok = s == CT_OK;
    for (int step = 0; ok && step < 3; step++) {
        /* every rank's gradient is known to all: the expected sum of the rounded values */
        for (size_t i = 0; i < n; i++) {
            double sum = 0;
            for (int r = 0; r < S; r++) {
                float v = 1.0f + 0.001f * (float)(i + 1) * (float)(r + 1 + step);
                float res_r = r == rank ? want_res[i] : 0.0f; /* only this rank's residual is known here */
                float q = bf16 ? ct_bf16_to_f32(ct_f32_to_bf16(v + res_r)) : ct_f16_to_f32(ct_f32_to_f16(v + res_r));
                if (r == rank) {
                    g[i] = v;
                    want_res[i] = (v + res_r) - q;
                }
                sum += q;
            }
            want[i] = sum;
        }
        int started;
        s = reduce_like_backward(b, order, 1, 1, &started);
        size_t nr = 0;
        const float *res = ct_buckets_residual(b, &nr);
        ok = s == CT_OK && res && nr == n;
        int lost = 0;
        for (size_t i = 0; ok && i < n; i++) {
            ok = res[i] == want_res[i];
            lost += res[i] != 0.0f;
            /* the other ranks' residuals are not known here, and the ranks' values are summed pairwise, each sum
             * rounded: within an ulp (2^-7 relative in bf16, 2^-10 in fp16) per rank */
            double tol = S * (bf16 ? 1.0 / 128 : 1.0 / 1024) * want[i];
            ok = ok && fabs((double)g[i] - want[i]) <= tol;
            if (!ok) fprintf(stderr, "  step %d i %zu: sum %.9g want %.9g, residual %g want %g\n", step, i, (double)g[i],
                             want[i], (double)res[i], (double)want_res[i]);
        }
        ok = all_ok(ok && lost > (int)n / 2); /* the values were chosen so that rounding loses something */
    }
    ct_buckets_free(b);
    free(g), free(want_res), free(want);
    CHECK_MSG(ok, "compression %d: %s", (int)comp, ct_context_last_error(g_ctx));
}

TEST(compression_keeps_what_rounding_lost) {
    compression_feedback(CT_GRAD_COMPRESSION_BF16);
    compression_feedback(CT_GRAD_COMPRESSION_FP16);
}

/* An inf on the last rank only reaches every rank (so every rank's loss
 * scaler sees the overflow and skips the step), compressed or not; the
 * residual of a non-finite value is 0 (the next step is not poisoned). */
TEST(an_inf_on_one_rank_reaches_every_rank) {
    const int rank = ct_comm_rank(g_world), S = ct_comm_size(g_world);
    for (int comp = 0; comp < CT_GRAD_COMPRESSION_COUNT; comp++) {
        const size_t n = 256;
        size_t off[2] = {0, n};
        const int order[1] = {0};
        float g[256];
        ct_bucket_opts o;
        ct_bucket_opts_default(&o);
        o.compression = (ct_grad_compression)comp;
        ct_buckets *b = NULL;
        CHECK_OK(g_ctx, ct_buckets_create(g_ctx, g_world, g, n, 1, off, order, 1, &o, &b));
        for (size_t i = 0; i < n; i++) g[i] = 0.5f;
        if (rank == S - 1) g[17] = INFINITY;
        int started;
        ct_status s = reduce_like_backward(b, order, 1, 1, &started);
        size_t nr = 0;
        const float *res = ct_buckets_residual(b, &nr);
        int ok = s == CT_OK && isinf(g[17]) && g[16] == 0.5f * (float)S;
        if (res) ok = ok && res[17] == 0.0f;
        ct_buckets_free(b);
        ok = all_ok(ok);
        CHECK_MSG(ok, "compression %d: g[17] = %g, g[16] = %g", comp, (double)g[17], (double)g[16]);
    }
}

/* Gradients reported outside begin..finish (the micro-batches before the
 * last one) send nothing: the communicator counts no allreduce. */
TEST(nothing_is_sent_before_begin) {
    size_t off[7], n = offsets(off);
    float *g = calloc(n, sizeof *g);
    CHECK(g);
    const int order[6] = {5, 4, 3, 2, 1, 0};
    ct_bucket_opts o;
    ct_bucket_opts_default(&o);
    o.first_bucket_bytes = 2000, o.bucket_bytes = 20000;
    ct_buckets *b = NULL;
    ct_status s = ct_buckets_create(g_ctx, g_world, g, n, 6, off, order, 6, &o, &b);
    if (s != CT_OK) free(g);
    CHECK_OK(g_ctx, s);
    ct_comm_stats a, c, d;
    ct_comm_get_stats(g_world, &a);
    for (int q = 0; q < 6; q++) ct_buckets_grad_ready(b, order[q]); /* not armed */
    spin_us(2000);
    ct_comm_get_stats(g_world, &c);
    int started;
    s = reduce_like_backward(b, order, 6, 1, &started);
    ct_comm_get_stats(g_world, &d);
    int nb = ct_buckets_count(b);
    ct_buckets_free(b);
    free(g);
    CHECK_OK(g_ctx, s);
    CHECK(c.allreduce_calls == a.allreduce_calls && c.allreduce_bytes == a.allreduce_bytes);
    CHECK(d.allreduce_calls == c.allreduce_calls + (uint64_t)nb && d.allreduce_bytes == c.allreduce_bytes + n * sizeof(float));
}

/* A real plan: ct_plan_grad_ready_order lists every parameter once, in the
 * order backward's hook reports them (recorded here). */
static int g_seen[16], g_n_seen;
static void record(void *user, int param, const ct_tensor *grad) {
    (void)user, (void)grad;
    if (g_n_seen < 16) g_seen[g_n_seen++] = param;
}
TEST(plan_backward_order) {
    const int nd[4] = {2, 1, 2, 1};
    const int64_t shapes[4][4] = {{8, 4}, {4}, {4, 3}, {3}};
    ct_plan *p = NULL;
    CHECK_OK(g_ctx, test_params_plan(g_ctx, 4, nd, shapes, &p));
    int order[8] = {0};
    int n = ct_plan_grad_ready_order(p, order, 8);
    ct_plan_set_grad_ready(p, record, NULL);
    g_n_seen = 0;
    ct_status s = ct_plan_forward(p, 1);
    if (s == CT_OK) s = ct_plan_backward(p);
    ct_plan_free(p);
    CHECK_OK(g_ctx, s);
    CHECK_MSG(n == 4 && g_n_seen == 4, "%d in the order, %d reported", n, g_n_seen);
    int seen[4] = {0};
    for (int i = 0; i < 4; i++) {
        CHECK(order[i] == g_seen[i] && order[i] >= 0 && order[i] < 4 && !seen[order[i]]);
        seen[order[i]] = 1;
    }
}

/* The trace: a bucket's allreduce ("comm_bucket") on its own track (tid 3), the
 * wait for the gradients ("comm") on track 2; the doctor's communication
 * share counts the wait only (the bucket overlapped backward). */
TEST(trace_tracks_and_doctor_share) {
    ct_profiler_opts po;
    ct_profiler_opts_default(&po);
    po.skip_steps = 0, po.warmup_steps = 0, po.record_steps = 0;
    ct_profiler *prof = NULL;
    CHECK_OK(g_ctx, ct_profiler_create(g_ctx, &po, &prof));
    double t0 = ct_profiler_now_us();
    spin_us(10000);
    double t1 = ct_profiler_now_us();
    ct_profiler_event(prof, "allreduce bucket 0", "comm_bucket", t0 + 1000, t0 + 6000, "{\"bucket\": 0}");
    ct_profiler_event(prof, "wait for gradient buckets", "comm", t1 - 1000, t1, NULL);
    ct_profiler_step(prof);
    char path[128];
    snprintf(path, sizeof path, "/tmp/ct_test_bucket_%d_%d.json", (int)getpid(), ct_comm_rank(g_world));
    ct_status s = ct_profiler_write(prof, path);
    ct_profiler_free(prof);
    ct_doctor_report r;
    memset(&r, 0, sizeof r);
    if (s == CT_OK) s = ct_doctor_analyze_file(g_ctx, path, &r);
    char txt[8192] = "";
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(txt, 1, sizeof txt - 1, f) : 0;
    if (f) fclose(f);
    txt[got] = 0;
    unlink(path);
    CHECK_OK(g_ctx, s);
    CHECK_MSG(strstr(txt, "\"tid\": 3, \"ts\"") && strstr(txt, "\"cat\": \"comm_bucket\"") &&
                  strstr(txt, "\"tid\": 2, \"ts\"") && strstr(txt, "gradient buckets (allreduce)"),
              "%s", txt);
    /* the step is >= 10 ms, the wait 1 ms of it: a share near 10%, not the 60% the bucket would add */
    CHECK_MSG(r.comm_share > 0.0 && r.comm_share <= 0.101, "comm share %g", r.comm_share);
}

/* While the progress thread may be sending (ct_buckets_begin .. ct_buckets_finish), a blocking collective
 * from the caller is refused with CT_E_STATE, counted nowhere: under MPI_THREAD_SERIALIZED it would race the
 * thread, and on one rank it could slip between two buckets and pair with a bucket on another rank (the
 * trainer once reduced its step statistics there). After finish, the same call works. The hook mode makes
 * every MPI call on the caller's thread in the same order on every rank: nothing to refuse. */
TEST(a_blocking_call_waits_for_the_progress_thread) {
    const int rank = ct_comm_rank(g_world), S = ct_comm_size(g_world);
    size_t off[7], n = offsets(off);
    float *g = malloc(n * sizeof *g);
    CHECK(g);
    const int order[6] = {5, 4, 3, 2, 1, 0};
    for (int mode = 0; mode < 2; mode++) {
        ct_bucket_opts o;
        ct_bucket_opts_default(&o);
        o.first_bucket_bytes = 2000, o.bucket_bytes = 20000;
        o.progress = mode ? CT_BUCKET_PROGRESS_HOOK : CT_BUCKET_PROGRESS_THREAD;
        ct_buckets *b = NULL;
        ct_status s = ct_buckets_create(g_ctx, g_world, g, n, 6, off, order, 6, &o, &b);
        if (s != CT_OK) free(g);
        CHECK_OK(g_ctx, s);
        fill(g, n, rank);
        ct_comm_stats st0, st1;
        ct_comm_get_stats(g_world, &st0);
        double v = 1.0;
        int32_t one = 1;
        s = ct_buckets_begin(b);
        for (int q = 0; s == CT_OK && q < 6; q++) ct_buckets_grad_ready(b, order[q]);
        ct_status during = ct_comm_allreduce_f64(g_world, &v, 1, CT_REDUCE_SUM);
        ct_status during_bc = ct_comm_broadcast(g_world, &one, sizeof one, 0);
        const char *msg = ct_context_last_error(g_ctx);
        int names = strstr(msg, "ct_buckets_finish") != NULL;
        ct_comm_get_stats(g_world, &st1);
        if (s == CT_OK) s = ct_buckets_finish(b, NULL);
        int sum_ok = s == CT_OK && exact_sum(g, n, S);
        double w = 1.0;
        ct_status after = ct_comm_allreduce_f64(g_world, &w, 1, CT_REDUCE_SUM);
        ct_buckets_free(b);
        if (mode == 0 && S > 1) { /* (a world of one has no progress thread: no MPI at all) */
            CHECK_MSG(during == CT_E_STATE && during_bc == CT_E_STATE && names,
                      "thread mode: a blocking allreduce / broadcast before ct_buckets_finish returned %s / %s (%s)",
                      ct_status_name(during), ct_status_name(during_bc), msg);
            CHECK_MSG(st1.broadcast_calls == st0.broadcast_calls && v == 1.0,
                      "a refused call was counted or changed its buffer");
        } else {
            CHECK_MSG(during == CT_OK && during_bc == CT_OK && v == (double)S,
                      "mode %d: a blocking allreduce between begin and finish returned %s, sum %g of %d", mode,
                      ct_status_name(during), v, S);
        }
        CHECK_MSG(sum_ok, "mode %d: the buckets' sum after the refused call is wrong (%s)", mode,
                  ct_context_last_error(g_ctx));
        CHECK_MSG(after == CT_OK && w == (double)S, "mode %d: after ct_buckets_finish the allreduce returned %s, %g",
                  mode, ct_status_name(after), w);
    }
    free(g);
}

/* ---- shard mode (ZeRO): each bucket reduce-scattered over the ranks' segments of the arena ------------------- */

/* Uneven segments of the 6-parameter arena (offsets(): buckets {0,1} [0,4160), {2,3} [4160,12416), {4,5}
 * [12416,13072)) cut inside buckets and parameters; at more than 2 ranks rank 1's segment is empty. */
static void shard_cuts(size_t n, int S, size_t *so) {
    so[0] = 0;
    for (int r = 1; r < S; r++) so[r] = n * (size_t)r / (size_t)S + 37 * (size_t)r;
    if (S > 2) so[2] = so[1];
    if (S == 4) so[3] = 12700; /* inside parameter 4, the last bucket */
    so[S] = n;
}

/* What o.done heard in one round; each call also checks that this rank's part of the range holds the sum already. */
typedef struct done_log {
    int n;
    size_t off[32], len[32];
    const float *arena, *want; /* the arena and the expected sums (this rank's segment [lo, hi)) */
    size_t lo, hi;
    int early;                 /* elements of a completed range not yet the sum when o.done was called */
} done_log;

static void on_done(void *user, size_t off, size_t n) {
    done_log *d = user;
    if (d->n < 32) d->off[d->n] = off, d->len[d->n] = n;
    d->n++;
    const size_t a = off > d->lo ? off : d->lo, b = off + n < d->hi ? off + n : d->hi;
    for (size_t i = a; i < b; i++) d->early += d->arena[i] != d->want[i];
}

/* The calls of one round: each bucket's (off, n) exactly once, together the arena once. */
static int done_covers(const ct_buckets *b, const done_log *d, size_t n) {
    const int nb = ct_buckets_count(b);
    if (d->n != nb || nb > 32) {
        fprintf(stderr, "  o.done called %d times for %d buckets\n", d->n, nb);
        return 0;
    }
    unsigned char *cover = calloc(n, 1);
    int ok = cover != NULL;
    for (int c = 0; ok && c < d->n; c++) {
        int match = 0;
        for (int i = 0; i < nb; i++) {
            ct_bucket_info bi;
            ct_buckets_info(b, i, &bi);
            match += bi.off == d->off[c] && bi.n == d->len[c];
        }
        ok = match == 1 && d->off[c] + d->len[c] <= n;
        for (size_t i = d->off[c]; ok && i < d->off[c] + d->len[c]; i++) cover[i]++;
    }
    for (size_t i = 0; ok && i < n; i++) ok = cover[i] == 1;
    free(cover);
    if (!ok) fprintf(stderr, "  o.done's ranges do not match the buckets or do not cover the arena once\n");
    return ok;
}

/* Rank r's gradient in round `step`: quarters (exact sums) without compression; with it, values the 16-bit format
 * cannot hold on two ranks per element (every rank's small integers for i % 5 == 0) so that the pairwise sums round
 * once whatever their order. */
static float shard_val(int r, size_t i, int step, int S, int comp) {
    if (!comp) return (float)((int)((i * 13 + (size_t)r * 101 + (size_t)step * 7) % 199) - 99) * 0.25f;
    if (i % 5 == 0) return (float)(r + 1 + (int)(i % 3));
    const int a = (int)(i % (size_t)S), b = S > 1 ? (a + 1 + (int)((i / 7) % (size_t)(S - 1))) % S : a;
    if (r != a && r != b) return 0.0f;
    const float v = 1.0f + 0.001f * (float)((i * 7 + (size_t)r * 13 + (size_t)step * 31) % 1000 + 1);
    return (i / 3) % 2 ? -v : v;
}

static float round16(float v, int bf16) {
    return bf16 ? ct_bf16_to_f32(ct_f32_to_bf16(v)) : ct_f16_to_f32(ct_f32_to_f16(v));
}

/* Three rounds of shard mode: after ct_buckets_finish this rank's segment holds exactly the sum over the ranks
 * (with compression: the 16-bit rounding of the sum of every rank's rounded g + residual, every rank's residual
 * simulated here, and this rank's residual exact); o.done once per bucket per round with its range, each call
 * after this rank's part of it holds the sum; only reduce-scatters are sent. poll: hook mode, the started buckets
 * completed by ct_buckets_poll before ct_buckets_finish. */
static void shard_mode(int overlap, ct_bucket_progress progress, ct_grad_compression comp, int poll) {
    const int rank = ct_comm_rank(g_world), S = ct_comm_size(g_world);
    const int bf16 = comp == CT_GRAD_COMPRESSION_BF16;
    size_t off[7], n = offsets(off), so[65];
    CHECK(S <= 64);
    shard_cuts(n, S, so);
    float *g = malloc(n * sizeof *g), *want = malloc(n * sizeof *want), *res = calloc((size_t)S * n, sizeof *res);
    if (!g || !want || !res) free(g), free(want), free(res);
    CHECK(g && want && res);
    const int order[6] = {5, 4, 3, 2, 1, 0};
    done_log d = {.arena = g, .want = want, .lo = so[rank], .hi = so[rank + 1]};
    ct_bucket_opts o;
    ct_bucket_opts_default(&o);
    o.first_bucket_bytes = 2000, o.bucket_bytes = 20000;
    o.overlap = overlap, o.progress = progress, o.compression = comp;
    o.shard_offs = so, o.done = on_done, o.done_user = &d;
    ct_buckets *b = NULL;
    ct_status s = ct_buckets_create(g_ctx, g_world, g, n, 6, off, order, 6, &o, &b);
    if (s != CT_OK) free(g), free(want), free(res);
    CHECK_OK(g_ctx, s);
    const int nb = ct_buckets_count(b);
    ct_comm_stats st0, st1;
    ct_comm_get_stats(g_world, &st0);
    int ok = nb == 3, polled = 1, lost = 0, rounded = 0;
    for (int step = 0; step < 3 && ok && s == CT_OK; step++) {
        for (size_t i = 0; i < n; i++) {
            float sum = 0;
            for (int r = 0; r < S; r++) {
                float v = shard_val(r, i, step, S, comp);
                if (comp) { /* rank r's error feedback, as compress() computes it */
                    float t = v + res[(size_t)r * n + i], q = round16(t, bf16);
                    res[(size_t)r * n + i] = t - q;
                    v = q;
                }
                sum += v;
                if (r == rank) g[i] = shard_val(r, i, step, S, comp);
            }
            want[i] = comp ? round16(sum, bf16) : sum;
            rounded += comp && want[i] != sum && i >= so[rank] && i < so[rank + 1];
        }
        d.n = d.early = 0;
        if (poll) {
            s = ct_buckets_begin(b);
            for (int q = 0; s == CT_OK && q < 6; q++) ct_buckets_grad_ready(b, order[q]);
            for (int t = 0; t < 20000 && d.n < nb; t++) { /* up to ~20 s; every rank keeps polling */
                ct_buckets_poll(b);
                if (d.n < nb) spin_us(1000);
            }
            polled = polled && d.n == nb && ct_buckets_started(b) == nb;
            if (s == CT_OK) s = ct_buckets_finish(b, NULL);
        } else {
            int started;
            s = reduce_like_backward(b, order, 6, overlap, &started);
            ct_buckets_poll(b); /* after finish (and in thread mode): nothing to do */
        }
        ok = s == CT_OK && done_covers(b, &d, n) && d.early == 0;
        for (size_t i = so[rank]; ok && i < so[rank + 1]; i++)
            if (g[i] != want[i]) {
                fprintf(stderr, "  step %d rank %d element %zu: %.9g, want %.9g\n", step, rank, i, (double)g[i],
                        (double)want[i]);
                ok = 0;
            }
        if (!ok) fprintf(stderr, "  step %d: %d done calls, %d early\n", step, d.n, d.early);
        size_t nr = 0;
        const float *mine = ct_buckets_residual(b, &nr);
        if (comp) {
            ok = ok && mine && nr == n && !memcmp(mine, res + (size_t)rank * n, n * sizeof *mine);
            for (size_t i = 0; mine && i < nr; i++) lost += mine[i] != 0.0f;
        }
    }
    ct_comm_get_stats(g_world, &st1);
    ct_buckets_free(b);
    free(g), free(want), free(res);
    const int sent_ok = S == 1 || (st1.reduce_scatter_calls == st0.reduce_scatter_calls + 3 * (uint64_t)nb &&
                                   st1.allreduce_calls == st0.allreduce_calls);
    ok = all_ok(ok), polled = all_ok(polled);
    CHECK_MSG(s == CT_OK, "%s", ct_context_last_error(g_ctx));
    CHECK_MSG(ok, "overlap %d progress %d compression %d: a segment, a residual or o.done's calls are wrong", overlap,
              (int)progress, (int)comp);
    CHECK_MSG(polled, "ct_buckets_poll did not complete the started buckets");
    CHECK_MSG(sent_ok, "%llu reduce-scatters (want %d), %llu allreduces", (unsigned long long)(st1.reduce_scatter_calls -
              st0.reduce_scatter_calls), 3 * nb, (unsigned long long)(st1.allreduce_calls - st0.allreduce_calls));
    /* the compressed values were chosen so that rounding loses something, and some sums round */
    CHECK(!comp || (lost > (int)n / 4 && (S == 1 || rank == 1 || rounded > 0)));
}

TEST(shard_sum_with_a_progress_thread) { shard_mode(1, CT_BUCKET_PROGRESS_THREAD, CT_GRAD_COMPRESSION_NONE, 0); }
TEST(shard_sum_from_the_hook_and_poll) {
    shard_mode(1, CT_BUCKET_PROGRESS_HOOK, CT_GRAD_COMPRESSION_NONE, 0);
    shard_mode(1, CT_BUCKET_PROGRESS_HOOK, CT_GRAD_COMPRESSION_NONE, 1);
}
TEST(shard_sum_after_backward) {
    shard_mode(0, CT_BUCKET_PROGRESS_THREAD, CT_GRAD_COMPRESSION_NONE, 0);
    shard_mode(0, CT_BUCKET_PROGRESS_HOOK, CT_GRAD_COMPRESSION_NONE, 0);
}
TEST(shard_compressed_with_error_feedback) {
    shard_mode(1, CT_BUCKET_PROGRESS_THREAD, CT_GRAD_COMPRESSION_BF16, 0);
    shard_mode(1, CT_BUCKET_PROGRESS_HOOK, CT_GRAD_COMPRESSION_BF16, 1);
    shard_mode(1, CT_BUCKET_PROGRESS_HOOK, CT_GRAD_COMPRESSION_FP16, 0);
}

/* shard_offs that do not run from 0 to the arena's end, increasing, are refused (no collective is made). */
TEST(shard_offs_must_cut_the_whole_arena) {
    const int S = ct_comm_size(g_world);
    size_t off[7], n = offsets(off), so[65];
    CHECK(S <= 64);
    float *g = calloc(n, sizeof *g);
    CHECK(g);
    const int order[6] = {5, 4, 3, 2, 1, 0};
    ct_bucket_opts o;
    ct_bucket_opts_default(&o);
    o.shard_offs = so;
    ct_status st[3];
    for (int c = 0; c < 3; c++) {
        shard_cuts(n, S, so);
        if (c == 0) so[0] = 1;              /* not from 0 */
        if (c == 1) so[S] = n - 1;          /* short of the end */
        if (c == 2) so[1] = n + 1;          /* beyond the end (then decreasing, at more than one rank) */
        ct_buckets *b = NULL;
        st[c] = ct_buckets_create(g_ctx, g_world, g, n, 6, off, order, 6, &o, &b);
        st[c] = st[c] == CT_OK || b ? CT_E_INTERNAL : st[c];
        ct_buckets_free(b);
    }
    free(g);
    ct_context_clear_error(g_ctx);
    CHECK_MSG(st[0] == CT_E_INVALID_ARG, "shard_offs[0] = 1: %s", ct_status_name(st[0]));
    CHECK_MSG(st[1] == CT_E_INVALID_ARG, "shard_offs[world] short: %s", ct_status_name(st[1]));
    CHECK_MSG(st[2] == CT_E_INVALID_ARG, "shard_offs past the end: %s", ct_status_name(st[2]));
}

int main(int argc, char **argv) {
    static const ct_test_case cases[] = {T(plan_covers_the_arena_from_its_end), T(sum_with_a_progress_thread),
                                         T(sum_from_the_hook), T(sum_after_backward), T(sum_in_bf16_and_fp16),
                                         T(compression_keeps_what_rounding_lost), T(an_inf_on_one_rank_reaches_every_rank),
                                         T(nothing_is_sent_before_begin), T(plan_backward_order),
                                         T(trace_tracks_and_doctor_share), T(plan_tiles_the_arena_for_any_order),
                                         T(a_blocking_call_waits_for_the_progress_thread),
                                         T(shard_sum_with_a_progress_thread), T(shard_sum_from_the_hook_and_poll),
                                         T(shard_sum_after_backward), T(shard_compressed_with_error_feedback),
                                         T(shard_offs_must_cut_the_whole_arena)};
    if (test_mpi_start("test_bucket", &g_ctx, &g_world)) return 1;
    int rc = ct_test_main(__FILE__, cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
    return test_mpi_finish(g_ctx, g_world, rc);
}
