/* bench/bench_fusion.c - step time and activation memory at fusion levels 0
 * and 2 in the same run: the Fashion CNN (batch 128) and gpt-char-small
 * (batch 8, context 256; FP32 and BF16 autocast, where level 1's cast_fold
 * applies), forward + backward, levels interleaved step by
 * step so both see the same machine load. Prints the median step time of
 * each level and the activation arena of each plan.
 *   make -C bench bench_fusion && ../build-bench/bench/bench_fusion [steps] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/ctrain.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static ct_status build(ct_context *ctx, const char *model, int64_t batch, ct_precision prec, int level, ct_plan **p,
                       ct_node *labels, int classes) {
    ct_graph *g;
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    ct_node logits, loss;
    int nd = 0;
    int64_t sh[8];
    s = ct_model_by_name(g, model, batch, &logits);
    if (s == CT_OK) s = ct_node_shape(g, logits, &nd, sh);
    if (s == CT_OK) s = ct_input(g, "labels", CT_I32, nd - 1, sh, labels);
    if (s == CT_OK) s = ct_cross_entropy(g, logits, *labels, 0.0f, -100, &loss);
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    co.fusion_level = level;
    co.precision = prec;
    if (s == CT_OK) s = ct_compile(g, loss, 0, NULL, &co, p);
    ct_graph_free(g);
    if (s != CT_OK) return s;
    ct_tensor t;
    if ((s = ct_plan_tensor(*p, 0, &t)) != CT_OK) return s;
    for (int64_t i = 0; i < ct_tensor_numel(&t); i++) {
        if (t.dtype == CT_F32) ((float *)t.data)[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
        else ((int32_t *)t.data)[i] = (int32_t)((i * 7 + 3) % classes);
    }
    if ((s = ct_plan_tensor(*p, *labels, &t)) != CT_OK) return s;
    for (int64_t i = 0; i < ct_tensor_numel(&t); i++) ((int32_t *)t.data)[i] = (int32_t)((i * 3 + 1) % classes);
    return CT_OK;
}

int main(int argc, char **argv) {
    ct_openmp_limit_spin(argv);
    int steps = argc > 1 ? atoi(argv[1]) : 10;
    if (steps < 2) steps = 2;
    static const struct {
        const char *model;
        int64_t batch;
        int classes;
        ct_precision prec;
    } k[] = {{"cnn", 128, 10, CT_PRECISION_FP32},
             {"gpt-char-small", 8, 65, CT_PRECISION_FP32},
             {"gpt-char-small", 8, 65, CT_PRECISION_BF16}};
    const int levels[2] = {0, 2};
    printf("%-15s %5s %5s %6s %12s %12s %10s\n", "model", "prec", "batch", "level", "act MiB", "ws MiB", "step ms");
    for (int m = 0; m < 3; m++) {
        ct_context *ctx;
        if (ct_context_create(NULL, &ctx) != CT_OK) return 1;
        ct_plan *p[2] = {0};
        ct_node labels[2];
        double *t[2];
        for (int l = 0; l < 2; l++) {
            t[l] = calloc((size_t)steps, sizeof(double));
            if (!t[l] || build(ctx, k[m].model, k[m].batch, k[m].prec, levels[l], &p[l], &labels[l], k[m].classes) != CT_OK) {
                fprintf(stderr, "bench_fusion: %s\n", ct_context_last_error(ctx));
                return 1;
            }
            ct_plan_forward(p[l], 1); /* warm-up: oneDNN primitives, first touch */
            ct_plan_backward(p[l]);
        }
        for (int i = 0; i < steps; i++)
            for (int l = 0; l < 2; l++) {
                double t0 = now();
                if (ct_plan_forward(p[l], 1) != CT_OK || ct_plan_backward(p[l]) != CT_OK) {
                    fprintf(stderr, "bench_fusion: %s\n", ct_context_last_error(ctx));
                    return 1;
                }
                t[l][i] = now() - t0;
            }
        for (int l = 0; l < 2; l++) {
            ct_plan_stats st;
            ct_plan_get_stats(p[l], &st);
            qsort(t[l], (size_t)steps, sizeof(double), cmp);
            printf("%-15s %5s %5lld %6d %12.2f %12.2f %10.2f\n", k[m].model, ct_precision_name(k[m].prec),
                   (long long)k[m].batch, levels[l],
                   st.activation_bytes / 1048576.0, st.workspace_bytes / 1048576.0, 1e3 * t[l][steps / 2]);
            ct_plan_free(p[l]);
            free(t[l]);
        }
        ct_context_free(ctx);
    }
    return 0;
}
