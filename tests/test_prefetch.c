/* tests/test_prefetch.c - the background prefetcher (ct_prefetcher): the
 * same batches as ct_loader with augment off, whatever the threads and ring
 * size; augmentation independent of the thread count; slow and fast
 * consumers; shutdown mid-epoch; no allocation per batch. */
#include <time.h>

#include "test.h"

#define N 103
#define H 8
#define W 8
#define SZ (H * W)

/* Sample i: label i, pixels i*1000 + k (k < 64). */
static void fake_ds(ct_dataset *ds) {
    memset(ds, 0, sizeof *ds);
    ds->n = N;
    ds->c = 1;
    ds->h = H;
    ds->w = W;
    ds->n_classes = 10;
    ds->images = malloc((size_t)N * SZ * sizeof(float));
    ds->labels = malloc((size_t)N * sizeof(int32_t));
    for (int64_t i = 0; i < N; i++) {
        ds->labels[i] = (int32_t)i;
        for (int k = 0; k < SZ; k++) ds->images[i * SZ + k] = (float)(i * 1000 + k);
    }
}

static void free_ds(ct_dataset *ds) {
    free(ds->images);
    free(ds->labels);
}

/* One epoch (from the current position) of a loader or a prefetcher into
 * img/lab (N*SZ, N); returns the samples seen or -1. sleep_us per batch. */
static int64_t drain(ct_loader *l, ct_prefetcher *pf, int64_t batch, float *img, int32_t *lab, long sleep_us) {
    int64_t total = 0, got = 0;
    for (;;) {
        ct_status s = l ? ct_loader_next(l, img + total * SZ, lab + total, &got)
                        : ct_prefetcher_next(pf, img + total * SZ, lab + total, &got);
        if (s != CT_OK) return -1;
        if (got == 0) break;
        if (got > batch) return -1;
        total += got;
        if (sleep_us > 0) {
            struct timespec ts = {0, sleep_us * 1000};
            nanosleep(&ts, NULL);
        }
    }
    return total;
}

typedef struct {
    float img[N * SZ];
    int32_t lab[N];
} epoch_buf;

TEST(same_batches_as_the_loader) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_dataset ds;
    fake_ds(&ds);
    epoch_buf *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    const int64_t batch = 10;
    int threads[] = {1, 2, 3}, bufs[] = {1, 2, 5, 16};
    for (int sh = 0; sh < 2; sh++)
        for (int dl = 0; dl < 2; dl++)
            for (int ti = 0; ti < 3; ti++)
                for (int bi = 0; bi < 4; bi++) {
                    ct_loader *l;
                    ct_prefetcher *pf;
                    ct_prefetch_opts o;
                    ct_prefetch_opts_default(&o);
                    o.threads = threads[ti];
                    o.buffer_size = bufs[bi];
                    CHECK_OK(ctx, ct_loader_create(ctx, &ds, batch, sh, dl, 42, &l));
                    CHECK_OK(ctx, ct_prefetcher_create(ctx, &ds, batch, sh, dl, 42, &o, &pf));
                    CHECK(ct_prefetcher_num_batches(pf) == ct_loader_num_batches(l));
                    /* epoch 0 as created, then epochs 3 and 1, and epoch 2 resumed at batch 4 */
                    for (int e = 0; e < 4; e++) {
                        uint64_t ep = e == 0 ? 0 : e == 1 ? 3 : e == 2 ? 1 : 2;
                        if (e > 0) {
                            ct_loader_start_epoch(l, ep);
                            CHECK_OK(ctx, ct_prefetcher_start_epoch(pf, ep));
                        }
                        if (e == 3) {
                            CHECK_OK(ctx, ct_loader_skip(l, 4));
                            CHECK_OK(ctx, ct_prefetcher_skip(pf, 4));
                        }
                        int64_t na = drain(l, NULL, batch, a->img, a->lab, 0);
                        int64_t nb = drain(NULL, pf, batch, b->img, b->lab, 0);
                        CHECK_MSG(na > 0 && na == nb, "sh %d dl %d threads %d buf %d epoch %d: %lld vs %lld", sh, dl,
                                  threads[ti], bufs[bi], e, (long long)na, (long long)nb);
                        CHECK(!memcmp(a->img, b->img, (size_t)na * SZ * sizeof(float)));
                        CHECK(!memcmp(a->lab, b->lab, (size_t)na * sizeof(int32_t)));
                    }
                    /* skipping past the end: end of epoch, as the loader */
                    ct_loader_start_epoch(l, 5);
                    CHECK_OK(ctx, ct_prefetcher_start_epoch(pf, 5));
                    CHECK_OK(ctx, ct_loader_skip(l, 100));
                    CHECK_OK(ctx, ct_prefetcher_skip(pf, 100));
                    CHECK(drain(NULL, pf, batch, b->img, b->lab, 0) == drain(l, NULL, batch, a->img, a->lab, 0));
                    ct_prefetcher_free(pf);
                    ct_loader_free(l);
                }
    free(a);
    free(b);
    free_ds(&ds);
    ct_context_free(ctx);
}

/* Epochs 0 and 1 of an augmenting prefetcher with `threads` threads. */
static int64_t aug_run(ct_context *ctx, const ct_dataset *ds, int threads, int buf, epoch_buf *out) {
    ct_prefetch_opts o;
    ct_prefetch_opts_default(&o);
    o.threads = threads;
    o.buffer_size = buf;
    o.augment = 1;
    o.crop_pad = 2;
    o.pad_value = -7.0f;
    ct_prefetcher *pf;
    if (ct_prefetcher_create(ctx, ds, 16, 1, 0, 9, &o, &pf) != CT_OK) return -1;
    int64_t n0 = drain(NULL, pf, 16, out[0].img, out[0].lab, 0);
    ct_prefetcher_start_epoch(pf, 1);
    int64_t n1 = drain(NULL, pf, 16, out[1].img, out[1].lab, 0);
    ct_prefetcher_free(pf);
    return n0 == N && n1 == N ? N : -1;
}

TEST(augmentation_does_not_depend_on_threads) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_dataset ds;
    fake_ds(&ds);
    epoch_buf *a = malloc(2 * sizeof *a), *b = malloc(2 * sizeof *b);
    CHECK(aug_run(ctx, &ds, 1, 4, a) == N);
    int cfg[][2] = {{3, 4}, {3, 1}, {2, 7}, {0, 1}};
    for (int c = 0; c < 4; c++) {
        CHECK(aug_run(ctx, &ds, cfg[c][0], cfg[c][1], b) == N);
        CHECK_MSG(!memcmp(a, b, 2 * sizeof *a), "threads %d buffer %d differ from 1 thread", cfg[c][0], cfg[c][1]);
    }
    free(a);
    free(b);
    free_ds(&ds);
    ct_context_free(ctx);
}

TEST(crop_and_flip_change_images_not_labels) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_dataset ds;
    fake_ds(&ds);
    epoch_buf *a = malloc(2 * sizeof *a), *plain = malloc(sizeof *plain);
    CHECK(aug_run(ctx, &ds, 2, 3, a) == N);
    ct_loader *l;
    CHECK_OK(ctx, ct_loader_create(ctx, &ds, 16, 1, 0, 9, &l));
    CHECK(drain(l, NULL, 16, plain->img, plain->lab, 0) == N);
    ct_loader_free(l);
    CHECK(!memcmp(plain->lab, a[0].lab, sizeof plain->lab)); /* same order, labels untouched */
    int changed = 0, flipped = 0, padded = 0, epochs_differ = 0;
    for (int i = 0; i < N; i++) {
        const float *x = a[0].img + i * SZ;
        int32_t s = a[0].lab[i];
        if (memcmp(x, plain->img + i * SZ, SZ * sizeof(float))) changed++;
        int has_pad = 0;
        for (int k = 0; k < SZ; k++) {
            if (x[k] == -7.0f) {
                has_pad = 1;
                continue;
            }
            int64_t v = (int64_t)x[k];
            CHECK_MSG(v / 1000 == s, "sample %d pixel %d comes from another image (%g)", i, k, (double)x[k]);
        }
        padded += has_pad;
        /* a flip reverses the columns: find a row with two source pixels */
        for (int y = 0; y < H; y++) {
            const float *row = x + y * W;
            int j = 0;
            while (j + 1 < W && (row[j] == -7.0f || row[j + 1] == -7.0f)) j++;
            if (j + 1 < W) {
                if (row[j + 1] < row[j]) flipped++;
                break;
            }
        }
        /* epoch 1 augments the same sample differently (somewhere) */
        for (int t = 0; t < N; t++)
            if (a[1].lab[t] == s && memcmp(a[1].img + t * SZ, x, SZ * sizeof(float))) {
                epochs_differ++;
                break;
            }
    }
    CHECK_MSG(changed > N / 2, "only %d of %d images changed", changed, N);
    CHECK_MSG(flipped > N / 5 && flipped < 4 * N / 5, "%d of %d images flipped", flipped, N);
    CHECK_MSG(padded > N / 2, "%d of %d images show padding", padded, N);
    CHECK(epochs_differ > N / 2);
    free(a);
    free(plain);
    free_ds(&ds);
    ct_context_free(ctx);
}

TEST(slow_and_fast_consumers) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_dataset ds;
    fake_ds(&ds);
    epoch_buf *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    ct_loader *l;
    CHECK_OK(ctx, ct_loader_create(ctx, &ds, 8, 1, 1, 5, &l));
    int64_t na = drain(l, NULL, 8, a->img, a->lab, 0);
    ct_loader_free(l);
    long sleeps[] = {2000, 0};
    for (int c = 0; c < 2; c++) {
        ct_prefetch_opts o;
        ct_prefetch_opts_default(&o);
        o.threads = c == 0 ? 3 : 1;
        o.buffer_size = c == 0 ? 2 : 1;
        ct_prefetcher *pf;
        CHECK_OK(ctx, ct_prefetcher_create(ctx, &ds, 8, 1, 1, 5, &o, &pf));
        CHECK(drain(NULL, pf, 8, b->img, b->lab, sleeps[c]) == na);
        CHECK(!memcmp(a->img, b->img, (size_t)na * SZ * sizeof(float)));
        CHECK(!memcmp(a->lab, b->lab, (size_t)na * sizeof(int32_t)));
        ct_prefetcher_free(pf);
    }
    free(a);
    free(b);
    free_ds(&ds);
    ct_context_free(ctx);
}

TEST(free_mid_epoch_and_no_allocation_per_batch) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_dataset ds;
    fake_ds(&ds);
    float img[4 * SZ];
    int32_t lab[4];
    ct_mem_stats m0, m1, m2;
    ct_context_mem_stats(ctx, &m0);
    for (int t = 0; t <= 4; t++)
        for (int stop = 0; stop < 3; stop++) {
            ct_prefetch_opts o;
            ct_prefetch_opts_default(&o);
            o.threads = t;
            o.buffer_size = 3;
            o.augment = t & 1;
            ct_prefetcher *pf;
            CHECK_OK(ctx, ct_prefetcher_create(ctx, &ds, 4, 1, 0, 1, &o, &pf));
            int64_t got = 0;
            ct_context_mem_stats(ctx, &m1);
            if (stop >= 1) CHECK_OK(ctx, ct_prefetcher_next(pf, img, lab, &got)); /* then free mid-epoch */
            if (stop == 2) {
                for (uint64_t e = 1; e < 4; e++) {
                    CHECK_OK(ctx, ct_prefetcher_start_epoch(pf, e));
                    CHECK_OK(ctx, ct_prefetcher_skip(pf, 2));
                    do CHECK_OK(ctx, ct_prefetcher_next(pf, img, lab, &got));
                    while (got > 0);
                }
                CHECK_OK(ctx, ct_prefetcher_start_epoch(pf, 9));
                CHECK_OK(ctx, ct_prefetcher_next(pf, img, lab, &got));
                CHECK(got == 4);
            }
            ct_context_mem_stats(ctx, &m2);
            CHECK_MSG(m2.n_allocs == m1.n_allocs, "threads %d: %llu allocations while batching", t,
                      (unsigned long long)(m2.n_allocs - m1.n_allocs));
            ct_prefetcher_free(pf);
        }
    ct_context_mem_stats(ctx, &m2);
    CHECK(m2.bytes_in_use == m0.bytes_in_use && m2.n_allocs - m0.n_allocs == m2.n_frees - m0.n_frees);
    free_ds(&ds);
    ct_context_free(ctx);
}

TEST(invalid_options_are_errors) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_dataset ds;
    fake_ds(&ds);
    ct_prefetch_opts o;
    ct_prefetcher *pf = (ct_prefetcher *)&o;
    ct_prefetch_opts_default(&o);
    CHECK(o.buffer_size == 4 && o.threads == 1 && !o.augment && o.crop_pad == 2);
    o.buffer_size = 0;
    CHECK(ct_prefetcher_create(ctx, &ds, 4, 1, 0, 1, &o, &pf) == CT_E_INVALID_ARG && pf == NULL);
    CHECK(strstr(ct_context_last_error(ctx), "buffer_size") != NULL);
    ct_prefetch_opts_default(&o);
    o.threads = -1;
    CHECK(ct_prefetcher_create(ctx, &ds, 4, 1, 0, 1, &o, &pf) == CT_E_INVALID_ARG);
    CHECK(ct_prefetcher_create(ctx, &ds, 0, 1, 0, 1, NULL, &pf) == CT_E_INVALID_ARG);
    CHECK_OK(ctx, ct_prefetcher_create(ctx, &ds, 4, 1, 0, 1, NULL, &pf));
    CHECK(ct_prefetcher_skip(pf, -1) == CT_E_INVALID_ARG);
    int64_t got = 5;
    CHECK(ct_prefetcher_next(pf, NULL, NULL, &got) == CT_E_INVALID_ARG && got == 0);
    ct_prefetcher_free(pf);
    ct_prefetcher_free(NULL);
    free_ds(&ds);
    ct_context_free(ctx);
}

TEST_MAIN(T(same_batches_as_the_loader), T(augmentation_does_not_depend_on_threads),
          T(crop_and_flip_change_images_not_labels), T(slow_and_fast_consumers),
          T(free_mid_epoch_and_no_allocation_per_batch), T(invalid_options_are_errors))
