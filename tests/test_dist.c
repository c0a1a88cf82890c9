/* tests/test_dist.c - the communicator (include/ctrain/dist.h) and the data
 * parallel shards of the loader and the prefetcher.
 *
 *   test_dist                    the tests on a world of one process (no MPI call)
 *   mpirun -np N test_dist       the same tests on N ranks: every collective's
 *                                result checked on every rank (tests/dist_test.sh)
 *   test_dist maxdiff A B        the largest |a - b| between the weights of two
 *                                model.safetensors (any model; tensors matched
 *                                by name and shape, read by the library's
 *                                checked safetensors reader); prints
 *                                "max abs diff X over N weights, max rel diff R ..." (tests/mpi_lib.sh) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "test.h"

static ct_context *g_ctx;
static ct_comm *g_world;

TEST(world_rank_and_size) {
    int rank = ct_comm_rank(g_world), size = ct_comm_size(g_world);
    CHECK(size >= 1 && rank >= 0 && rank < size);
    CHECK(ct_comm_uses_mpi(g_world) == ct_comm_launched());
    if (!ct_comm_launched()) CHECK(size == 1 && rank == 0);
    CHECK(ct_comm_local_size(g_world) >= 1 && ct_comm_local_size(g_world) <= size);
    CHECK(ct_comm_local_rank(g_world) >= 0 && ct_comm_local_rank(g_world) < ct_comm_local_size(g_world));
    CHECK(ct_comm_rank(NULL) == 0 && ct_comm_size(NULL) == 1);
}

/* x_r[i] = r + 1 + (i % 7) on rank r: every op's result is exact in FP32. */
TEST(allreduce_ops) {
    const int rank = ct_comm_rank(g_world), S = ct_comm_size(g_world);
    const size_t n = 100003; /* not a multiple of anything */
    float *x = malloc(n * sizeof *x);
    double *d = malloc(n * sizeof *d);
    CHECK(x && d);
    for (int op = 0; op < CT_REDUCE_COUNT; op++) {
        for (size_t i = 0; i < n; i++) x[i] = (float)(rank + 1 + (int)(i % 7)), d[i] = x[i];
        ct_status s1 = ct_comm_allreduce_f32(g_world, x, n, (ct_reduce_op)op);
        ct_status s2 = ct_comm_allreduce_f64(g_world, d, n, (ct_reduce_op)op);
        if (s1 != CT_OK || s2 != CT_OK) {
            free(x), free(d);
            CHECK_MSG(0, "op %d: %s", op, ct_context_last_error(g_ctx));
        }
        int bad = 0;
        for (size_t i = 0; i < n && !bad; i++) {
            double k = (double)(i % 7), want;
            switch (op) {
            case CT_REDUCE_SUM: want = S * (S + 1) / 2.0 + S * k; break;
            case CT_REDUCE_AVG: want = (S + 1) / 2.0 + k; break;
            case CT_REDUCE_MAX: want = S + k; break;
            default: want = 1 + k; break;
            }
            bad = (double)x[i] != (float)want || d[i] != want;
            if (bad) fprintf(stderr, "  op %d i %zu: got %g / %g, want %g\n", op, i, (double)x[i], d[i], want);
        }
        if (bad) {
            free(x), free(d);
            CHECK(!bad);
        }
    }
    free(x), free(d);
    CHECK(ct_comm_allreduce_f32(g_world, NULL, 0, CT_REDUCE_SUM) == CT_OK);
}

TEST(broadcast_allgather_barrier) {
    const int rank = ct_comm_rank(g_world), S = ct_comm_size(g_world), root = S - 1;
    char buf[4096];
    memset(buf, rank == root ? 'r' : 'x', sizeof buf);
    CHECK_OK(g_ctx, ct_comm_broadcast(g_world, buf, sizeof buf, root));
    for (size_t i = 0; i < sizeof buf; i++) CHECK(buf[i] == 'r');
    int64_t mine = 3 * rank + 1, *all = calloc((size_t)S, sizeof *all);
    CHECK(all);
    ct_status s = ct_comm_allgather(g_world, &mine, sizeof mine, all);
    int ok = s == CT_OK;
    for (int r = 0; r < S && ok; r++) ok = all[r] == 3 * r + 1;
    free(all);
    CHECK(ok);
    ct_comm_stats a, b;
    ct_comm_get_stats(g_world, &a);
    CHECK_OK(g_ctx, ct_comm_barrier(g_world));
    ct_comm_get_stats(g_world, &b);
    CHECK(b.barrier_calls == a.barrier_calls + 1);
}

TEST(bad_arguments) {
    float x[4] = {0};
    CHECK(ct_comm_allreduce_f32(g_world, x, 4, (ct_reduce_op)99) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(g_ctx), "reduce op 99"));
    CHECK(ct_comm_broadcast(g_world, x, sizeof x, ct_comm_size(g_world)) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(g_ctx), "root"));
    CHECK(ct_comm_allreduce_f32(NULL, x, 4, CT_REDUCE_SUM) == CT_E_INVALID_ARG);
    ct_context_clear_error(g_ctx);
}

/* Equal hashes pass; a hash that differs on ranks 1.. fails on every rank, naming rank 1. */
TEST(agree_names_the_rank) {
    const int S = ct_comm_size(g_world);
    CHECK_OK(g_ctx, ct_comm_agree(g_world, "the recipe", ct_hash64("abc", 3, CT_HASH64_INIT), NULL));
    ct_status s = ct_comm_agree(g_world, "the recipe", (uint64_t)ct_comm_rank(g_world), NULL);
    if (S == 1) {
        CHECK(s == CT_OK);
    } else {
        CHECK(s == CT_E_DIST);
        const char *m = ct_context_last_error(g_ctx);
        CHECK_MSG(strstr(m, "the recipe differs between the ranks") && strstr(m, "rank") && strstr(m, " 1"), "%s", m);
        CHECK_MSG(strstr(m, "E80001"), "%s", m);
    }
    CHECK(ct_hash64("abc", 3, CT_HASH64_INIT) != ct_hash64("abd", 3, CT_HASH64_INIT));
    ct_context_clear_error(g_ctx);
}

/* One grid: the coordinates follow the documented order, and an allreduce inside each group sums exactly
 * the world ranks of that group's members. Returns the number of mismatches (printed). */
static int grid_mismatches(const ct_comm_grid *g) {
    const int r = ct_comm_rank(g_world), T = g->tensor, D = g->data, P = g->pipeline;
    int bad = 0;
    bad += T * D * P != ct_comm_size(g_world);
    bad += ct_comm_grid_world_rank(g, g->tensor_rank, g->data_rank, g->pipeline_rank) != r;
    bad += r % T != g->tensor_rank; /* tensor neighbours are consecutive world ranks */
    bad += ct_comm_size(g->tensor_group) != T || ct_comm_rank(g->tensor_group) != g->tensor_rank;
    bad += ct_comm_size(g->data_group) != D || ct_comm_rank(g->data_group) != g->data_rank;
    bad += ct_comm_size(g->pipeline_group) != P || ct_comm_rank(g->pipeline_group) != g->pipeline_rank;
    ct_comm *groups[3] = {g->tensor_group, g->data_group, g->pipeline_group};
    for (int k = 0; k < 3; k++) {
        double x = r, want = 0;
        int n = k == 0 ? T : k == 1 ? D : P;
        for (int i = 0; i < n; i++)
            want += ct_comm_grid_world_rank(g, k == 0 ? i : g->tensor_rank, k == 1 ? i : g->data_rank,
                                            k == 2 ? i : g->pipeline_rank);
        if (ct_comm_allreduce_f64(groups[k], &x, 1, CT_REDUCE_SUM) != CT_OK || x != want) bad++;
    }
    if (bad)
        fprintf(stderr, "  rank %d grid %dx%dx%d (t %d d %d p %d): %d mismatches\n", r, T, D, P, g->tensor_rank,
                g->data_rank, g->pipeline_rank, bad);
    return bad;
}

/* Process groups for every factorization of the world: tensor x data x pipeline. */
TEST(process_grid_every_factorization) {
    const int S = ct_comm_size(g_world);
    int grids = 0;
    for (int t = 1; t <= S; t++)
        for (int p = 1; t * p <= S; p++) {
            if (S % (t * p)) continue;
            ct_comm_grid *g = NULL;
            CHECK_OK(g_ctx, ct_comm_grid_create(g_world, t, p, &g));
            int bad = grid_mismatches(g);
            ct_comm_grid_free(g);
            CHECK_MSG(!bad, "grid tensor %d pipeline %d", t, p);
            grids++;
        }
    CHECK(grids >= 1);
    printf("    %d grids on %d rank%s\n", grids, S, S == 1 ? "" : "s");
}

/* Sizes that do not factor the world, or that differ between ranks: a clear error on every rank, no hang. */
TEST(process_grid_bad_sizes) {
    const int S = ct_comm_size(g_world);
    ct_comm_grid *g = (ct_comm_grid *)&g; /* must become NULL */
    CHECK(ct_comm_grid_create(g_world, S + 1, 1, &g) == CT_E_CONFIG && g == NULL);
    const char *m = ct_context_last_error(g_ctx);
    CHECK_MSG(strstr(m, "does not factor into tensor parallel") && strstr(m, "mpirun -np"), "%s", m);
    CHECK(ct_comm_grid_create(g_world, 0, 1, &g) == CT_E_INVALID_ARG);
    CHECK(ct_comm_grid_create(g_world, 1, -2, &g) == CT_E_INVALID_ARG);
    CHECK(ct_comm_grid_create(NULL, 1, 1, &g) == CT_E_INVALID_ARG);
    if (S > 1) { /* rank 0 asks for no tensor parallelism, the others for all of it: both factor, they disagree */
        ct_status s = ct_comm_grid_create(g_world, ct_comm_rank(g_world) ? S : 1, 1, &g);
        CHECK(s == CT_E_DIST && g == NULL);
        m = ct_context_last_error(g_ctx);
        CHECK_MSG(strstr(m, "the process grid") && strstr(m, "differs between the ranks"), "%s", m);
    }
    ct_comm_grid_free(NULL);
    ct_context_clear_error(g_ctx);
}

/* A bucket: a contiguous range reduced with a nonblocking allreduce, driven by ct_comm_test. */
TEST(nonblocking_allreduce) {
    const int rank = ct_comm_rank(g_world), S = ct_comm_size(g_world);
    enum { N = 50000 };
    float *arena = malloc(3 * N * sizeof *arena);
    CHECK(arena);
    for (int i = 0; i < 3 * N; i++) arena[i] = (float)(rank + 1);
    ct_comm_request *r = NULL;
    CHECK_OK(g_ctx, ct_comm_request_create(g_world, &r));
    ct_status s = ct_comm_iallreduce_f32(g_world, arena + N, N, CT_REDUCE_AVG, r); /* the middle bucket */
    int done = 0, restart_refused = 1;
    if (s == CT_OK) s = ct_comm_test(r, &done);
    if (s == CT_OK && !done) /* still running: a second start on the same request is refused, nothing starts */
        restart_refused = ct_comm_iallreduce_f32(g_world, arena + N, N, CT_REDUCE_SUM, r) == CT_E_STATE;
    while (s == CT_OK && !done) s = ct_comm_test(r, &done);
    if (s == CT_OK) s = ct_comm_wait(r); /* idle: returns at once */
    int ok = s == CT_OK && done;
    for (int i = 0; i < 3 * N && ok; i++) {
        float want = i >= N && i < 2 * N ? (float)(S + 1) / 2.0f : (float)(rank + 1);
        ok = arena[i] == want;
        if (!ok) fprintf(stderr, "  arena[%d] = %g, want %g\n", i, (double)arena[i], (double)want);
    }
    ct_comm_request_free(r);
    free(arena);
    CHECK_MSG(ok, "%s", ct_context_last_error(g_ctx));
    CHECK(restart_refused);
}

TEST(stats_count_bytes) {
    ct_comm_stats a, b;
    float x[256] = {0};
    ct_comm_get_stats(g_world, &a);
    CHECK_OK(g_ctx, ct_comm_allreduce_f32(g_world, x, 256, CT_REDUCE_SUM));
    CHECK_OK(g_ctx, ct_comm_broadcast(g_world, x, 100, 0));
    ct_comm_get_stats(g_world, &b);
    CHECK(b.allreduce_calls == a.allreduce_calls + 1 && b.allreduce_bytes == a.allreduce_bytes + 1024);
    CHECK(b.broadcast_calls == a.broadcast_calls + 1 && b.broadcast_bytes == a.broadcast_bytes + 100);
    CHECK(b.seconds >= a.seconds);
}

/* The launcher is recognized from the environment (tested where no launcher started us). */
TEST(launcher_detection) {
    if (ct_comm_launched()) return; /* under mpirun: the variables are real, leave them */
    setenv("PMI_RANK", "0", 1);
    CHECK(ct_comm_launched());
    unsetenv("PMI_RANK");
    setenv("SLURM_STEP_ID", "0", 1);
    setenv("SLURM_STEP_NUM_TASKS", "1", 1);
    int one = ct_comm_launched();
    setenv("SLURM_STEP_NUM_TASKS", "4", 1);
    int four = ct_comm_launched();
    unsetenv("SLURM_STEP_ID");
    unsetenv("SLURM_STEP_NUM_TASKS");
    CHECK(!one && four);
    CHECK(!ct_comm_launched());
}

/* ct_train on several ranks refuses a task without a shard function, on
 * every rank alike, before any collective (one rank: nothing to check). */
TEST(task_without_shard_is_refused) {
    if (ct_comm_size(g_world) == 1) return;
    ct_recipe r;
    ct_recipe_default(&r);
    r.batch_size = 4 * ct_comm_size(g_world);
    ct_task t;
    memset(&t, 0, sizeof t);
    t.name = "custom";
    ct_train_opts o;
    ct_train_opts_default(&o);
    o.out = NULL;
    o.task = &t;
    o.comm = g_world;
    CHECK(ct_train(g_ctx, &r, &o, NULL) == CT_E_CONFIG);
    CHECK_MSG(strstr(ct_context_last_error(g_ctx), "the custom task has no data parallel support"), "%s",
              ct_context_last_error(g_ctx));
    ct_context_clear_error(g_ctx);
}

/* A tiny dataset whose image i is filled with i: rows identify samples. */
static void tiny_dataset(ct_dataset *ds, int64_t n) {
    memset(ds, 0, sizeof *ds);
    ds->n = n, ds->c = 1, ds->h = 4, ds->w = 4, ds->n_classes = 10;
    ds->images = malloc((size_t)n * 16 * sizeof(float));
    ds->labels = malloc((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) {
        for (int j = 0; j < 16; j++) ds->images[i * 16 + j] = (float)i + 0.01f * (float)j;
        ds->labels[i] = (int32_t)(i % 10);
    }
}

/* The loader and the prefetcher behind one "next batch" call. */
typedef ct_status (*next_fn)(void *src, float *x, int32_t *y, int64_t *got);
static ct_status loader_next(void *l, float *x, int32_t *y, int64_t *got) { return ct_loader_next(l, x, y, got); }
static ct_status prefetcher_next(void *p, float *x, int32_t *y, int64_t *got) { return ct_prefetcher_next(p, x, y, got); }

enum { SH_B = 12, SH_W = 4, SH_b = SH_B / SH_W, SH_PX = 16 };
/* Reads `full` and its SH_W shards to the epoch's end: 1 when every batch is
 * its shards put together (each shard SH_b rows, all ending together). */
static int shards_match(next_fn next, void *full, void *const *parts) {
    float whole[SH_B * SH_PX], joined[SH_B * SH_PX];
    int32_t wl[SH_B], jl[SH_B];
    for (int64_t batch = 0;; batch++) {
        int64_t got = 0, g = 0;
        if (next(full, whole, wl, &got) != CT_OK) return 0;
        for (int k = 0; k < SH_W; k++)
            if (next(parts[k], joined + k * SH_b * SH_PX, jl + k * SH_b, &g) != CT_OK || g != (got ? SH_b : 0)) return 0;
        if (!got) return 1;
        if (memcmp(whole, joined, sizeof whole) || memcmp(wl, jl, sizeof wl)) {
            fprintf(stderr, "  batch %lld differs from its shards put together\n", (long long)batch);
            return 0;
        }
    }
}

/* Shards of 4 ranks put together are the whole batches, for the loader and
 * the prefetcher (augmenting: the crops and flips too), including after a skip. */
TEST(shards_make_the_whole_batch) {
    ct_dataset ds;
    tiny_dataset(&ds, 100);
    ct_loader *full = NULL, *ld[SH_W] = {0};
    int ok = ct_loader_create(g_ctx, &ds, SH_B, 1, 1, 7, &full) == CT_OK;
    for (int k = 0; k < SH_W && ok; k++)
        ok = ct_loader_create(g_ctx, &ds, SH_B, 1, 1, 7, &ld[k]) == CT_OK && ct_loader_set_shard(ld[k], k * SH_b, SH_b) == CT_OK;
    int bad_rejected = ok && ct_loader_set_shard(full, 10, 3) == CT_E_INVALID_ARG; /* rows beyond the batch */
    for (int ep = 0; ep < 2 && ok; ep++) {
        ct_loader_start_epoch(full, (uint64_t)ep);
        for (int k = 0; k < SH_W; k++) ct_loader_start_epoch(ld[k], (uint64_t)ep);
        if (ep == 1) { /* resume-style skip */
            ok = ct_loader_skip(full, 2) == CT_OK;
            for (int k = 0; k < SH_W; k++) ok = ok && ct_loader_skip(ld[k], 2) == CT_OK;
        }
        ok = ok && shards_match(loader_next, full, (void *const *)ld);
    }
    ct_loader_free(full);
    for (int k = 0; k < SH_W; k++) ct_loader_free(ld[k]);
    /* the prefetcher, augmenting, threaded */
    ct_prefetch_opts po;
    ct_prefetch_opts_default(&po);
    po.augment = 1;
    po.crop_pad = 1;
    ct_prefetcher *pfull = NULL, *pf[SH_W] = {0};
    ok = ok && ct_prefetcher_create(g_ctx, &ds, SH_B, 1, 1, 9, &po, &pfull) == CT_OK;
    for (int k = 0; k < SH_W && ok; k++) {
        po.shard_offset = k * SH_b;
        po.shard_rows = SH_b;
        ok = ct_prefetcher_create(g_ctx, &ds, SH_B, 1, 1, 9, &po, &pf[k]) == CT_OK;
    }
    ok = ok && shards_match(prefetcher_next, pfull, (void *const *)pf);
    po.shard_offset = 11, po.shard_rows = 2;
    ct_prefetcher *badpf = NULL;
    bad_rejected = bad_rejected && ct_prefetcher_create(g_ctx, &ds, SH_B, 1, 1, 9, &po, &badpf) == CT_E_INVALID_ARG;
    ct_prefetcher_free(pfull);
    for (int k = 0; k < SH_W; k++) ct_prefetcher_free(pf[k]);
    ct_prefetcher_free(badpf);
    free(ds.images);
    free(ds.labels);
    CHECK(ok);
    CHECK(bad_rejected);
}

/* ---- test_dist maxdiff A B ------------------------------------------------------------------------ */

/* The largest |a - b| over the tensors of two safetensors files, matched by
 * name (read by the library's checked reader); -1 when they hold other
 * tensors or shapes. */
static int maxdiff(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: test_dist maxdiff A.safetensors B.safetensors\n");
        return 2;
    }
    ct_context *ctx = test_ctx(-1, 1);
    ct_st_file a, b;
    memset(&a, 0, sizeof a), memset(&b, 0, sizeof b);
    int rc = 2;
    if (ct_st_read(ctx, argv[2], 0, &a) != CT_OK || ct_st_read(ctx, argv[3], 0, &b) != CT_OK) {
        fprintf(stderr, "test_dist maxdiff: %s\n", ct_context_last_error(ctx));
        goto out;
    }
    double m = 0, mrel = 0;
    size_t n = 0;
    int same = a.n_tensors == b.n_tensors;
    const cJSON *ea;
    cJSON_ArrayForEach(ea, a.header) {
        if (!same || !strcmp(ea->string, "__metadata__")) continue;
        const cJSON *eb = cJSON_GetObjectItemCaseSensitive(b.header, ea->string);
        const cJSON *oa = cJSON_GetObjectItemCaseSensitive(ea, "data_offsets");
        const cJSON *ob = eb ? cJSON_GetObjectItemCaseSensitive(eb, "data_offsets") : NULL;
        const cJSON *sa = cJSON_GetObjectItemCaseSensitive(ea, "shape");
        const cJSON *sb = eb ? cJSON_GetObjectItemCaseSensitive(eb, "shape") : NULL;
        char *ta = sa ? cJSON_PrintUnformatted(sa) : NULL, *tb = sb ? cJSON_PrintUnformatted(sb) : NULL;
        same = oa && ob && ta && tb && !strcmp(ta, tb);
        free(ta), free(tb);
        if (!same) break;
        size_t a0 = (size_t)cJSON_GetArrayItem(oa, 0)->valuedouble, a1 = (size_t)cJSON_GetArrayItem(oa, 1)->valuedouble;
        size_t b0 = (size_t)cJSON_GetArrayItem(ob, 0)->valuedouble;
        const unsigned char *pa = a.buf + a.data_off + a0, *pb = b.buf + b.data_off + b0;
        double tm = 0.0, ta_max = 0.0; /* this tensor's largest difference and largest |value| */
        for (size_t i = 0; i < (a1 - a0) / 4; i++, n++) {
            float x, y;
            memcpy(&x, pa + 4 * i, 4), memcpy(&y, pb + 4 * i, 4);
            double d = fabs((double)x - (double)y);
            if (d > m || d != d) m = d;
            if (d > tm || d != d) tm = d;
            if (fabs((double)x) > ta_max) ta_max = fabs((double)x);
        }
        double rel = ta_max > 0.0 ? tm / ta_max : tm;
        if (rel > mrel || rel != rel) mrel = rel;
    }
    if (!same) {
        fprintf(stderr, "test_dist maxdiff: %s and %s hold other tensors or shapes\n", argv[2], argv[3]);
        goto out;
    }
    printf("max abs diff %.3g over %zu weights, max rel diff %.3g (per tensor, of its largest |value|)\n", m, n, mrel);
    rc = 0;
out:
    ct_st_close(&a);
    ct_st_close(&b);
    ct_context_free(ctx);
    return rc;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "maxdiff")) return maxdiff(argc, argv);
    static const ct_test_case cases[] = {T(world_rank_and_size), T(allreduce_ops), T(broadcast_allgather_barrier),
                                         T(bad_arguments), T(agree_names_the_rank), T(nonblocking_allreduce),
                                         T(stats_count_bytes), T(launcher_detection), T(shards_make_the_whole_batch),
                                         T(task_without_shard_is_refused),
                                         T(process_grid_every_factorization), T(process_grid_bad_sizes)};
    if (test_mpi_start("test_dist", &g_ctx, &g_world)) return 1;
    int rc = ct_test_main(__FILE__, cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
    return test_mpi_finish(g_ctx, g_world, rc);
}
