/* bench/bench_image.c - decode + augment throughput of ctrain's image
 * pipeline: an ImageFolder read through ct_prefetcher (RandomResizedCrop +
 * flip + normalize, or the eval Resize + CenterCrop) for a number of epochs,
 * with T worker threads; prints the wall-clock images/s and the per-thread
 * rate of ct_image_set_stats. bench/image_data.sh runs it beside
 * torchvision's ImageFolder + DataLoader (bench/torch_image.py).
 * usage: bench_image DIR [threads 2] [epochs 1] [size 32] [train 1] [batch 64] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ctrain/ctrain.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [threads] [epochs] [size] [train] [batch]\n", argv[0]);
        return 2;
    }
    const int threads = argc > 2 ? atoi(argv[2]) : 2, epochs = argc > 3 ? atoi(argv[3]) : 1;
    const int size = argc > 4 ? atoi(argv[4]) : 32, train = argc > 5 ? atoi(argv[5]) : 1;
    const int64_t batch = argc > 6 ? atoll(argv[6]) : 64;
    ct_context_opts co;
    ct_context_opts_default(&co);
    co.num_threads = 1;
    ct_context *ctx;
    if (ct_context_create(&co, &ctx) != CT_OK) return 1;
    ct_image_opts o;
    ct_image_opts_default(&o);
    o.size = size;
    o.train = train;
    for (int c = 0; c < 3; c++) o.mean[c] = 0.286f, o.std[c] = 0.353f;
    ct_image_set *set;
    ct_dataset ds;
    ct_prefetcher *pf;
    ct_prefetch_opts po;
    ct_prefetch_opts_default(&po);
    po.threads = threads;
    po.buffer_size = threads > 0 ? 2 * threads + 2 : 1;
    if (ct_image_set_open_folder(ctx, argv[1], &o, &set) != CT_OK || ct_dataset_from_image_set(set, &ds) != CT_OK ||
        ct_prefetcher_create(ctx, &ds, batch, 1, 0, 1, &po, &pf) != CT_OK) {
        fprintf(stderr, "bench_image: %s\n", ct_context_last_error(ctx));
        return 1;
    }
    float *img = malloc(sizeof(float) * (size_t)batch * 3 * (size_t)size * (size_t)size);
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)batch);
    int64_t n = 0, got;
    double t0 = now_s();
    for (int e = 0; e < epochs; e++) {
        ct_prefetcher_start_epoch(pf, (uint64_t)e);
        for (;;) {
            if (ct_prefetcher_next(pf, img, lab, &got) != CT_OK) {
                fprintf(stderr, "bench_image: %s\n", ct_context_last_error(ctx));
                return 1;
            }
            if (!got) break;
            n += got;
        }
    }
    double dt = now_s() - t0;
    ct_image_stats st;
    ct_image_set_stats(set, &st);
    printf("ctrain images %lld  seconds %.3f  images/s %.0f  per-thread-CPU-s images/s %.0f  threads %d  %s %dx%d\n",
           (long long)n, dt, (double)n / dt, st.seconds > 0 ? (double)st.images / st.seconds : 0.0, threads,
           train ? "RandomResizedCrop+flip" : "Resize+CenterCrop", size, size);
    free(img);
    free(lab);
    ct_prefetcher_free(pf);
    ct_image_set_free(set);
    ct_context_free(ctx);
    return 0;
}
