/* src/io/tensorboard.c - TensorBoard event files (ctrain/tensorboard.h).
 * The Event and Summary messages are TensorFlow's (proto/, a subset with the
 * original field numbers), serialized by protobuf-c from the C that
 * protoc-c generates at build time ($(BUILD)/gen). This file adds the
 * TFRecord framing: little-endian uint64 length, masked CRC32C of those 8
 * bytes, the data, masked CRC32C of the data; mask(c) = ((c >> 15) |
 * (c << 17)) + 0xa282ead8, as TensorFlow's lib/hash/crc32c.h. Each record is
 * one fwrite and one fflush: a crash loses no event already written. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <tensorflow/core/util/event.pb-c.h>

#include "core/internal.h"
#include "ctrain/tensorboard.h"
#include "io/io_internal.h"

#define MAX_VALUES 64

struct ct_tensorboard {
    ct_context *ctx;
    FILE *f;
    double prev_time; /* the last step's (or evaluation's) time_s: samples/s as the metrics log */
    int failed;       /* errno of the first write error */
    char path[PATH_MAX];
    uint8_t *buf;     /* one record: 12 + the event + 4 bytes */
    size_t cap;
};

/* CRC32C (Castagnoli, reflected polynomial 0x82f63b78), bit by bit: a record is a few hundred bytes, and no
 * table means no global state */
static uint32_t crc32c(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
}

static uint32_t masked_crc(const uint8_t *p, size_t n) {
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static ct_status io_error(ct_tensorboard *tb) {
    return ct_set_error(tb->ctx, CT_E_IO, "cannot write TensorBoard event file '%s': %s", tb->path,
                        strerror(tb->failed));
}

/* One Event as one TFRecord, flushed. */
static ct_status write_event(ct_tensorboard *tb, const Tensorflow__Event *ev) {
    if (tb->failed) return io_error(tb);
    size_t n = tensorflow__event__get_packed_size(ev);
    if (n + 16 > tb->cap) {
        uint8_t *b = realloc(tb->buf, n + 16);
        if (!b) return ct_set_error(tb->ctx, CT_E_OOM, "out of memory writing TensorBoard event file '%s'", tb->path);
        tb->buf = b, tb->cap = n + 16;
    }
    uint8_t *b = tb->buf;
    put_le(b, n, 8);
    put_le(b + 8, masked_crc(b, 8), 4);
    tensorflow__event__pack(ev, b + 12);
    put_le(b + 12 + n, masked_crc(b + 12, n), 4);
    if (fwrite(b, 1, n + 16, tb->f) != n + 16 || fflush(tb->f) != 0) tb->failed = errno ? errno : EIO;
    return tb->failed ? io_error(tb) : CT_OK;
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* events.out.tfevents.<seconds>.<host>, or with ".<pid>" when that exists; opened exclusively */
static ct_status open_file(ct_tensorboard *tb, const char *dir) {
    char host[256] = "localhost";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    long long now = (long long)time(NULL);
    for (int attempt = 0; attempt < 2; attempt++) {
        int len = attempt == 0 ? snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%010lld.%s", dir, now, host)
                               : snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%010lld.%s.%ld", dir, now,
                                          host, (long)getpid());
        if (len < 0 || (size_t)len >= sizeof tb->path)
            return ct_set_error(tb->ctx, CT_E_INVALID_ARG, "tensorboard_dir '%s' is too long", dir);
        tb->f = fopen(tb->path, "wbx");
        if (tb->f) return CT_OK;
        if (errno != EEXIST) break;
    }
    return ct_set_error(tb->ctx, CT_E_IO, "cannot open TensorBoard event file '%s' for writing: %s", tb->path,
                        strerror(errno));
}

ct_status ct_tensorboard_open(ct_context *ctx, const char *dir, ct_tensorboard **out) {
    if (!ctx || !dir || !*dir || !out) return CT_E_INVALID_ARG;
    *out = NULL;
    CT_TRY(ct_io_make_dirs(ctx, dir, "tensorboard_dir"));
    ct_tensorboard *tb = calloc(1, sizeof *tb);
    if (!tb) return ct_set_error(ctx, CT_E_OOM, "out of memory opening a TensorBoard event file in '%s'", dir);
    tb->ctx = ctx;
    ct_status s = open_file(tb, dir);
    if (s != CT_OK) {
        free(tb);
        return s;
    }
    Tensorflow__SourceMetadata src = TENSORFLOW__SOURCE_METADATA__INIT;
    src.writer = (char *)"ctrain";
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.wall_time = wall_now();
    ev.what_case = TENSORFLOW__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char *)"brain.Event:2";
    ev.source_metadata = &src;
    s = write_event(tb, &ev);
    if (s != CT_OK) {
        fclose(tb->f);
        free(tb->buf);
        free(tb);
        return s;
    }
    *out = tb;
    return CT_OK;
}

const char *ct_tensorboard_path(const ct_tensorboard *tb) { return tb ? tb->path : ""; }

ct_status ct_tensorboard_scalars(ct_tensorboard *tb, int64_t step, int n, const char *const *tags,
                                 const double *values) {
    if (!tb || !tags || !values) return CT_E_INVALID_ARG;
    if (n < 1 || n > MAX_VALUES)
        return ct_set_error(tb->ctx, CT_E_INVALID_ARG, "ct_tensorboard_scalars: %d values (1..%d per event)", n,
                            MAX_VALUES);
    Tensorflow__Summary__Value val[MAX_VALUES], *vp[MAX_VALUES];
    for (int i = 0; i < n; i++) {
        if (!tags[i] || !tags[i][0])
            return ct_set_error(tb->ctx, CT_E_INVALID_ARG, "ct_tensorboard_scalars: value %d has no tag", i);
        tensorflow__summary__value__init(&val[i]);
        val[i].tag = (char *)tags[i];
        val[i].value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
        val[i].simple_value = (float)values[i];
        vp[i] = &val[i];
    }
    Tensorflow__Summary sum = TENSORFLOW__SUMMARY__INIT;
    sum.n_value = (size_t)n;
    sum.value = vp;
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.wall_time = wall_now();
    ev.step = step;
    ev.what_case = TENSORFLOW__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    return write_event(tb, &ev);
}

ct_status ct_tensorboard_log_step(ct_tensorboard *tb, const ct_metrics_step *s) {
    if (!tb || !s) return CT_E_INVALID_ARG;
    double dt = s->time_s - tb->prev_time; /* samples/s exactly as ct_metrics_log_step derives it */
    tb->prev_time = s->time_s;
    const char *tags[9] = {"train/loss", "train/accuracy", "train/lr", "train/samples_per_s"};
    double v[9] = {s->loss, s->acc, s->lr, dt > 0 ? s->samples / dt : NAN};
    int n = 4;
    const struct {
        const char *tag;
        double v;
    } opt[] = {{"train/grad_norm", s->grad_norm}, {"train/loss_scale", s->loss_scale}, {"perf/mfu", s->mfu},
               {"perf/peak_mib", s->peak_mib},    {"perf/comm_share", s->comm_share}};
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++)
        if (opt[i].v >= 0) tags[n] = opt[i].tag, v[n++] = opt[i].v;
    return ct_tensorboard_scalars(tb, s->step, n, tags, v);
}

ct_status ct_tensorboard_log_eval(ct_tensorboard *tb, int64_t step, double test_loss, double test_acc, double time_s) {
    if (!tb) return CT_E_INVALID_ARG;
    tb->prev_time = time_s;
    const char *tags[] = {"eval/loss", "eval/accuracy"};
    double v[] = {test_loss, test_acc};
    return ct_tensorboard_scalars(tb, step, 2, tags, v);
}

ct_status ct_tensorboard_close(ct_tensorboard *tb) {
    if (!tb) return CT_OK;
    if (!tb->failed && (fflush(tb->f) != 0 || fsync(fileno(tb->f)) != 0)) tb->failed = errno ? errno : EIO;
    if (fclose(tb->f) != 0 && !tb->failed) tb->failed = errno ? errno : EIO;
    ct_status s = tb->failed ? io_error(tb) : CT_OK;
    free(tb->buf);
    free(tb);
    return s;
}
