/* tests/test_schedule.c - learning-rate schedules against PyTorch 1.13
 * (tests/golden/schedules.txt from scripts/make_schedule_golden.py), the
 * plateau scheduler on fixed metric sequences, state round trips, early
 * stopping, batch-size scaling and parameter errors. */
#include "test.h"

#define NV 128

typedef struct {
    char name[64];
    int n;
    double v[NV];
} gold_line;

static gold_line g_lines[64];
static int g_n = -1;

static int load_golden(void) {
    if (g_n >= 0) return g_n;
    g_n = 0;
    char path[1024];
    const char *env = getenv("CT_GOLDEN_DIR");
    const char *src = __FILE__, *slash = strrchr(src, '/');
    if (env && env[0]) snprintf(path, sizeof path, "%s/schedules.txt", env);
    else if (slash) snprintf(path, sizeof path, "%.*s/golden/schedules.txt", (int)(slash - src), src);
    else snprintf(path, sizeof path, "golden/schedules.txt");
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "  cannot open %s (set CT_GOLDEN_DIR)\n", path);
        return 0;
    }
    static char line[1 << 16];
    while (g_n < 64 && fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        gold_line *g = &g_lines[g_n];
        char *p = line, *end;
        size_t k = strcspn(p, " \n");
        snprintf(g->name, sizeof g->name, "%.*s", (int)k, p);
        p += k;
        g->n = 0;
        for (;;) {
            double x = strtod(p, &end);
            if (end == p || g->n >= NV) break;
            g->v[g->n++] = x;
            p = end;
        }
        g_n++;
    }
    fclose(f);
    return g_n;
}

static const gold_line *golden(const char *name) {
    load_golden();
    for (int i = 0; i < g_n; i++)
        if (!strcmp(g_lines[i].name, name)) return &g_lines[i];
    return NULL;
}

static double g_worst = 0;

/* |a - b| <= 1e-6 * max(|a|, |b|) (plus 1e-12 absolute for values at 0) */
static int close_rel(double a, double b) {
    double d = fabs(a - b), m = fmax(fabs(a), fabs(b));
    if (m > 0 && d / m > g_worst) g_worst = d / m;
    return d <= 1e-6 * m + 1e-12;
}

/* the case's options, mirroring scripts/make_schedule_golden.py */
static int case_opts(const char *name, ct_schedule_opts *o) {
    const double B = 0.1;
#define IS(s) (!strcmp(name, s))
    if (IS("constant")) ct_schedule_opts_default(o, CT_SCHED_CONSTANT, B);
    else if (IS("step")) ct_schedule_opts_default(o, CT_SCHED_STEP, B), o->step_size = 7, o->gamma = 0.5;
    else if (IS("multistep")) {
        ct_schedule_opts_default(o, CT_SCHED_MULTISTEP, B);
        o->n_milestones = 3, o->milestones[0] = 10, o->milestones[1] = 25, o->milestones[2] = 60, o->gamma = 0.3;
    } else if (IS("exponential")) ct_schedule_opts_default(o, CT_SCHED_EXPONENTIAL, B), o->gamma = 0.97;
    else if (IS("cosine")) ct_schedule_opts_default(o, CT_SCHED_COSINE, B), o->t_max = 40, o->min_lr = 0.001;
    else if (IS("cosine_restarts"))
        ct_schedule_opts_default(o, CT_SCHED_COSINE_RESTARTS, B), o->t_0 = 10, o->t_mult = 2, o->min_lr = 0.002;
    else if (IS("cosine_restarts1"))
        ct_schedule_opts_default(o, CT_SCHED_COSINE_RESTARTS, B), o->t_0 = 13, o->t_mult = 1, o->min_lr = 0;
    else if (IS("linear")) {
        ct_schedule_opts_default(o, CT_SCHED_LINEAR, B);
        o->start_factor = 0.9, o->end_factor = 0.05, o->total_iters = 60;
    } else if (IS("polynomial"))
        ct_schedule_opts_default(o, CT_SCHED_POLYNOMIAL, B), o->total_iters = 80, o->power = 2.0;
    else if (IS("one_cycle_cos"))
        ct_schedule_opts_default(o, CT_SCHED_ONE_CYCLE, B), o->max_lr = 0.5, o->total_steps = 100, o->pct_start = 0.3;
    else if (IS("one_cycle_linear")) {
        ct_schedule_opts_default(o, CT_SCHED_ONE_CYCLE, B);
        o->max_lr = 0.2, o->total_steps = 120, o->pct_start = 0.25, o->anneal_linear = 1;
        o->div_factor = 10, o->final_div_factor = 100;
    } else if (IS("warmup_cosine")) {
        ct_schedule_opts_default(o, CT_SCHED_COSINE, B);
        o->t_max = 90, o->min_lr = 0.001, o->warmup_steps = 10, o->warmup_start_factor = 0.1;
    } else if (IS("warmup_step")) {
        ct_schedule_opts_default(o, CT_SCHED_STEP, B);
        o->step_size = 15, o->gamma = 0.5, o->warmup_steps = 8, o->warmup_start_factor = 0.25;
    } else if (IS("warmup_multistep")) {
        ct_schedule_opts_default(o, CT_SCHED_MULTISTEP, B);
        o->n_milestones = 2, o->milestones[0] = 20, o->milestones[1] = 50, o->gamma = 0.1;
        o->warmup_steps = 5, o->warmup_start_factor = 0.2;
    } else if (IS("warmup_exponential")) {
        ct_schedule_opts_default(o, CT_SCHED_EXPONENTIAL, B);
        o->gamma = 0.95, o->warmup_steps = 12, o->warmup_start_factor = 0.5;
    } else if (IS("warmup_restarts")) {
        ct_schedule_opts_default(o, CT_SCHED_COSINE_RESTARTS, B);
        o->t_0 = 10, o->t_mult = 2, o->min_lr = 0.001, o->warmup_steps = 6, o->warmup_start_factor = 0.1;
    } else if (IS("warmup_linear")) {
        ct_schedule_opts_default(o, CT_SCHED_LINEAR, B);
        o->start_factor = 1.0, o->end_factor = 0.01, o->total_iters = 70;
        o->warmup_steps = 10, o->warmup_start_factor = 0.1;
    } else if (IS("warmup_polynomial")) {
        ct_schedule_opts_default(o, CT_SCHED_POLYNOMIAL, B);
        o->total_iters = 50, o->power = 0.5, o->warmup_steps = 10, o->warmup_start_factor = 0.3;
    } else if (IS("warmup_constant")) {
        ct_schedule_opts_default(o, CT_SCHED_CONSTANT, B);
        o->warmup_steps = 10, o->warmup_start_factor = 0.05;
    } else if (IS("legacy_warmup_cosine")) {
        ct_schedule_opts_default(o, CT_SCHED_COSINE, B);
        o->t_max = 80, o->min_lr = 0.0005, o->warmup_steps = 20, o->warmup_start_factor = 1.0 / 20,
        o->warmup_iters = 19;
    } else if (IS("inverse_sqrt")) {
        ct_schedule_opts_default(o, CT_SCHED_INV_SQRT, B);
        o->warmup_steps = 10, o->warmup_start_factor = 0.1, o->rsqrt_timescale = 0; /* = warmup_steps */
    } else if (IS("plateau_min_rel")) {
        ct_schedule_opts_default(o, CT_SCHED_PLATEAU, B);
        o->factor = 0.5, o->patience = 2, o->threshold = 1e-2, o->cooldown = 1, o->min_lr = 0.004;
    } else if (IS("plateau_max_abs")) {
        ct_schedule_opts_default(o, CT_SCHED_PLATEAU, B);
        o->mode_max = 1, o->factor = 0.3, o->patience = 1, o->threshold = 0.02, o->threshold_abs = 1;
    } else if (IS("plateau_default")) ct_schedule_opts_default(o, CT_SCHED_PLATEAU, B);
    else if (IS("plateau_p0")) {
        ct_schedule_opts_default(o, CT_SCHED_PLATEAU, B);
        o->factor = 0.1, o->patience = 0, o->threshold = 0, o->min_lr = 1e-4;
    } else return 0;
#undef IS
    return 1;
}

static const char *const k_step_cases[] = {
    "constant", "step", "multistep", "exponential", "cosine", "cosine_restarts", "cosine_restarts1", "linear",
    "polynomial", "one_cycle_cos", "one_cycle_linear", "warmup_cosine", "warmup_step", "warmup_multistep",
    "warmup_exponential", "warmup_restarts", "warmup_linear", "warmup_polynomial", "warmup_constant",
    "legacy_warmup_cosine", "inverse_sqrt",
};
static const char *const k_plateau_cases[] = {"plateau_min_rel", "plateau_max_abs", "plateau_default", "plateau_p0"};
#define COUNT(a) ((int)(sizeof a / sizeof a[0]))

TEST(step_schedules_match_pytorch) {
    ct_context *ctx = test_ctx(-1, 1);
    CHECK_MSG(load_golden() >= COUNT(k_step_cases), "golden file missing or short");
    g_worst = 0;
    for (int c = 0; c < COUNT(k_step_cases); c++) {
        const gold_line *g = golden(k_step_cases[c]);
        CHECK_MSG(g && g->n == 100, "golden case %s missing", k_step_cases[c]);
        ct_schedule_opts o;
        CHECK(case_opts(g->name, &o));
        ct_schedule *s;
        CHECK_OK(ctx, ct_schedule_create(ctx, &o, &s));
        for (int t = 0; t < g->n; t++) {
            double v = ct_schedule_lr_f64(s, t);
            float vf = ct_schedule_lr(s, t);
            CHECK_MSG(close_rel(v, g->v[t]), "%s step %d: ctrain %.17g, pytorch %.17g", g->name, t, v, g->v[t]);
            CHECK_MSG(close_rel((double)vf, g->v[t]), "%s step %d (float): %.9g vs %.17g", g->name, t, (double)vf,
                      g->v[t]);
        }
        ct_schedule_free(s);
    }
    printf("    worst relative error vs PyTorch (step-indexed, float): %.3g\n", g_worst);
    ct_context_free(ctx);
}

TEST(plateau_matches_pytorch_and_resumes) {
    ct_context *ctx = test_ctx(-1, 1);
    char mname[80];
    for (int c = 0; c < COUNT(k_plateau_cases); c++) {
        const gold_line *g = golden(k_plateau_cases[c]);
        snprintf(mname, sizeof mname, "%s_metric", k_plateau_cases[c]);
        const gold_line *m = golden(mname);
        CHECK_MSG(g && m && g->n == m->n && g->n > 5, "golden case %s missing", k_plateau_cases[c]);
        ct_schedule_opts o;
        CHECK(case_opts(g->name, &o));
        ct_schedule *s, *r;
        CHECK_OK(ctx, ct_schedule_create(ctx, &o, &s));
        CHECK_OK(ctx, ct_schedule_create(ctx, &o, &r));
        CHECK(ct_schedule_lr_f64(s, 0) == 0.1);
        int half = g->n / 2;
        for (int e = 0; e < g->n; e++) {
            double before = ct_schedule_lr_f64(s, e);
            int red = ct_schedule_observe(s, m->v[e]);
            double v = ct_schedule_lr_f64(s, e);
            CHECK_MSG(close_rel(v, g->v[e]), "%s epoch %d: ctrain %.17g, pytorch %.17g", g->name, e, v, g->v[e]);
            CHECK(red == (v < before));
            if (e == half) { /* resume a fresh schedule from the state here */
                ct_schedule_state st;
                ct_schedule_get_state(s, &st);
                CHECK_OK(ctx, ct_schedule_set_state(r, &st));
            }
            if (e > half) {
                ct_schedule_observe(r, m->v[e]);
                CHECK(ct_schedule_lr_f64(r, e) == v);
            }
        }
        ct_schedule_free(s);
        ct_schedule_free(r);
    }
    ct_context_free(ctx);
}

TEST(state_round_trip_resumes_step_schedules) {
    ct_context *ctx = test_ctx(-1, 1);
    for (int c = 0; c < COUNT(k_step_cases); c++) {
        ct_schedule_opts o;
        CHECK(case_opts(k_step_cases[c], &o));
        ct_schedule *a, *b;
        CHECK_OK(ctx, ct_schedule_create(ctx, &o, &a));
        CHECK_OK(ctx, ct_schedule_create(ctx, &o, &b));
        ct_schedule_state st;
        ct_schedule_get_state(a, &st);
        CHECK_OK(ctx, ct_schedule_set_state(b, &st));
        for (int t = 37; t < 100; t++) CHECK(ct_schedule_lr(a, t) == ct_schedule_lr(b, t));
        ct_schedule_free(a);
        ct_schedule_free(b);
    }
    ct_context_free(ctx);
}

TEST(early_stopping_on_a_fixed_sequence) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_early_stop e;
    CHECK_OK(ctx, ct_early_stop_init(ctx, &e, 3, 0.01, 0));
    const double m[] = {1.0, 0.8, 0.795, 0.79, 0.7, 0.71, 0.695, 0.7, 0.72, 0.6};
    const int best[] = {1, 1, 0, 0, 1, 0, 0, 0, 0, -1};
    int stop_at = -1;
    for (int i = 0; i < 10; i++) {
        int isb = -1;
        int stop = ct_early_stop_update(&e, m[i], &isb);
        CHECK_MSG(isb == best[i], "epoch %d: is_best %d, expected %d", i, isb, best[i]);
        if (stop) {
            stop_at = i;
            break;
        }
    }
    CHECK_MSG(stop_at == 7, "stopped at %d, expected 7", stop_at);
    CHECK(e.best == 0.7 && e.best_epoch == 4 && e.wait == 3);
    /* mode max, patience 0 stops at the first non-improvement; NaN never improves */
    CHECK_OK(ctx, ct_early_stop_init(ctx, &e, 1, 0, 1));
    int isb;
    CHECK(!ct_early_stop_update(&e, 0.5, &isb) && isb);
    CHECK(!ct_early_stop_update(&e, 0.6, &isb) && isb);
    CHECK(ct_early_stop_update(&e, NAN, &isb) && !isb);
    CHECK(e.best == 0.6 && e.best_epoch == 1);
    CHECK(ct_early_stop_init(ctx, &e, -1, 0, 0) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "patience"));
    CHECK(ct_early_stop_init(ctx, &e, 2, -0.1, 0) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "min_delta"));
    ct_context_free(ctx);
}

/* warmup_start_factor 0 means the same in ct_schedule_opts as in a recipe:
 * the ramp base_lr * (t + 1) / W, i.e. LinearLR(1/W, total_iters = W - 1). */
TEST(warmup_start_factor_zero_is_the_ramp) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_schedule_opts o, o2;
    ct_schedule_opts_default(&o, CT_SCHED_COSINE, 0.1);
    CHECK(o.warmup_start_factor == 0); /* the default, as a recipe's */
    o.warmup_steps = 8, o.t_max = 100;
    o2 = o;
    o2.warmup_start_factor = 1.0 / 8, o2.warmup_iters = 7;
    ct_schedule *a = NULL, *b = NULL;
    CHECK_OK(ctx, ct_schedule_create(ctx, &o, &a));
    CHECK_OK(ctx, ct_schedule_create(ctx, &o2, &b));
    for (int64_t t = 0; t < 20; t++) CHECK_MSG(ct_schedule_lr_f64(a, t) == ct_schedule_lr_f64(b, t), "step %lld", (long long)t);
    CHECK(fabs(ct_schedule_lr_f64(a, 0) - 0.1 / 8) < 1e-15 && fabs(ct_schedule_lr_f64(a, 7) - 0.1) < 1e-15);
    ct_schedule_free(a);
    ct_schedule_free(b);
    ct_context_free(ctx);
}

TEST(batch_size_scaling_rule) {
    CHECK(fabs(ct_lr_scale_for_batch(0.1, 1024, 256, 0) - 0.4) < 1e-15);
    CHECK(fabs(ct_lr_scale_for_batch(0.1, 1024, 256, 1) - 0.2) < 1e-15);
    CHECK(fabs(ct_lr_scale_for_batch(0.1, 64, 256, 0) - 0.025) < 1e-15);
    CHECK(fabs(ct_lr_scale_for_batch(0.1, 64, 256, 1) - 0.05) < 1e-15);
    CHECK(ct_lr_scale_for_batch(0.1, 0, 256, 0) == 0.1);
}

static int bad(ct_context *ctx, const ct_schedule_opts *o, const char *field) {
    ct_schedule *s = NULL;
    ct_status st = ct_schedule_create(ctx, o, &s);
    int ok = st == CT_E_INVALID_ARG && s == NULL && strstr(ct_context_last_error(ctx), field) != NULL;
    if (!ok) fprintf(stderr, "  expected an error naming '%s', got %s: %s\n", field, ct_status_name(st),
                     ct_context_last_error(ctx));
    ct_schedule_free(s);
    return ok;
}

TEST(bad_parameters_name_the_field) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_schedule_opts o;
    ct_schedule_opts_default(&o, CT_SCHED_STEP, 0.1), o.step_size = 0;
    CHECK(bad(ctx, &o, "step_size"));
    ct_schedule_opts_default(&o, CT_SCHED_EXPONENTIAL, 0.1), o.gamma = 1.5;
    CHECK(bad(ctx, &o, "gamma"));
    ct_schedule_opts_default(&o, CT_SCHED_MULTISTEP, 0.1), o.n_milestones = 2, o.milestones[0] = 30,
                                                          o.milestones[1] = 10;
    CHECK(bad(ctx, &o, "milestones"));
    ct_schedule_opts_default(&o, CT_SCHED_MULTISTEP, 0.1);
    CHECK(bad(ctx, &o, "milestones"));
    ct_schedule_opts_default(&o, CT_SCHED_COSINE, 0.1), o.t_max = 0;
    CHECK(bad(ctx, &o, "t_max"));
    ct_schedule_opts_default(&o, CT_SCHED_COSINE, 0.1), o.t_max = 10, o.min_lr = 0.2;
    CHECK(bad(ctx, &o, "min_lr"));
    ct_schedule_opts_default(&o, CT_SCHED_COSINE_RESTARTS, 0.1), o.t_0 = 5, o.t_mult = 0;
    CHECK(bad(ctx, &o, "t_mult"));
    ct_schedule_opts_default(&o, CT_SCHED_LINEAR, 0.1), o.start_factor = 0;
    CHECK(bad(ctx, &o, "start_factor"));
    ct_schedule_opts_default(&o, CT_SCHED_POLYNOMIAL, 0.1), o.total_iters = 0;
    CHECK(bad(ctx, &o, "total_iters"));
    ct_schedule_opts_default(&o, CT_SCHED_ONE_CYCLE, 0.1), o.total_steps = 100, o.pct_start = 1.2;
    CHECK(bad(ctx, &o, "pct_start"));
    ct_schedule_opts_default(&o, CT_SCHED_ONE_CYCLE, 0.1), o.total_steps = 100, o.warmup_steps = 5;
    CHECK(bad(ctx, &o, "warmup_steps"));
    ct_schedule_opts_default(&o, CT_SCHED_INV_SQRT, 0.1);
    CHECK(bad(ctx, &o, "rsqrt_timescale"));
    ct_schedule_opts_default(&o, CT_SCHED_PLATEAU, 0.1), o.factor = 1.0;
    CHECK(bad(ctx, &o, "factor"));
    ct_schedule_opts_default(&o, CT_SCHED_CONSTANT, 0.1), o.warmup_steps = 5, o.warmup_start_factor = 1.5;
    CHECK(bad(ctx, &o, "warmup_start_factor"));
    ct_schedule_opts_default(&o, CT_SCHED_CONSTANT, NAN);
    CHECK(bad(ctx, &o, "base_lr"));
    ct_schedule_kind k;
    CHECK(ct_schedule_kind_parse(ctx, "cosine_restarts", &k) == CT_OK && k == CT_SCHED_COSINE_RESTARTS);
    CHECK(ct_schedule_kind_parse(ctx, "cosinus", &k) == CT_E_CONFIG);
    CHECK(strstr(ct_context_last_error(ctx), "one_cycle") && strstr(ct_context_last_error(ctx), "cosinus"));
    ct_mem_stats ms;
    ct_context_mem_stats(ctx, &ms);
    CHECK(ms.bytes_in_use == 0);
    ct_context_free(ctx);
}

TEST(recipe_schedule_keys) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_recipe r;
    ct_recipe_default(&r);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, "{\"schedule\": \"multistep\", \"milestones\": [100, 300], "
                                            "\"gamma\": 0.5, \"warmup_steps\": 10, \"warmup_start_factor\": 0.1}", &r));
    CHECK(r.schedule == CT_SCHED_MULTISTEP && r.n_milestones == 2 && r.milestones[1] == 300);
    CHECK(fabsf(r.gamma - 0.5f) < 1e-7f && fabsf(r.warmup_start_factor - 0.1f) < 1e-7f);
    CHECK_OK(ctx, ct_recipe_validate(ctx, &r));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "schedule", "step"));
    CHECK(ct_recipe_validate(ctx, &r) == CT_E_CONFIG && strstr(ct_context_last_error(ctx), "step_size"));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "step_size", "50"));
    CHECK_OK(ctx, ct_recipe_validate(ctx, &r));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "schedule", "plateau"));
    CHECK(ct_recipe_validate(ctx, &r) == CT_E_CONFIG && strstr(ct_context_last_error(ctx), "warmup_steps"));
    CHECK(ct_recipe_set(ctx, &r, "schedule", "cosinus") == CT_E_CONFIG);
    CHECK(strstr(ct_context_last_error(ctx), "cosine_restarts"));
    CHECK(ct_recipe_set(ctx, &r, "gamma", "0") == CT_E_CONFIG && strstr(ct_context_last_error(ctx), "gamma"));
    ct_context_free(ctx);
}

/* The recipe keys in epochs through ct_train_schedule_epochs against PyTorch (scripts/make_schedule_golden.py's
 * epoch_cases): spe optimizer steps per epoch, 100 steps in the run. per_epoch: PyTorch stepped once per epoch,
 * compared at the first step of each epoch (ctrain's per-step curve meets the guide's per-epoch formula there). */
static void epoch_case(ct_context *ctx, const char *name, const char *json, int64_t spe, int per_epoch) {
    const gold_line *g = golden(name);
    CHECK_MSG(g && g->n == 100, "golden case %s missing", name);
    if (!g) return;
    ct_recipe r;
    ct_recipe_default(&r);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, json, &r));
    CHECK_OK(ctx, ct_recipe_validate(ctx, &r));
    ct_schedule *s = NULL;
    CHECK_OK(ctx, ct_train_schedule_epochs(ctx, &r, 100, spe, &s));
    for (int t = 0; s && t < g->n; t++) {
        if (per_epoch && t % spe) continue;
        double v = ct_schedule_lr_f64(s, t);
        CHECK_MSG(close_rel(v, g->v[t]), "%s step %d: ctrain %.17g, pytorch %.17g", name, t, v, g->v[t]);
    }
    ct_schedule_free(s);
}

TEST(epoch_keys_match_pytorch) {
    ct_context *ctx = test_ctx(-1, 1);
    g_worst = 0;
    const char *lr = "\"optimizer\": {\"name\": \"sgd\", \"lr\": 0.1}";
    char j[512];
    snprintf(j, sizeof j, "{%s, \"schedule\": \"step\", \"step_size_epochs\": 3, \"gamma\": 0.1}", lr);
    epoch_case(ctx, "epochs_step_per_epoch", j, 5, 0); /* step: equal at every step, not only at epoch starts */
    snprintf(j, sizeof j, "{%s, \"schedule\": \"step\", \"warmup_epochs\": 5, \"step_size_epochs\": 30}", lr);
    epoch_case(ctx, "epochs_warmup_step", j, 2, 0);
    snprintf(j, sizeof j, "{%s, \"schedule\": \"cosine\", \"cosine_epochs\": 8, \"min_lr\": 0.001}", lr);
    epoch_case(ctx, "epochs_cosine", j, 5, 0);
    epoch_case(ctx, "epochs_cosine_per_epoch", j, 5, 1);
    snprintf(j, sizeof j, "{%s, \"schedule\": \"cosine\", \"cosine_epochs\": 8, \"min_lr\": 0.001, "
             "\"cosine_after\": \"hold\"}", lr);
    epoch_case(ctx, "epochs_cosine_hold", j, 5, 0);
    snprintf(j, sizeof j, "{%s, \"schedule\": \"cosine\", \"warmup_epochs\": 1.5, \"cosine_epochs\": 10}", lr);
    epoch_case(ctx, "epochs_warmup_cosine", j, 4, 0);
    /* keys in epochs without steps per epoch: an error naming them, not a silent step count */
    ct_recipe r;
    ct_recipe_default(&r);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, j, &r));
    ct_schedule *s = NULL;
    CHECK(ct_train_schedule(ctx, &r, 100, &s) == CT_E_CONFIG && strstr(ct_context_last_error(ctx), "cosine_epochs"));
    CHECK(s == NULL);
    /* each key belongs to its schedule and replaces the key in steps */
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, "{\"schedule\": \"step\", \"step_size\": 10}", &r));
    CHECK(ct_recipe_validate(ctx, &r) == CT_E_CONFIG && strstr(ct_context_last_error(ctx), "cosine_epochs"));
    ct_recipe_default(&r);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, "{\"schedule\": \"step\", \"step_size\": 10, \"step_size_epochs\": 2}", &r));
    CHECK(ct_recipe_validate(ctx, &r) == CT_E_CONFIG && strstr(ct_context_last_error(ctx), "both set"));
    printf("    worst relative error vs PyTorch (recipe keys in epochs): %.3g\n", g_worst);
    ct_context_free(ctx);
}

TEST_MAIN({"step_schedules_match_pytorch", step_schedules_match_pytorch},
          {"epoch_keys_match_pytorch", epoch_keys_match_pytorch},
          {"plateau_matches_pytorch_and_resumes", plateau_matches_pytorch_and_resumes},
          {"state_round_trip_resumes_step_schedules", state_round_trip_resumes_step_schedules},
          {"early_stopping_on_a_fixed_sequence", early_stopping_on_a_fixed_sequence},
          {"batch_size_scaling_rule", batch_size_scaling_rule},
          {"warmup_start_factor_zero_is_the_ramp", warmup_start_factor_zero_is_the_ramp},
          {"bad_parameters_name_the_field", bad_parameters_name_the_field},
          {"recipe_schedule_keys", recipe_schedule_keys})
