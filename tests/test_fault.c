/* tests/test_fault.c - NaN and divergence through ct_train: a small task of
 * synthetic data (an MLP on 8 features, 4 classes, 12 batches an epoch)
 * whose next_batch can put a NaN into one step's batch.
 *   - FP32: the run stops with CT_E_NONFINITE and the message names the step
 *     (1-based, as the progress display and the metrics log count steps);
 *   - detect_anomaly: the message names the op that first made the NaN;
 *   - FP16 with the dynamic scaler: that one step is skipped (the weights
 *     after it are bit for bit those before it, one overflow in the metrics
 *     log at that step), the next step trains again, the run finishes;
 *   - a learning rate that makes FP32 training diverge: the error names the
 *     step after the last one that completed (the metrics log's last step + 1).
 * The tasks' data never depends on the run, so every run is the same. */
#include <math.h>
#include <stdint.h>

#include "test.h"

#define FEAT 8
#define CLASSES 4
#define BATCHES 12

#define TRY(expr)                                                                        \
    do {                                                                                 \
        ct_status s_ = (expr);                                                           \
        if (s_ != CT_OK) return s_;                                                      \
    } while (0)

typedef struct {
    ct_node x, y;
    ct_tensor tx, ty;
    ct_plan *plan;
    int64_t nan_step;    /* 0-based optimizer step whose batch holds a NaN; -1: none */
    int64_t steps_done;  /* the step hook's count                                   */
    float *snap;         /* the weights after each step (step hook), and before it */
    float *prev;
    size_t n_par;
    int64_t unchanged_at; /* 1-based step after which the weights were unchanged; -1 */
    int64_t n_unchanged;
    int nonfinite_params; /* evaluate found a non-finite weight                      */
    double eval_loss;     /* what evaluate reports                                    */
} syn_task;

static ct_status syn_build(ct_task *t, ct_graph *g, const ct_recipe *r, ct_node *loss, int *n_keep, ct_node *keep) {
    syn_task *st = t->impl;
    ct_node logits;
    TRY(ct_input(g, "features", CT_F32, 2, (int64_t[]){r->batch_size, FEAT}, &st->x));
    TRY(ct_input(g, "labels", CT_I32, 1, (int64_t[]){r->batch_size}, &st->y));
    TRY(ct_model_mlp(g, st->x, 1, (int64_t[]){16}, CLASSES, CT_ACT_RELU, 0.0f, &logits));
    TRY(ct_cross_entropy(g, logits, st->y, 0.0f, -100, loss));
    keep[0] = logits;
    *n_keep = 1;
    return CT_OK;
}

static ct_status syn_bind(ct_task *t, ct_plan *p) {
    syn_task *st = t->impl;
    st->plan = p;
    TRY(ct_plan_tensor(p, st->x, &st->tx));
    TRY(ct_plan_tensor(p, st->y, &st->ty));
    float *par;
    ct_plan_param_arena(p, &par, NULL, &st->n_par);
    st->snap = calloc(st->n_par + 1, sizeof(float));
    st->prev = calloc(st->n_par + 1, sizeof(float));
    if (!st->snap || !st->prev) return CT_E_OOM;
    memcpy(st->snap, par, st->n_par * sizeof(float));
    return CT_OK;
}

static int64_t syn_batches(ct_task *t) {
    (void)t;
    return BATCHES;
}

static ct_status syn_start_epoch(ct_task *t, int64_t epoch, int64_t skip) {
    (void)t, (void)epoch, (void)skip;
    return CT_OK;
}

/* Features in [-1, 1] from the step and the position; the label is the
 * sign pattern of the first two features, so the task is learnable. */
static ct_status syn_next(ct_task *t, int64_t step, int micro, int64_t *rows) {
    syn_task *st = t->impl;
    (void)micro;
    const int64_t B = st->tx.shape[0];
    float *x = st->tx.data;
    int32_t *y = st->ty.data;
    for (int64_t i = 0; i < B; i++) {
        for (int j = 0; j < FEAT; j++) x[i * FEAT + j] = sinf(0.37f * (float)((step * B + i) * FEAT + j) + 0.5f);
        y[i] = (x[i * FEAT] > 0) * 2 + (x[i * FEAT + 1] > 0);
    }
    if (step == st->nan_step) x[3 * FEAT + 5] = NAN;
    *rows = B;
    return CT_OK;
}

static int64_t syn_correct(ct_task *t, int64_t rows) {
    (void)t, (void)rows;
    return 0;
}

static ct_status syn_evaluate(ct_task *t, ct_task_eval *out) {
    syn_task *st = t->impl;
    float *par;
    size_t n;
    ct_plan_param_arena(st->plan, &par, NULL, &n);
    for (size_t i = 0; i < n; i++) st->nonfinite_params |= !isfinite(par[i]);
    out->loss = st->eval_loss;
    out->accuracy = 0.0;
    out->detail[0] = 0;
    return CT_OK;
}

static void syn_describe(ct_task *t, const ct_plan_stats *ps, char *buf, size_t len) {
    (void)t, (void)ps;
    snprintf(buf, len, "synthetic");
}

/* After each optimizer step: was it a no-op on the weights? */
static void syn_step_hook(void *user, int64_t step) {
    ct_task *t = user;
    syn_task *st = t->impl;
    float *par;
    size_t n;
    ct_plan_param_arena(st->plan, &par, NULL, &n);
    memcpy(st->prev, st->snap, n * sizeof(float));
    memcpy(st->snap, par, n * sizeof(float));
    if (!memcmp(st->prev, st->snap, n * sizeof(float))) {
        if (st->unchanged_at < 0) st->unchanged_at = step;
        st->n_unchanged++;
    }
    st->steps_done = step;
}

typedef struct {
    ct_task t;
    syn_task st;
} syn;

static void syn_init(syn *s, int64_t nan_step) {
    memset(s, 0, sizeof *s);
    s->t.name = "synthetic";
    s->t.epochs_from_data = 1;
    s->t.eval_split = "test";
    s->t.unit = "samples";
    s->t.unit_per_row = 1;
    s->t.impl = &s->st;
    s->t.build = syn_build;
    s->t.bind = syn_bind;
    s->t.batches_per_epoch = syn_batches;
    s->t.start_epoch = syn_start_epoch;
    s->t.next_batch = syn_next;
    s->t.batch_correct = syn_correct;
    s->t.evaluate = syn_evaluate;
    s->t.describe = syn_describe;
    s->st.nan_step = nan_step;
    s->st.unchanged_at = -1;
}

static void syn_fini(syn *s) {
    free(s->st.snap);
    free(s->st.prev);
}

/* Runs the task with the recipe "batch_size 8, threads 1" plus `sets`
 * ("key=value" strings, NULL-terminated). Returns ct_train's status; the
 * message is copied to msg. */
static FILE *g_out; /* the run's progress display and summary (NULL: silent) */

static ct_status run(syn *s, const char *const *sets, const char *metrics, ct_train_result *res, char *msg,
                     size_t msg_len) {
    ct_recipe r;
    ct_recipe_default(&r);
    ct_context *c0 = test_ctx(-1, 1);
    ct_status st = ct_recipe_set(c0, &r, "batch_size", "8");
    if (st == CT_OK) st = ct_recipe_set(c0, &r, "threads", "1");
    for (int i = 0; st == CT_OK && sets && sets[i]; i++) {
        char kv[128];
        snprintf(kv, sizeof kv, "%s", sets[i]);
        char *eq = strchr(kv, '=');
        if (!eq) {
            st = CT_E_INVALID_ARG;
            break;
        }
        *eq = 0;
        st = ct_recipe_set(c0, &r, kv, eq + 1);
    }
    snprintf(msg, msg_len, "%s", ct_context_last_error(c0));
    ct_context_free(c0);
    if (st != CT_OK) return st;
    ct_context *ctx = NULL;
    if ((st = ct_train_context_create(&r, &ctx)) != CT_OK) return st;
    ct_train_opts o;
    ct_train_opts_default(&o);
    o.out = g_out;
    o.task = &s->t;
    o.step_hook = syn_step_hook;
    o.hook_user = &s->t;
    o.metrics_path = metrics;
    st = ct_train(ctx, &r, &o, res);
    snprintf(msg, msg_len, "%s", st == CT_OK ? "" : ct_context_last_error(ctx));
    ct_context_free(ctx);
    return st;
}

/* Lines of a metrics log holding both needles (needle2 may be NULL). */
static int count_lines(const char *path, const char *needle1, const char *needle2) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle1) && (!needle2 || strstr(line, needle2));
    fclose(f);
    return n;
}

/* The largest "step" of the log's step lines. */
static int64_t last_logged_step(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int64_t last = -1;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "{\"type\":\"step\",\"step\":");
        if (p) last = strtoll(p + strlen("{\"type\":\"step\",\"step\":"), NULL, 10);
    }
    fclose(f);
    return last;
}

/* NaN in the batch of the 5th step (0-based 4), FP32: the run stops there,
 * and the message names step 5, counting from 1 as the display, the metrics
 * log and the checkpoints do. */
TEST(nan_in_data_fp32_stops_naming_the_step) {
    syn s;
    syn_init(&s, 4);
    ct_train_result res;
    char msg[1024];
    ct_status st = run(&s, (const char *const[]){"epochs=2", NULL}, NULL, &res, msg, sizeof msg);
    syn_fini(&s);
    CHECK_MSG(st == CT_E_NONFINITE, "%s: %s", ct_status_name(st), msg);
    CHECK_MSG(s.st.steps_done == 4, "%lld steps done before the NaN batch", (long long)s.st.steps_done);
    CHECK_MSG(strstr(msg, "loss became nan") || strstr(msg, "loss became -nan"), "%s", msg);
    CHECK_MSG(strstr(msg, "at step 5 "), "the NaN was in the batch of step 5 (4 steps were done): %s", msg);
}

/* The same NaN with detect_anomaly: the first op whose output holds it is
 * named, with its node (the first linear layer reads the features), the
 * element (row 3 of the batch: 3 x 16 hidden units) and its inputs. */
TEST(nan_in_data_anomaly_mode_names_the_op) {
    syn s;
    syn_init(&s, 4);
    ct_train_result res;
    char msg[1024];
    ct_status st = run(&s, (const char *const[]){"epochs=2", "detect_anomaly=true", NULL}, NULL, &res, msg, sizeof msg);
    syn_fini(&s);
    CHECK_MSG(st == CT_E_NONFINITE, "%s: %s", ct_status_name(st), msg);
    CHECK_MSG(s.st.steps_done == 4, "%lld steps done before the NaN batch", (long long)s.st.steps_done);
    CHECK_MSG(strstr(msg, "anomaly: op '") && strstr(msg, "(node 'fc1'") && strstr(msg, "forward) produced NaN at element 48 of [8, 16]") &&
                  strstr(msg, "'features' [8, 8]") && strstr(msg, "1 non-finite"),
              "%s", msg);
}

/* FP16 with the dynamic loss scaler: the NaN step is skipped, not applied,
 * and training goes on; the metrics log has one overflow, at step 5. */
TEST(nan_in_data_fp16_scaler_skips_that_step) {
    test_tmp_make("fault");
    const char *mp = test_tmp_path("metrics.jsonl");
    syn s;
    syn_init(&s, 4);
    ct_train_result res;
    char msg[1024];
    ct_status st = run(&s, (const char *const[]){"epochs=2", "precision=fp16", NULL}, mp, &res, msg, sizeof msg);
    syn_fini(&s);
    CHECK_MSG(st == CT_OK, "%s: %s", ct_status_name(st), msg);
    CHECK_MSG(res.steps == 2 * BATCHES, "%lld steps", (long long)res.steps);
    CHECK_MSG(s.st.n_unchanged == 1 && s.st.unchanged_at == 5,
              "the weights stayed the same after %lld steps, first at step %lld (want 1, at step 5)",
              (long long)s.st.n_unchanged, (long long)s.st.unchanged_at);
    CHECK(!s.st.nonfinite_params);
    int overflows = count_lines(mp, "\"event\":\"overflow\"", NULL);
    CHECK_MSG(overflows == 1, "%d overflow events in %s", overflows, mp);
    CHECK(count_lines(mp, "\"type\":\"amp\",\"step\":5,\"event\":\"overflow\"", "\"first_nonfinite\":\"fc1.weight\"") == 1);
    CHECK(count_lines(mp, "\"type\":\"amp\",\"step\":5,\"event\":\"backoff\"", NULL) == 1);
    CHECK_MSG(res.skipped_steps == 1 && res.zero_grad_steps == 0, "skipped %lld, zero-gradient steps %lld",
              (long long)res.skipped_steps, (long long)res.zero_grad_steps);
}

/* The summary reports what went wrong quietly: the step skipped (naming the
 * tensor) and an evaluation loss that is not finite. */
TEST(summary_reports_skips_and_a_nonfinite_eval) {
    syn s;
    syn_init(&s, 4);
    s.st.eval_loss = NAN;
    ct_train_result res;
    char msg[1024], text[8192] = "";
    g_out = tmpfile();
    CHECK(g_out != NULL);
    ct_status st = run(&s, (const char *const[]){"epochs=1", "precision=fp16", NULL}, NULL, &res, msg, sizeof msg);
    if (g_out) {
        rewind(g_out);
        size_t n = fread(text, 1, sizeof text - 1, g_out);
        text[n] = 0;
        fclose(g_out);
        g_out = NULL;
    }
    syn_fini(&s);
    CHECK_MSG(st == CT_OK, "%s: %s", ct_status_name(st), msg);
    CHECK_MSG(strstr(text, "loss scaler: 1 of 12 steps skipped (inf/NaN gradients; the first in 'fc1.weight' at step 5)"),
              "%s", text);
    CHECK_MSG(strstr(text, "warning: the last evaluation's loss is nan"), "%s", text);
    CHECK_MSG(!strstr(text, "most steps"), "%s", text);
}

/* A learning rate that makes FP32 training blow up: the run stops with
 * CT_E_NONFINITE before its end, and the message names the step whose loss
 * was not finite or diverged (divergence_factor): the one after the last step
 * the metrics log recorded. */
TEST(huge_lr_fp32_stops_naming_the_step) {
    test_tmp_make("fault");
    const char *mp = test_tmp_path("metrics.jsonl");
    syn s;
    syn_init(&s, -1);
    ct_train_result res;
    char msg[1024];
    ct_status st = run(&s,
                       (const char *const[]){"epochs=20", "optimizer.name=adamw", "optimizer.lr=1000",
                                             "schedule=constant", "log_every=1", NULL},
                       mp, &res, msg, sizeof msg);
    syn_fini(&s);
    CHECK_MSG(st == CT_E_NONFINITE, "%s: %s", ct_status_name(st), msg);
    int64_t last = last_logged_step(mp);
    CHECK_MSG(last == s.st.steps_done && last > 0 && last < 20 * BATCHES, "last logged step %lld, %lld steps done",
              (long long)last, (long long)s.st.steps_done);
    char want[64];
    snprintf(want, sizeof want, "at step %lld ", (long long)last + 1);
    CHECK_MSG(strstr(msg, want), "%lld steps completed (metrics log), so the failing step is %lld: %s", (long long)last,
              (long long)last + 1, msg);
}

TEST_MAIN(T(nan_in_data_fp32_stops_naming_the_step),
          T(nan_in_data_anomaly_mode_names_the_op), T(nan_in_data_fp16_scaler_skips_that_step),
          T(summary_reports_skips_and_a_nonfinite_eval),
          T(huge_lr_fp32_stops_naming_the_step))
