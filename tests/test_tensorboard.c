/* tests/test_tensorboard.c - the TensorBoard event files (ctrain/tensorboard.h)
 * read back by a reader of this test's own: the TFRecord framing with both
 * masked CRC32Cs checked (a table CRC32C here, against the writer's bitwise
 * one, and the standard check value), each record decoded by protobuf-c
 * from the same proto/ files. The first record must be the file_version
 * event "brain.Event:2"; a real training run's events must hold every scalar
 * of its JSON metrics log at every step (train_matches_metrics_log). Also:
 * corrupted and truncated files are refused by the reader, an unwritable
 * folder is a CT_E_IO naming the path, two files in one second differ.
 *
 *   test_tensorboard                       the tests
 *   test_tensorboard --compare DIR LOG     DIR's one event file against the
 *                                          metrics log LOG (tests/tensorboard_test.sh)
 *   test_tensorboard --dump DIR            every record of DIR's event file(s), one line each */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <tensorflow/core/util/event.pb-c.h>

#include "test.h"

/* ---- the reader ---------------------------------------------------------------------------- */

static uint32_t crc_table[256];

static uint32_t crc32c(const uint8_t *p, size_t n) {
    if (!crc_table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = (c & 1) ? 0x82f63b78u ^ (c >> 1) : c >> 1;
            crc_table[i] = c;
        }
    uint32_t c = ~0u;
    while (n--) c = crc_table[(c ^ *p++) & 0xffu] ^ (c >> 8);
    return ~c;
}

static uint32_t unmask(uint32_t m) {
    uint32_t r = m - 0xa282ead8u;
    return (r >> 17) | (r << 15);
}

static uint64_t get_le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

typedef struct {
    Tensorflow__Event **ev;
    int n;
} events;

static void events_free(events *E) {
    for (int i = 0; i < E->n; i++) tensorflow__event__free_unpacked(E->ev[i], NULL);
    free(E->ev);
    E->ev = NULL, E->n = 0;
}

/* Every record of the file; 0, or -1 with err saying which record and what is wrong. */
static int read_events(const char *path, events *E, char *err, size_t errlen) {
    memset(E, 0, sizeof *E);
    size_t size = 0;
    unsigned char *b = test_read_file(path, &size);
    if (!b) return snprintf(err, errlen, "cannot read '%s'", path), -1;
    size_t at = 0;
    int rc = 0;
    while (at < size && rc == 0) {
        if (size - at < 12) {
            rc = -1, snprintf(err, errlen, "record %d: truncated header (%zu bytes left)", E->n, size - at);
            break;
        }
        uint64_t len = get_le(b + at, 8);
        if (crc32c(b + at, 8) != unmask((uint32_t)get_le(b + at + 8, 4))) {
            rc = -1, snprintf(err, errlen, "record %d: the length's CRC does not match", E->n);
            break;
        }
        if (len > size - at - 12 || size - at - 12 - len < 4) {
            rc = -1, snprintf(err, errlen, "record %d: truncated data (%llu bytes)", E->n, (unsigned long long)len);
            break;
        }
        const uint8_t *d = b + at + 12;
        if (crc32c(d, len) != unmask((uint32_t)get_le(d + len, 4))) {
            rc = -1, snprintf(err, errlen, "record %d: the data's CRC does not match", E->n);
            break;
        }
        Tensorflow__Event *ev = tensorflow__event__unpack(NULL, len, d);
        if (!ev) {
            rc = -1, snprintf(err, errlen, "record %d: not an Event", E->n);
            break;
        }
        Tensorflow__Event **nv = realloc(E->ev, (size_t)(E->n + 1) * sizeof *nv);
        if (!nv) abort();
        E->ev = nv;
        E->ev[E->n++] = ev;
        at += 12 + len + 4;
    }
    free(b);
    if (rc) events_free(E);
    return rc;
}

/* The one events.out.tfevents.* file in dir (0), else -1 with err. */
static int find_event_file(const char *dir, char *out, size_t len, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) return snprintf(err, errlen, "cannot open folder '%s'", dir), -1;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "events.out.tfevents.", 20)) found++, snprintf(out, len, "%s/%s", dir, e->d_name);
    closedir(d);
    if (found != 1) return snprintf(err, errlen, "%d event files in '%s' (want 1)", found, dir), -1;
    return 0;
}

/* The value of tag in a summary event, 1 if present */
static int find_value(const Tensorflow__Event *ev, const char *tag, double *v) {
    if (ev->what_case != TENSORFLOW__EVENT__WHAT_SUMMARY) return 0;
    for (size_t i = 0; i < ev->summary->n_value; i++)
        if (!strcmp(ev->summary->value[i]->tag, tag)) {
            *v = ev->summary->value[i]->simple_value;
            return 1;
        }
    return 0;
}

/* float (event) against %.7g (metrics log); a JSON null against NaN */
static int same_value(double tb, const cJSON *j) {
    if (cJSON_IsNull(j)) return isnan(tb);
    if (!cJSON_IsNumber(j)) return 0;
    double v = j->valuedouble;
    return fabs(tb - v) <= 2e-6 * fabs(v) + 1e-30;
}

static const char *const STEP_KEYS[][2] = {
    {"loss", "train/loss"},  {"acc", "train/accuracy"},         {"lr", "train/lr"},
    {"samples_per_s", "train/samples_per_s"}, {"grad_norm", "train/grad_norm"}, {"loss_scale", "train/loss_scale"},
    {"mfu", "perf/mfu"},     {"peak_mib", "perf/peak_mib"},     {"comm_share", "perf/comm_share"}};
static const char *const EVAL_KEYS[][2] = {{"test_loss", "eval/loss"}, {"test_acc", "eval/accuracy"}};

/* One metrics-log line against its event (the next summary event from *at with the line's step): every key
 * of keys the line has is a value of the event, equal; the event has no other value. */
static int compare_line(const cJSON *line, const events *E, int *at, const char *const (*keys)[2], int nkeys,
                        char *err, size_t errlen, int *checked) {
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(line, "step");
    long long step = cJSON_IsNumber(js) ? (long long)js->valuedouble : -1;
    while (*at < E->n && E->ev[*at]->what_case != TENSORFLOW__EVENT__WHAT_SUMMARY) (*at)++;
    if (*at >= E->n) return snprintf(err, errlen, "step %lld: no event left for this line", step), -1;
    const Tensorflow__Event *ev = E->ev[(*at)++];
    if (ev->step != step)
        return snprintf(err, errlen, "the event at step %lld comes where the log's line of step %lld is",
                        (long long)ev->step, step), -1;
    int present = 0;
    for (int k = 0; k < nkeys; k++) {
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(line, keys[k][0]);
        double v;
        int have = find_value(ev, keys[k][1], &v);
        if (!j && !have) continue;
        if (!j || !have)
            return snprintf(err, errlen, "step %lld: '%s' is %s the metrics log but %s the events", step, keys[k][0],
                            j ? "in" : "not in", have ? "in" : "not in"), -1;
        if (!same_value(v, j))
            return snprintf(err, errlen, "step %lld: %s: event %.9g, metrics log %.9g", step, keys[k][1], v,
                            cJSON_IsNumber(j) ? j->valuedouble : NAN), -1;
        present++;
        (*checked)++;
    }
    if ((size_t)present != ev->summary->n_value)
        return snprintf(err, errlen, "step %lld: the event holds %zu values, the log's line %d", step,
                        ev->summary->n_value, present), -1;
    return 0;
}

/* dir's event file against the metrics log: the file_version first, then one summary event per step and eval
 * line, in order, with the same values. *checked: the values compared, *steps: the step lines. */
static int compare_run(const char *dir, const char *log, char *err, size_t errlen, int *checked, int *steps) {
    char path[1024];
    events E;
    *checked = *steps = 0;
    if (find_event_file(dir, path, sizeof path, err, errlen) || read_events(path, &E, err, errlen)) return -1;
    int rc = 0, at = 1;
    if (E.n < 1 || E.ev[0]->what_case != TENSORFLOW__EVENT__WHAT_FILE_VERSION ||
        strcmp(E.ev[0]->file_version, "brain.Event:2"))
        rc = -1, snprintf(err, errlen, "the first record is not the file_version event brain.Event:2");
    FILE *f = fopen(log, "r");
    if (!f && !rc) rc = -1, snprintf(err, errlen, "cannot open metrics log '%s'", log);
    char line[1 << 16];
    while (!rc && f && fgets(line, sizeof line, f)) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
        if (cJSON_IsString(t) && !strcmp(t->valuestring, "step"))
            rc = compare_line(j, &E, &at, STEP_KEYS, 9, err, errlen, checked), (*steps)++;
        else if (cJSON_IsString(t) && !strcmp(t->valuestring, "eval"))
            rc = compare_line(j, &E, &at, EVAL_KEYS, 2, err, errlen, checked);
        cJSON_Delete(j);
    }
    if (f) fclose(f);
    if (!rc && at != E.n) rc = -1, snprintf(err, errlen, "%d events after the log's last line", E.n - at);
    events_free(&E);
    return rc;
}

/* ---- the tests ----------------------------------------------------------------------------- */

static char tmp_root[64];

static const char *tmp_dir(void) {
    if (!tmp_root[0]) {
        snprintf(tmp_root, sizeof tmp_root, "/tmp/ct_tb_XXXXXX");
        if (!mkdtemp(tmp_root)) abort();
    }
    return tmp_root;
}

TEST(crc32c_check_value) {
    CHECK(crc32c((const uint8_t *)"123456789", 9) == 0xe3069283u); /* the CRC-32C check value (RFC 3720) */
    uint32_t c = crc32c((const uint8_t *)"", 0);
    CHECK(c == 0);
}

TEST(scalars_round_trip) {
    ct_context *ctx = test_ctx(-1, 0);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/a/b", tmp_dir()); /* parents made */
    ct_tensorboard *tb = NULL;
    CHECK_OK(ctx, ct_tensorboard_open(ctx, dir, &tb));
    const char *path = ct_tensorboard_path(tb);
    char host[256] = "";
    gethostname(host, sizeof host);
    char want[512];
    snprintf(want, sizeof want, "%s/events.out.tfevents.", dir);
    CHECK_MSG(!strncmp(path, want, strlen(want)) && strlen(path) > strlen(want) + 11 &&
                  path[strlen(want) + 10] == '.' && !strcmp(path + strlen(want) + 11, host),
              "%s (host %s)", path, host);
    const char *tags[] = {"a/x", "a/y", "b"};
    for (int s = 1; s <= 50; s++) {
        double v[] = {0.5 * s, s == 7 ? NAN : -1.0 / s, s == 8 ? -INFINITY : 1e6 * s};
        CHECK_OK(ctx, ct_tensorboard_scalars(tb, s, 3, tags, v));
    }
    char kept[1024];
    snprintf(kept, sizeof kept, "%s", path);
    /* flushed as written: readable whole before close */
    events E;
    char err[256];
    CHECK_MSG(read_events(kept, &E, err, sizeof err) == 0 && E.n == 51, "%s", err);
    events_free(&E);
    CHECK_OK(ctx, ct_tensorboard_close(tb));
    CHECK_MSG(read_events(kept, &E, err, sizeof err) == 0, "%s", err);
    CHECK(E.n == 51);
    const Tensorflow__Event *e0 = E.ev[0];
    CHECK(e0->what_case == TENSORFLOW__EVENT__WHAT_FILE_VERSION && !strcmp(e0->file_version, "brain.Event:2"));
    CHECK(e0->source_metadata && !strcmp(e0->source_metadata->writer, "ctrain"));
    CHECK(e0->wall_time > 1.6e9);
    for (int s = 1; s <= 50; s++) {
        const Tensorflow__Event *e = E.ev[s];
        CHECK(e->step == s && e->what_case == TENSORFLOW__EVENT__WHAT_SUMMARY && e->summary->n_value == 3);
        CHECK(e->wall_time >= e0->wall_time);
        for (int i = 0; i < 3; i++) {
            const Tensorflow__Summary__Value *v = e->summary->value[i];
            CHECK(!strcmp(v->tag, tags[i]) && v->value_case == TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
        }
        CHECK(e->summary->value[0]->simple_value == (float)(0.5 * s));
        CHECK(s == 7 ? isnan(e->summary->value[1]->simple_value) : e->summary->value[1]->simple_value == (float)(-1.0 / s));
        CHECK(s == 8 ? isinf(e->summary->value[2]->simple_value) && e->summary->value[2]->simple_value < 0
                     : e->summary->value[2]->simple_value == (float)(1e6 * s));
    }
    events_free(&E);
    ct_context_free(ctx);
}

TEST(step_and_eval_tags) {
    ct_context *ctx = test_ctx(-1, 0);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/steps", tmp_dir());
    ct_tensorboard *tb = NULL;
    CHECK_OK(ctx, ct_tensorboard_open(ctx, dir, &tb));
    ct_metrics_step all = {.step = 1, .epoch = 1, .loss = 2.5, .acc = 0.25, .lr = 1e-3, .samples = 100, .grad_norm = 3,
                           .loss_scale = 65536, .time_s = 0.5, .mfu = 0.125, .peak_mib = 10, .comm_share = 0.25};
    ct_metrics_step few = all;
    few.step = 2, few.time_s = 1.0, few.grad_norm = few.loss_scale = few.mfu = few.peak_mib = few.comm_share = -1;
    CHECK_OK(ctx, ct_tensorboard_log_step(tb, &all));
    CHECK_OK(ctx, ct_tensorboard_log_step(tb, &few));
    CHECK_OK(ctx, ct_tensorboard_log_eval(tb, 2, 1.5, 0.75, 2.0));
    char path[1024];
    snprintf(path, sizeof path, "%s", ct_tensorboard_path(tb));
    CHECK_OK(ctx, ct_tensorboard_close(tb));
    events E;
    char err[256];
    CHECK_MSG(read_events(path, &E, err, sizeof err) == 0 && E.n == 4, "%s", err);
    double v;
    CHECK(E.ev[1]->summary->n_value == 9 && E.ev[2]->summary->n_value == 4 && E.ev[3]->summary->n_value == 2);
    CHECK(find_value(E.ev[1], "train/samples_per_s", &v) && v == 200.0); /* 100 samples in 0.5 s */
    CHECK(find_value(E.ev[2], "train/samples_per_s", &v) && v == 200.0);
    CHECK(find_value(E.ev[1], "perf/mfu", &v) && v == 0.125 && find_value(E.ev[1], "perf/comm_share", &v) && v == 0.25);
    CHECK(find_value(E.ev[1], "train/loss_scale", &v) && v == 65536 && !find_value(E.ev[2], "train/loss_scale", &v));
    CHECK(E.ev[3]->step == 2 && find_value(E.ev[3], "eval/loss", &v) && v == 1.5 &&
          find_value(E.ev[3], "eval/accuracy", &v) && v == 0.75);
    events_free(&E);
    const char *t1[] = {""};
    double v1[] = {1};
    CHECK_OK(ctx, ct_tensorboard_open(ctx, dir, &tb));
    CHECK(ct_tensorboard_scalars(tb, 1, 1, t1, v1) == CT_E_INVALID_ARG); /* no tag */
    CHECK(ct_tensorboard_scalars(tb, 1, 0, t1, v1) == CT_E_INVALID_ARG);
    CHECK_OK(ctx, ct_tensorboard_close(tb));
    CHECK(ct_tensorboard_close(NULL) == CT_OK);
    ct_context_free(ctx);
}

/* the reader refuses a flipped bit in the data, in the length and a cut file */
TEST(reader_checks_crcs) {
    ct_context *ctx = test_ctx(-1, 0);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/crc", tmp_dir());
    ct_tensorboard *tb = NULL;
    CHECK_OK(ctx, ct_tensorboard_open(ctx, dir, &tb));
    const char *tags[] = {"x"};
    double v[] = {1.0};
    CHECK_OK(ctx, ct_tensorboard_scalars(tb, 1, 1, tags, v));
    char path[1024];
    snprintf(path, sizeof path, "%s", ct_tensorboard_path(tb));
    CHECK_OK(ctx, ct_tensorboard_close(tb));
    size_t n;
    unsigned char *b = test_read_file(path, &n);
    CHECK(b && n > 40);
    const size_t first = 12 + (size_t)get_le(b, 8) + 4;
    struct {
        size_t at;
        const char *want;
    } cases[] = {{first + 14, "data's CRC"}, {first + 1, "length's CRC"}, {n - 1, "data's CRC"}};
    char err[256] = "";
    events E;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        b[cases[c].at] ^= 0x10;
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(b, 1, n, f) == n && fclose(f) == 0);
        CHECK_MSG(read_events(path, &E, err, sizeof err) == -1 && strstr(err, cases[c].want), "case %zu: %s", c, err);
        b[cases[c].at] ^= 0x10;
    }
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b, 1, n - 3, f) == n - 3 && fclose(f) == 0);
    CHECK_MSG(read_events(path, &E, err, sizeof err) == -1 && strstr(err, "truncated"), "%s", err);
    free(b);
    ct_context_free(ctx);
}

TEST(unwritable_dir_is_an_error) {
    ct_context *ctx = test_ctx(-1, 0);
    char file[256], dir[300];
    snprintf(file, sizeof file, "%s/plain", tmp_dir());
    FILE *f = fopen(file, "w");
    CHECK(f && fclose(f) == 0);
    ct_tensorboard *tb = (ct_tensorboard *)1;
    CHECK(ct_tensorboard_open(ctx, file, &tb) == CT_E_IO && !tb); /* a file, not a folder */
    CHECK_MSG(strstr(ct_context_last_error(ctx), file) != NULL, "%s", ct_context_last_error(ctx));
    snprintf(dir, sizeof dir, "%s/sub", file);
    CHECK(ct_tensorboard_open(ctx, dir, &tb) == CT_E_IO); /* below a file */
    CHECK_MSG(strstr(ct_context_last_error(ctx), file) != NULL, "%s", ct_context_last_error(ctx));
    if (geteuid() != 0) { /* root writes anywhere */
        snprintf(dir, sizeof dir, "%s/ro", tmp_dir());
        CHECK(mkdir(dir, 0555) == 0);
        CHECK(ct_tensorboard_open(ctx, dir, &tb) == CT_E_IO);
        CHECK(strstr(ct_context_last_error(ctx), dir) != NULL);
    }
    CHECK(ct_tensorboard_open(ctx, "", &tb) == CT_E_INVALID_ARG);
    ct_context_free(ctx);
}

/* two writers in one second: two files (the second named with the process id) */
TEST(two_files_in_one_second) {
    ct_context *ctx = test_ctx(-1, 0);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/two", tmp_dir());
    ct_tensorboard *a = NULL, *b = NULL;
    CHECK_OK(ctx, ct_tensorboard_open(ctx, dir, &a));
    CHECK_OK(ctx, ct_tensorboard_open(ctx, dir, &b));
    CHECK(strcmp(ct_tensorboard_path(a), ct_tensorboard_path(b)) != 0);
    CHECK_OK(ctx, ct_tensorboard_close(a));
    CHECK_OK(ctx, ct_tensorboard_close(b));
    ct_context_free(ctx);
}

/* A real run through ct_train with both logs: every scalar of every step and evaluation line of the metrics
 * log is in the events, equal (with gradient clipping: grad_norm too). */
TEST(train_matches_metrics_log) {
    if (access("data/mnist/t10k-images-idx3-ubyte", R_OK) != 0) {
        CHECK_MSG(0, "data/mnist is missing: run scripts/setup.sh");
    }
    ct_recipe r;
    ct_recipe_default(&r);
    r.n_hidden = 1, r.hidden[0] = 32;
    r.epochs = 2, r.max_steps = 12, r.batch_size = 10000, r.threads = 2, r.clip_grad_norm = 1.0f;
    snprintf(r.metrics_file, sizeof r.metrics_file, "%s/run.jsonl", tmp_dir());
    snprintf(r.tensorboard_dir, sizeof r.tensorboard_dir, "%s/run", tmp_dir());
    ct_context *ctx = NULL;
    CHECK_OK(ctx, ct_train_context_create(&r, &ctx));
    ct_train_opts o;
    ct_train_opts_default(&o);
    o.out = NULL;
    ct_train_result res;
    ct_status s = ct_train(ctx, &r, &o, &res);
    CHECK_MSG(s == CT_OK, "%s", ct_context_last_error(ctx));
    ct_context_free(ctx);
    char err[512];
    int checked = 0, steps = 0;
    CHECK_MSG(compare_run(r.tensorboard_dir, r.metrics_file, err, sizeof err, &checked, &steps) == 0, "%s", err);
    /* 12 steps x (loss, acc, lr, samples/s, grad_norm, mfu, peak_mib) + 2 evaluations x 2 */
    CHECK_MSG(steps == 12 && checked == 12 * 7 + 2 * 2, "%d steps, %d values", steps, checked);
}

static int dump(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return fprintf(stderr, "cannot open '%s'\n", dir), 1;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20)) continue;
        char path[1024], err[256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        events E;
        if (read_events(path, &E, err, sizeof err)) {
            fprintf(stderr, "%s: %s\n", path, err);
            rc = 1;
            continue;
        }
        for (int i = 0; i < E.n; i++) {
            const Tensorflow__Event *ev = E.ev[i];
            printf("%s step %lld", e->d_name, (long long)ev->step);
            if (ev->what_case == TENSORFLOW__EVENT__WHAT_FILE_VERSION) printf(" file_version %s", ev->file_version);
            else if (ev->what_case == TENSORFLOW__EVENT__WHAT_SUMMARY)
                for (size_t k = 0; k < ev->summary->n_value; k++)
                    printf(" %s=%.9g", ev->summary->value[k]->tag, ev->summary->value[k]->simple_value);
            printf("\n");
        }
        events_free(&E);
    }
    closedir(d);
    return rc;
}

static int cleanup(int rc) {
    if (tmp_root[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    }
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--compare")) {
        char err[512];
        int checked, steps;
        if (compare_run(argv[2], argv[3], err, sizeof err, &checked, &steps)) {
            fprintf(stderr, "test_tensorboard --compare: %s\n", err);
            return 1;
        }
        printf("%d steps, %d values equal\n", steps, checked);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "--dump")) return dump(argv[2]);
    static const ct_test_case cases[] = {T(crc32c_check_value),         T(scalars_round_trip),
                                         T(step_and_eval_tags),         T(reader_checks_crcs),
                                         T(unwritable_dir_is_an_error), T(two_files_in_one_second),
                                         T(train_matches_metrics_log)};
    return cleanup(ct_test_main(__FILE__, cases, (int)(sizeof cases / sizeof cases[0]), argc, argv));
}
