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
                                         T(sharded_lamb_equals_whole)};
    if (test_mpi_start("test_dist_zero", &g_ctx, &g_world)) return 1;
    int rc;
    if (argc > 1 && !strcmp(argv[1], "bench")) rc = bench(argc > 2 ? atoi(argv[2]) : 5);
    else rc = ct_test_main(__FILE__, cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
    return test_mpi_finish(g_ctx, g_world, rc);
}
