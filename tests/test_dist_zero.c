/* tests/test_dist_zero.c - the collectives of the deterministic mode and of
 * ZeRO (src/comm/zero_collectives.c) and the sharded optimizer (ct_optimizer_set_shard), LAMB's trust
 * ratios over shards (ct_optimizer_set_reduce) included.
 *
 *   test_dist_zero                  the tests on a world of one process
 *   mpirun -np N test_dist_zero     the same tests on N ranks (tests/dist_zero_test.sh)
 *   mpirun -np N test_dist_zero bench [REPS]
 *                                   MPI_Reduce_scatter_block against the ring
 *                                   reduce-scatter for 256 KB..64 MB buffers: a
 *                                   markdown table on rank 0 (docs/distributed.md) */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "ctrain/convert.h"
#include "test.h"

static ct_context *g_ctx;
static ct_comm *g_world;

/* A leaf value with no exact sums: leaf j's element i, magnitudes 1e-3 .. 1e3. */
static float leaf(int j, size_t i) {
    uint32_t h = (uint32_t)(j * 2654435761u) ^ (uint32_t)(i * 40503u + 17u);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    float u = (float)(h & 0xffffff) / 16777216.0f - 0.5f;
    return u * powf(10.0f, (float)((int)(h >> 24) % 7 - 3));
}

/* The pairwise tree over 4 leaves, ((l0 + l1) + (l2 + l3)), on every rank from the leaves it holds
 * (4 / size of them), then the tree allreduce: the same bits as the whole tree on one rank. */
TEST(tree_allreduce_is_world_size_independent) {
    const int rank = ct_comm_rank(g_world), S = ct_comm_size(g_world);
    if (S > 4 || (S & (S - 1))) {
        float x = 1, t = 0;
        CHECK(ct_comm_tree_allreduce_f32(g_world, &x, 1, &t) == (S > 4 ? CT_OK : CT_E_CONFIG));
        return;
    }
    const size_t n = 50021;
    const int per = 4 / S;
    float *x = malloc(n * sizeof *x), *tmp = malloc(n * sizeof *tmp), *want = malloc(n * sizeof *want);
    CHECK(x && tmp && want);
    int naive_differs = 0;
    for (size_t i = 0; i < n; i++) {
        float l[4] = {leaf(0, i), leaf(1, i), leaf(2, i), leaf(3, i)};
        want[i] = (l[0] + l[1]) + (l[2] + l[3]);
        naive_differs |= ((l[0] + l[1]) + l[2]) + l[3] != want[i]; /* the order matters for these values */
        const float *m = l + rank * per;
        x[i] = per == 4 ? (m[0] + m[1]) + (m[2] + m[3]) : per == 2 ? m[0] + m[1] : m[0];
    }
    ct_status s = ct_comm_tree_allreduce_f32(g_world, x, n, tmp);
    int same = s == CT_OK && !memcmp(x, want, n * sizeof *x);
    free(x), free(tmp), free(want);
    CHECK_MSG(s == CT_OK, "%s", ct_context_last_error(g_ctx));
    CHECK(naive_differs);
    CHECK_MSG(same, "the tree allreduce at %d ranks differs from the one-rank tree", S);
}

/* Uneven segments (the last one short, one empty when size > 2); x_r[i] = r + 1 + (i % 7): exact sums. */
TEST(reduce_scatter_mpi_and_ring_allgatherv_gatherv) {
    const int rank = ct_comm_rank(g_world), S = ct_comm_size(g_world);
    size_t counts[64], total = 0;
    CHECK(S <= 64);
    for (int r = 0; r < S; r++) counts[r] = r == S - 1 ? 1001 : (S > 2 && r == 1) ? 0 : 3072 + (size_t)r * 64;
    for (int r = 0; r < S; r++) total += counts[r];
    size_t off = 0;
    for (int r = 0; r < rank; r++) off += counts[r];
    float *x = malloc(total * sizeof *x), *tmp = malloc(4096 * sizeof *tmp), *all = malloc(total * sizeof *all);
    CHECK(x && tmp && all);
    const ct_rs_algo algos[] = {CT_RS_MPI, CT_RS_RING, CT_RS_AUTO};
    int bad = 0;
    for (int a = 0; a < 3 && !bad; a++) {
        for (size_t i = 0; i < total; i++) x[i] = (float)(rank + 1 + (int)(i % 7));
        if (ct_comm_reduce_scatter_f32(g_world, x, counts, algos[a], tmp) != CT_OK) bad = 1;
        for (size_t i = 0; i < counts[rank] && !bad; i++) {
            size_t g = off + i;
            bad = x[g] != (float)(S * (S + 1) / 2 + S * (int)(g % 7));
            if (bad) fprintf(stderr, "  algo %d: element %zu: %g\n", a, g, (double)x[g]);
        }
    }
    if (bad) free(x), free(tmp), free(all);
    CHECK_MSG(!bad, "reduce-scatter: %s", ct_context_last_error(g_ctx));
    /* allgatherv in place: every rank's segment to all */
    for (size_t i = 0; i < total; i++) x[i] = -1.0f;
    for (size_t i = 0; i < counts[rank]; i++) x[off + i] = (float)(rank * 100000 + (int)i);
    ct_status s = ct_comm_allgatherv_f32(g_world, x, counts);
    size_t o = 0;
    for (int r = 0; r < S && s == CT_OK; r++)
        for (size_t i = 0; i < counts[r]; i++, o++) bad |= x[o] != (float)(r * 100000 + (int)i);
    /* gatherv to the last rank */
    if (s == CT_OK) s = ct_comm_gatherv_f32(g_world, x + off, counts, rank == S - 1 ? all : NULL, S - 1);
    if (s == CT_OK && rank == S - 1) bad |= memcmp(all, x, total * sizeof *x) != 0;
    free(x), free(tmp), free(all);
    CHECK_MSG(s == CT_OK, "%s", ct_context_last_error(g_ctx));
    CHECK(!bad);
    ct_comm_stats st;
    ct_comm_get_stats(g_world, &st);
    CHECK(st.reduce_scatter_calls >= 3);
}

TEST(bad_arguments_are_errors) {
    size_t counts[64] = {0};
    float x = 0;
    CHECK(ct_comm_reduce_scatter_f32(g_world, &x, NULL, CT_RS_MPI, NULL) == CT_E_INVALID_ARG);
    CHECK(ct_comm_gatherv_f32(g_world, &x, counts, &x, -1) == CT_E_INVALID_ARG);
    CHECK(ct_comm_tree_allreduce_f32(NULL, &x, 1, &x) == CT_E_INVALID_ARG);
    counts[0] = (size_t)INT_MAX + 1;
    CHECK(ct_comm_allgatherv_f32(g_world, &x, counts) == CT_E_INVALID_ARG);
}

/* The optimizer split into shards takes the whole optimizer's step bit for bit, with groups; gathered back
 * whole it continues the same. (LAMB: sharded_lamb_equals_whole.) */
TEST(sharded_optimizer_equals_whole) {
    int nd[3] = {2, 1, 4};
    int64_t shapes[3][4] = {{301, 257}, {37}, {17, 9, 5, 5}};
    const ct_optim_kind kinds[] = {CT_OPTIM_ADAMW, CT_OPTIM_SGD, CT_OPTIM_ADAGRAD, CT_OPTIM_RMSPROP};
    for (int c = 0; c < 4; c++) {
        ct_context *ctx = test_ctx(-1, 1);
        ct_plan *p1, *p2;
        CHECK_OK(ctx, test_params_plan(ctx, 3, nd, (const int64_t(*)[4])shapes, &p1));
        CHECK_OK(ctx, test_params_plan(ctx, 3, nd, (const int64_t(*)[4])shapes, &p2));
        ct_optim_opts o;
        ct_optim_opts_default(&o, kinds[c]);
        o.weight_decay = 0.01f;
        o.momentum = kinds[c] == CT_OPTIM_ADAGRAD ? 0.0f : 0.9f;
        o.initial_accumulator_value = kinds[c] == CT_OPTIM_ADAGRAD ? 0.1f : 0.0f;
        ct_optimizer *whole, *sh[3];
        CHECK_OK(ctx, ct_optimizer_create(p1, &o, &whole));
        float *w1, *g1, *w2, *g2;
        size_t n;
        ct_plan_param_arena(p1, &w1, &g1, &n);
        ct_plan_param_arena(p2, &w2, &g2, &n);
        /* three shards over the arena, boundaries inside tensors */
        size_t cut[4] = {0, 64 * 300, 64 * 1100, n};
        for (int k = 0; k < 3; k++) {
            if (k == 0) { /* created as a shard, or cut afterwards: the same */
                CHECK_OK(ctx, ct_optimizer_create_shard(p2, &o, cut[0], cut[1], &sh[k]));
            } else {
                CHECK_OK(ctx, ct_optimizer_create(p2, &o, &sh[k]));
                CHECK_OK(ctx, ct_optimizer_set_shard(sh[k], cut[k], cut[k + 1]));
            }
            size_t b, e, ns;
            float *st;
            ct_optimizer_shard(sh[k], &b, &e);
            ct_optimizer_state(sh[k], &st, &ns);
            CHECK(b == cut[k] && e == cut[k + 1] && ns == (e - b) * (kinds[c] == CT_OPTIM_ADAMW || kinds[c] == CT_OPTIM_RMSPROP ? 2 : 1));
        }
        CHECK_OK(ctx, ct_optimizer_set_group(whole, "w1", 0.5f, 0.0f));
        for (int k = 0; k < 3; k++) CHECK_OK(ctx, ct_optimizer_set_group(sh[k], "w1", 0.5f, 0.0f));
        test_fill_uniform(w1, n, 7, -1, 1);
        memcpy(w2, w1, n * sizeof *w1);
        for (int it = 0; it < 4; it++) {
            test_fill_uniform(g1, n, 100 + (unsigned)it, -1, 1);
            memcpy(g2, g1, n * sizeof *g1);
            CHECK_OK(ctx, ct_optimizer_step(whole));
            for (int k = 0; k < 3; k++) CHECK_OK(ctx, ct_optimizer_step(sh[k]));
            if (it == 1) { /* shard 1 made whole again (gathered for a checkpoint), then sharded back */
                float *st;
                size_t ns;
                ct_optimizer_state(sh[1], &st, &ns);
                size_t len = cut[2] - cut[1], blocks = ns / len;
                float *keep = malloc(ns * sizeof *keep);
                CHECK(keep);
                memcpy(keep, st, ns * sizeof *keep);
                CHECK_OK(ctx, ct_optimizer_set_shard(sh[1], 0, n));
                ct_optimizer_state(sh[1], &st, &ns);
                int same = ns == blocks * n;
                for (size_t bk = 0; bk < blocks && same; bk++)
                    same = !memcmp(st + bk * n + cut[1], keep + bk * len, len * sizeof *st);
                free(keep);
                CHECK_MSG(same, "the state kept its values when made whole");
                CHECK_OK(ctx, ct_optimizer_set_shard(sh[1], cut[1], cut[2]));
            }
        }
        int same = !memcmp(w1, w2, n * sizeof *w1);
        for (int k = 0; k < 3; k++) ct_optimizer_free(sh[k]);
        ct_optimizer_free(whole);
        ct_plan_free(p1);
        ct_plan_free(p2);
        ct_context_free(ctx);
        CHECK_MSG(same, "%s: the shards' steps differ from the whole optimizer's", ct_optim_kind_name(kinds[c]));
    }
}

/* LAMB sharded over the ranks as ZeRO cuts the arena (segments of multiples of 64 floats; w0 split across ranks'
 * segments, the cuts inside LAMB blocks), its per-tensor sums reduced by an allreduce (ct_optimizer_set_reduce):
 * after several steps with weight decay and a group, the gathered weights are within 1e-6 relative of a whole LAMB
 * on the same weights and gradients. Without the allreduce (each rank's own sums) they are not (the check bites). */
static ct_status world_sum(void *user, double *x, size_t n) {
    (void)user;
    return ct_comm_allreduce_f64(g_world, x, n, CT_REDUCE_SUM);
}
static ct_status local_only(void *user, double *x, size_t n) {
    (void)user, (void)x, (void)n;
    return CT_OK;
}

/* max |a - b| / max |b|: the largest difference relative to the weights' scale */
static double max_rel(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i])), m = fmax(m, fabs((double)b[i]));
    return m > 0 ? d / m : d;
}

static ct_status lamb_run(ct_context *ctx, const ct_optim_opts *o, size_t b, size_t e, ct_optim_reduce_fn fn,
                          const size_t *counts, float *out, size_t *n_out) {
    int nd[3] = {2, 1, 4};
    int64_t shapes[3][4] = {{301, 257}, {37}, {17, 9, 5, 5}};
    ct_plan *p = NULL;
    ct_optimizer *opt = NULL;
    float *w, *g;
    size_t n;
    ct_status s = test_params_plan(ctx, 3, nd, (const int64_t(*)[4])shapes, &p);
    if (s == CT_OK) ct_plan_param_arena(p, &w, &g, &n);
    /* odd ranks: created whole and cut afterwards (a resume), the blocks recut to the shard */
    const int cut_later = counts && ct_comm_rank(g_world) % 2;
    if (s == CT_OK)
        s = counts && !cut_later ? ct_optimizer_create_shard(p, o, b, e, &opt) : ct_optimizer_create(p, o, &opt);
    if (s == CT_OK && cut_later) s = ct_optimizer_set_shard(opt, b, e);
    if (s == CT_OK && fn) s = ct_optimizer_set_reduce(opt, fn, NULL);
    if (s == CT_OK) s = ct_optimizer_set_group(opt, "w2", 0.5f, 0.1f);
    if (s == CT_OK) test_fill_uniform(w, n, 7, -1, 1);
    for (int it = 0; it < 5 && s == CT_OK; it++) {
        test_fill_uniform(g, n, 100 + (unsigned)it, -1, 1);
        s = ct_optimizer_step(opt);
        if (s == CT_OK && counts) s = ct_comm_allgatherv_f32(g_world, w, counts); /* as ZeRO: every rank's part */
    }
    if (s == CT_OK) memcpy(out, w, n * sizeof *w), *n_out = n;
    ct_optimizer_free(opt);
    ct_plan_free(p);
    return s;
}

TEST(sharded_lamb_equals_whole) {
    const int rank = ct_comm_rank(g_world), S = ct_comm_size(g_world);
    ct_context *ctx = test_ctx(-1, 1);
    ct_optim_opts o;
    ct_optim_opts_default(&o, CT_OPTIM_LAMB);
    o.lr = 0.02f;
    o.weight_decay = 0.05f;
    const size_t cap = 90000;
    float *whole = malloc(cap * sizeof *whole), *sh = malloc(cap * sizeof *sh), *loc = malloc(cap * sizeof *loc);
    size_t *counts = malloc((size_t)S * sizeof *counts), n = 0, n2 = 0;
    CHECK(whole && sh && loc && counts);
    CHECK_OK(ctx, lamb_run(ctx, &o, 0, 0, NULL, NULL, whole, &n));
    CHECK(n <= cap && n > 77357 + 37);
    /* the segments as ct_zero_create cuts them */
    size_t per = (n + (size_t)S - 1) / (size_t)S, b = 0;
    per = (per + 63) / 64 * 64;
    for (int k = 0; k < S; k++) {
        size_t left = (size_t)k * per >= n ? 0 : n - (size_t)k * per;
        counts[k] = left < per ? left : per;
    }
    for (int k = 0; k < rank; k++) b += counts[k];
    CHECK_OK(ctx, lamb_run(ctx, &o, b, b + counts[rank], world_sum, counts, sh, &n2));
    double d = max_rel(sh, whole, n), d_loc = 0;
    if (S > 1) {
        CHECK_OK(ctx, lamb_run(ctx, &o, b, b + counts[rank], local_only, counts, loc, &n2));
        d_loc = max_rel(loc, whole, n);
    }
    int moved = 0;
    test_fill_uniform(loc, n, 7, -1, 1); /* the initial weights: LAMB moved them */
    moved = max_rel(whole, loc, n) > 1e-3;
    if (rank == 0)
        printf("  sharded lamb at %d ranks: max relative difference %.3g (each rank's own sums: %.3g)\n", S, d, d_loc);
    free(whole), free(sh), free(loc), free(counts);
    ct_context_free(ctx);
    CHECK_MSG(d <= 1e-6, "sharded LAMB vs whole: max relative difference %g > 1e-6", d);
    CHECK(moved);
    CHECK_MSG(S == 1 || d_loc > 1e-5, "without the allreduce the shards should differ (%g)", d_loc);
}

/* ---- ZeRO's nonblocking v-collectives (ct_comm_ireduce_scatter_*, ct_comm_iallgatherv_*) ------------------ */

/* Round `it`'s uneven counts (offs: world + 1 offsets), one of them 0 by turns: rank 1, rank 0, none, the last. */
static size_t vc_counts(int it, int S, size_t *counts, size_t *offs) {
    const int zero = it % 4 == 0 ? 1 : it % 4 == 1 ? 0 : it % 4 == 3 ? S - 1 : -1;
    size_t total = 0;
    for (int r = 0; r < S; r++) {
        counts[r] = S > 1 && r == zero ? 0 : 700 + (size_t)r * 131 + (size_t)it * 29;
        offs[r] = total;
        total += counts[r];
    }
    offs[S] = total;
    return total;
}

/* Rank r's element i in round it: quarters in [-24.75, 24.75], so any sum over the ranks is exact in FP32. */
static float vc_val(int r, size_t i, int it) {
    return (float)((int)((i * 13 + (size_t)r * 101 + (size_t)it * 7) % 199) - 99) * 0.25f;
}

/* Completes r by ct_comm_test (polled; counts the tests) or by ct_comm_wait. */
static ct_status vc_complete(ct_comm_request *r, int poll) {
    if (!poll) return ct_comm_wait(r);
    int done = 0;
    ct_status s = CT_OK;
    while (s == CT_OK && !done) s = ct_comm_test(r, &done);
    return s;
}

/* Five rounds on one request (its counts change every round, a zero count for some rank): this rank's segment
 * holds the exact sum of every rank's values there, moved from the buffer's start to the segment. */
TEST(ireduce_scatter_f32_sums_into_this_ranks_segment) {
    const int rank = ct_comm_rank(g_world), S = ct_comm_size(g_world);
    CHECK(S <= 64);
    size_t counts[64], offs[65];
    ct_comm_request *r = NULL;
    CHECK_OK(g_ctx, ct_comm_request_create(g_world, &r));
    ct_comm_stats st0, st1;
    ct_comm_get_stats(g_world, &st0);
    ct_status s = CT_OK;
    int bad = 0, moved = 0;
    for (int it = 0; it < 5 && s == CT_OK; it++) {
        size_t total = vc_counts(it, S, counts, offs);
        float *x = malloc(total * sizeof *x);
        if (!x) {
            s = CT_E_OOM;
            break;
        }
        for (size_t i = 0; i < total; i++) x[i] = vc_val(rank, i, it);
        s = ct_comm_ireduce_scatter_f32(g_world, x, counts, r);
        if (s == CT_OK) s = vc_complete(r, it % 2);
        for (size_t i = 0; s == CT_OK && i < counts[rank]; i++) {
            const size_t g = offs[rank] + i;
            float want = 0;
            for (int q = 0; q < S; q++) want += vc_val(q, g, it);
            if (x[g] != want && bad++ < 5)
                fprintf(stderr, "  round %d rank %d element %zu: %g, want %g\n", it, rank, g, (double)x[g], (double)want);
            moved += offs[rank] > 0 && S > 1; /* the result had to move from the buffer's start */
        }
        free(x);
    }
    ct_comm_get_stats(g_world, &st1);
    ct_comm_request_free(r);
    CHECK_MSG(s == CT_OK, "%s", ct_context_last_error(g_ctx));
    CHECK_MSG(!bad, "%d elements of this rank's segment are not the sum", bad);
    CHECK(S == 1 || rank == 0 || moved > 0); /* (the check above covered a segment not at the start) */
    CHECK(st1.reduce_scatter_calls == st0.reduce_scatter_calls + 5);
}

/* A 16-bit value (exact in bf16 / fp16): rank r's element i contributes when it is one of the element's two
 * ranks, or every rank for i % 5 == 0 (small integers: exact sums). Two contributors' FP32 sum is exact, and the
 * pairwise sums round it once whatever the reduction's order: the expected bits are the 16-bit rounding of the
 * FP32 sum. */
static float vc_half(int r, size_t i, int it, int bf16, int S) {
    if (i % 5 == 0) return (float)(r + 1 + (int)(i % 3));
    const int a = (int)(i % (size_t)S), b = S > 1 ? (a + 1 + (int)((i / 7) % (size_t)(S - 1))) % S : a;
    if (r != a && r != b) return 0.0f;
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)((size_t)r * 40503u + (size_t)it * 977u + 5u);
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    const int mbits = bf16 ? 7 : 10;
    const float m = (float)((1u << mbits) + (h % (1u << mbits)));
    const float v = ldexpf(m, (int)((h >> 16) % 5) - 2 - mbits); /* [0.25, 8) */
    return (h >> 24) & 1 ? -v : v;
}

static uint16_t to16(float v, int bf16) { return bf16 ? ct_f32_to_bf16(v) : ct_f32_to_f16(v); }

TEST(ireduce_scatter_half_rounds_the_fp32_sum) {
    const int rank = ct_comm_rank(g_world), S = ct_comm_size(g_world);
    CHECK(S <= 64);
    size_t counts[64], offs[65];
    ct_comm_request *r = NULL;
    CHECK_OK(g_ctx, ct_comm_request_create(g_world, &r));
    ct_status s = CT_OK;
    int bad = 0, rounded = 0, checked = 0;
    for (int it = 0; it < 8 && s == CT_OK; it++) {
        const int bf16 = it % 2 == 0;
        size_t total = vc_counts(it / 2, S, counts, offs);
        uint16_t *x = malloc(total * sizeof *x);
        if (!x) {
            s = CT_E_OOM;
            break;
        }
        for (size_t i = 0; i < total; i++) x[i] = to16(vc_half(rank, i, it, bf16, S), bf16);
        s = ct_comm_ireduce_scatter_half(g_world, x, counts, bf16, r);
        if (s == CT_OK) s = vc_complete(r, it % 3 == 0);
        for (size_t i = 0; s == CT_OK && i < counts[rank]; i++) {
            const size_t g = offs[rank] + i;
            float sum = 0;
            for (int q = 0; q < S; q++) sum += vc_half(q, g, it, bf16, S);
            const uint16_t want = to16(sum, bf16);
            const float back = bf16 ? ct_bf16_to_f32(want) : ct_f16_to_f32(want);
            rounded += back != sum;
            checked++;
            if (x[g] != want && bad++ < 5)
                fprintf(stderr, "  round %d (%s) rank %d element %zu: 0x%04x, want 0x%04x (FP32 sum %.9g)\n", it,
                        bf16 ? "bf16" : "fp16", rank, g, x[g], want, (double)sum);
        }
        free(x);
    }
    ct_comm_request_free(r);
    CHECK_MSG(s == CT_OK, "%s", ct_context_last_error(g_ctx));
    CHECK_MSG(!bad, "%d of %d elements differ from the rounded FP32 sum", bad, checked);
    CHECK_MSG(S == 1 || rounded > checked / 10, "only %d of %d sums needed rounding: the check does not bite", rounded,
              checked);
}

/* Allgatherv in place on one request over five rounds (f32 and u16 by turns): every segment from its rank,
 * nothing written outside the buffer (guards on both sides). */
TEST(iallgatherv_fills_every_segment_from_its_rank) {
    const int rank = ct_comm_rank(g_world), S = ct_comm_size(g_world);
    CHECK(S <= 64);
    enum { G = 16 };
    size_t counts[64], offs[65];
    ct_comm_request *r = NULL;
    CHECK_OK(g_ctx, ct_comm_request_create(g_world, &r));
    ct_status s = CT_OK;
    int bad = 0, guards = 0;
    for (int it = 0; it < 6 && s == CT_OK; it++) {
        const size_t total = vc_counts(it, S, counts, offs);
        const int u16 = it % 2;
        float *xf = malloc((total + 2 * G) * sizeof *xf);
        uint16_t *xh = malloc((total + 2 * G) * sizeof *xh);
        if (!xf || !xh) {
            free(xf), free(xh);
            s = CT_E_OOM;
            break;
        }
        for (size_t i = 0; i < total + 2 * G; i++) xf[i] = NAN, xh[i] = 0xfffe;
        for (size_t i = offs[rank]; i < offs[rank + 1]; i++)
            xf[G + i] = vc_val(rank, i, it), xh[G + i] = (uint16_t)(rank * 977 + (int)i * 31 + it);
        s = u16 ? ct_comm_iallgatherv_u16(g_world, xh + G, counts, r) : ct_comm_iallgatherv_f32(g_world, xf + G, counts, r);
        if (s == CT_OK) s = vc_complete(r, it % 3 == 1);
        for (int q = 0; q < S && s == CT_OK; q++)
            for (size_t i = offs[q]; i < offs[q + 1]; i++) {
                int ok = u16 ? xh[G + i] == (uint16_t)(q * 977 + (int)i * 31 + it) : xf[G + i] == vc_val(q, i, it);
                if (!ok && bad++ < 5) fprintf(stderr, "  round %d rank %d: segment %d element %zu wrong\n", it, rank, q, i);
            }
        for (size_t i = 0; i < G; i++)
            guards += u16 ? xh[i] != 0xfffe || xh[G + total + i] != 0xfffe : !isnan(xf[i]) || !isnan(xf[G + total + i]);
        free(xf), free(xh);
    }
    ct_comm_request_free(r);
    CHECK_MSG(s == CT_OK, "%s", ct_context_last_error(g_ctx));
    CHECK_MSG(!bad, "%d elements not gathered from their rank", bad);
    CHECK_MSG(!guards, "%d guard elements outside the buffer were written", guards);
}

/* Bad arguments are errors (no MPI call is made, so the ranks stay in step); a request still in flight is
 * refused with CT_E_STATE by every nonblocking call, and the refused call leaves the operation in flight intact
 * (its result is right once waited for); the request is usable again afterwards. */
TEST(v_collectives_bad_arguments_and_an_active_request) {
    const int rank = ct_comm_rank(g_world), S = ct_comm_size(g_world);
    CHECK(S <= 64);
    size_t counts[64], offs[65], other[64], big[64];
    const size_t total = vc_counts(2, S, counts, offs);
    vc_counts(3, S, other, offs);
    vc_counts(2, S, counts, offs);
    float *x = malloc(total * sizeof *x);
    uint16_t *h = malloc(total * sizeof *h);
    ct_comm_request *r = NULL, *r2 = NULL;
    CHECK(x && h);
    CHECK_OK(g_ctx, ct_comm_request_create(g_world, &r));
    CHECK_OK(g_ctx, ct_comm_request_create(g_world, &r2));
    int e = 0; /* the first wrong answer, for the message */
#define EXPECT(call, want)                                                                                        \
    do {                                                                                                          \
        ct_status s_ = (call);                                                                                    \
        if (s_ != (want) && !e) e = __LINE__, fprintf(stderr, "  line %d: %s -> %s\n", __LINE__, #call, ct_status_name(s_)); \
    } while (0)
    EXPECT(ct_comm_ireduce_scatter_f32(g_world, x, NULL, r), CT_E_INVALID_ARG);
    const int names = strstr(ct_context_last_error(g_ctx), "ct_comm_ireduce_scatter_f32") != NULL;
    EXPECT(ct_comm_ireduce_scatter_half(g_world, h, NULL, 1, r), CT_E_INVALID_ARG);
    EXPECT(ct_comm_iallgatherv_f32(g_world, x, NULL, r), CT_E_INVALID_ARG);
    EXPECT(ct_comm_iallgatherv_u16(g_world, h, NULL, r), CT_E_INVALID_ARG);
    EXPECT(ct_comm_ireduce_scatter_f32(NULL, x, counts, r), CT_E_INVALID_ARG);
    EXPECT(ct_comm_iallgatherv_u16(NULL, h, counts, r), CT_E_INVALID_ARG);
    EXPECT(ct_comm_ireduce_scatter_f32(g_world, x, counts, NULL), CT_E_INVALID_ARG);
    EXPECT(ct_comm_iallgatherv_f32(g_world, x, counts, NULL), CT_E_INVALID_ARG);
    EXPECT(ct_comm_ireduce_scatter_half(g_world, NULL, counts, 0, r), CT_E_INVALID_ARG);
    EXPECT(ct_comm_iallgatherv_f32(g_world, NULL, counts, r), CT_E_INVALID_ARG);
    memcpy(big, counts, sizeof big);
    big[S - 1] = (size_t)INT_MAX + 1;
    EXPECT(ct_comm_ireduce_scatter_f32(g_world, x, big, r), CT_E_INVALID_ARG);
    EXPECT(ct_comm_iallgatherv_u16(g_world, h, big, r), CT_E_INVALID_ARG);
    /* no elements at all: NULL x is fine, the request completes at once */
    size_t zeros[64] = {0};
    int done = 0;
    EXPECT(ct_comm_ireduce_scatter_f32(g_world, NULL, zeros, r), CT_OK);
    EXPECT(ct_comm_test(r, &done), CT_OK);
    EXPECT(ct_comm_iallgatherv_u16(g_world, NULL, zeros, r), CT_OK);
    EXPECT(ct_comm_wait(r), CT_OK);
    /* an active request (only with MPI and more than one rank: a world of one completes at once) */
    int bad = 0, refused_named = 1;
    for (int kind = 0; kind < 4; kind++) {
        for (size_t i = 0; i < total; i++) x[i] = vc_val(rank, i, kind), h[i] = 0;
        for (size_t i = 0; i < total; i++) h[i] = ct_f32_to_bf16((float)(rank + 1 + (int)(i % 5)));
        if (kind % 2) /* allgather: only this rank's segment is meaningful */
            for (size_t i = offs[rank]; i < offs[rank + 1]; i++) h[i] = (uint16_t)(rank * 1000 + (int)i);
        ct_status s = kind == 0 ? ct_comm_ireduce_scatter_f32(g_world, x, counts, r)
                    : kind == 1 ? ct_comm_iallgatherv_f32(g_world, x, counts, r)
                    : kind == 2 ? ct_comm_ireduce_scatter_half(g_world, h, counts, 1, r)
                                : ct_comm_iallgatherv_u16(g_world, h, counts, r);
        EXPECT(s, CT_OK);
        if (S > 1) {
            const ct_status st = CT_E_STATE;
            EXPECT(ct_comm_ireduce_scatter_f32(g_world, x, other, r), st);
            refused_named &= strstr(ct_context_last_error(g_ctx), "active") != NULL;
            EXPECT(ct_comm_ireduce_scatter_half(g_world, h, other, 0, r), st);
            EXPECT(ct_comm_iallgatherv_f32(g_world, x, other, r), st);
            EXPECT(ct_comm_iallgatherv_u16(g_world, h, other, r), st);
            EXPECT(ct_comm_iallreduce_f32(g_world, x, total, CT_REDUCE_SUM, r), st);
            EXPECT(ct_comm_iallreduce_half(g_world, h, total, 1, r), st);
            EXPECT(ct_comm_ireduce_scatter_f32(g_world, x, NULL, r), st); /* (the state is checked first) */
        }
        EXPECT(ct_comm_wait(r), CT_OK);
        EXPECT(ct_comm_wait(r), CT_OK); /* idle: returns at once */
        for (int q = 0; q < S; q++) {
            if (kind % 2 == 0 && q != rank) continue;
            for (size_t i = offs[q]; i < offs[q + 1]; i++) {
                int ok;
                if (kind == 0) {
                    float want = 0;
                    for (int p = 0; p < S; p++) want += vc_val(p, i, kind);
                    ok = x[i] == want;
                } else if (kind == 1) {
                    ok = x[i] == vc_val(q, i, kind);
                } else if (kind == 2) {
                    ok = h[i] == ct_f32_to_bf16((float)(S * (S + 1) / 2 + S * (int)(i % 5)));
                } else {
                    ok = h[i] == (uint16_t)(q * 1000 + (int)i);
                }
                if (!ok && bad++ < 5) fprintf(stderr, "  kind %d rank %d element %zu wrong after a refused call\n", kind, rank, i);
            }
        }
    }
    /* reused after all that, with another request in flight at the same time */
    for (size_t i = 0; i < total; i++) x[i] = vc_val(rank, i, 7);
    for (size_t i = 0; i < total; i++) h[i] = (uint16_t)(rank * 1000 + (int)i);
    EXPECT(ct_comm_ireduce_scatter_f32(g_world, x, counts, r), CT_OK);
    EXPECT(ct_comm_iallgatherv_u16(g_world, h, counts, r2), CT_OK);
    EXPECT(ct_comm_wait(r2), CT_OK);
    EXPECT(ct_comm_wait(r), CT_OK);
    for (size_t i = offs[rank]; i < offs[rank + 1]; i++) {
        float want = 0;
        for (int p = 0; p < S; p++) want += vc_val(p, i, 7);
        bad += x[i] != want;
    }
    for (int q = 0; q < S; q++)
        for (size_t i = offs[q]; i < offs[q + 1]; i++) bad += h[i] != (uint16_t)(q * 1000 + (int)i);
#undef EXPECT
    ct_comm_request_free(r);
    ct_comm_request_free(r2);
    free(x), free(h);
    ct_context_clear_error(g_ctx);
    CHECK_MSG(!e, "the first wrong status at line %d", e);
    CHECK(names);
    CHECK_MSG(refused_named, "the CT_E_STATE message should say the request is still active");
    CHECK_MSG(!bad, "%d elements wrong", bad);
}

/* ---- bench: MPI_Reduce_scatter_block against the ring ------------------------------------------- */
static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int bench(int reps) {
    const int rank = ct_comm_rank(g_world), S = ct_comm_size(g_world);
    if (!ct_comm_uses_mpi(g_world)) {
        fprintf(stderr, "test_dist_zero bench: start it with mpirun -np N (N >= 2)\n");
        return 2;
    }
    MPI_Comm m = MPI_COMM_WORLD;
    const int kbs[] = {256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
    if (rank == 0) {
        printf("| buffer | MPI_Reduce_scatter_block | ring (zero_collectives.c) | faster |\n|---:|---:|---:|---|\n");
        fflush(stdout);
    }
    for (int k = 0; k < 9; k++) {
        size_t total = (size_t)kbs[k] * 1024 / sizeof(float), per = total / (size_t)S;
        total = per * (size_t)S;
        float *x = malloc(total * sizeof *x), *tmp = malloc(per * sizeof *tmp), *out = malloc(per * sizeof *out);
        size_t *counts = malloc((size_t)S * sizeof *counts);
        if (!x || !tmp || !out || !counts) return 1;
        for (int r = 0; r < S; r++) counts[r] = per;
        double best[2] = {1e30, 1e30};
        for (int it = 0; it < reps + 1; it++) {
            for (int a = 0; a < 2; a++) {
                for (size_t i = 0; i < total; i++) x[i] = (float)(i % 13);
                MPI_Barrier(m);
                double t0 = wall();
                if (a == 0) MPI_Reduce_scatter_block(x, out, (int)per, MPI_FLOAT, MPI_SUM, m);
                else if (ct_comm_reduce_scatter_f32(g_world, x, counts, CT_RS_RING, tmp) != CT_OK) return 1;
                double t = wall() - t0;
                MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, m);
                if (it > 0 && t < best[a]) best[a] = t; /* the first round warms up */
            }
        }
        if (rank == 0) {
            if (kbs[k] < 1024) printf("| %d KB ", kbs[k]);
            else printf("| %d MB ", kbs[k] / 1024);
            printf("| %.2f ms (%.2f GB/s) | %.2f ms (%.2f GB/s) | %s |\n", 1e3 * best[0],
                   (double)total * 4 / best[0] / 1e9, 1e3 * best[1], (double)total * 4 / best[1] / 1e9,
                   best[1] < best[0] ? "ring" : "MPI");
            fflush(stdout);
        }
        free(x), free(tmp), free(out), free(counts);
    }
    return 0;
}

int main(int argc, char **argv) {
    static const ct_test_case cases[] = {T(tree_allreduce_is_world_size_independent),
                                         T(reduce_scatter_mpi_and_ring_allgatherv_gatherv), T(bad_arguments_are_errors),
                                         T(sharded_optimizer_equals_whole),
                                         T(sharded_lamb_equals_whole),
                                         T(ireduce_scatter_f32_sums_into_this_ranks_segment),
                                         T(ireduce_scatter_half_rounds_the_fp32_sum),
                                         T(iallgatherv_fills_every_segment_from_its_rank),
                                         T(v_collectives_bad_arguments_and_an_active_request)};
    if (test_mpi_start("test_dist_zero", &g_ctx, &g_world)) return 1;
    int rc;
    if (argc > 1 && !strcmp(argv[1], "bench")) rc = bench(argc > 2 ? atoi(argv[2]) : 5);
    else rc = ct_test_main(__FILE__, cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
    return test_mpi_finish(g_ctx, g_world, rc);
}
