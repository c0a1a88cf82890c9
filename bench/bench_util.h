/* bench/bench_util.h - what the C benches share: BENCH_DIE_IF (a failed ctrain call ends the bench with
 * the library's message; BENCH_NAME, defined before the include, names the bench), a monotonic clock,
 * qsort's comparison of doubles, and the step benches' workload graphs. */
#ifndef CT_BENCH_UTIL_H
#define CT_BENCH_UTIL_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/ctrain.h"

#ifndef BENCH_NAME
#error "define BENCH_NAME (the bench's name, for its messages) before including bench_util.h"
#endif

#define DIE_IF(ctx, expr)                                                                          \
    do {                                                                                           \
        ct_status s_ = (expr);                                                                     \
        if (s_ != CT_OK) {                                                                         \
            fprintf(stderr, BENCH_NAME ": %s failed: %s: %s\n", #expr, ct_status_name(s_),         \
                    (ctx) ? ct_context_last_error(ctx) : "");                                      \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

static inline double bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* qsort's comparison of doubles (medians of timings) */
static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The step benches' workloads (bench_step, bench_gemm), by name:
 *   mlp       MLP 784-1024-1024-10, batch 256
 *   cnn       ct_model_cnn_ex channels [32, 64] on 1x28x28, batch 128, 10 classes
 *   gptchar   gpt-char-small, batch 8, T 256, dropout 0; logits reshaped to (B*T, V)
 *   gpt2      gpt2-124m, batch 4, T 64, dropout 0; the same
 *   resnet50  torchvision's resnet50 (ct_model_vision), 3x224x224, batch 32, 1000 classes
 * dropout: the GPTs' and the MLP's dropout probability (0 above: the same work every step; the recipes train
 * gpt-char-small with 0.2, bench_step --dropout 0.2 times that).
 * channels_last: the cnn's and resnet50's activations NHWC (1) or NCHW (0). */
typedef struct {
    int64_t batch, seq, classes, labels, x_numel; /* seq: GPT tokens per row; labels: per step */
    int is_gpt;
} bench_workload;

static inline int bench_workload_known(const char *name) {
    static const char *const k[] = {"mlp", "cnn", "gptchar", "gpt2", "resnet50"};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(name, k[i])) return 1;
    return 0;
}

/* Declares the labels y and the input x first (the activation planner places an input at its node
 * index, so an input declared after the model could share memory with an activation: bench/README.md),
 * then builds the workload's logits; w: the shapes to fill the inputs with. */
static inline void bench_workload_graph(ct_context *ctx, ct_graph *g, const char *name, int channels_last,
                                        float dropout, ct_node *x, ct_node *y, ct_node *logits, bench_workload *w) {
    const int is_mlp = !strcmp(name, "mlp"), is_cnn = !strcmp(name, "cnn"), is_r50 = !strcmp(name, "resnet50");
    const int is_gptchar = !strcmp(name, "gptchar");
    w->is_gpt = is_gptchar || !strcmp(name, "gpt2");
    w->batch = is_mlp ? 256 : is_cnn ? 128 : is_r50 ? 32 : is_gptchar ? 8 : 4;
    w->seq = w->is_gpt ? (is_gptchar ? 256 : 64) : 0;
    w->classes = is_r50 ? 1000 : 10;
    w->labels = w->batch;
    if (w->is_gpt) { /* ids (B, T), next-token labels (B*T); logits (B, T, V) -> (B*T, V) for the loss */
        ct_gpt_config gc;
        DIE_IF(ctx, ct_gpt_preset(ctx, is_gptchar ? "gpt-char-small" : "gpt2-124m", &gc));
        gc.dropout = dropout;
        w->classes = gc.vocab;
        w->labels = w->batch * w->seq;
        w->x_numel = w->batch * w->seq;
        DIE_IF(ctx, ct_input(g, "y", CT_I32, 1, (int64_t[]){w->labels}, y));
        DIE_IF(ctx, ct_input(g, "x", CT_I32, 2, (int64_t[]){w->batch, w->seq}, x));
        ct_node l3;
        DIE_IF(ctx, ct_model_gpt(g, *x, &gc, &l3));
        DIE_IF(ctx, ct_reshape(g, l3, 2, (int64_t[]){w->labels, w->classes}, logits));
        return;
    }
    DIE_IF(ctx, ct_input(g, "y", CT_I32, 1, (int64_t[]){w->batch}, y));
    if (is_mlp) {
        w->x_numel = w->batch * 784;
        DIE_IF(ctx, ct_input(g, "x", CT_F32, 2, (int64_t[]){w->batch, 784}, x));
        DIE_IF(ctx, ct_model_mlp(g, *x, 2, (int64_t[]){1024, 1024}, w->classes, CT_ACT_RELU, dropout, logits));
    } else if (is_r50) {
        w->x_numel = w->batch * 3 * 224 * 224;
        DIE_IF(ctx, ct_input(g, "x", CT_F32, 4, (int64_t[]){w->batch, 3, 224, 224}, x));
        ct_vision_config vc;
        DIE_IF(ctx, ct_vision_config_default(ctx, "resnet50", &vc));
        vc.channels_last = channels_last;
        DIE_IF(ctx, ct_model_vision(g, *x, &vc, logits));
    } else {
        w->x_numel = w->batch * 28 * 28;
        DIE_IF(ctx, ct_input(g, "x", CT_F32, 4, (int64_t[]){w->batch, 1, 28, 28}, x));
        DIE_IF(ctx, ct_model_cnn_ex(g, *x, 2, (int64_t[]){32, 64}, w->classes, channels_last, logits));
    }
}
#endif
