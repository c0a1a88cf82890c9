/* examples/train_mlp.c - trains an MLP (784-128-10, ReLU) on MNIST through
 * ctrain's graph API, reports the test accuracy and saves a checkpoint that
 * examples/predict.c loads. Uses only the installed public headers.
 *
 *   make -C examples                   (pkg-config --cflags --libs ctrain)
 *   examples/train_mlp data/mnist runs/example [STEPS]
 *
 * STEPS (default 300) AdamW steps of 100 images: ~94% test accuracy in a
 * few seconds. Every call that can fail returns a ct_status; on failure the
 * context holds a message naming the problem and what to do. */
#include <stdio.h>
#include <stdlib.h>

#include <ctrain/ctrain.h>

enum { BATCH = 100, HIDDEN = 128, CLASSES = 10 };

/* Prints the failed call and the library's message; 1 for main's exit code. */
static int fail(ct_context *ctx, ct_status s, const char *what) {
    fprintf(stderr, "train_mlp: %s failed: %s\n", what,
            ctx && ct_context_last_error(ctx)[0] ? ct_context_last_error(ctx) : ct_status_advice(s));
    return 1;
}
#define CHECK(call)                                      \
    do {                                                 \
        ct_status s_ = (call);                           \
        if (s_ != CT_OK) { rc = fail(ctx, s_, #call); goto done; } \
    } while (0)

/* The index of the largest of n logits. */
static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

int main(int argc, char **argv) {
    /* First: libgomp reads its spin setting only at start-up, so this
     * re-executes the program once with GOMP_SPINCOUNT=10000 unless the user
     * set it or OMP_WAIT_POLICY (include/ctrain/context.h says why). */
    ct_status spin = ct_openmp_limit_spin(argv);
    if (spin != CT_OK)
        fprintf(stderr, "train_mlp: warning: running with OpenMP's default spin (%s)\n", ct_status_name(spin));
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: %s MNIST_DIR CHECKPOINT_DIR [STEPS]\n", argv[0]);
        return 2;
    }
    const char *data_dir = argv[1], *save_dir = argv[2];
    long steps = argc > 3 ? strtol(argv[3], NULL, 10) : 300;
    if (steps < 1) {
        fprintf(stderr, "train_mlp: STEPS must be a positive number\n");
        return 2;
    }

    int rc = 0;
    ct_context *ctx = NULL;
    ct_graph *g = NULL;
    ct_plan *plan = NULL;
    ct_optimizer *opt = NULL;
    ct_loader *loader = NULL;
    ct_dataset train = {0}, test = {0};
    static ct_train_state state; /* ~12 KiB: the recipe text lives inside */

    /* The context: threads (0: all cores), RNG seed, allocator, last error. */
    ct_context_opts co;
    ct_context_opts_default(&co);
    co.seed = 1;
    ct_status s = ct_context_create(&co, &ctx);
    if (s != CT_OK) return fail(NULL, s, "ct_context_create");

    /* MNIST as normalized FP32 images (N, 1, 28, 28) and I32 labels. */
    CHECK(ct_dataset_load_idx(ctx, data_dir, "train", 0.1307f, 0.3081f, &train));
    CHECK(ct_dataset_load_idx(ctx, data_dir, "t10k", 0.1307f, 0.3081f, &test));
    const int64_t pixels = train.c * train.h * train.w;

    /* The graph: inputs, the model, the loss. Shapes are fixed at build time. */
    CHECK(ct_graph_create(ctx, &g));
    ct_node x, y, logits, loss;
    CHECK(ct_input(g, "x", CT_F32, 2, (int64_t[]){BATCH, pixels}, &x));       /* (B, 784) */
    CHECK(ct_input(g, "y", CT_I32, 1, (int64_t[]){BATCH}, &y));               /* (B)      */
    CHECK(ct_model_mlp(g, x, 1, (int64_t[]){HIDDEN}, CLASSES, CT_ACT_RELU, 0.0f, &logits)); /* (B, 10) */
    CHECK(ct_cross_entropy(g, logits, y, 0.0f, -100, &loss));                 /* scalar   */

    /* Compile: autodiff, passes, memory plan; logits stay readable. The plan
     * keeps its own copy of the graph. */
    CHECK(ct_compile(g, loss, 1, &logits, NULL, &plan));
    ct_graph_free(g);
    g = NULL;

    ct_optim_opts oo;
    ct_optim_opts_default(&oo, CT_OPTIM_ADAMW); /* lr 1e-3, weight decay 0.01 */
    CHECK(ct_optimizer_create(plan, &oo, &opt));

    /* Inputs are written straight into the plan's memory. */
    ct_tensor tx, ty, tl;
    CHECK(ct_plan_tensor(plan, x, &tx));
    CHECK(ct_plan_tensor(plan, y, &ty));
    CHECK(ct_plan_tensor(plan, logits, &tl));

    /* Training: shuffled batches (the order depends only on seed and epoch). */
    CHECK(ct_loader_create(ctx, &train, BATCH, 1, 1, 1, &loader));
    long step = 0;
    for (uint64_t epoch = 0; step < steps; epoch++) {
        ct_loader_start_epoch(loader, epoch);
        int64_t got;
        while (step < steps) {
            CHECK(ct_loader_next(loader, tx.data, ty.data, &got));
            if (got == 0) break; /* end of the epoch */
            CHECK(ct_plan_forward(plan, 1));
            CHECK(ct_plan_backward(plan));
            CHECK(ct_optimizer_step(opt));
            step++;
            if (step % 100 == 0 || step == steps) {
                float l;
                CHECK(ct_plan_loss(plan, &l));
                printf("step %ld/%ld  loss %.4f\n", step, steps, l);
            }
        }
    }

    /* Test accuracy: eval-mode forward over the test set, batch by batch. */
    int64_t correct = 0, seen = 0;
    for (int64_t i = 0; i + BATCH <= test.n; i += BATCH) {
        for (int64_t j = 0; j < BATCH * pixels; j++) ((float *)tx.data)[j] = test.images[i * pixels + j];
        for (int64_t j = 0; j < BATCH; j++) ((int32_t *)ty.data)[j] = test.labels[i + j];
        CHECK(ct_plan_forward(plan, 0));
        for (int64_t j = 0; j < BATCH; j++)
            correct += argmax((const float *)tl.data + j * CLASSES, CLASSES) == test.labels[i + j];
        seen += BATCH;
    }
    printf("test accuracy %.2f%% (%lld/%lld)\n", 100.0 * (double)correct / (double)seen, (long long)correct,
           (long long)seen);

    /* Checkpoint: weights, optimizer state and the recipe that describes
     * this model and run, as `ctrain train` stores it; predict.c rebuilds
     * the graph from that recipe, so it reads checkpoints of both. */
    ct_recipe r;
    ct_recipe_default(&r);
    r.model = CT_MODEL_MLP;
    r.n_hidden = 1;
    r.hidden[0] = HIDDEN;
    r.activation = CT_ACT_RELU;
    r.dropout = 0.0f;
    r.dataset = CT_DATASET_MNIST;
    r.batch_size = BATCH;
    r.max_steps = steps;
    r.seed = co.seed;
    r.optim = oo;
    r.schedule = CT_SCHED_CONSTANT;
    CHECK(ct_recipe_validate(ctx, &r));
    ct_train_state_init(&state);
    int len = ct_recipe_to_json_full(&r, state.recipe_json, sizeof state.recipe_json);
    if (len < 0 || (size_t)len >= sizeof state.recipe_json) {
        fprintf(stderr, "train_mlp: the recipe does not fit in the checkpoint's %zu bytes\n", sizeof state.recipe_json);
        rc = 1;
        goto done;
    }
    state.step = step;
    state.test_acc = (double)correct / (double)seen;
    state.finished = 1;
    CHECK(ct_checkpoint_save(ctx, save_dir, plan, opt, &state, 1));
    char where[4096];
    CHECK(ct_checkpoint_resolve(ctx, save_dir, where, sizeof where));
    printf("checkpoint %s\n", where);

done:
    ct_loader_free(loader);
    ct_optimizer_free(opt);
    ct_plan_free(plan);
    ct_graph_free(g);
    ct_dataset_free(ctx, &train);
    ct_dataset_free(ctx, &test);
    ct_context_free(ctx);
    return rc;
}
