/* examples/predict.c - loads an MLP checkpoint (written by
 * examples/train_mlp or by `ctrain train --save-dir DIR` with model mlp),
 * rebuilds the model from the recipe stored in it, and classifies MNIST /
 * Fashion-MNIST test images, printing the first predictions and the
 * accuracy. Uses only the installed public headers.
 *
 *   make -C examples                   (pkg-config --cflags --libs ctrain)
 *   examples/predict runs/example data/mnist [N]
 *
 * N: how many test images (default: all). Every call that can fail returns
 * a ct_status; on failure the context holds a message naming the problem. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ctrain/ctrain.h>

enum { BATCH = 100 };

static int fail(ct_context *ctx, ct_status s, const char *what) {
    fprintf(stderr, "predict: %s failed: %s\n", what,
            ctx && ct_context_last_error(ctx)[0] ? ct_context_last_error(ctx) : ct_status_advice(s));
    return 1;
}
#define CHECK(call)                                      \
    do {                                                 \
        ct_status s_ = (call);                           \
        if (s_ != CT_OK) { rc = fail(ctx, s_, #call); goto done; } \
    } while (0)

int main(int argc, char **argv) {
    ct_status spin = ct_openmp_limit_spin(argv); /* first: see train_mlp.c */
    if (spin != CT_OK)
        fprintf(stderr, "predict: warning: running with OpenMP's default spin (%s)\n", ct_status_name(spin));
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: %s CHECKPOINT DATA_DIR [N]\n", argv[0]);
        return 2;
    }
    const char *ckpt = argv[1], *data_dir = argv[2];
    long limit = argc > 3 ? strtol(argv[3], NULL, 10) : 0;
    if (argc > 3 && limit < 1) {
        fprintf(stderr, "predict: N must be a positive number\n");
        return 2;
    }

    int rc = 0;
    ct_context *ctx = NULL;
    ct_graph *g = NULL;
    ct_plan *plan = NULL;
    ct_dataset test = {0};
    static ct_train_state state;

    ct_status s = ct_context_create(NULL, &ctx);
    if (s != CT_OK) return fail(NULL, s, "ct_context_create");

    /* 1. The recipe stored with the weights says which model they belong to
     *    (plan NULL: read and check the checkpoint, change nothing). */
    CHECK(ct_checkpoint_load(ctx, ckpt, NULL, NULL, &state));
    ct_recipe r;
    ct_recipe_default(&r);
    if (!state.recipe_json[0]) {
        fprintf(stderr, "predict: %s holds no recipe, so the model cannot be rebuilt\n", state.path);
        rc = 1;
        goto done;
    }
    CHECK(ct_recipe_parse_json(ctx, state.recipe_json, &r));
    if (r.model != CT_MODEL_MLP) {
        fprintf(stderr, "predict: %s holds a '%s' model; this example rebuilds MLPs only\n", state.path,
                ct_recipe_enum_name("model", (int)r.model));
        rc = 1;
        goto done;
    }

    /* 2. The test images, normalized as the model saw them in training. */
    int fashion = r.dataset == CT_DATASET_FASHION_MNIST;
    CHECK(ct_dataset_load_idx(ctx, data_dir, "t10k", fashion ? 0.2860f : 0.1307f, fashion ? 0.3530f : 0.3081f,
                              &test));
    const int64_t pixels = test.c * test.h * test.w, classes = test.n_classes;
    const int64_t n = limit > 0 && limit < test.n ? limit : test.n;

    /* 3. The same graph as in training, compiled forward only (no loss, no
     *    backward, no gradients), then the checkpoint's weights loaded in. */
    CHECK(ct_graph_create(ctx, &g));
    ct_node x, logits;
    CHECK(ct_input(g, "x", CT_F32, 2, (int64_t[]){BATCH, pixels}, &x));
    CHECK(ct_model_mlp(g, x, r.n_hidden, r.hidden, classes, r.activation, r.dropout, &logits));
    ct_compile_opts opts;
    ct_compile_opts_default(&opts);
    opts.build_backward = 0;
    CHECK(ct_compile(g, CT_NONE, 1, &logits, &opts, &plan));
    ct_graph_free(g);
    g = NULL;
    CHECK(ct_checkpoint_load(ctx, ckpt, plan, NULL, NULL)); /* weights and buffers only */

    /* 4. Predict, BATCH images at a time (the last batch padded with zeros). */
    ct_tensor tx, tl;
    CHECK(ct_plan_tensor(plan, x, &tx));
    CHECK(ct_plan_tensor(plan, logits, &tl));
    int64_t correct = 0;
    for (int64_t i = 0; i < n; i += BATCH) {
        int64_t rows = n - i < BATCH ? n - i : BATCH;
        memset(tx.data, 0, (size_t)(BATCH * pixels) * sizeof(float));
        memcpy(tx.data, test.images + i * pixels, (size_t)(rows * pixels) * sizeof(float));
        CHECK(ct_plan_forward(plan, 0)); /* eval mode: no dropout */
        for (int64_t j = 0; j < rows; j++) {
            const float *v = (const float *)tl.data + j * classes;
            int best = 0;
            for (int c = 1; c < classes; c++)
                if (v[c] > v[best]) best = c;
            correct += best == test.labels[i + j];
            if (i + j < 8) printf("image %lld: predicted %d, label %d\n", (long long)(i + j), best, test.labels[i + j]);
        }
    }
    printf("accuracy %.2f%% (%lld/%lld test images) with %s\n", 100.0 * (double)correct / (double)n,
           (long long)correct, (long long)n, state.path);

done:
    ct_plan_free(plan);
    ct_graph_free(g);
    ct_dataset_free(ctx, &test);
    ct_context_free(ctx);
    return rc;
}
