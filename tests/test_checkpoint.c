/* tests/test_checkpoint.c - safetensors weights and checkpoints: save/load
 * round trip of params, buffers, optimizer state and metadata bit for bit
 * (and training continues identically, dropout included); every flipped
 * byte and every truncation of a file is CT_E_CORRUPT without a crash and
 * leaves the plan untouched; a checkpoint of another model or optimizer is
 * CT_E_CONFIG naming the tensor; keep_last; atomic `latest`; the recipe's
 * JSON round trip; the loader's skip; the loss-scale history (a full ring
 * round trip, the resumed scaler continuing it, a train state from before
 * the history still loading); the PyTorch reader
 * (scripts/load_safetensors.py, skipped without python3-torch unless
 * CT_REQUIRE_TORCH=1). */
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cjson/cJSON.h>

#include "test.h"

static char g_tmp[256];

static void cleanup(void) {
    if (g_tmp[0]) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
        if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_tmp);
    }
}

static const char *tmpdir(void) {
    if (!g_tmp[0]) {
        snprintf(g_tmp, sizeof g_tmp, "/tmp/ct_ckpt_test_XXXXXX");
        if (!mkdtemp(g_tmp)) {
            perror("mkdtemp");
            exit(2);
        }
        atexit(cleanup);
    }
    return g_tmp;
}

static void path_in(char *out, size_t len, const char *a, const char *b) { snprintf(out, len, "%s/%s", a, b); }

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void write_all(const char *p, const unsigned char *b, size_t n) {
    FILE *f = fopen(p, "wb");
    if (!f) return;
    fwrite(b, 1, n, f);
    fclose(f);
}

static void copy_file(const char *from, const char *to) {
    size_t n;
    unsigned char *b = test_read_file(from, &n);
    if (b) write_all(to, b, n);
    free(b);
}

/* An MLP with dropout (x 8x6, hidden [5], 3 classes) or a CNN with
 * batchnorm buffers (x 4x1x8x8, channels [3]) and an optimizer. */
typedef struct {
    ct_context *ctx;
    test_model m;
    ct_optimizer *opt;
} rig;

static ct_status rig_make(rig *r, int cnn, int64_t hidden, ct_optim_kind kind, float momentum) {
    memset(r, 0, sizeof *r);
    r->ctx = test_ctx(-1, 1);
    ct_status s;
    if (cnn) s = test_model_build(r->ctx, 4, (int64_t[]){4, 1, 8, 8}, 1, (int64_t[]){3}, 3, 0.0f, 0.0f, &r->m);
    else s = test_model_build(r->ctx, 2, (int64_t[]){8, 6}, 1, (int64_t[]){hidden}, 3, 0.3f, 0.0f, &r->m);
    if (s != CT_OK) return s;
    ct_optim_opts oo;
    ct_optim_opts_default(&oo, kind);
    oo.momentum = momentum;
    return ct_optimizer_create(r->m.plan, &oo, &r->opt);
}

static void rig_free(rig *r) {
    ct_optimizer_free(r->opt);
    ct_plan_free(r->m.plan);
    ct_context_free(r->ctx);
}

static ct_status rig_steps(rig *r, int n) {
    for (int i = 0; i < n; i++) {
        ct_status s = ct_plan_forward(r->m.plan, 1);
        if (s == CT_OK) s = ct_plan_backward(r->m.plan);
        if (s == CT_OK) s = ct_optimizer_set_lr(r->opt, 0.05f);
        if (s == CT_OK) s = ct_optimizer_step(r->opt);
        if (s != CT_OK) return s;
    }
    return CT_OK;
}

/* memcmp of params, buffers and optimizer state */
static int rig_same(rig *a, rig *b) {
    float *pa, *pb, *ba, *bb, *sa, *sb;
    size_t na, nb, nba, nbb, nsa, nsb;
    ct_plan_param_arena(a->m.plan, &pa, NULL, &na);
    ct_plan_param_arena(b->m.plan, &pb, NULL, &nb);
    ct_plan_buffer_arena(a->m.plan, &ba, &nba);
    ct_plan_buffer_arena(b->m.plan, &bb, &nbb);
    ct_optimizer_state(a->opt, &sa, &nsa);
    ct_optimizer_state(b->opt, &sb, &nsb);
    return na == nb && nba == nbb && nsa == nsb && !memcmp(pa, pb, na * 4) && (!nba || !memcmp(ba, bb, nba * 4)) &&
           (!nsa || !memcmp(sa, sb, nsa * 4)) && ct_optimizer_steps(a->opt) == ct_optimizer_steps(b->opt);
}

static void scramble(rig *r) {
    float *p, *b, *s;
    size_t n, nb, ns;
    ct_plan_param_arena(r->m.plan, &p, NULL, &n);
    ct_plan_buffer_arena(r->m.plan, &b, &nb);
    ct_optimizer_state(r->opt, &s, &ns);
    for (size_t i = 0; i < n; i++) p[i] = 7.0f;
    for (size_t i = 0; i < nb; i++) b[i] = -3.0f;
    /* the optimizer state's real elements only (its padding is not saved) */
    for (size_t blk = 0; n && blk < ns / n; blk++)
        for (int t = 0; t < ct_plan_num_params(r->m.plan); t++) {
            ct_tensor v;
            ct_plan_param_info(r->m.plan, t, NULL, &v, NULL);
            size_t off = (size_t)((float *)v.data - p), len = (size_t)ct_tensor_numel(&v);
            for (size_t i = 0; i < len; i++) s[blk * n + off + i] = 0.25f;
        }
}

static void fill_state(ct_train_state *st) {
    ct_train_state_init(st);
    st->step = 3;
    st->epoch = 1;
    st->batch_in_epoch = 2;
    st->has_schedule = 1;
    st->schedule = (ct_schedule_state){1.0 / 3.0, 0.123456789012345678, 2, 1, 7};
    st->has_early_stop = 1;
    ct_early_stop_init(NULL, &st->early_stop, 4, 0.001, 0);
    st->early_stop.wait = 1;
    st->early_stop.epoch = 2;
    st->has_scaler = 1;
    ct_scaler_state *c = &st->scaler; /* field by field: the padding stays zero for memcmp */
    c->scale = 32768.0f;
    c->growth_tracker = 17;
    c->hysteresis_left = 1;
    c->step = 3;
    c->skipped = 1;
    c->backoffs = 1;
    c->events = 2;
    c->n_history = 2;
    c->history[0].step = c->history[1].step = 1;
    c->history[0].event = CT_SCALE_OVERFLOW;
    c->history[0].scale = 65536.0f;
    c->history[1].event = CT_SCALE_BACKOFF;
    c->history[1].scale = 32768.0f;
    c->history[0].param = c->history[1].param = 2;
    snprintf(c->history[0].tensor, sizeof c->history[0].tensor, "fc2.weight \"quoted\"");
    snprintf(c->history[1].tensor, sizeof c->history[1].tensor, "fc2.weight \"quoted\"");
    st->epoch_loss_sum = 2.0 / 3.0;
    st->epoch_correct = 11;
    st->epoch_seen = 16;
    st->test_loss = 0.1;
    st->test_acc = 0.9;
    snprintf(st->recipe_json, sizeof st->recipe_json, "{\"model\": \"mlp\", \"note\": \"quote \\\" and \\\\\"}");
}

/* Scaler updates [from, to): every other one overflows (overflow + backoff),
 * the others grow (growth_interval 1), naming the plan's parameters in turn. */
static ct_status drive_scaler(ct_scaler *s, ct_plan *plan, int from, int to) {
    for (int i = from; i < to; i++) {
        ct_status st = ct_scaler_update(s, plan, i % 2 == 0, i % 2 == 0 ? (i / 2) % ct_plan_num_params(plan) : -1);
        if (st != CT_OK) return st;
    }
    return CT_OK;
}

/* The loss-scale history and totals through a checkpoint: a full ring
 * round-trips bit for bit and the resumed scaler continues it identically. */
static void scaler_history_roundtrip(rig *a, const char *dir) {
    ct_scaler_opts so;
    ct_scaler_opts_default(&so);
    so.init_scale = 1024.0f;
    so.growth_interval = 1;
    ct_scaler *sa, *sb;
    CHECK_OK(a->ctx, ct_scaler_create(a->ctx, &so, &sa));
    CHECK_OK(a->ctx, ct_scaler_create(a->ctx, &so, &sb));
    CHECK_OK(a->ctx, drive_scaler(sa, a->m.plan, 0, 200)); /* 300 events: the ring is full */
    ct_train_state *st = malloc(sizeof *st), *got = malloc(sizeof *got);
    fill_state(st);
    ct_scaler_get_state(sa, &st->scaler);
    CHECK(st->scaler.n_history == CT_SCALER_HISTORY && st->scaler.events == 300 && st->scaler.history[1].tensor[0]);
    CHECK_OK(a->ctx, ct_checkpoint_save(a->ctx, dir, a->m.plan, a->opt, st, 2));
    CHECK_OK(a->ctx, ct_checkpoint_load(a->ctx, dir, NULL, NULL, got));
    CHECK(got->has_scaler && !memcmp(&got->scaler, &st->scaler, sizeof st->scaler));
    CHECK_OK(a->ctx, ct_scaler_set_state(sb, &got->scaler));
    CHECK_OK(a->ctx, drive_scaler(sa, a->m.plan, 200, 260));
    CHECK_OK(a->ctx, drive_scaler(sb, a->m.plan, 200, 260));
    ct_scaler_get_state(sa, &st->scaler);
    ct_scaler_get_state(sb, &got->scaler);
    CHECK(!memcmp(&got->scaler, &st->scaler, sizeof st->scaler) && st->scaler.events == 390);
    free(st);
    free(got);
    ct_scaler_free(sa);
    ct_scaler_free(sb);
}

static void roundtrip(int cnn, ct_optim_kind kind, float momentum) {
    rig a, b;
    CHECK_OK(a.ctx, rig_make(&a, cnn, 5, kind, momentum));
    CHECK_OK(b.ctx, rig_make(&b, cnn, 5, kind, momentum));
    CHECK_OK(a.ctx, rig_steps(&a, 3));
    char dir[512];
    snprintf(dir, sizeof dir, "%s/rt_%d_%d", tmpdir(), cnn, (int)kind);
    ct_train_state st, got;
    fill_state(&st);
    CHECK_OK(a.ctx, ct_checkpoint_save(a.ctx, dir, a.m.plan, a.opt, &st, 2));
    scramble(&b);
    CHECK(!rig_same(&a, &b));
    CHECK_OK(b.ctx, ct_checkpoint_load(b.ctx, dir, b.m.plan, b.opt, &got));
    CHECK(rig_same(&a, &b));
    CHECK(got.step == 3 && got.epoch == 1 && got.batch_in_epoch == 2 && got.optimizer_steps == 3);
    CHECK(got.has_schedule && !memcmp(&got.schedule, &st.schedule, sizeof st.schedule));
    CHECK(got.has_early_stop && got.early_stop.best == INFINITY && got.early_stop.best_epoch == -1 &&
          got.early_stop.wait == 1 && got.early_stop.epoch == 2 && got.early_stop.min_delta == 0.001 &&
          got.early_stop.patience == 4);
    CHECK(got.has_scaler && !memcmp(&got.scaler, &st.scaler, sizeof st.scaler));
    CHECK(got.epoch_loss_sum == st.epoch_loss_sum && got.epoch_correct == 11 && got.epoch_seen == 16);
    CHECK(got.test_loss == 0.1 && got.test_acc == 0.9);
    CHECK(!strcmp(got.recipe_json, st.recipe_json));
    CHECK(strstr(got.path, "step-000003") != NULL);
    /* training continues identically (dropout masks follow the step) */
    CHECK_OK(a.ctx, rig_steps(&a, 2));
    CHECK_OK(b.ctx, rig_steps(&b, 2));
    CHECK(rig_same(&a, &b));
    /* metadata only (plan NULL) */
    ct_train_state meta;
    CHECK_OK(b.ctx, ct_checkpoint_load(b.ctx, dir, NULL, NULL, &meta));
    CHECK(meta.step == 3 && !strcmp(meta.recipe_json, st.recipe_json));
    snprintf(dir, sizeof dir, "%s/rt_scaler_%d_%d", tmpdir(), cnn, (int)kind);
    scaler_history_roundtrip(&a, dir);
    rig_free(&a);
    rig_free(&b);
}

TEST(roundtrip_mlp_adamw_dropout) { roundtrip(0, CT_OPTIM_ADAMW, 0.0f); }
TEST(roundtrip_cnn_sgd_momentum_buffers) { roundtrip(1, CT_OPTIM_SGD, 0.9f); }
TEST(roundtrip_mlp_rmsprop) { roundtrip(0, CT_OPTIM_RMSPROP, 0.5f); }
TEST(roundtrip_cnn_lamb) { roundtrip(1, CT_OPTIM_LAMB, 0.0f); }

/* Saves a small checkpoint and returns its step directory. */
static int small_ckpt(rig *a, const char *name, char *stepdir, size_t len) {
    if (rig_make(a, 0, 5, CT_OPTIM_ADAMW, 0) != CT_OK || rig_steps(a, 2) != CT_OK) return 0;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir(), name);
    ct_train_state st;
    fill_state(&st);
    if (ct_checkpoint_save(a->ctx, dir, a->m.plan, a->opt, &st, 3) != CT_OK) return 0;
    snprintf(stepdir, len, "%s/step-000003", dir);
    return 1;
}

/* Every single-byte change of either file: CT_E_CORRUPT, plan untouched. */
TEST(flipped_bytes_are_corrupt) {
    rig a, b;
    char sd[600], p[700], keep[720];
    CHECK(small_ckpt(&a, "flip", sd, sizeof sd));
    CHECK_OK(b.ctx, rig_make(&b, 0, 5, CT_OPTIM_ADAMW, 0));
    scramble(&b);
    rig c;
    CHECK_OK(c.ctx, rig_make(&c, 0, 5, CT_OPTIM_ADAMW, 0));
    scramble(&c);
    const char *files[] = {"model.safetensors", "train_state.safetensors"};
    int tried = 0;
    for (int fi = 0; fi < 2; fi++) {
        path_in(p, sizeof p, sd, files[fi]);
        snprintf(keep, sizeof keep, "%s.orig", p);
        copy_file(p, keep);
        size_t n;
        unsigned char *orig = test_read_file(keep, &n);
        CHECK(orig && n > 100);
        for (size_t i = 0; i < n; i++) {
            unsigned char *mod = malloc(n);
            memcpy(mod, orig, n);
            mod[i] ^= (unsigned char)(1u << (i % 8));
            write_all(p, mod, n);
            free(mod);
            ct_status s = ct_checkpoint_load(b.ctx, sd, b.m.plan, b.opt, NULL);
            CHECK_MSG(s == CT_E_CORRUPT, "%s byte %zu: %d %s", files[fi], i, (int)s, ct_context_last_error(b.ctx));
            tried++;
        }
        CHECK(rig_same(&b, &c)); /* nothing was written into the plan */
        write_all(p, orig, n);
        free(orig);
        unlink(keep);
    }
    CHECK_OK(b.ctx, ct_checkpoint_load(b.ctx, sd, b.m.plan, b.opt, NULL));
    CHECK(rig_same(&a, &b));
    printf("    %d flipped bytes rejected\n", tried);
    rig_free(&a);
    rig_free(&b);
    rig_free(&c);
}

/* A train state written before the loss-scale history was kept (no
 * scaler.backoffs/growths/events/history keys) still loads: an empty
 * history, events = skipped, and the scaler accepts it. */
TEST(train_state_without_scaler_history_loads) {
    rig a;
    char sd[600], p[700];
    CHECK(small_ckpt(&a, "oldscaler", sd, sizeof sd));
    path_in(p, sizeof p, sd, "train_state.safetensors");
    size_t n;
    unsigned char *buf = test_read_file(p, &n);
    CHECK(buf && n > 8);
    uint64_t hl;
    memcpy(&hl, buf, 8);
    char *hdr = malloc(hl + 1);
    memcpy(hdr, buf + 8, hl);
    hdr[hl] = 0;
    cJSON *root = cJSON_Parse(hdr), *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    CHECK(meta && cJSON_GetObjectItemCaseSensitive(meta, "scaler.history"));
    const char *drop[] = {"scaler.backoffs", "scaler.growths", "scaler.events", "scaler.history"};
    for (int i = 0; i < 4; i++) cJSON_DeleteItemFromObjectCaseSensitive(meta, drop[i]);
    cJSON_ReplaceItemInObjectCaseSensitive(meta, "ctrain_crc32", cJSON_CreateString("00000000"));
    char *js = cJSON_PrintUnformatted(root);
    size_t jl = strlen(js), nhl = (jl + 8 + 7) / 8 * 8 - 8, data = n - 8 - (size_t)hl;
    unsigned char *out = malloc(8 + nhl + data);
    uint64_t nhl64 = nhl;
    memcpy(out, &nhl64, 8);
    memcpy(out + 8, js, jl);
    memset(out + 8 + jl, ' ', nhl - jl);
    memcpy(out + 8 + nhl, buf + 8 + hl, data);
    char hex[9];
    snprintf(hex, sizeof hex, "%08lx", (unsigned long)crc32(0L, out, (uInt)(8 + nhl + data)));
    char *at = strstr((char *)out + 8, "\"ctrain_crc32\":\"00000000\"");
    CHECK(at != NULL);
    if (at) memcpy(at + strlen("\"ctrain_crc32\":\""), hex, 8);
    write_all(p, out, 8 + nhl + data);
    ct_train_state *got = malloc(sizeof *got);
    CHECK_OK(a.ctx, ct_checkpoint_load(a.ctx, sd, a.m.plan, a.opt, got));
    CHECK(got->has_scaler && got->scaler.scale == 32768.0f && got->scaler.skipped == 1 && got->scaler.events == 1 &&
          got->scaler.backoffs == 0 && got->scaler.growths == 0 && got->scaler.n_history == 0);
    ct_scaler *sc;
    CHECK_OK(a.ctx, ct_scaler_create(a.ctx, NULL, &sc));
    CHECK_OK(a.ctx, ct_scaler_set_state(sc, &got->scaler));
    ct_scaler_free(sc);
    free(got);
    cJSON_free(js);
    cJSON_Delete(root);
    free(hdr);
    free(out);
    free(buf);
    rig_free(&a);
}

/* Every prefix of either file: CT_E_CORRUPT with a message, no crash. */
TEST(truncated_files_are_corrupt) {
    rig a, b;
    char sd[600], p[700];
    CHECK(small_ckpt(&a, "trunc", sd, sizeof sd));
    CHECK_OK(b.ctx, rig_make(&b, 0, 5, CT_OPTIM_ADAMW, 0));
    const char *files[] = {"model.safetensors", "train_state.safetensors"};
    for (int fi = 0; fi < 2; fi++) {
        path_in(p, sizeof p, sd, files[fi]);
        size_t n;
        unsigned char *orig = test_read_file(p, &n);
        CHECK(orig);
        int saw_truncated = 0;
        for (size_t len = 0; len < n; len++) {
            write_all(p, orig, len);
            ct_status s = ct_checkpoint_load(b.ctx, sd, b.m.plan, b.opt, NULL);
            CHECK_MSG(s == CT_E_CORRUPT, "%s cut at %zu: %s", files[fi], len, ct_context_last_error(b.ctx));
            saw_truncated += strstr(ct_context_last_error(b.ctx), "truncated") != NULL;
        }
        CHECK(saw_truncated > 0);
        write_all(p, orig, n);
        free(orig);
    }
    /* a missing file is CT_E_IO */
    path_in(p, sizeof p, sd, "model.safetensors");
    unlink(p);
    CHECK(ct_checkpoint_load(b.ctx, sd, b.m.plan, b.opt, NULL) == CT_E_IO);
    rig_free(&a);
    rig_free(&b);
}

TEST(other_model_is_config_error) {
    rig a, b;
    char sd[600];
    CHECK(small_ckpt(&a, "other", sd, sizeof sd));
    /* different hidden size */
    CHECK_OK(b.ctx, rig_make(&b, 0, 7, CT_OPTIM_ADAMW, 0));
    ct_status s = ct_checkpoint_load(b.ctx, sd, b.m.plan, b.opt, NULL);
    CHECK_MSG(s == CT_E_CONFIG && strstr(ct_context_last_error(b.ctx), "'fc1.weight'") &&
                  strstr(ct_context_last_error(b.ctx), "[5, 6]") && strstr(ct_context_last_error(b.ctx), "[7, 6]"),
              "%s", ct_context_last_error(b.ctx));
    rig_free(&b);
    /* a CNN: its first tensor is not in the checkpoint */
    CHECK_OK(b.ctx, rig_make(&b, 1, 0, CT_OPTIM_ADAMW, 0));
    s = ct_checkpoint_load(b.ctx, sd, b.m.plan, b.opt, NULL);
    CHECK_MSG(s == CT_E_CONFIG && strstr(ct_context_last_error(b.ctx), "'conv1.weight'"), "%s",
              ct_context_last_error(b.ctx));
    rig_free(&b);
    /* another optimizer */
    CHECK_OK(b.ctx, rig_make(&b, 0, 5, CT_OPTIM_SGD, 0.9f));
    s = ct_checkpoint_load(b.ctx, sd, b.m.plan, b.opt, NULL);
    CHECK_MSG(s == CT_E_CONFIG && strstr(ct_context_last_error(b.ctx), "'adamw'") &&
                  strstr(ct_context_last_error(b.ctx), "'sgd'"),
              "%s", ct_context_last_error(b.ctx));
    /* weights only still load into the same model */
    rig_free(&b);
    CHECK_OK(b.ctx, rig_make(&b, 0, 5, CT_OPTIM_SGD, 0.9f));
    CHECK_OK(b.ctx, ct_checkpoint_load(b.ctx, sd, b.m.plan, NULL, NULL));
    float *pa, *pb;
    size_t n;
    ct_plan_param_arena(a.m.plan, &pa, NULL, &n);
    ct_plan_param_arena(b.m.plan, &pb, NULL, NULL);
    CHECK(!memcmp(pa, pb, n * 4));
    rig_free(&a);
    rig_free(&b);
}

static int count_steps(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) n += !strncmp(e->d_name, "step-", 5) || !strncmp(e->d_name, ".tmp-", 5);
    if (d) closedir(d);
    return n;
}

static void read_latest(const char *dir, char *out, size_t len) {
    char p[700];
    path_in(p, sizeof p, dir, "latest");
    size_t n = 0;
    unsigned char *b = test_read_file(p, &n);
    snprintf(out, len, "%.*s", b ? (int)n : 0, b ? (const char *)b : "");
    free(b);
}

typedef struct {
    const char *dir;
    int checks, bad;
} hook_ctx;

static void hook(void *user, const char *phase, int64_t step) {
    hook_ctx *h = user;
    char latest[64], want[64];
    read_latest(h->dir, latest, sizeof latest);
    snprintf(want, sizeof want, "step-%06lld\n", (long long)(step - 1));
    /* until `latest` is replaced it names the previous, complete checkpoint */
    if (strcmp(phase, "latest") && step > 1 && strcmp(latest, want)) h->bad++;
    if (!strcmp(phase, "latest")) {
        snprintf(want, sizeof want, "step-%06lld\n", (long long)step);
        if (strcmp(latest, want)) h->bad++;
    }
    h->checks++;
}

TEST(keep_last_and_latest) {
    rig a;
    CHECK_OK(a.ctx, rig_make(&a, 0, 5, CT_OPTIM_ADAMW, 0));
    char dir[512], p[700], latest[64];
    snprintf(dir, sizeof dir, "%s/keep", tmpdir());
    mkdir(dir, 0777);
    path_in(p, sizeof p, dir, ".tmp-leftover"); /* an interrupted save */
    mkdir(p, 0777);
    hook_ctx h = {dir, 0, 0};
    ct_checkpoint_opts o;
    ct_checkpoint_opts_default(&o);
    o.keep_last = 2;
    o.hook = hook;
    o.hook_user = &h;
    ct_train_state st;
    ct_train_state_init(&st);
    for (int s = 1; s <= 5; s++) {
        st.step = s;
        CHECK_OK(a.ctx, rig_steps(&a, 1));
        CHECK_OK(a.ctx, ct_checkpoint_save_ex(a.ctx, dir, a.m.plan, a.opt, &st, &o));
    }
    CHECK(h.checks == 15 && h.bad == 0);
    CHECK(count_steps(dir) == 2);
    path_in(p, sizeof p, dir, "step-000004");
    CHECK(exists(p));
    path_in(p, sizeof p, dir, "step-000005");
    CHECK(exists(p));
    read_latest(dir, latest, sizeof latest);
    CHECK(!strcmp(latest, "step-000005\n"));
    /* the same step again replaces it */
    CHECK_OK(a.ctx, ct_checkpoint_save(a.ctx, dir, a.m.plan, a.opt, &st, 2));
    CHECK(count_steps(dir) == 2);
    /* saving an older step (a run resumed from an earlier checkpoint) drops the newer ones */
    st.step = 2;
    CHECK_OK(a.ctx, ct_checkpoint_save(a.ctx, dir, a.m.plan, a.opt, &st, 2));
    CHECK(count_steps(dir) == 1);
    read_latest(dir, latest, sizeof latest);
    CHECK(!strcmp(latest, "step-000002\n"));
    /* keep_last 0 keeps all */
    for (int s = 3; s <= 6; s++) {
        st.step = s;
        CHECK_OK(a.ctx, ct_checkpoint_save(a.ctx, dir, a.m.plan, a.opt, &st, 0));
    }
    CHECK(count_steps(dir) == 5);
    /* a step directory loads directly; a bad `latest` is an error */
    ct_train_state got;
    path_in(p, sizeof p, dir, "step-000004");
    CHECK_OK(a.ctx, ct_checkpoint_load(a.ctx, p, a.m.plan, a.opt, &got));
    CHECK(got.step == 4);
    path_in(p, sizeof p, dir, "latest");
    write_all(p, (const unsigned char *)"../../etc\n", 10);
    CHECK(ct_checkpoint_load(a.ctx, dir, a.m.plan, a.opt, &got) == CT_E_CORRUPT);
    write_all(p, (const unsigned char *)"step-000099\n", 12);
    CHECK(ct_checkpoint_load(a.ctx, dir, a.m.plan, a.opt, &got) == CT_E_IO);
    CHECK(strstr(ct_context_last_error(a.ctx), "step-000099"));
    path_in(p, sizeof p, tmpdir(), "nothing-here");
    CHECK(ct_checkpoint_load(a.ctx, p, a.m.plan, a.opt, &got) == CT_E_IO);
    rig_free(&a);
}

/* Pruning deletes only what a save made: a symlinked step directory, a
 * symlinked leftover and a link inside a real step directory are never
 * followed, a step directory without a train state (not ctrain's) stays. */
TEST(prune_never_follows_links) {
    rig a;
    CHECK_OK(a.ctx, rig_make(&a, 0, 5, CT_OPTIM_SGD, 0));
    char dir[512], victim[512], p[700], q[700];
    snprintf(dir, sizeof dir, "%s/links", tmpdir());
    snprintf(victim, sizeof victim, "%s/victim", tmpdir());
    mkdir(dir, 0777);
    mkdir(victim, 0777);
    const char *vfiles[] = {"train_state.safetensors", "model.safetensors", "precious.txt"};
    for (int i = 0; i < 3; i++) {
        path_in(p, sizeof p, victim, vfiles[i]);
        write_all(p, (const unsigned char *)"keep me\n", 8);
    }
    ct_train_state st;
    ct_train_state_init(&st);
    st.step = 2;
    CHECK_OK(a.ctx, ct_checkpoint_save(a.ctx, dir, a.m.plan, a.opt, &st, 0));
    path_in(p, sizeof p, dir, "step-000002/link-to-victim"); /* a link inside a real step directory */
    path_in(q, sizeof q, victim, "precious.txt");
    CHECK(symlink(q, p) == 0);
    path_in(p, sizeof p, dir, "step-000001"); /* a step directory that is a link */
    CHECK(symlink(victim, p) == 0);
    path_in(p, sizeof p, dir, ".tmp-planted"); /* a "leftover" that is a link */
    CHECK(symlink(victim, p) == 0);
    path_in(p, sizeof p, dir, "step-000003"); /* not a checkpoint: no train state */
    mkdir(p, 0777);
    path_in(p, sizeof p, dir, "step-000003/notes.txt");
    write_all(p, (const unsigned char *)"mine\n", 5);
    path_in(p, sizeof p, dir, "step-000000"); /* emptied by a deletion killed before its rmdir */
    mkdir(p, 0777);
    for (int s = 4; s <= 6; s++) {
        st.step = s;
        CHECK_OK(a.ctx, ct_checkpoint_save(a.ctx, dir, a.m.plan, a.opt, &st, 1));
    }
    for (int i = 0; i < 3; i++) {
        path_in(p, sizeof p, victim, vfiles[i]);
        CHECK(exists(p));
    }
    path_in(p, sizeof p, dir, "step-000003/notes.txt");
    CHECK(exists(p));
    path_in(p, sizeof p, dir, "step-000002/train_state.safetensors"); /* its own files went, the link stayed */
    CHECK(!exists(p));
    path_in(p, sizeof p, dir, "step-000005");
    CHECK(!exists(p));
    path_in(p, sizeof p, dir, "step-000000");
    CHECK(!exists(p));
    path_in(p, sizeof p, dir, "step-000006");
    CHECK(exists(p));
    /* a save over a step directory that is a link replaces the link, not what it points to */
    path_in(p, sizeof p, dir, "step-000007");
    CHECK(symlink(victim, p) == 0);
    st.step = 7;
    CHECK_OK(a.ctx, ct_checkpoint_save(a.ctx, dir, a.m.plan, a.opt, &st, 1));
    struct stat sb;
    CHECK(lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode));
    for (int i = 0; i < 3; i++) {
        path_in(q, sizeof q, victim, vfiles[i]);
        CHECK(exists(q));
    }
    rig_free(&a);
}

/* Saving a step again (a run resumed from an earlier checkpoint reaches it
 * once more) swaps the new directory in: at the moment the old one is set
 * aside, `latest` still names a complete, loadable checkpoint. */
typedef struct {
    ct_context *ctx;
    const char *dir;
    int replaced, loaded;
} replace_ctx;

static void replace_hook(void *user, const char *phase, int64_t step) {
    replace_ctx *h = user;
    if (strcmp(phase, "replaced")) return;
    h->replaced++;
    ct_train_state got;
    if (ct_checkpoint_load(h->ctx, h->dir, NULL, NULL, &got) == CT_OK && got.step == step) h->loaded++;
}

TEST(replacing_a_step_never_leaves_latest_dangling) {
    rig a;
    CHECK_OK(a.ctx, rig_make(&a, 0, 5, CT_OPTIM_SGD, 0));
    char dir[512], latest[64];
    snprintf(dir, sizeof dir, "%s/replace", tmpdir());
    ct_train_state st;
    ct_train_state_init(&st);
    st.step = 3;
    CHECK_OK(a.ctx, ct_checkpoint_save(a.ctx, dir, a.m.plan, a.opt, &st, 0));
    replace_ctx h = {a.ctx, dir, 0, 0};
    ct_checkpoint_opts o;
    ct_checkpoint_opts_default(&o);
    o.hook = replace_hook;
    o.hook_user = &h;
    CHECK_OK(a.ctx, rig_steps(&a, 1));
    CHECK_OK(a.ctx, ct_checkpoint_save_ex(a.ctx, dir, a.m.plan, a.opt, &st, &o));
    CHECK(h.replaced == 1 && h.loaded == 1);
    CHECK(count_steps(dir) == 1); /* the old copy is gone, no leftover */
    read_latest(dir, latest, sizeof latest);
    CHECK(!strcmp(latest, "step-000003\n"));
    /* and what is there now is the new one */
    rig b;
    CHECK_OK(b.ctx, rig_make(&b, 0, 5, CT_OPTIM_SGD, 0));
    CHECK_OK(b.ctx, ct_checkpoint_load(b.ctx, dir, b.m.plan, b.opt, NULL));
    CHECK(rig_same(&a, &b));
    rig_free(&b);
    rig_free(&a);
}

/* An extra file (a tokenizer's vocabulary) is checked like the tensors: a
 * changed byte, a truncation or a missing file is CT_E_CORRUPT naming it. */
TEST(extra_files_are_checked) {
    rig a;
    CHECK_OK(a.ctx, rig_make(&a, 0, 5, CT_OPTIM_SGD, 0));
    char dir[512], p[700];
    snprintf(dir, sizeof dir, "%s/extra", tmpdir());
    const char vocab[] = "a\nb\nc\nthe vocabulary\n";
    ct_checkpoint_file f = {"tokenizer.vocab", vocab, sizeof vocab - 1};
    ct_checkpoint_opts o;
    ct_checkpoint_opts_default(&o);
    o.files = &f;
    o.n_files = 1;
    ct_train_state st;
    ct_train_state_init(&st);
    st.step = 1;
    CHECK_OK(a.ctx, ct_checkpoint_save_ex(a.ctx, dir, a.m.plan, a.opt, &st, &o));
    CHECK_OK(a.ctx, ct_checkpoint_load(a.ctx, dir, NULL, NULL, NULL));
    path_in(p, sizeof p, dir, "step-000001/tokenizer.vocab");
    for (size_t i = 0; i < sizeof vocab - 1; i++) { /* every byte changed */
        unsigned char bad[sizeof vocab];
        memcpy(bad, vocab, sizeof vocab);
        bad[i] ^= 0x20;
        write_all(p, bad, sizeof vocab - 1);
        ct_status s = ct_checkpoint_load(a.ctx, dir, NULL, NULL, NULL);
        CHECK_MSG(s == CT_E_CORRUPT && strstr(ct_context_last_error(a.ctx), "tokenizer.vocab"), "byte %zu: %s", i,
                  ct_context_last_error(a.ctx));
    }
    write_all(p, (const unsigned char *)vocab, sizeof vocab - 2); /* truncated */
    CHECK(ct_checkpoint_load(a.ctx, dir, NULL, NULL, NULL) == CT_E_CORRUPT);
    unlink(p);
    CHECK(ct_checkpoint_load(a.ctx, dir, NULL, NULL, NULL) == CT_E_CORRUPT);
    CHECK(strstr(ct_context_last_error(a.ctx), "missing"));
    write_all(p, (const unsigned char *)vocab, sizeof vocab - 1); /* put back: loads again */
    CHECK_OK(a.ctx, ct_checkpoint_load(a.ctx, dir, a.m.plan, a.opt, NULL));
    /* names that do not fit the metadata are refused before anything is written */
    ct_checkpoint_file longname = {"a-file-name-much-longer-than-forty-bytes-in-all.txt", vocab, 4};
    o.files = &longname;
    CHECK(ct_checkpoint_save_ex(a.ctx, dir, a.m.plan, a.opt, &st, &o) == CT_E_INVALID_ARG);
    rig_free(&a);
}

TEST(recipe_json_full_round_trip) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_recipe r, back;
    ct_recipe_default(&r);
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "optimizer.name", "sgd"));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "optimizer.momentum", "0.99999"));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "optimizer.lr", "0.1"));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "hidden", "64,32,16"));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "dropout", "0.3"));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "schedule", "multistep"));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "milestones", "10,20"));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "data_dir", "/tmp/a \"quoted\" dir"));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "save_dir", "ckpt"));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "save_every", "10"));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "keep_last", "5"));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "seed", "123456789"));
    char buf[CT_CHECKPOINT_RECIPE_MAX];
    int n = ct_recipe_to_json_full(&r, buf, sizeof buf);
    CHECK(n > 0 && (size_t)n < sizeof buf);
    ct_recipe_default(&back);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, buf, &back));
    CHECK_MSG(!memcmp(&r, &back, sizeof r), "%s", buf);
    ct_context_free(ctx);
}

TEST(loader_skip_resumes_mid_epoch) {
    ct_context *ctx = test_ctx(-1, 1);
    enum { N = 23, B = 4 };
    float img[N];
    int32_t lab[N];
    for (int i = 0; i < N; i++) {
        img[i] = (float)i;
        lab[i] = i;
    }
    ct_dataset ds = {N, 1, 1, 1, 10, img, lab, NULL};
    ct_loader *a, *b;
    CHECK_OK(ctx, ct_loader_create(ctx, &ds, B, 1, 1, 42, &a));
    CHECK_OK(ctx, ct_loader_create(ctx, &ds, B, 1, 1, 42, &b));
    float xa[B], xb[B];
    int32_t ya[B], yb[B];
    int64_t ga, gb;
    for (int k = 0; k <= 6; k++) {
        ct_loader_start_epoch(a, 3);
        ct_loader_start_epoch(b, 3);
        for (int i = 0; i < k; i++) CHECK_OK(ctx, ct_loader_next(a, xa, ya, &ga));
        CHECK_OK(ctx, ct_loader_skip(b, k));
        CHECK_OK(ctx, ct_loader_next(a, xa, ya, &ga));
        CHECK_OK(ctx, ct_loader_next(b, xb, yb, &gb));
        CHECK(ga == gb && !memcmp(ya, yb, sizeof(int32_t) * (size_t)ga));
        CHECK(ga == (k < 5 ? B : 0));
    }
    CHECK(ct_loader_skip(b, -1) == CT_E_INVALID_ARG);
    ct_loader_free(a);
    ct_loader_free(b);
    ct_context_free(ctx);
}

TEST(weights_file_round_trip) {
    rig a, b;
    CHECK_OK(a.ctx, rig_make(&a, 1, 0, CT_OPTIM_SGD, 0.9f));
    CHECK_OK(a.ctx, rig_steps(&a, 2));
    CHECK_OK(b.ctx, rig_make(&b, 1, 0, CT_OPTIM_SGD, 0.9f));
    char p[512];
    path_in(p, sizeof p, tmpdir(), "w.safetensors");
    CHECK_OK(a.ctx, ct_weights_save(a.ctx, p, a.m.plan));
    scramble(&b);
    CHECK_OK(b.ctx, ct_weights_load(b.ctx, p, b.m.plan));
    float *pa, *pb, *ba, *bb;
    size_t n, nb;
    ct_plan_param_arena(a.m.plan, &pa, NULL, &n);
    ct_plan_param_arena(b.m.plan, &pb, NULL, NULL);
    ct_plan_buffer_arena(a.m.plan, &ba, &nb);
    ct_plan_buffer_arena(b.m.plan, &bb, NULL);
    CHECK(!memcmp(pa, pb, n * 4) && nb > 0 && !memcmp(ba, bb, nb * 4));
    rig_free(&a);
    rig_free(&b);
}

/* ---- the PyTorch reader ----------------------------------------------------------------- */

/* The interpreter: /usr/bin/python3 (Debian's python3-torch), or $CT_PYTHON. */
static const char *python(void) {
    const char *p = getenv("CT_PYTHON");
    return p && *p ? p : "/usr/bin/python3";
}

/* PyTorch missing (the script exits 77, or no interpreter: 127): a skip, or a
 * failure under CT_REQUIRE_TORCH=1. Returns 1 when the caller should stop. */
static int torch_missing(int rc) {
    if (rc != 77 && rc != 127) return 0;
    const char *req = getenv("CT_REQUIRE_TORCH");
    if (req && !strcmp(req, "1")) {
        fprintf(stderr, "  PyTorch (python3-torch) is missing and CT_REQUIRE_TORCH=1: run scripts/setup.sh\n");
        ct_test_failed_checks++;
    } else {
        printf("    skip: PyTorch (python3-torch) is missing; run scripts/setup.sh "
               "(CT_REQUIRE_TORCH=1 makes this a failure)\n");
    }
    return 1;
}

/* Runs the script on a file from a model, checks names, shapes, CRC32s and
 * sums against the C side, then a strict load_state_dict. */
static void pytorch_check(int cnn) {
    CHECK_MSG(access("scripts/load_safetensors.py", R_OK) == 0, "run the tests from the repository root");
    rig a;
    CHECK_OK(a.ctx, rig_make(&a, cnn, 5, CT_OPTIM_ADAMW, 0));
    CHECK_OK(a.ctx, rig_steps(&a, 2));
    char p[512], cmd[2400], line[512];
    snprintf(p, sizeof p, "%s/torch_%d.safetensors", tmpdir(), cnn);
    CHECK_OK(a.ctx, ct_weights_save(a.ctx, p, a.m.plan));
    /* ctrain's eval-mode logits for the rig's inputs, for PyTorch to reproduce */
    char xin[600], yout[600];
    ct_tensor tx, tl;
    CHECK_OK(a.ctx, ct_plan_forward(a.m.plan, 0));
    CHECK_OK(a.ctx, ct_plan_tensor(a.m.plan, a.m.x, &tx));
    CHECK_OK(a.ctx, ct_plan_tensor(a.m.plan, a.m.logits, &tl));
    snprintf(xin, sizeof xin, "%s.x.f32", p);
    snprintf(yout, sizeof yout, "%s.y.f32", p);
    write_all(xin, tx.data, (size_t)ct_tensor_numel(&tx) * 4);
    write_all(yout, tl.data, (size_t)ct_tensor_numel(&tl) * 4);
    /* one run: --check (names, shapes, sums, CRC32s), a strict load_state_dict, the logits */
    snprintf(cmd, sizeof cmd,
             "%s scripts/load_safetensors.py --check --model %s %s --in-shape %s --classes 3 --inputs %s --expect %s "
             "%s 2>&1",
             python(), cnn ? "cnn" : "mlp", cnn ? "--channels 3" : "--hidden 5", cnn ? "1,8,8" : "1,1,6", xin, yout, p);
    FILE *f = popen(cmd, "r");
    CHECK(f);
    int np = ct_plan_num_params(a.m.plan), seen = 0, bad = 0, strict = 0, logits = 0;
    float *buf;
    size_t nbuf;
    ct_plan_buffer_arena(a.m.plan, &buf, &nbuf);
    while (fgets(line, sizeof line, f)) {
        char name[128], shape[64], crc[16];
        double sum;
        strict |= !strncmp(line, "MODEL ", 6) && strstr(line, "loaded strictly") != NULL;
        logits |= !strncmp(line, "LOGITS ", 7);
        if (!strncmp(line, "LOGITS ", 7)) printf("    pytorch %s", line);
        if (strncmp(line, "TENSOR ", 7) && strncmp(line, "MODEL ", 6) && strncmp(line, "METADATA ", 9) &&
            strncmp(line, "LOGITS ", 7))
            fprintf(stderr, "  python: %s", line);
        if (sscanf(line, "TENSOR %127s %63s %lf %15s", name, shape, &sum, crc) != 4) continue;
        /* the i-th tensor: params in arena order, then (cnn) bn1.running_mean, bn1.running_var */
        const char *want_name;
        ct_tensor v;
        if (seen < np) {
            ct_plan_param_info(a.m.plan, seen, &want_name, &v, NULL);
        } else {
            int k = seen - np;
            want_name = k == 0 ? "bn1.running_mean" : "bn1.running_var";
            v = ct_tensor_make(buf + (k ? 64 / 4 : 0), CT_F32, 1, (int64_t[]){3});
        }
        char want_shape[64] = "";
        size_t o = 0;
        for (int d = 0; d < v.ndim; d++)
            o += (size_t)snprintf(want_shape + o, sizeof want_shape - o, d ? "x%lld" : "%lld", (long long)v.shape[d]);
        size_t n = (size_t)ct_tensor_numel(&v);
        double s = 0;
        for (size_t i = 0; i < n; i++) s += ((const float *)v.data)[i];
        char want_crc[16];
        snprintf(want_crc, sizeof want_crc, "%08lx", (unsigned long)crc32(0L, v.data, (uInt)(n * 4)));
        if (strcmp(name, want_name) || strcmp(shape, want_shape) || strcmp(crc, want_crc) ||
            fabs(sum - s) > 1e-9 * fmax(1.0, fabs(s))) {
            fprintf(stderr, "  python: %s  C: %s %s %.17g %s\n", line, want_name, want_shape, s, want_crc);
            bad++;
        }
        seen++;
    }
    int rc = pclose(f);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
    if (torch_missing(rc)) {
        rig_free(&a);
        return;
    }
    CHECK_MSG(rc == 0 && bad == 0 && seen == np + (cnn ? 2 : 0) && strict && logits,
              "rc %d, %d tensors, %d differ, strict %d, logits %d", rc, seen, bad, strict, logits);
    /* the reader checks the CRC32 too: a damaged file is rejected */
    snprintf(cmd, sizeof cmd, "%s scripts/load_safetensors.py --verify %s >/dev/null 2>&1", python(), p);
    CHECK(WEXITSTATUS(system(cmd)) == 0);
    size_t n;
    unsigned char *b = test_read_file(p, &n);
    b[n - 1] ^= 1;
    write_all(p, b, n);
    free(b);
    CHECK(WEXITSTATUS(system(cmd)) == 1);
    rig_free(&a);
}

TEST(pytorch_reader_mlp) { pytorch_check(0); }
TEST(pytorch_reader_cnn_buffers) { pytorch_check(1); }

TEST_MAIN(T(train_state_without_scaler_history_loads), T(roundtrip_mlp_adamw_dropout), T(roundtrip_cnn_sgd_momentum_buffers), T(roundtrip_mlp_rmsprop),
          T(roundtrip_cnn_lamb), T(flipped_bytes_are_corrupt), T(truncated_files_are_corrupt),
          T(other_model_is_config_error), T(keep_last_and_latest), T(prune_never_follows_links),
          T(replacing_a_step_never_leaves_latest_dangling), T(extra_files_are_checked), T(recipe_json_full_round_trip),
          T(loader_skip_resumes_mid_epoch), T(weights_file_round_trip), T(pytorch_reader_mlp),
          T(pytorch_reader_cnn_buffers))
