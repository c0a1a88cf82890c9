/* tests/test_scaler.c - the loss scaler: an injected inf skips the step with
 * weights and optimizer state bit-identical, backs off and names the tensor;
 * growth after growth_interval clean steps; hysteresis; min/max clamps; the
 * min_scale outcome (error or stop); static scaling; state round trip
 * resumes the same scale sequence and history; the history of a scripted
 * sequence event by event; a full ring keeps exact totals; events as
 * metrics-log lines; the loss seed carries the scale. */
#include <unistd.h>

#include "ctrain/metrics.h"
#include "test.h"

static int contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

typedef struct {
    ct_context *ctx;
    test_model tm;
    ct_optimizer *opt;
} rig;

static ct_status rig_make(rig *r) {
    r->ctx = test_ctx(-1, 1);
    ct_status s = test_model_build(r->ctx, 2, (int64_t[]){8, 12}, 2, (int64_t[]){16, 16}, 4, 0, 0, &r->tm);
    if (s != CT_OK) return s;
    ct_optim_opts o;
    ct_optim_opts_default(&o, CT_OPTIM_ADAMW);
    return ct_optimizer_create(r->tm.plan, &o, &r->opt);
}

static void rig_free(rig *r) {
    ct_optimizer_free(r->opt);
    ct_plan_free(r->tm.plan);
    ct_context_free(r->ctx);
}

static ct_status fwd_bwd(rig *r, ct_scaler *s) {
    ct_status st = ct_plan_set_loss_scale(r->tm.plan, ct_scaler_scale(s));
    if (st == CT_OK) st = ct_plan_forward(r->tm.plan, 1);
    if (st == CT_OK) st = ct_plan_backward(r->tm.plan);
    return st;
}

static int param_index(ct_plan *p, const char *name) {
    for (int i = 0; i < ct_plan_num_params(p); i++) {
        const char *n;
        ct_plan_param_info(p, i, &n, NULL, NULL);
        if (!strcmp(n, name)) return i;
    }
    return -1;
}

static const ct_scale_record *last_event(ct_scaler *s) {
    const ct_scale_record *a;
    int na;
    ct_scaler_history(s, &a, &na);
    return na ? &a[na - 1] : NULL;
}

TEST(inf_gradient_skips_the_step_and_names_the_tensor) {
    rig r;
    CHECK_OK(r.ctx, rig_make(&r));
    ct_scaler *s;
    CHECK_OK(r.ctx, ct_scaler_create(r.ctx, NULL, &s));
    int skipped = -1;
    CHECK_OK(r.ctx, fwd_bwd(&r, s)); /* one clean step so the optimizer state is non-zero */
    CHECK_OK(r.ctx, ct_scaler_step(s, r.tm.plan, r.opt, &skipped));
    CHECK(skipped == 0);
    float *w, *st;
    size_t n, ns;
    ct_plan_param_arena(r.tm.plan, &w, NULL, &n);
    ct_optimizer_state(r.opt, &st, &ns);
    float *w0 = malloc(n * 4), *s0 = malloc(ns * 4);
    memcpy(w0, w, n * 4);
    memcpy(s0, st, ns * 4);
    uint64_t steps0 = ct_optimizer_steps(r.opt);
    CHECK_OK(r.ctx, fwd_bwd(&r, s));
    int fc2 = param_index(r.tm.plan, "fc2.weight");
    ct_tensor g;
    ct_plan_param_info(r.tm.plan, fc2, NULL, NULL, &g);
    ((float *)g.data)[5] = INFINITY;
    CHECK_OK(r.ctx, ct_scaler_step(s, r.tm.plan, r.opt, &skipped));
    CHECK(skipped == 1);
    CHECK(memcmp(w, w0, n * 4) == 0);  /* weights bit-identical */
    CHECK(memcmp(st, s0, ns * 4) == 0); /* optimizer state bit-identical */
    CHECK(ct_optimizer_steps(r.opt) == steps0);
    CHECK(ct_scaler_scale(s) == 32768.0f); /* backed off from 65536 */
    const ct_scale_record *e = last_event(s);
    CHECK(e && e->event == CT_SCALE_BACKOFF && e->step == 1 && e->scale == 32768.0f);
    CHECK_MSG(!strcmp(e->tensor, "fc2.weight"), "history names '%s'", e->tensor);
    /* NaN in an earlier tensor is named instead */
    CHECK_OK(r.ctx, fwd_bwd(&r, s));
    ct_plan_param_info(r.tm.plan, param_index(r.tm.plan, "fc1.bias"), NULL, NULL, &g);
    ((float *)g.data)[0] = NAN;
    ct_plan_param_info(r.tm.plan, fc2, NULL, NULL, &g);
    ((float *)g.data)[0] = -INFINITY;
    CHECK_OK(r.ctx, ct_scaler_step(s, r.tm.plan, r.opt, &skipped));
    CHECK(skipped == 1 && !strcmp(last_event(s)->tensor, "fc1.bias"));
    free(w0);
    free(s0);
    ct_scaler_free(s);
    rig_free(&r);
}

TEST(loss_seed_carries_the_scale_and_unscale_restores_gradients) {
    rig r;
    CHECK_OK(r.ctx, rig_make(&r));
    ct_scaler *s;
    ct_scaler_opts o;
    ct_scaler_opts_default(&o);
    o.init_scale = 1024.0f;
    CHECK_OK(r.ctx, ct_scaler_create(r.ctx, &o, &s));
    float *g;
    size_t n;
    CHECK_OK(r.ctx, ct_plan_set_loss_scale(r.tm.plan, 1.0f));
    CHECK_OK(r.ctx, ct_plan_forward(r.tm.plan, 1));
    CHECK_OK(r.ctx, ct_plan_backward(r.tm.plan));
    ct_plan_param_arena(r.tm.plan, NULL, &g, &n);
    float *g1 = malloc(n * 4);
    memcpy(g1, g, n * 4);
    CHECK_OK(r.ctx, fwd_bwd(&r, s));
    int found, param;
    CHECK_OK(r.ctx, ct_scaler_unscale(s, r.tm.plan, &found, &param));
    CHECK(!found && param == -1);
    CHECK(test_max_rel(g, g1, n, 1e-6) < 1e-6); /* power-of-two scale: exact up to rounding of tiny values */
    CHECK(ct_plan_set_loss_scale(r.tm.plan, 0.0f) == CT_E_INVALID_ARG);
    free(g1);
    ct_scaler_free(s);
    rig_free(&r);
}

/* The scale sequence with no plan: update(found) drives the state machine. */
TEST(growth_hysteresis_and_clamps) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_scaler_opts o;
    ct_scaler_opts_default(&o);
    o.init_scale = 8.0f;
    o.growth_interval = 3;
    o.hysteresis = 2;
    o.min_scale = 2.0f;
    o.max_scale = 32.0f;
    o.floor_patience = 3;
    ct_scaler *s;
    CHECK_OK(ctx, ct_scaler_create(ctx, &o, &s));
    /* 3 clean steps grow 8 -> 16, 3 more -> 32, then clamp at max */
    for (int i = 0; i < 9; i++) CHECK_OK(ctx, ct_scaler_update(s, NULL, 0, -1));
    CHECK(ct_scaler_scale(s) == 32.0f);
    /* hysteresis 2: the first overflow only skips, the second backs off */
    CHECK_OK(ctx, ct_scaler_update(s, NULL, 1, -1));
    CHECK(ct_scaler_scale(s) == 32.0f && last_event(s)->event == CT_SCALE_OVERFLOW);
    CHECK_OK(ctx, ct_scaler_update(s, NULL, 1, -1));
    CHECK(ct_scaler_scale(s) == 16.0f && last_event(s)->event == CT_SCALE_BACKOFF);
    /* a clean step resets hysteresis: overflow -> skip again */
    CHECK_OK(ctx, ct_scaler_update(s, NULL, 0, -1));
    CHECK_OK(ctx, ct_scaler_update(s, NULL, 1, -1));
    CHECK(ct_scaler_scale(s) == 16.0f);
    /* an overflow resets the growth tracker */
    CHECK_OK(ctx, ct_scaler_update(s, NULL, 0, -1));
    CHECK_OK(ctx, ct_scaler_update(s, NULL, 0, -1));
    CHECK(ct_scaler_scale(s) == 16.0f);
    CHECK_OK(ctx, ct_scaler_update(s, NULL, 0, -1));
    CHECK(ct_scaler_scale(s) == 32.0f && last_event(s)->event == CT_SCALE_GROWTH);
    /* down to the floor: 32 -> 16 -> 8 -> 4 -> 2, never below */
    for (int i = 0; i < 8; i++) CHECK_OK(ctx, ct_scaler_update(s, NULL, 1, -1));
    CHECK(ct_scaler_scale(s) == 2.0f);
    ct_scaler_state st;
    ct_scaler_get_state(s, &st);
    CHECK(st.skipped == 11);
    /* floor_patience (3) overflows in a row at min_scale, after hysteresis
     * tolerated the first: an error with advice */
    ct_status r1 = ct_scaler_update(s, NULL, 1, -1), r2 = ct_scaler_update(s, NULL, 1, -1);
    ct_status r3 = ct_scaler_update(s, NULL, 1, -1), r4 = ct_scaler_update(s, NULL, 1, -1);
    CHECK(r1 == CT_OK && r2 == CT_OK && r3 == CT_OK && r4 == CT_E_NONFINITE);
    CHECK(last_event(s)->event == CT_SCALE_OVERFLOW && last_event(s)->scale == 2.0f);
    const char *m = ct_context_last_error(ctx);
    CHECK_MSG(contains(m, "min_scale") && contains(m, "learning rate") && contains(m, "bf16"), "%s", m);
    CHECK(ct_scaler_scale(s) == 2.0f);
    ct_scaler_free(s);
    /* the stop policy raises a flag instead */
    o.floor_policy = CT_SCALER_FLOOR_STOP;
    o.init_scale = 2.0f;
    o.hysteresis = 1;
    CHECK_OK(ctx, ct_scaler_create(ctx, &o, &s));
    for (int i = 0; i < 2; i++) CHECK_OK(ctx, ct_scaler_update(s, NULL, 1, -1));
    CHECK(!ct_scaler_should_stop(s));
    CHECK_OK(ctx, ct_scaler_update(s, NULL, 1, -1));
    CHECK(ct_scaler_should_stop(s));
    ct_scaler_free(s);
    ct_context_free(ctx);
}

TEST(static_scale_never_changes) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_scaler_opts o;
    ct_scaler_opts_default(&o);
    o.dynamic = 0;
    o.init_scale = 1024.0f;
    o.growth_interval = 1;
    ct_scaler *s;
    CHECK_OK(ctx, ct_scaler_create(ctx, &o, &s));
    for (int i = 0; i < 5; i++) CHECK_OK(ctx, ct_scaler_update(s, NULL, i % 2, -1));
    CHECK(ct_scaler_scale(s) == 1024.0f && last_event(s)->event == CT_SCALE_OVERFLOW);
    ct_scaler_totals t;
    ct_scaler_get_totals(s, &t);
    CHECK(t.overflows == 2 && t.backoffs == 0 && t.growths == 0 && t.events == 2);
    ct_scaler_free(s);
    ct_context_free(ctx);
}

TEST(state_round_trip_resumes_the_same_sequence) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_scaler_opts o;
    ct_scaler_opts_default(&o);
    o.growth_interval = 4;
    o.hysteresis = 2;
    ct_scaler *a, *b;
    CHECK_OK(ctx, ct_scaler_create(ctx, &o, &a));
    const int pattern[] = {0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0};
    const int n = (int)(sizeof pattern / sizeof pattern[0]);
    float seq[64];
    for (int i = 0; i < n; i++) {
        if (i == 9) { /* save, then continue in a fresh scaler */
            ct_scaler_state st;
            ct_scaler_get_state(a, &st);
            CHECK_OK(ctx, ct_scaler_create(ctx, &o, &b));
            CHECK_OK(ctx, ct_scaler_set_state(b, &st));
        }
        CHECK_OK(ctx, ct_scaler_update(a, NULL, pattern[i], -1));
        seq[i] = ct_scaler_scale(a);
    }
    for (int i = 9; i < n; i++) {
        CHECK_OK(ctx, ct_scaler_update(b, NULL, pattern[i], -1));
        CHECK_MSG(ct_scaler_scale(b) == seq[i], "step %d: %g vs %g", i, (double)ct_scaler_scale(b), (double)seq[i]);
    }
    /* the history and totals continue bit for bit too */
    ct_scaler_state *sa = malloc(sizeof *sa), *sb = malloc(sizeof *sb);
    ct_scaler_get_state(a, sa);
    ct_scaler_get_state(b, sb);
    CHECK(sa->n_history > 0 && sa->events == (uint64_t)sa->n_history && sa->growths > 0 && sa->backoffs > 0);
    CHECK(!memcmp(sa, sb, sizeof *sa));
    ct_scaler_state bad = {0};
    CHECK(ct_scaler_set_state(b, &bad) == CT_E_CORRUPT);
    /* inconsistent histories and totals are rejected, the state unchanged */
    *sb = *sa;
    sb->history[0].event = (ct_scale_event)7;
    CHECK(ct_scaler_set_state(b, sb) == CT_E_CORRUPT);
    *sb = *sa;
    sb->growths++;
    CHECK(ct_scaler_set_state(b, sb) == CT_E_CORRUPT);
    *sb = *sa;
    sb->n_history = CT_SCALER_HISTORY + 1;
    CHECK(ct_scaler_set_state(b, sb) == CT_E_CORRUPT);
    *sb = *sa;
    memset(sb->history[1].tensor, 'x', sizeof sb->history[1].tensor);
    CHECK(ct_scaler_set_state(b, sb) == CT_E_CORRUPT);
    ct_scaler_get_state(b, sb);
    CHECK(!memcmp(sa, sb, sizeof *sa));
    free(sa);
    free(sb);
    ct_scaler_free(a);
    ct_scaler_free(b);
    ct_context_free(ctx);
}

/* The history of a scripted sequence, event by event, with the tensor
 * names of a real plan; ct_scaler_last_events gives each update's events. */
TEST(history_of_a_scripted_sequence) {
    rig r;
    CHECK_OK(r.ctx, rig_make(&r));
    ct_scaler_opts o;
    ct_scaler_opts_default(&o);
    o.init_scale = 64.0f;
    o.growth_interval = 2;
    o.min_scale = 16.0f;
    ct_scaler *s;
    CHECK_OK(r.ctx, ct_scaler_create(r.ctx, &o, &s));
    const ct_scale_record *ev;
    int n;
    ct_scaler_last_events(s, &ev, &n);
    CHECK(n == 0);
    int fc1b = param_index(r.tm.plan, "fc1.bias"), fc2 = param_index(r.tm.plan, "fc2.weight");
    /* step: 0 1 2 3 4 5 6 7 (1: overflow in fc2.weight, 2: in fc1.bias) */
    const int script[] = {0, 0, 1, 2, 2, 0, 0, 1};
    const int n_events[] = {0, 1, 2, 2, 2, 0, 1, 2}; /* growth at 1 and 6; overflow + backoff otherwise */
    for (int i = 0; i < 8; i++) {
        int found = script[i] != 0, param = script[i] == 1 ? fc2 : script[i] == 2 ? fc1b : -1;
        CHECK_OK(r.ctx, ct_scaler_update(s, r.tm.plan, found, param));
        ct_scaler_last_events(s, &ev, &n);
        CHECK_MSG(n == n_events[i], "step %d: %d events", i, n);
        for (int k = 0; k < n; k++) CHECK(ev[k].step == (uint64_t)i);
    }
    static const struct {
        uint64_t step;
        ct_scale_event ev;
        float scale;
        const char *tensor;
    } want[] = {{1, CT_SCALE_GROWTH, 128, ""},        {2, CT_SCALE_OVERFLOW, 128, "fc2.weight"},
                {2, CT_SCALE_BACKOFF, 64, "fc2.weight"}, {3, CT_SCALE_OVERFLOW, 64, "fc1.bias"},
                {3, CT_SCALE_BACKOFF, 32, "fc1.bias"},   {4, CT_SCALE_OVERFLOW, 32, "fc1.bias"},
                {4, CT_SCALE_BACKOFF, 16, "fc1.bias"},   {6, CT_SCALE_GROWTH, 32, ""},
                {7, CT_SCALE_OVERFLOW, 32, "fc2.weight"}, {7, CT_SCALE_BACKOFF, 16, "fc2.weight"}};
    const int nw = (int)(sizeof want / sizeof want[0]);
    ct_scaler_history(s, &ev, &n);
    CHECK_MSG(n == nw, "%d events", n);
    for (int i = 0; i < n && i < nw; i++) {
        CHECK_MSG(ev[i].step == want[i].step && ev[i].event == want[i].ev && ev[i].scale == want[i].scale &&
                      !strcmp(ev[i].tensor, want[i].tensor),
                  "event %d: step %llu %s scale %g '%s'", i, (unsigned long long)ev[i].step,
                  ct_scale_event_name(ev[i].event), (double)ev[i].scale, ev[i].tensor);
        CHECK(ev[i].param == (!want[i].tensor[0] ? -1 : !strcmp(want[i].tensor, "fc2.weight") ? fc2 : fc1b));
    }
    /* at min_scale an overflow is recorded without a backoff */
    CHECK_OK(r.ctx, ct_scaler_update(s, r.tm.plan, 1, fc2));
    ct_scaler_last_events(s, &ev, &n);
    CHECK(n == 1 && ev[0].event == CT_SCALE_OVERFLOW && ev[0].scale == 16.0f && ev[0].step == 8);
    ct_scaler_totals t;
    ct_scaler_get_totals(s, &t);
    CHECK(t.overflows == 5 && t.backoffs == 4 && t.growths == 2 && t.events == 11);
    CHECK(!strcmp(ct_scale_event_name(CT_SCALE_OVERFLOW), "overflow") &&
          !strcmp(ct_scale_event_name(CT_SCALE_BACKOFF), "backoff") &&
          !strcmp(ct_scale_event_name(CT_SCALE_GROWTH), "growth") && !strcmp(ct_scale_event_name(0), "?"));
    ct_scaler_free(s);
    rig_free(&r);
}

/* More events than the ring holds: it keeps the newest CT_SCALER_HISTORY,
 * oldest first, and the totals stay exact. */
TEST(ring_overflow_keeps_exact_totals) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_scaler_opts o;
    ct_scaler_opts_default(&o);
    o.init_scale = 1024.0f;
    o.growth_interval = 1;
    ct_scaler *s;
    CHECK_OK(ctx, ct_scaler_create(ctx, &o, &s));
    const int pairs = 300; /* step 2i: overflow + backoff to 512; step 2i+1: growth back to 1024 */
    for (int i = 0; i < 2 * pairs; i++) CHECK_OK(ctx, ct_scaler_update(s, NULL, i % 2 == 0, -1));
    ct_scaler_totals t;
    ct_scaler_get_totals(s, &t);
    CHECK(t.overflows == 300 && t.backoffs == 300 && t.growths == 300 && t.events == 900);
    const ct_scale_record *ev;
    int n;
    ct_scaler_history(s, &ev, &n);
    CHECK(n == CT_SCALER_HISTORY);
    for (int i = 0; i < n; i++) {
        int k = 900 - n + i; /* the event's index in the run: pair k / 3, kind k % 3 */
        ct_scale_event want = k % 3 == 0 ? CT_SCALE_OVERFLOW : k % 3 == 1 ? CT_SCALE_BACKOFF : CT_SCALE_GROWTH;
        uint64_t step = (uint64_t)(2 * (k / 3) + (k % 3 == 2));
        float scale = k % 3 == 0 ? 1024.0f : k % 3 == 1 ? 512.0f : 1024.0f;
        CHECK_MSG(ev[i].event == want && ev[i].step == step && ev[i].scale == scale && ev[i].param == -1,
                  "history[%d]: %s at %llu", i, ct_scale_event_name(ev[i].event), (unsigned long long)ev[i].step);
    }
    /* the state carries it all */
    ct_scaler_state *st = malloc(sizeof *st);
    ct_scaler_get_state(s, st);
    CHECK(st->n_history == CT_SCALER_HISTORY && st->events == 900 && st->skipped == 300 && st->step == 600);
    ct_scaler *b;
    CHECK_OK(ctx, ct_scaler_create(ctx, &o, &b));
    CHECK_OK(ctx, ct_scaler_set_state(b, st));
    ct_scaler_last_events(b, &ev, &n);
    CHECK(n == 0);
    ct_scaler_get_totals(b, &t);
    CHECK(t.overflows == 300 && t.backoffs == 300 && t.growths == 300 && t.events == 900);
    free(st);
    ct_scaler_free(b);
    ct_scaler_free(s);
    ct_context_free(ctx);
}

/* ct_metrics_log_scaler_event: one "amp" JSON line per event, step 1-based. */
TEST(events_as_metrics_lines) {
    rig r;
    CHECK_OK(r.ctx, rig_make(&r));
    ct_scaler_opts o;
    ct_scaler_opts_default(&o);
    o.init_scale = 8.0f;
    o.growth_interval = 1;
    ct_scaler *s;
    CHECK_OK(r.ctx, ct_scaler_create(r.ctx, &o, &s));
    char path[] = "/tmp/ct_scaler_metrics_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    ct_metrics *mx;
    CHECK_OK(r.ctx, ct_metrics_open(r.ctx, path, 0, NULL, &mx));
    const int script[] = {0, 1}; /* step 1: growth; step 2: overflow + backoff in fc1.bias */
    for (int i = 0; i < 2; i++) {
        CHECK_OK(r.ctx, ct_scaler_update(s, r.tm.plan, script[i], script[i] ? param_index(r.tm.plan, "fc1.bias") : -1));
        const ct_scale_record *ev;
        int n;
        ct_scaler_last_events(s, &ev, &n);
        for (int k = 0; k < n; k++) CHECK_OK(r.ctx, ct_metrics_log_scaler_event(mx, &ev[k]));
    }
    CHECK_OK(r.ctx, ct_metrics_close(mx));
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    char line[512];
    const char *want[] = {NULL, /* the run line */
                          "{\"type\":\"amp\",\"step\":1,\"event\":\"growth\",\"scale\":16}",
                          "{\"type\":\"amp\",\"step\":2,\"event\":\"overflow\",\"scale\":16,\"first_nonfinite\":\"fc1.bias\"}",
                          "{\"type\":\"amp\",\"step\":2,\"event\":\"backoff\",\"scale\":8,\"first_nonfinite\":\"fc1.bias\"}"};
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (n > 0 && n < 4) CHECK_MSG(!strcmp(line, want[n]), "line %d: %s", n + 1, line);
        n++;
    }
    CHECK(n == 4);
    if (f) fclose(f);
    unlink(path);
    CHECK(ct_metrics_log_scaler_event(NULL, NULL) == CT_E_INVALID_ARG);
    ct_scaler_free(s);
    rig_free(&r);
}

TEST(bad_options_are_rejected) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_scaler_opts o;
    ct_scaler *s = NULL;
    ct_scaler_opts_default(&o);
    o.backoff_factor = 1.5f;
    CHECK(ct_scaler_create(ctx, &o, &s) == CT_E_INVALID_ARG && !s);
    CHECK(contains(ct_context_last_error(ctx), "backoff_factor"));
    ct_scaler_opts_default(&o);
    o.init_scale = 0.5f; /* below min_scale 1 */
    CHECK(ct_scaler_create(ctx, &o, &s) == CT_E_INVALID_ARG);
    ct_scaler_opts_default(&o);
    o.growth_interval = 0;
    CHECK(ct_scaler_create(ctx, &o, &s) == CT_E_INVALID_ARG);
    ct_context_free(ctx);
}

TEST_MAIN(T(inf_gradient_skips_the_step_and_names_the_tensor),
          T(loss_seed_carries_the_scale_and_unscale_restores_gradients), T(growth_hysteresis_and_clamps),
          T(static_scale_never_changes), T(state_round_trip_resumes_the_same_sequence),
          T(history_of_a_scripted_sequence), T(ring_overflow_keeps_exact_totals),
          T(events_as_metrics_lines), T(bad_options_are_rejected))
