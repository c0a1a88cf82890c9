/* tests/test_train_callbacks.c - ct_train_opts.on_step / on_eval (the
 * metrics of every step and evaluation; a non-zero return stops the run) and
 * ct_task_image_custom (a model of the program's own through the built-in
 * image task and the one trainer): the Python package's hooks into the
 * library (python/ctrain/). Needs data/mnist (scripts/setup.sh). */
#include <sys/stat.h>

#include "test.h"

#define CT_TRY_T(expr)                  \
    do {                                \
        ct_status s_ = (expr);          \
        if (s_ != CT_OK) return s_;     \
    } while (0)

static int have(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0) return 1;
    printf("  note: %s not found (scripts/setup.sh), skipping\n", path);
    return 0;
}

/* A small MNIST MLP: 784-16-10, batch 1000 (60 steps an epoch). */
static void small_recipe(ct_recipe *r) {
    ct_recipe_default(r);
    r->n_hidden = 1;
    r->hidden[0] = 16;
    r->batch_size = 1000;
    r->prefetch = 0;
    r->threads = 1;
}

typedef struct {
    int steps, evals, stop_at_step, stop_at_eval;
    int64_t last_step, total;
    double samples, first_loss;
    int64_t eval_step;
    double eval_acc;
} watch;

static int on_step(void *user, const ct_metrics_step *m, int64_t total) {
    watch *w = user;
    w->steps++;
    w->last_step = m->step;
    w->total = total;
    w->samples = m->samples;
    if (w->steps == 1) w->first_loss = m->loss;
    return w->stop_at_step && m->step >= w->stop_at_step;
}

static int on_eval(void *user, int64_t epoch, int64_t step, const ct_task_eval *ev) {
    watch *w = user;
    (void)epoch;
    w->evals++;
    w->eval_step = step;
    w->eval_acc = ev->accuracy;
    return w->stop_at_eval && w->evals >= w->stop_at_eval;
}

static ct_status run(ct_context *ctx, const ct_recipe *r, ct_task *t, watch *w, ct_train_result *res) {
    ct_train_opts o;
    ct_train_opts_default(&o);
    o.out = NULL;
    o.task = t;
    o.on_step = on_step;
    o.on_eval = on_eval;
    o.cb_user = w;
    return ct_train(ctx, r, &o, res);
}

/* on_step sees every step's metrics; returning 1 at step 3 ends the run there, with its evaluation. */
TEST(step_callback_stops) {
    if (!have("data/mnist")) return;
    ct_context *ctx = test_ctx(-1, 1);
    ct_recipe r;
    small_recipe(&r);
    r.epochs = 2;
    watch w = {.stop_at_step = 3};
    ct_train_result res;
    CHECK_OK(ctx, run(ctx, &r, NULL, &w, &res));
    CHECK(res.steps == 3 && w.steps == 3 && w.last_step == 3);
    CHECK(w.total == 120 && w.samples == 1000);
    CHECK(isfinite(w.first_loss) && w.first_loss > 1.0);
    CHECK(res.stopped_early == 1);
    CHECK(w.evals == 1 && w.eval_step == 3 && w.eval_acc == res.eval_accuracy);
    ct_context_free(ctx);
}

/* on_eval returning 1 after the first epoch: one epoch of 60 steps instead of 3. */
TEST(eval_callback_stops) {
    if (!have("data/mnist")) return;
    ct_context *ctx = test_ctx(-1, 1);
    ct_recipe r;
    small_recipe(&r);
    r.epochs = 3;
    watch w = {.stop_at_eval = 1};
    ct_train_result res;
    CHECK_OK(ctx, run(ctx, &r, NULL, &w, &res));
    CHECK(res.steps == 60 && w.steps == 60 && w.evals == 1 && res.stopped_early == 1);
    CHECK(res.eval_accuracy > 0.8);
    ct_context_free(ctx);
}

/* The MLP of src/models/mlp.c, built by the program (as python/ctrain's graph builder does). */
static ct_status build_mlp(void *user, ct_graph *g, ct_node x, int64_t n_classes, ct_node *logits) {
    const int64_t *hidden = user;
    ct_node h, w, b;
    CT_TRY_T(ct_flatten(g, x, &h));
    int64_t in = 784;
    for (int i = 0; i < 2; i++) {
        int64_t out = i == 0 ? hidden[0] : n_classes;
        char name[32];
        snprintf(name, sizeof name, "fc%d.weight", i + 1);
        CT_TRY_T(ct_param(g, name, 2, (int64_t[]){out, in}, CT_INIT_KAIMING_UNIFORM, in, &w));
        snprintf(name, sizeof name, "fc%d.bias", i + 1);
        CT_TRY_T(ct_param(g, name, 1, (int64_t[]){out}, CT_INIT_KAIMING_UNIFORM, in, &b));
        CT_TRY_T(ct_linear(g, h, w, b, &h));
        if (i == 0) CT_TRY_T(ct_relu(g, h, &h));
        in = out;
    }
    *logits = h;
    return CT_OK;
}

/* A custom model equal to the built-in one trains to the same evaluation bit for bit; another differs;
 * a text recipe is refused. */
TEST(custom_model_matches_builtin) {
    if (!have("data/mnist")) return;
    ct_context *ctx = test_ctx(-1, 1);
    ct_recipe r;
    small_recipe(&r);
    r.max_steps = 5;
    watch w0 = {0}, w1 = {0}, w2 = {0};
    ct_train_result ref, got, other;
    CHECK_OK(ctx, run(ctx, &r, NULL, &w0, &ref));
    ct_context_free(ctx);
    ctx = test_ctx(-1, 1);
    int64_t h16 = 16, h17 = 17;
    ct_task *t = NULL;
    CHECK_OK(ctx, ct_task_image_custom(ctx, &r, build_mlp, &h16, &t));
    CHECK_OK(ctx, run(ctx, &r, t, &w1, &got));
    ct_task_free(t);
    CHECK(got.steps == 5 && w1.first_loss == w0.first_loss);
    CHECK_MSG(got.eval_loss == ref.eval_loss && got.eval_accuracy == ref.eval_accuracy, "%.9g vs %.9g",
              got.eval_loss, ref.eval_loss);
    CHECK_OK(ctx, ct_task_image_custom(ctx, &r, build_mlp, &h17, &t));
    CHECK_OK(ctx, run(ctx, &r, t, &w2, &other));
    ct_task_free(t);
    CHECK(other.eval_loss != ref.eval_loss);
    ct_recipe rt;
    ct_recipe_default(&rt);
    rt.model = CT_MODEL_GPT;
    CHECK(ct_task_image_custom(ctx, &rt, build_mlp, &h16, &t) == CT_E_CONFIG && t == NULL);
    CHECK(strstr(ct_context_last_error(ctx), "text model") != NULL);
    ct_context_free(ctx);
}

TEST_MAIN(T(step_callback_stops), T(eval_callback_stops), T(custom_model_matches_builtin))
