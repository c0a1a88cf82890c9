/* tools/train.c - `ctrain train`: recipe + flags -> dataset, model graph,
 * plan, optimizer; the training loop with a live progress display, LR
 * schedule, per-epoch test evaluation and a final summary. */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "ctrain/ctrain.h"
#include "ctrain/metrics.h"
#include <errno.h>
#include <sys/stat.h>

static void train_usage(FILE *f) {
    fprintf(f,
            "usage: ctrain train [--recipe FILE] [options]\n"
            "\n"
            "Trains a model on an image dataset and evaluates it on the test split, or a\n"
            "language model (--model gpt|bert, dataset moby-dick; see docs/recipes.md) for\n"
            "max_steps steps with validation loss / perplexity every eval_every steps.\n"
            "The recipe file (JSON) is applied first, then the flags; docs/recipes.md\n"
            "lists every key. Defaults: MLP 784-1024-1024-10 on MNIST, AdamW, cosine LR.\n"
            "\n"
            "options:\n"
            "  --recipe FILE          JSON recipe (e.g. recipes/mnist_mlp.json)\n"
            "  --model mlp|cnn|gpt|bert   --hidden 1024,1024     --channels 32,64\n"
            "  --dataset mnist|fashion-mnist                 --data-dir DIR\n"
            "  --epochs N             --batch-size N         --max-steps N\n"
            "  --optimizer NAME (sgd|adamw|adam|rmsprop|adagrad|lamb)   --lr X   --weight-decay X\n"
            "  --momentum X           --schedule NAME (constant|cosine|step|multistep|...)\n"
            "  --dropout P            --label-smoothing E    --seed N\n"
            "  --threads N            --set KEY=VALUE (any recipe key)\n"
            "  --precision P          fp32|bf16|fp16|bf16-pure|fp16-pure (mixed precision; fp16 uses a dynamic\n"
            "                         loss scaler, see loss_scale.* in docs/recipes.md)\n"
            "  --keep-fp32 LIST       layer names or op kinds that stay FP32, e.g. fc2,maxpool2d\n"
            "  --save-dir DIR         write checkpoints to DIR/step-NNNNNN (DIR/latest names the newest)\n"
            "  --save-every N         a checkpoint every N steps (0: only at the end)   --keep K (default 3, 0: all)\n"
            "  --resume DIR           continue a run from DIR (a save dir or a step dir) bit for bit, with the\n"
            "                         recipe stored in the checkpoint; flags still override its keys\n"
            "  --metrics FILE         write a JSON-lines metrics log (one line per step and evaluation)\n"
            "  --profile DIR          profile steps 4-13: write DIR/trace.json (Chrome trace) and print the doctor's verdict\n"
            "  --report DIR           write DIR/metrics.jsonl and, at the end, DIR/report.html (docs/report.md)\n"
            "  --quiet                only the per-epoch lines and the summary\n"
            "  -h, --help             this message\n");
}

double cli_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *cli_msg(const char *e) {
    const char *c = e[0] == 'E' ? strstr(e, ": ") : NULL;
    return c && c - e < 40 ? c + 2 : e;
}

int cli_fail(ct_context *ctx, ct_status s, const char *what) {
    fprintf(stderr, "ctrain: error: %s\n", ctx ? ct_context_last_error(ctx) : what);
    if (ctx && !ct_context_last_error(ctx)[0]) fprintf(stderr, "ctrain: error: %s (%s)\n", what, ct_status_name(s));
    fprintf(stderr, "ctrain: hint: %s\n", ct_status_advice(s));
    return 1;
}

/* flag -> recipe key */
static const char *const k_flags[][2] = {
    {"--model", "model"}, {"--hidden", "hidden"}, {"--channels", "channels"}, {"--dataset", "dataset"},
    {"--data-dir", "data_dir"}, {"--epochs", "epochs"}, {"--batch-size", "batch_size"},
    {"--max-steps", "max_steps"}, {"--optimizer", "optimizer.name"}, {"--lr", "optimizer.lr"},
    {"--weight-decay", "optimizer.weight_decay"}, {"--momentum", "optimizer.momentum"},
    {"--schedule", "schedule"}, {"--dropout", "dropout"}, {"--label-smoothing", "label_smoothing"},
    {"--seed", "seed"}, {"--threads", "threads"},
    {"--save-dir", "save_dir"}, {"--save-every", "save_every"}, {"--keep", "keep_last"},
    {"--metrics", "metrics_file"}, {"--profile", "profile_dir"}, {"--precision", "precision"},
    {"--keep-fp32", "keep_fp32"},
};

/* The recipe's schedule as a library schedule over `total` steps (lengths
 * left at 0 span the run after warmup). "constant" and "cosine" keep their
 * historical meaning: warmup ramp lr*(step+1)/warmup_steps (warmup_start_factor
 * 0), then constant or cosine down to min_lr at the end of the run. */
ct_status cli_sched_from_recipe(ct_context *ctx, const ct_recipe *r, int64_t total, ct_schedule **out) {
    ct_schedule_kind kind;
    ct_status s = ct_schedule_kind_parse(ctx, r->schedule, &kind);
    if (s != CT_OK) return s;
    int64_t w = r->warmup_steps, rest = total - w > 1 ? total - w : 1;
    if (kind == CT_SCHED_COSINE && total - w < 1) kind = CT_SCHED_CONSTANT;
    ct_schedule_opts o;
    ct_schedule_opts_default(&o, kind, r->optim.lr);
    o.warmup_steps = kind == CT_SCHED_ONE_CYCLE || kind == CT_SCHED_PLATEAU ? 0 : w;
    if (w > 0 && r->warmup_start_factor == 0) {
        o.warmup_start_factor = 1.0 / (double)w;
        o.warmup_iters = w - 1;
    } else if (w > 0) {
        o.warmup_start_factor = r->warmup_start_factor;
    }
    o.min_lr = r->min_lr;
    o.gamma = r->gamma;
    o.step_size = r->step_size;
    o.n_milestones = r->n_milestones;
    for (int i = 0; i < r->n_milestones && i < CT_SCHED_MAX_MILESTONES; i++) o.milestones[i] = r->milestones[i];
    o.t_max = rest;
    o.t_0 = r->t_0;
    o.t_mult = r->t_mult;
    o.start_factor = 1.0;
    o.end_factor = r->end_factor;
    o.total_iters = rest;
    o.power = r->power;
    o.max_lr = r->optim.lr;
    o.total_steps = total;
    o.pct_start = r->pct_start;
    o.anneal_linear = !strcmp(r->anneal, "linear");
    o.div_factor = r->div_factor;
    o.final_div_factor = r->final_div_factor;
    o.rsqrt_timescale = w;
    o.factor = r->plateau_factor;
    o.patience = r->plateau_patience;
    o.threshold = r->plateau_threshold;
    o.cooldown = r->plateau_cooldown;
    return ct_schedule_create(ctx, &o, out);
}

/* Logits as FP32: a low-precision plan stores BF16/FP16 logits, converted
 * into buf (B*C floats). */
static const float *logits_f32(ct_context *ctx, const ct_tensor *tl, float *buf) {
    if (tl->dtype == CT_F32) return tl->data;
    ct_tensor f = ct_tensor_make(buf, CT_F32, tl->ndim, tl->shape);
    return ct_convert(ctx, tl, &f) == CT_OK ? buf : tl->data;
}

static int64_t argmax_correct(const float *logits, const int32_t *labels, int64_t n, int64_t c) {
    int64_t ok = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t best = 0;
        for (int64_t j = 1; j < c; j++)
            if (logits[i * c + j] > logits[i * c + best]) best = j;
        ok += best == labels[i];
    }
    return ok;
}

void cli_fmt_time(double s, char *buf, size_t len) {
    if (!(s >= 0) || s > 1e7) s = 0;
    int t = (int)(s + 0.5);
    if (t >= 3600) snprintf(buf, len, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, len, "%d:%02d", t / 60, t % 60);
}

typedef struct {
    ct_plan *plan;
    ct_node x, y, logits, loss;
    int64_t batch, n_classes;
    float *logits_buf; /* FP32 copy of low-precision logits (B*C) */
} model_t;

/* Evaluates on a dataset in eval mode; the last partial batch is padded with
 * ignored labels (-100) so it does not count. */
static ct_status evaluate(ct_context *ctx, model_t *m, const ct_dataset *ds, double *loss, double *acc) {
    ct_loader *ld;
    ct_status s = ct_loader_create(ctx, ds, m->batch, 0, 0, 0, &ld);
    if (s != CT_OK) return s;
    ct_tensor tx, ty, tl;
    ct_plan_tensor(m->plan, m->x, &tx);
    ct_plan_tensor(m->plan, m->y, &ty);
    ct_plan_tensor(m->plan, m->logits, &tl);
    ct_loader_start_epoch(ld, 0);
    double tot_loss = 0;
    int64_t correct = 0, seen = 0, got;
    while ((s = ct_loader_next(ld, tx.data, ty.data, &got)) == CT_OK && got > 0) {
        int32_t *lab = ty.data;
        for (int64_t i = got; i < m->batch; i++) lab[i] = -100;
        if ((s = ct_plan_forward(m->plan, 0)) != CT_OK) break;
        float l;
        ct_plan_loss(m->plan, &l);
        tot_loss += (double)l * (double)got;
        correct += argmax_correct(logits_f32(ctx, &tl, m->logits_buf), lab, got, m->n_classes);
        seen += got;
    }
    ct_loader_free(ld);
    if (s != CT_OK) return s;
    *loss = seen ? tot_loss / (double)seen : 0;
    *acc = seen ? (double)correct / (double)seen : 0;
    return CT_OK;
}

static ct_status build_model(ct_context *ctx, const ct_recipe *r, const ct_dataset *ds, model_t *m) {
    ct_graph *g;
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    m->batch = r->batch_size;
    m->n_classes = ds->n_classes;
    int64_t xs[4] = {r->batch_size, ds->c, ds->h, ds->w};
    if ((s = ct_input(g, "images", CT_F32, 4, xs, &m->x)) == CT_OK &&
        (s = ct_input(g, "labels", CT_I32, 1, (int64_t[]){r->batch_size}, &m->y)) == CT_OK) {
        if (!strcmp(r->model, "mlp")) s = ct_model_mlp(g, m->x, r->n_hidden, r->hidden, ds->n_classes, CT_ACT_RELU, r->dropout, &m->logits);
        else s = ct_model_cnn(g, m->x, r->n_channels, r->channels, ds->n_classes, &m->logits);
    }
    if (s == CT_OK) s = ct_cross_entropy(g, m->logits, m->y, r->label_smoothing, -100, &m->loss);
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    co.accumulate_grads = r->accumulate_steps > 1;
    co.recompute_every = r->recompute_every;
    co.recompute_ops = !strcmp(r->recompute_ops, "cheap") ? CT_RECOMPUTE_CHEAP
                       : !strcmp(r->recompute_ops, "all") ? CT_RECOMPUTE_ALL
                                                          : 0;
    if (s == CT_OK) s = ct_precision_parse(ctx, r->precision, &co.precision);
    co.keep_fp32 = r->keep_fp32;
    if (s == CT_OK && !(m->logits_buf = malloc(sizeof(float) * (size_t)(r->batch_size * ds->n_classes))))
        s = CT_E_OOM;
    if (s == CT_OK) s = ct_compile(g, m->loss, 1, &m->logits, &co, &m->plan);
    /* "loss / accumulation_steps": each micro-batch's gradient is added into the arena */
    if (s == CT_OK && r->accumulate_steps > 1) s = ct_plan_set_loss_scale(m->plan, 1.0f / (float)r->accumulate_steps);
    if (s == CT_OK && r->detect_anomaly) ct_plan_set_anomaly(m->plan, 1);
    ct_graph_free(g);
    return s;
}

/* The loss scaler the recipe asks for (NULL: none). auto: dynamic for
 * fp16, static 1024 for fp16-pure, none for fp32/bf16. */
void cli_print_precision(ct_context *ctx, const ct_recipe *r, const ct_plan *plan) {
    if (!strcmp(r->precision, "fp32")) return;
    printf("  precision %s: %d casts, loss scaling %s%s%s\n", r->precision, ct_plan_num_casts(plan), cli_scale_mode(r),
           r->keep_fp32[0] ? ", kept in fp32: " : "", r->keep_fp32);
    const ct_cpu_features *f = ct_context_cpu(ctx);
    int bf16 = !strncmp(r->precision, "bf16", 4);
    int hw = bf16 ? (f->amx_bf16 && f->amx_permitted) || (f->avx512_bf16 && f->os_avx512) : f->avx512_fp16 && f->os_avx512;
    if (!hw)
        printf("  note: this CPU has no %s matrix unit (%s): %s saves activation memory and gives %s numerics, but "
               "every op computes in FP32 on converted copies, so steps are slower than fp32\n",
               bf16 ? "BF16" : "FP16", bf16 ? "AMX-BF16 / AVX512-BF16" : "AVX512-FP16", r->precision,
               bf16 ? "BF16" : "FP16");
}

const char *cli_scale_mode(const ct_recipe *r) {
    if (strcmp(r->scale_mode, "auto")) return r->scale_mode;
    return !strcmp(r->precision, "fp16") ? "dynamic" : !strcmp(r->precision, "fp16-pure") ? "static" : "off";
}

ct_status cli_scaler_from_recipe(ct_context *ctx, const ct_recipe *r, ct_scaler **out) {
    *out = NULL;
    const char *mode = cli_scale_mode(r);
    if (!strcmp(mode, "off")) return CT_OK;
    ct_scaler_opts o;
    ct_scaler_opts_default(&o);
    o.dynamic = !strcmp(mode, "dynamic");
    o.init_scale = r->scale_init > 0 ? r->scale_init : o.dynamic ? 65536.0f : 1024.0f;
    o.growth_factor = r->scale_growth_factor;
    o.backoff_factor = r->scale_backoff_factor;
    o.growth_interval = r->scale_growth_interval;
    o.hysteresis = r->scale_hysteresis;
    o.min_scale = r->scale_min;
    o.max_scale = r->scale_max > o.init_scale ? r->scale_max : o.init_scale;
    o.floor_patience = r->scale_floor_patience;
    o.floor_policy = !strcmp(r->scale_floor, "stop") ? CT_SCALER_FLOOR_STOP : CT_SCALER_FLOOR_ERROR;
    return ct_scaler_create(ctx, &o, out);
}

/* See cli.h. */
ct_status cli_optimizer_step(const ct_recipe *r, ct_plan *plan, ct_optimizer *opt, ct_scaler *scaler,
                             ct_profiler *prof, float lr, float *gnorm, int *stop) {
    ct_status s;
    int overflow = 0, bad_param = -1;
    *gnorm = 0.0f;
    /* loss scaling: unscale + inf/NaN check in one pass, then clip and step, or skip */
    if (scaler && (s = ct_scaler_unscale(scaler, plan, &overflow, &bad_param)) != CT_OK) return s;
    if (!overflow) {
        if (r->clip_grad_norm > 0.0f && (s = ct_clip_grad_norm(plan, r->clip_grad_norm, 2.0f, gnorm)) != CT_OK)
            return s;
        if (r->clip_grad_value > 0.0f && (s = ct_clip_grad_value(plan, r->clip_grad_value)) != CT_OK) return s;
        if ((s = ct_optimizer_set_lr(opt, lr)) != CT_OK || (s = ct_optimizer_step(opt)) != CT_OK) return s;
    }
    if (!scaler) return CT_OK;
    const float scale_before = ct_scaler_scale(scaler);
    double ts = prof ? ct_profiler_now_us() : 0;
    if ((s = ct_scaler_update(scaler, plan, overflow, bad_param)) != CT_OK) return s;
    if (prof && (overflow || ct_scaler_scale(scaler) != scale_before)) { /* the scale's story in the trace */
        char args[128];
        const char *pname = "";
        if (bad_param >= 0) ct_plan_param_info(plan, bad_param, &pname, NULL, NULL);
        snprintf(args, sizeof args, "{\"scale\": %g, \"first_nonfinite\": \"%.60s\"}", (double)ct_scaler_scale(scaler),
                 pname);
        ct_profiler_event(prof, overflow ? "overflow: update skipped" : "loss scale grown", "amp", ts,
                          ct_profiler_now_us(), args);
    }
    if (ct_scaler_should_stop(scaler)) {
        printf("\n  loss scaler: the scale stayed at loss_scale.min_scale %g for %d overflows in a row; stopping "
               "(loss_scale.floor = stop). Check the data and the learning rate, or train in bf16\n",
               (double)r->scale_min, r->scale_floor_patience);
        *stop = 1;
    }
    return CT_OK;
}

/* ---- checkpoints -------------------------------------------------------------------------- */

/* An error found by the CLI itself, printed like the library's. Returns 1. */
int cli_error(ct_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ctrain: error: %s %s: ", ct_status_code(s), ct_status_name(s));
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nctrain: hint: %s\n", ct_status_advice(s));
    return 1;
}

/* CTRAIN_TEST_CRASH=PHASE:STEP kills the process with SIGKILL at one point
 * (tests/resume_test.sh): PHASE "step" right after that optimizer step, or a
 * phase of the save of that step's checkpoint ("written": the temporary
 * directory is complete, "renamed": in place but `latest` not updated,
 * "latest": before old checkpoints are deleted). */
static void crash_point(void *user, const char *phase, int64_t step) {
    (void)user;
    const char *e = getenv("CTRAIN_TEST_CRASH");
    const char *colon = e ? strchr(e, ':') : NULL;
    if (!colon || (size_t)(colon - e) != strlen(phase) || strncmp(e, phase, strlen(phase))) return;
    if (strtoll(colon + 1, NULL, 10) != step) return;
    fflush(stdout);
    raise(SIGKILL);
}

static void model_text(const ct_recipe *r, char *buf, size_t len) {
    int mlp = !strcmp(r->model, "mlp");
    int n = mlp ? r->n_hidden : r->n_channels;
    const int64_t *v = mlp ? r->hidden : r->channels;
    size_t o = (size_t)snprintf(buf, len, "%s %s [", r->model, mlp ? "hidden" : "channels");
    for (int i = 0; i < n && o < len; i++) o += (size_t)snprintf(buf + o, len - o, i ? ", %lld" : "%lld", (long long)v[i]);
    if (o < len) snprintf(buf + o, len - o, "] on %s", r->dataset);
}

/* Writes a checkpoint of the run; st holds the position and progress.
 * Returns the exit code on failure (the error printed), 0 on success. */
static int save_checkpoint(ct_context *ctx, const ct_recipe *r, model_t *m, ct_optimizer *opt,
                           const ct_schedule *sched, const ct_early_stop *es, const ct_scaler *scaler,
                           ct_train_state *st) {
    st->has_scaler = scaler != NULL;
    if (scaler) ct_scaler_get_state(scaler, &st->scaler);
    st->has_schedule = 1;
    ct_schedule_get_state(sched, &st->schedule);
    st->has_early_stop = 1;
    st->early_stop = *es;
    int n = ct_recipe_to_json_full(r, st->recipe_json, sizeof st->recipe_json);
    if (n < 0 || (size_t)n >= sizeof st->recipe_json)
        return cli_error(CT_E_CONFIG, "checkpoint: the recipe does not fit in %zu bytes of JSON",
                         sizeof st->recipe_json);
    ct_checkpoint_opts o;
    ct_checkpoint_opts_default(&o);
    o.keep_last = r->keep_last;
    o.hook = crash_point;
    ct_status s = ct_checkpoint_save_ex(ctx, r->save_dir, m->plan, opt, st, &o);
    if (s != CT_OK) return cli_fail(ctx, s, "saving a checkpoint failed");
    size_t dl = strlen(r->save_dir);
    printf("  checkpoint: step %lld -> %s%sstep-%06lld%s\n", (long long)st->step, r->save_dir,
           dl && r->save_dir[dl - 1] == '/' ? "" : "/", (long long)st->step, st->finished ? " (end of run)" : "");
    fflush(stdout);
    return 0;
}

/* ---- profiler (--profile DIR): a failure only warns, training goes on ---------------------- */

static ct_profiler *profile_start(ct_context *ctx, const char *dir, ct_plan *plan) {
    ct_profiler_opts po;
    ct_profiler_opts_default(&po);
    po.skip_steps = 1;
    po.warmup_steps = 2;
    po.record_steps = 10;
    ct_profiler *p = NULL;
    if (ct_profiler_create(ctx, &po, &p) != CT_OK || ct_plan_set_profiler(plan, p) != CT_OK) {
        fprintf(stderr, "ctrain: warning: profiler: %s; training without it\n", ct_context_last_error(ctx));
        ct_profiler_free(p);
        return NULL;
    }
    mkdir(dir, 0777); /* an existing or unwritable directory is reported when the trace is written */
    return p;
}

static void profile_finish(ct_profiler *p, ct_context *ctx, ct_plan *plan, ct_optimizer *opt, size_t budget,
                           const char *dir) {
    ct_plan_stats ps;
    ct_plan_get_stats(plan, &ps);
    float *ost = NULL;
    size_t on = 0;
    if (ct_optimizer_state(opt, &ost, &on) != CT_OK) on = 0;
    ct_profiler_set_memory(p, &ps, on * sizeof(float), budget);
    char path[600];
    snprintf(path, sizeof path, "%s/trace.json", dir);
    ct_status s = ct_profiler_write(p, path);
    if (s != CT_OK) {
        fprintf(stderr, "ctrain: warning: %s %s: %s (training results are unaffected)\n", ct_status_code(s),
                ct_status_name(s), ct_context_last_error(ctx));
        return;
    }
    printf("profile: %s (%zu events, %llu dropped; open in chrome://tracing or ui.perfetto.dev)\n", path,
           ct_profiler_num_events(p), (unsigned long long)ct_profiler_dropped(p));
    ct_doctor_report dr;
    if (ct_doctor_analyze_file(ctx, path, &dr) == CT_OK) ct_doctor_print(&dr, stdout);
    else fprintf(stderr, "ctrain: warning: doctor: %s\n", ct_context_last_error(ctx));
    fflush(stdout);
}

int ct_cli_train(int argc, char **argv) {
    ct_recipe r;
    ct_recipe_default(&r);
    int quiet = 0;
    const char *recipe_path = NULL, *resume = NULL;
    const char *report_dir = NULL; /* --report DIR: DIR/metrics.jsonl and DIR/report.html */
    ct_metrics *mx = NULL;
    ct_profiler *prof = NULL; /* --profile DIR */
    char mpath[600];
    /* pass 1: --help, --recipe, --resume and --quiet */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            train_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (!strcmp(argv[i], "--recipe")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ctrain: error: --recipe needs a file name\n");
                return 2;
            }
            recipe_path = argv[++i];
        } else if (!strcmp(argv[i], "--resume")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ctrain: error: --resume needs a checkpoint directory\n");
                return 2;
            }
            resume = argv[++i];
        } else if (!strcmp(argv[i], "--report")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ctrain: error: --report needs a directory\n");
                return 2;
            }
            report_dir = argv[++i];
        }
    }
    ct_context *ctx = NULL;
    ct_context_opts co;
    ct_context_opts_default(&co);
    ct_status s = ct_context_create(&co, &ctx);
    if (s != CT_OK) {
        fprintf(stderr, "ctrain: error: cannot create a context (%s); check CT_ISA (ref, avx2 or avx512)\n",
                ct_status_name(s));
        return 1;
    }
    int rc = 1;
    ct_dataset train = {0}, test = {0};
    model_t m = {0};
    ct_optimizer *opt = NULL;
    ct_scaler *scaler = NULL;
    ct_loader *ld = NULL;
    ct_prefetcher *pf = NULL; /* prefetch > 0 or augment: training batches from the prefetcher */
    float *best_copy = NULL; /* restore-best weights (early stopping) */
    int have_best = 0;
    ct_schedule *sched = NULL;
    ct_train_state *ckst = calloc(1, sizeof *ckst);
    ct_recipe ck_recipe;
    if (!ckst) {
        fprintf(stderr, "ctrain: error: out of memory\n");
        ct_context_free(ctx);
        return 1;
    }
    ct_train_state_init(ckst);
    if (resume) { /* the checkpoint's recipe first: the recipe file and flags apply on top */
        if ((s = ct_checkpoint_load(ctx, resume, NULL, NULL, ckst)) != CT_OK) goto out_err;
        if (!ckst->recipe_json[0]) {
            rc = cli_error(CT_E_CONFIG, "checkpoint '%s' holds no recipe (not written by ctrain train)", ckst->path);
            goto out;
        }
        if ((s = ct_recipe_parse_json(ctx, ckst->recipe_json, &r)) != CT_OK) goto out_err;
        ck_recipe = r;
    }
    if (recipe_path && (s = ct_recipe_load_file(ctx, recipe_path, &r)) != CT_OK) goto out_err;
    /* pass 2: --optimizer first (it resets that optimizer's defaults), then the rest in order */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 1; i < argc; i++) {
            const char *a = argv[i];
            if (!strcmp(a, "--quiet")) continue;
            if (!strcmp(a, "--recipe") || !strcmp(a, "--resume") || !strcmp(a, "--report")) { i++; continue; }
            const char *key = NULL;
            char kv[512];
            for (size_t f = 0; f < sizeof k_flags / sizeof k_flags[0]; f++)
                if (!strcmp(a, k_flags[f][0])) key = k_flags[f][1];
            if (!key && !strcmp(a, "--set")) key = "";
            if (!key) {
                fprintf(stderr, "ctrain: error: unknown option '%s' (see ctrain train --help)\n", a);
                rc = 2;
                goto out;
            }
            if (i + 1 >= argc) {
                fprintf(stderr, "ctrain: error: %s needs a value\n", a);
                rc = 2;
                goto out;
            }
            const char *val = argv[++i];
            int is_opt = !strcmp(key, "optimizer.name");
            if ((pass == 0) != is_opt) continue;
            if (!*key) { /* --set key=value */
                snprintf(kv, sizeof kv, "%s", val);
                char *eq = strchr(kv, '=');
                if (!eq) {
                    fprintf(stderr, "ctrain: error: --set needs KEY=VALUE, got '%s'\n", val);
                    rc = 2;
                    goto out;
                }
                *eq = 0;
                s = ct_recipe_set(ctx, &r, kv, eq + 1);
            } else {
                s = ct_recipe_set(ctx, &r, key, val);
            }
            if (s != CT_OK) goto out_err;
        }
    if ((s = ct_recipe_validate(ctx, &r)) != CT_OK) goto out_err;
    if (!strcmp(r.model, "gpt") || !strcmp(r.model, "bert")) { /* language models: tools/train_text.c */
        rc = ct_cli_train_text(&r, quiet, report_dir, resume);
        goto out;
    }
    if (resume) {
        char was[256], now[256];
        model_text(&ck_recipe, was, sizeof was);
        model_text(&r, now, sizeof now);
        if (strcmp(was, now)) {
            rc = cli_error(CT_E_CONFIG,
                           "--resume: this run's model (%s) differs from the checkpoint's (%s); drop the model flags "
                           "to resume with the recipe stored in %s",
                           now, was, ckst->path);
            goto out;
        }
    }
    /* a context with the recipe's seed and threads */
    ct_context_free(ctx);
    ctx = NULL;
    co.seed = r.seed;
    co.num_threads = r.threads;
    if ((s = ct_context_create(&co, &ctx)) != CT_OK) {
        fprintf(stderr, "ctrain: error: cannot create a context (%s)\n", ct_status_name(s));
        return 1;
    }
    char dir[300];
    if (r.data_dir[0]) snprintf(dir, sizeof dir, "%s", r.data_dir);
    else snprintf(dir, sizeof dir, "data/%s", r.dataset);
    const float mean = !strcmp(r.dataset, "mnist") ? 0.1307f : 0.2860f;
    const float stdv = !strcmp(r.dataset, "mnist") ? 0.3081f : 0.3530f;
    double t0 = cli_now_s();
    if ((s = ct_dataset_load_idx(ctx, dir, "train", mean, stdv, &train)) != CT_OK) goto out_data;
    if ((s = ct_dataset_load_idx(ctx, dir, "t10k", mean, stdv, &test)) != CT_OK) goto out_data;
    if ((s = build_model(ctx, &r, &train, &m)) != CT_OK) goto out_err;
    if ((s = ct_optimizer_create(m.plan, &r.optim, &opt)) != CT_OK) goto out_err;
    if ((s = cli_scaler_from_recipe(ctx, &r, &scaler)) != CT_OK) goto out_err;
    if ((s = ct_loader_create(ctx, &train, r.batch_size, 1, 1, r.seed, &ld)) != CT_OK) goto out_err;
    int64_t per_epoch = ct_loader_num_batches(ld);
    if (r.prefetch > 0 || r.augment) {
        ct_prefetch_opts po;
        ct_prefetch_opts_default(&po);
        po.buffer_size = r.prefetch > 0 ? r.prefetch : 1;
        po.threads = r.prefetch > 0 ? r.prefetch_threads : 0; /* 0: synchronous */
        po.augment = r.augment;
        po.pad_value = -mean / stdv; /* a normalized 0 pixel */
        if ((s = ct_prefetcher_create(ctx, &train, r.batch_size, 1, 1, r.seed, &po, &pf)) != CT_OK) goto out_err;
    }
    const int accum = r.accumulate_steps;
    if (per_epoch < accum) {
        fprintf(stderr, "ctrain: error: E40010 accumulate_steps %d is more than the %lld batches of an epoch; lower "
                "it or the batch size\n", accum, (long long)per_epoch);
        rc = 1;
        goto out;
    }
    /* optimizer steps; a partial accumulation at the end of an epoch is dropped */
    int64_t total = per_epoch / accum * r.epochs;
    if (r.max_steps > 0 && r.max_steps < total) total = r.max_steps;
    if ((s = cli_sched_from_recipe(ctx, &r, total, &sched)) != CT_OK) goto out_err;
    ct_early_stop es;
    const int es_max = !strcmp(r.early_stop_mode, "max"); /* max: test accuracy; min: test loss */
    if ((s = ct_early_stop_init(ctx, &es, r.early_stop_patience, r.early_stop_min_delta, es_max)) != CT_OK) goto out_err;
    /* restore-best keeps one copy of the weights and buffers, made at each new best epoch */
    float *par_arena, *buf_arena;
    size_t n_par, n_buf;
    ct_plan_param_arena(m.plan, &par_arena, NULL, &n_par);
    ct_plan_buffer_arena(m.plan, &buf_arena, &n_buf);
    if (r.early_stop_patience > 0 && r.early_stop_restore_best) {
        best_copy = malloc((n_par + n_buf + 1) * sizeof(float));
        if (!best_copy) {
            fprintf(stderr, "ctrain: error: E60003 out of memory keeping a copy of the best weights\n");
            rc = 1;
            goto out;
        }
    }
    if (resume) {
        if ((s = ct_checkpoint_load(ctx, resume, m.plan, opt, ckst)) != CT_OK) goto out_err;
        if (ckst->has_schedule && (s = ct_schedule_set_state(sched, &ckst->schedule)) != CT_OK) goto out_err;
        if (ckst->has_early_stop) es = ckst->early_stop;
        if (ckst->has_scaler && scaler && (s = ct_scaler_set_state(scaler, &ckst->scaler)) != CT_OK) goto out_err;
    }
    ct_plan_stats ps;
    ct_plan_get_stats(m.plan, &ps);
    char rj[8192];
    if (ct_recipe_to_json(&r, rj, sizeof rj) < 0) snprintf(rj, sizeof rj, "(out of memory)");
    char cvtbuf[64] = "";
    if (ps.cast_bytes) snprintf(cvtbuf, sizeof cvtbuf, " (incl. FP32 conversion copies, up to %.1f MiB)", (double)ps.cast_bytes / 1048576.0);
    printf("ctrain train: %s on %s (%lld train / %lld test images, %dx%lldx%lld), %d params, %.1f MiB "
           "activations%s\n",
           r.model, r.dataset, (long long)train.n, (long long)test.n, (int)train.c, (long long)train.h,
           (long long)train.w, (int)(ps.param_bytes / 4), (double)ps.activation_bytes / 1048576.0, cvtbuf);
    printf("  threads %d, kernels: %s%s, data loaded in %.2f s\n", ct_context_num_threads(ctx),
           ct_isa_name(ct_context_isa(ctx)), ct_context_use_onednn(ctx) ? " + oneDNN" : "", cli_now_s() - t0);
    cli_print_precision(ctx, &r, m.plan);
    printf("  recipe: %s\n", rj);
    fflush(stdout);
    if (report_dir && mkdir(report_dir, 0777) != 0 && errno != EEXIST) {
        rc = cli_error(CT_E_IO, "--report: cannot create directory '%s': %s", report_dir, strerror(errno));
        goto out;
    }
    snprintf(mpath, sizeof mpath, report_dir ? "%s/metrics.jsonl" : "%s", report_dir ? report_dir : r.metrics_file);
    if (mpath[0] && (s = ct_metrics_open(ctx, mpath, resume != NULL, rj, &mx)) != CT_OK) goto out_err;
    if (r.profile_dir[0]) prof = profile_start(ctx, r.profile_dir, m.plan);
    ct_tensor tx, ty, tl;
    ct_plan_tensor(m.plan, m.x, &tx);
    ct_plan_tensor(m.plan, m.y, &ty);
    ct_plan_tensor(m.plan, m.logits, &tl);
    int tty = isatty(STDOUT_FILENO);
    int64_t step = 0, step0 = 0;
    double train_start = cli_now_s();
    double test_loss = 0, test_acc = 0;
    int ep = 0, stopped = 0;
    if (resume) {
        step = step0 = ckst->step;
        ep = (int)ckst->epoch;
        test_loss = ckst->test_loss;
        test_acc = ckst->test_acc;
        stopped = es.stopped;
        printf("  resumed from %s: step %lld, epoch %d, batch %lld%s\n", ckst->path, (long long)step, ep + 1,
               (long long)ckst->batch_in_epoch, ckst->finished ? " (the run had ended)" : "");
        fflush(stdout);
    }
    ct_train_state *st = ckst; /* reused for saving */
    for (; !stopped && ep < r.epochs && step < total; ep++) {
        if (pf) {
            if ((s = ct_prefetcher_start_epoch(pf, (uint64_t)ep)) != CT_OK) goto out_err;
        } else {
            ct_loader_start_epoch(ld, (uint64_t)ep);
        }
        double ep_start = cli_now_s(), run_loss = 0;
        int64_t ep_correct = 0, ep_seen = 0, got, b = 0;
        if (resume && step == step0 && ep == (int)ckst->epoch && ckst->batch_in_epoch > 0) {
            b = ckst->batch_in_epoch; /* mid-epoch: skip what was consumed, restore the running totals */
            if ((s = pf ? ct_prefetcher_skip(pf, b) : ct_loader_skip(ld, b)) != CT_OK) goto out_err;
            run_loss = ckst->epoch_loss_sum;
            ep_correct = ckst->epoch_correct;
            ep_seen = ckst->epoch_seen;
        }
        int micro = 0;
        double mk_loss = run_loss; /* running totals at the last step, for the metrics log */
        int64_t mk_correct = ep_correct, mk_seen = ep_seen;
        if (accum > 1 && (s = ct_plan_zero_grads(m.plan)) != CT_OK) goto out_err;
        double prof_td = 0; /* profiler: when the batch load began */
        while (!stopped && step < total && (prof_td = prof ? ct_profiler_now_us() : 0, (s = pf ? ct_prefetcher_next(pf, tx.data, ty.data, &got) : ct_loader_next(ld, tx.data, ty.data, &got)) == CT_OK) && got > 0) {
            if (prof) ct_profiler_event(prof, "batch", "data", prof_td, ct_profiler_now_us(), NULL);
            float lr = ct_schedule_lr(sched, step), loss;
            if (scaler && (s = ct_plan_set_loss_scale(m.plan, ct_scaler_scale(scaler) / (float)accum)) != CT_OK)
                goto out_err;
            if ((s = ct_plan_forward(m.plan, 1)) != CT_OK) goto out_err;
            ct_plan_loss(m.plan, &loss);
            if (!isfinite(loss) && scaler) {
                loss = 0.0f; /* FP16 overflowed in the forward: the scaler skips this step */
            } else if (!isfinite(loss)) {
                fprintf(stderr, "\nctrain: error: E40020 the loss became %g at step %lld (epoch %d, lr %g); lower "
                        "optimizer.lr, check the data for NaN/inf\n", (double)loss, (long long)step, ep + 1, (double)lr);
                rc = 1;
                goto out;
            }
            if ((s = ct_plan_backward(m.plan)) != CT_OK) goto out_err;
            b++;
            run_loss += loss;
            ep_correct += argmax_correct(logits_f32(ctx, &tl, m.logits_buf), ty.data, got, m.n_classes);
            ep_seen += got;
            if (++micro < accum) continue; /* more micro-batches before this step */
            micro = 0;
            double prof_to = prof ? ct_profiler_now_us() : 0;
            float gnorm = 0.0f;
            if ((s = cli_optimizer_step(&r, m.plan, opt, scaler, prof, lr, &gnorm, &stopped)) != CT_OK) goto out_err;
            if (accum > 1 && (s = ct_plan_zero_grads(m.plan)) != CT_OK) goto out_err;
            step++;
            if (prof) {
                ct_profiler_event(prof, "optimizer step", "optimizer", prof_to, ct_profiler_now_us(), NULL);
                ct_profiler_step(prof);
            }
            if (mx) {
                ct_metrics_step ml = {step, ep + 1, (run_loss - mk_loss) / accum,
                                      (double)(ep_correct - mk_correct) / (double)(ep_seen - mk_seen), lr,
                                      (double)(ep_seen - mk_seen), r.clip_grad_norm > 0.0f ? gnorm : -1.0,
                                      scaler ? (double)ct_scaler_scale(scaler) : -1.0,
                                      cli_now_s() - train_start};
                if ((s = ct_metrics_log_step(mx, &ml)) != CT_OK) goto out_err;
            }
            mk_loss = run_loss, mk_correct = ep_correct, mk_seen = ep_seen;
            crash_point(NULL, "step", step);
            if (r.save_dir[0] && r.save_every > 0 && step % r.save_every == 0 && step < total) {
                if (tty && !quiet) printf("\n");
                ct_train_state_init(st);
                st->step = step;
                st->epoch = ep;
                st->batch_in_epoch = b;
                st->epoch_loss_sum = run_loss;
                st->epoch_correct = ep_correct;
                st->epoch_seen = ep_seen;
                st->test_loss = test_loss;
                st->test_acc = test_acc;
                if ((rc = save_checkpoint(ctx, &r, &m, opt, sched, &es, scaler, st)) != 0) goto out;
            }
            int show = tty ? (b % 5 == 0 || b == per_epoch) : (b % r.log_every == 0);
            if (!quiet && show) {
                double el = cli_now_s() - train_start;
                double sps = (double)((step - step0) * r.batch_size * accum) / el;
                char eta[32];
                cli_fmt_time(el / (double)(step - step0) * (double)(total - step), eta, sizeof eta);
                int bar = (int)(20 * b / per_epoch);
                char barbuf[24];
                for (int i = 0; i < 20; i++) barbuf[i] = i < bar ? '#' : '.';
                barbuf[20] = 0;
                char normbuf[32] = "";
                if (r.clip_grad_norm > 0.0f) snprintf(normbuf, sizeof normbuf, "  grad norm %.3g", (double)gnorm);
                char scalebuf[64] = "";
                if (scaler) {
                    ct_scaler_state ss;
                    ct_scaler_get_state(scaler, &ss);
                    snprintf(scalebuf, sizeof scalebuf, "  scale %g skipped %llu", (double)ss.scale,
                             (unsigned long long)ss.skipped);
                }
                printf("%sepoch %d/%d [%s] %lld/%lld  loss %.4f  acc %5.2f%%  lr %.2e%s%s  %.0f samples/s  ETA %s%s",
                       tty ? "\r" : "  ", ep + 1, r.epochs, barbuf, (long long)b, (long long)per_epoch,
                       run_loss / (double)b, 100.0 * (double)ep_correct / (double)ep_seen, (double)lr, normbuf,
                       scalebuf, sps, eta, tty ? "   " : "\n");
                fflush(stdout);
            }
        }
        if (s != CT_OK) goto out_err;
        double prof_te = prof ? ct_profiler_now_us() : 0;
        ct_profiler_set_ops_enabled(prof, 0); /* evaluation: one "eval" event, not part of a step */
        if ((s = evaluate(ctx, &m, &test, &test_loss, &test_acc)) != CT_OK) goto out_err;
        ct_profiler_set_ops_enabled(prof, 1);
        if (prof) ct_profiler_event(prof, "evaluate", "eval", prof_te, ct_profiler_now_us(), NULL);
        if (mx && (s = ct_metrics_log_eval(mx, ep + 1, step, test_loss, test_acc, cli_now_s() - train_start)) != CT_OK)
            goto out_err;
        double ep_time = cli_now_s() - ep_start;
        printf("%sepoch %d/%d  train loss %.4f  train acc %.2f%%  test loss %.4f  test acc %.2f%%  %.1f s  %.0f "
               "samples/s\n",
               tty && !quiet ? "\r\033[K" : "", ep + 1, r.epochs, b ? run_loss / (double)b : 0.0,
               ep_seen ? 100.0 * (double)ep_correct / (double)ep_seen : 0.0, test_loss, 100.0 * test_acc, ep_time,
               (double)ep_seen / ep_time);
        if (ct_schedule_observe(sched, test_loss))
            printf("  plateau: test loss did not improve; lr -> %.3g\n", ct_schedule_lr_f64(sched, step));
        int is_best = 0;
        if (r.early_stop_patience > 0 && ct_early_stop_update(&es, es_max ? test_acc : test_loss, &is_best)) {
            printf("  early stop: test %s did not improve by %g for %d epochs; best %.4f at epoch %lld\n",
                   es_max ? "accuracy" : "loss", (double)r.early_stop_min_delta, r.early_stop_patience, es.best,
                   (long long)es.best_epoch + 1);
            fflush(stdout);
            es.stopped = 1;
            stopped = 1;
        }
        if (is_best && best_copy) {
            memcpy(best_copy, par_arena, n_par * sizeof(float));
            memcpy(best_copy + n_par, buf_arena, n_buf * sizeof(float));
            have_best = 1;
        }
        fflush(stdout);
    }
    if (stopped && best_copy) {
        if (have_best) {
            memcpy(par_arena, best_copy, n_par * sizeof(float));
            memcpy(buf_arena, best_copy + n_par, n_buf * sizeof(float));
            if ((s = evaluate(ctx, &m, &test, &test_loss, &test_acc)) != CT_OK) goto out_err;
            printf("  restored the best weights (epoch %lld): test loss %.4f, test acc %.2f%%\n",
                   (long long)es.best_epoch + 1, test_loss, 100.0 * test_acc);
        } else {
            printf("  warning: the best epoch (%lld) came before the resume; its weights were not kept, the final "
                   "weights stay\n", (long long)es.best_epoch + 1);
        }
    }
    if (r.save_dir[0] && (!resume || step > step0 || stopped != (int)ckst->early_stop.stopped)) {
        ct_train_state_init(st);
        st->step = step;
        st->epoch = ep; /* the loop's increment ran: the next epoch, from its start */
        st->test_loss = test_loss;
        st->test_acc = test_acc;
        st->finished = 1;
        if ((rc = save_checkpoint(ctx, &r, &m, opt, sched, &es, scaler, st)) != 0) goto out;
    }
    double total_time = cli_now_s() - train_start;
    ct_mem_stats ms;
    ct_context_mem_stats(ctx, &ms);
    printf("done: %lld steps in %.1f s, test accuracy %.2f%% (test loss %.4f), peak memory %.1f MiB\n",
           (long long)step, total_time, 100.0 * test_acc, test_loss, (double)ms.peak_bytes / 1048576.0);
    if (prof) profile_finish(prof, ctx, m.plan, opt, co.memory_budget, r.profile_dir);
    if (mx) {
        ct_metrics_log_done(mx, step, total_time, test_loss, test_acc, (double)ms.peak_bytes / 1048576.0);
        s = ct_metrics_close(mx);
        mx = NULL;
        if (s != CT_OK) goto out_err;
    }
    if (report_dir) {
        char hpath[600];
        snprintf(hpath, sizeof hpath, "%s/report.html", report_dir);
        if (ct_report_html(mpath, hpath) != 0) goto out;
        printf("report: %s\n", hpath);
    }
    rc = 0;
    goto out;
out_data:
    fprintf(stderr, "ctrain: error: %s\n", ct_context_last_error(ctx));
    fprintf(stderr, "ctrain: hint: run scripts/setup.sh to install the datasets into data/, or pass --data-dir\n");
    rc = 1;
    goto out;
out_err:
    rc = cli_fail(ctx, s, "training failed");
out:
    ct_metrics_close(mx);
    free(best_copy);
    free(ckst);
    ct_schedule_free(sched);
    ct_prefetcher_free(pf);
    ct_loader_free(ld);
    ct_scaler_free(scaler);
    ct_optimizer_free(opt);
    ct_plan_free(m.plan);
    free(m.logits_buf);
    ct_profiler_free(prof);
    ct_dataset_free(ctx, &train);
    ct_dataset_free(ctx, &test);
    ct_context_free(ctx);
    return rc;
}
