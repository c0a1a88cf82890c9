/* src/train/dp_buckets.c - the trainer's gradient buckets (data parallel,
 * docs/distributed.md): planned at compile time from the plan's parameter
 * layout and its backward order (ct_plan_grad_ready_order) with the
 * recipe's bucket_size_mb / overlap_communication / comm_progress /
 * grad_compression, fed by the plan's grad-ready hook, and shown: the
 * header's line, the profiler's per-bucket events and the run's summary.
 * The reduction itself is src/comm/bucket.c. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "train_internal.h"

/* sync_batchnorm: the batchnorm kernels' per-channel sums over every rank (ct_context_set_batch_sum) */
static ct_status batch_sum(void *user, double *x, size_t n) { return ct_comm_allreduce_f64(user, x, n, CT_REDUCE_SUM); }

static void on_grad_ready(void *user, int param, const ct_tensor *grad) {
    (void)grad;
    ct_buckets_grad_ready(user, param);
}

ct_status ct_dp_buckets_create(ct_context *ctx, ct_comm *c, ct_plan *p, const ct_recipe *r, const size_t *shard_offs,
                               void (*done)(void *user, size_t off, size_t n), void *done_user, ct_buckets **out) {
    *out = NULL;
    if (ct_comm_size(c) == 1) return CT_OK;
    float *g = NULL;
    size_t n = 0;
    CT_TRY(ct_plan_param_arena(p, NULL, &g, &n));
    const int np = ct_plan_num_params(p);
    size_t *off = malloc(((size_t)np + 1) * sizeof *off);
    int n_ready = ct_plan_grad_ready_order(p, NULL, 0);
    int *order = malloc(((size_t)n_ready + 1) * sizeof *order);
    ct_status s = off && order ? CT_OK : ct_set_error(ctx, CT_E_OOM, "out of memory planning gradient buckets");
    for (int i = 0; s == CT_OK && i < np; i++) {
        ct_tensor gt;
        s = ct_plan_param_info(p, i, NULL, NULL, &gt);
        off[i] = (size_t)((float *)gt.data - g);
    }
    if (s == CT_OK) {
        off[np] = n;
        ct_plan_grad_ready_order(p, order, n_ready);
        ct_bucket_opts o;
        ct_bucket_opts_default(&o);
        o.bucket_bytes = (size_t)((double)r->bucket_size_mb * 1048576.0);
        o.first_bucket_bytes = CT_MIN(o.bucket_bytes, (size_t)1 << 20);
        o.overlap = r->overlap_communication;
        o.progress = (ct_bucket_progress)r->comm_progress;
        /* sync_batchnorm reduces inside backward from the training thread: a progress thread would call MPI
         * at the same time (MPI_THREAD_SERIALIZED), so the buckets progress from the hook */
        if (r->sync_batchnorm) o.progress = CT_BUCKET_PROGRESS_HOOK;
        o.compression = (ct_grad_compression)r->grad_compression;
        o.shard_offs = shard_offs;
        o.done = done;
        o.done_user = done_user;
        s = ct_buckets_create(ctx, c, g, n, np, off, order, n_ready, &o, out);
    }
    if (s == CT_OK) ct_plan_set_grad_ready(p, on_grad_ready, *out);
    if (s == CT_OK && r->sync_batchnorm) ct_context_set_batch_sum(ctx, batch_sum, c);
    free(off);
    free(order);
    return s;
}

void ct_dp_buckets_free(ct_plan *p, ct_buckets *b) {
    if (!b) return;
    if (p) ct_plan_set_grad_ready(p, NULL, NULL);
    ct_buckets_free(b);
}

void ct_dp_buckets_describe(const ct_buckets *b, const ct_recipe *r, int n_ready, char *buf, size_t len) {
    int nb = ct_buckets_count(b), o = 0;
    o += snprintf(buf, len, "%d bucket%s (MiB:", nb, nb == 1 ? "" : "s");
    for (int i = 0; i < nb && (size_t)o < len; i++) {
        ct_bucket_info bi;
        ct_buckets_info(b, i, &bi);
        if (i == 8 && nb > 9) {
            o += snprintf(buf + o, len - (size_t)o, " ... (%d more)", nb - 8);
            break;
        }
        o += snprintf(buf + o, len - (size_t)o, " %.2f", (double)bi.n * sizeof(float) / 1048576.0);
    }
    if ((size_t)o < len) o += snprintf(buf + o, len - (size_t)o, ")");
    if ((size_t)o < len && r->overlap_communication && nb > 0) {
        /* how early the buckets can start: after which share of backward's gradients */
        o += snprintf(buf + o, len - (size_t)o, ", overlapped with backward by a %s (ready after",
                      r->comm_progress == CT_BUCKET_PROGRESS_HOOK || r->sync_batchnorm
                          ? "test at each gradient" : "progress thread");
        for (int i = 0; i < nb && i < 8 && (size_t)o < len; i++) {
            ct_bucket_info bi;
            ct_buckets_info(b, i, &bi);
            o += snprintf(buf + o, len - (size_t)o, "%s %d%%", i ? "," : "",
                          n_ready ? (int)(100.0 * bi.ready_after / n_ready + 0.5) : 100);
        }
        if ((size_t)o < len) o += snprintf(buf + o, len - (size_t)o, "%s of the gradients)", nb > 8 ? ", ..." : "");
    } else if ((size_t)o < len) {
        o += snprintf(buf + o, len - (size_t)o, ", after backward");
    }
    if ((size_t)o < len && r->sync_batchnorm)
        o += snprintf(buf + o, len - (size_t)o, "; sync_batchnorm: batch statistics over the global batch");
    if ((size_t)o < len && r->grad_compression != CT_GRAD_COMPRESSION_NONE)
        snprintf(buf + o, len - (size_t)o, ", sent as %s with error feedback",
                 ct_recipe_enum_name("grad_compression", r->grad_compression));
}

void ct_dp_buckets_trace(const ct_buckets *b, ct_profiler *prof) {
    if (!prof || !ct_profiler_recording(prof)) return;
    for (int i = 0; i < ct_buckets_count(b); i++) {
        ct_bucket_info bi;
        if (ct_buckets_info(b, i, &bi) != CT_OK || bi.end_us <= 0) continue;
        char name[64], args[128];
        snprintf(name, sizeof name, "allreduce bucket %d", i);
        snprintf(args, sizeof args, "{\"bucket\": %d, \"bytes\": %zu, \"params\": %d, \"queued_us\": %.1f}", i,
                 bi.n * sizeof(float), bi.n_params, bi.start_us - bi.ready_us);
        ct_profiler_event(prof, name, "comm_bucket", bi.start_us, bi.end_us, args);
    }
}

/* ---- the compression residuals in checkpoints ------------------------------------------------------------
 * Each rank's error-feedback residual is its own (what its rounding lost), so the checkpoint keeps all of
 * them: gathered to every rank (allgather) and written by rank 0 with the step directory as
 * grad_residual.bin: "CTRESID1", int32 world, int32 0, uint64 n (floats per rank), then world x n floats
 * in rank order. Written in the step directory's temporary folder with the rest, so it is as atomic as
 * the checkpoint. */
#define RESID_MAGIC "CTRESID1"

ct_status ct_dp_residual_gather(ct_context *ctx, ct_comm *c, ct_buckets *b, void **blob, size_t *size) {
    *blob = NULL;
    *size = 0;
    size_t n = 0;
    float *res = ct_buckets_residual(b, &n);
    if (!res) return CT_OK;
    const int world = ct_comm_size(c);
    if (n * sizeof(float) > (size_t)INT_MAX)
        return ct_set_error(ctx, CT_E_UNSUPPORTED, "checkpoint: the gradient compression residual (%zu floats per "
                            "rank) is over 2 GiB: the gather takes at most INT_MAX bytes; train without "
                            "grad_compression or save no checkpoints", n);
    size_t hdr = 24, bytes = hdr + (size_t)world * n * sizeof(float);
    char *p = malloc(bytes);
    if (!p) return ct_set_error(ctx, CT_E_OOM, "out of memory gathering the ranks' gradient compression residuals");
    memcpy(p, RESID_MAGIC, 8);
    int32_t w = world, z = 0;
    uint64_t n64 = n;
    memcpy(p + 8, &w, 4);
    memcpy(p + 12, &z, 4);
    memcpy(p + 16, &n64, 8);
    ct_status s = ct_comm_allgather(c, res, n * sizeof(float), p + hdr);
    if (s != CT_OK) {
        free(p);
        return s;
    }
    *blob = p;
    *size = bytes;
    return CT_OK;
}

ct_status ct_dp_residual_load(ct_context *ctx, ct_comm *c, ct_buckets *b, const char *step_dir, char *note,
                              size_t note_len) {
    note[0] = 0;
    size_t n = 0;
    float *res = ct_buckets_residual(b, &n);
    if (!res) return CT_OK;
    memset(res, 0, n * sizeof(float));
    char path[4200];
    snprintf(path, sizeof path, "%s/grad_residual.bin", step_dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(note, note_len, "the checkpoint has no gradient compression residual (saved without "
                 "grad_compression): it starts from zero");
        return CT_OK;
    }
    char hdr[24];
    int32_t w = 0;
    uint64_t n64 = 0;
    ct_status s = CT_OK;
    if (fread(hdr, 1, 24, f) != 24 || memcmp(hdr, RESID_MAGIC, 8)) {
        s = ct_set_error(ctx, CT_E_CORRUPT, "%s is not a gradient residual file (bad header): delete it to start "
                         "the residual from zero", path);
    } else {
        memcpy(&w, hdr + 8, 4);
        memcpy(&n64, hdr + 16, 8);
        if (w != ct_comm_size(c) || n64 != n) {
            snprintf(note, note_len, "the gradient compression residual was saved at %d rank%s x %llu floats, this "
                     "run has %d x %zu: it starts from zero", (int)w, w == 1 ? "" : "s", (unsigned long long)n64,
                     ct_comm_size(c), n);
        } else if (fseek(f, (long)(24 + (size_t)ct_comm_rank(c) * n * sizeof(float)), SEEK_SET) ||
                   fread(res, sizeof(float), n, f) != n) {
            memset(res, 0, n * sizeof(float));
            s = ct_set_error(ctx, CT_E_CORRUPT, "%s is shorter than its header says (%d ranks x %zu floats): the "
                             "checkpoint is damaged; delete the file to start the residual from zero", path, (int)w, n);
        }
    }
    fclose(f);
    return s;
}
