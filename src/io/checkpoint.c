/* src/io/checkpoint.c - weights files and checkpoints that resume a run bit
 * for bit, through the plan's public API (parameters and buffers in arena
 * order) and the safetensors reader/writer (safetensors.c).
 * docs/checkpoint-format.md describes the files.
 *
 * Files go to a temporary name, are fsync'd and renamed into place; the
 * directory is fsync'd after each rename. A file is read and checked whole
 * before anything is copied into the plan or optimizer, so a failed load
 * leaves them untouched.
 *
 * Deleting is the dangerous part of a checkpoint writer, so it trusts
 * nothing: it removes only `step-NNNNNN` directories that hold a train state
 * and `.tmp-*` leftovers of its own saves, only the regular files directly
 * inside them, and never follows a symbolic link (every name is opened
 * relative to its parent with O_NOFOLLOW). A step saved again is swapped in
 * with one atomic rename (RENAME_EXCHANGE), so `latest` never names a
 * missing directory. */
#define _GNU_SOURCE /* renameat2 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "amp/scaler_history.h"
#include "core/internal.h"
#include "ctrain/checkpoint.h"
#include "ctrain/dist.h"
#include "ctrain/version.h"
#include "io/io_internal.h"
#include "io/pp_files.h"
#include "io/safetensors.h"

#define MODEL_FILE "model.safetensors"
#define STATE_FILE "train_state.safetensors"
#define FORMAT_VERSION "1"
#define MAX_FILES 8       /* extra files of a step directory (ct_checkpoint_opts.files) */
#define MAX_FILE_NAME 40  /* their names fit a metadata value with size and CRC */

/* ---- small helpers ------------------------------------------------------------------- */

static void join_path(char *out, size_t len, const char *dir, const char *name) {
    size_t n = strlen(dir);
    int w = snprintf(out, len, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name);
    if (w < 0 || (size_t)w >= len) out[0] = 0; /* too long: an empty path fails to open */
}

static ct_status fsync_dir(ct_context *ctx, const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return ct_set_error(ctx, CT_E_IO, "cannot open directory '%s' to sync it: %s", dir, strerror(errno));
    int r = fsync(fd);
    int e = errno;
    close(fd);
    if (r != 0 && e != EINVAL && e != EROFS)
        return ct_set_error(ctx, CT_E_IO, "cannot sync directory '%s': %s", dir, strerror(e));
    return CT_OK;
}

static void dir_of(const char *path, char *out, size_t len) {
    snprintf(out, len, "%s", path);
    char *slash = strrchr(out, '/');
    if (!slash) snprintf(out, len, ".");
    else if (slash == out) out[1] = 0;
    else *slash = 0;
}

/* mkdir -p dir (io_internal.h) */
ct_status ct_io_make_dirs(ct_context *ctx, const char *dir, const char *what) {
    char buf[PATH_MAX];
    if (strlen(dir) >= sizeof buf) return ct_set_error(ctx, CT_E_INVALID_ARG, "%s '%s' is too long", what, dir);
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return ct_set_error(ctx, CT_E_IO, "%s: cannot create directory '%s': %s", what, buf, strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ct_set_error(ctx, CT_E_IO, "%s '%s' exists and is not a directory; pass another one", what, dir);
    return CT_OK;
}

/* Deletes directory `name` of the directory open as `pfd` if it is a real
 * directory (not a link): the regular files directly inside it, the train
 * state last, then the directory itself. Links and anything else inside are
 * left (and with them the directory). With `need_state`, only a directory
 * holding a train state file (one ctrain wrote) is emptied; an empty one
 * (a deletion killed after its last file) is removed too. */
static void remove_dir_at(int pfd, const char *name, int need_state) {
    int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    struct stat sb;
    if (need_state && (fstatat(fd, STATE_FILE, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))) {
        close(fd);
        unlinkat(pfd, name, AT_REMOVEDIR); /* only if empty */
        return;
    }
    DIR *d = fdopendir(fd); /* owns fd from here */
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *e;
    int state = 0;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (!strcmp(e->d_name, STATE_FILE)) {
            state = 1; /* last: a deletion killed half way leaves a directory the next prune still recognizes */
            continue;
        }
        if (fstatat(fd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode)) unlinkat(fd, e->d_name, 0);
    }
    if (state && fstatat(fd, STATE_FILE, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode))
        unlinkat(fd, STATE_FILE, 0);
    closedir(d);
    unlinkat(pfd, name, AT_REMOVEDIR); /* fails, harmlessly, if something was left inside */
}

/* remove_dir_at for a path: a temporary directory of this save. */
static void remove_dir(const char *path) {
    char parent[PATH_MAX];
    dir_of(path, parent, sizeof parent);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0) return;
    remove_dir_at(pfd, base, 0);
    close(pfd);
}

/* ---- the tensors of a plan and an optimizer --------------------------------------------- */

/* Parameters then buffers, in arena order, viewing the plan's memory. */
static ct_status model_tensors(ct_context *ctx, ct_plan *p, ct_st_tensor **out, int *n_out) {
    int np = ct_plan_num_params(p), nb = ct_plan_num_buffers(p);
    ct_st_tensor *t = calloc((size_t)(np + nb) + 1, sizeof *t);
    if (!t) return ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    int k = 0;
    for (int i = 0; i < np + nb; i++, k++) {
        const char *name;
        ct_tensor v;
        ct_status s = i < np ? ct_plan_param_info(p, i, &name, &v, NULL) : ct_plan_buffer_info(p, i - np, &name, &v);
        if (s != CT_OK) {
            free(t);
            return ct_set_error(ctx, CT_E_INTERNAL, "checkpoint: the plan has no %s %d", i < np ? "parameter" : "buffer",
                                i < np ? i : i - np);
        }
        snprintf(t[k].name, sizeof t[k].name, "%s", name);
        t[k].ndim = v.ndim;
        memcpy(t[k].shape, v.shape, sizeof t[k].shape);
        t[k].data = v.data;
        t[k].numel = (size_t)ct_tensor_numel(&v);
    }
    *out = t;
    *n_out = k;
    return CT_OK;
}

/* PyTorch's names for the optimizer's state blocks (include/ctrain/optim.h). */
static int state_names(const ct_optim_opts *o, const char *names[4]) {
    int n = 0;
    switch (o->kind) {
    case CT_OPTIM_SGD:
        if (o->momentum != 0.0f) names[n++] = "momentum_buffer";
        break;
    case CT_OPTIM_ADAMW:
    case CT_OPTIM_ADAM:
        names[n++] = "exp_avg";
        names[n++] = "exp_avg_sq";
        if (o->amsgrad) names[n++] = "max_exp_avg_sq";
        break;
    case CT_OPTIM_RMSPROP:
        names[n++] = "square_avg";
        if (o->momentum > 0.0f) names[n++] = "momentum_buffer";
        if (o->centered) names[n++] = "grad_avg";
        break;
    case CT_OPTIM_ADAGRAD: names[n++] = "sum"; break;
    case CT_OPTIM_LAMB:
        names[n++] = "exp_avg";
        names[n++] = "exp_avg_sq";
        break;
    }
    return n;
}

static void state_list(const ct_optim_opts *o, char *buf, size_t len) {
    const char *names[4];
    int n = state_names(o, names);
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; i < n && off < len; i++) off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? "," : "", names[i]);
}

/* "optimizer.<state>.<param>" for every state block and parameter. */
static ct_status optim_tensors(ct_context *ctx, ct_plan *p, ct_optimizer *opt, ct_st_tensor **out, int *n_out) {
    ct_optim_opts oo;
    float *state;
    size_t n_state, n;
    ct_optimizer_get_opts(opt, &oo);
    ct_optimizer_state(opt, &state, &n_state);
    float *arena;
    ct_plan_param_arena(p, &arena, NULL, &n);
    int np = ct_plan_num_params(p);
    const char *names[4];
    int nb = state_names(&oo, names);
    if ((size_t)nb * n != n_state)
        return ct_set_error(ctx, CT_E_INTERNAL, "checkpoint: the %s optimizer holds %zu state floats, expected %d x %zu",
                            ct_optim_kind_name(oo.kind), n_state, nb, n);
    ct_st_tensor *t = calloc((size_t)(nb * np) + 1, sizeof *t);
    if (!t) return ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    int k = 0;
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < np; i++, k++) {
            const char *name;
            ct_tensor v;
            ct_plan_param_info(p, i, &name, &v, NULL);
            snprintf(t[k].name, sizeof t[k].name, "optimizer.%s.%s", names[b], name);
            t[k].ndim = v.ndim;
            memcpy(t[k].shape, v.shape, sizeof t[k].shape);
            t[k].data = state + (size_t)b * n + (size_t)((const float *)v.data - arena); /* the param's offset */
            t[k].numel = (size_t)ct_tensor_numel(&v);
        }
    *out = t;
    *n_out = k;
    return CT_OK;
}

/* ---- tensor parallelism: shards <-> whole tensors ------------------------------------------
 * A plan built for tensor parallelism (ct_graph_set_tensor_group) holds shards of some parameters.
 * Checkpoints stay in the one-process format: a save gathers each shard (and its optimizer state) into the
 * whole tensor on tensor rank 0, which writes; a load gives every rank its slices of the whole tensors. */

typedef struct {
    ct_shard sh;                 /* dim -1: not a shard                  */
    int64_t shape[CT_MAX_DIMS];  /* the shard's shape                    */
} tp_part;

/* parts[k] for each tensor of t (model: parameters then buffers; else optimizer blocks of np parameters);
 * a shard's entry in t gets the whole tensor's shape and numel (its data still the shard). NULL without
 * tensor parallelism. */
static ct_status tp_parts(ct_context *ctx, ct_plan *p, ct_st_tensor *t, int n, int model, tp_part **out) {
    *out = NULL;
    if (!ct_plan_tensor_group(p)) return CT_OK;
    const int np = ct_plan_num_params(p);
    tp_part *parts = calloc((size_t)n + 1, sizeof *parts);
    if (!parts) return ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    for (int k = 0; k < n; k++) {
        parts[k].sh.dim = -1;
        int i = model ? (k < np ? k : -1) : k % np;
        if (i < 0 || ct_plan_param_shard(p, i, &parts[k].sh) != CT_OK || parts[k].sh.dim < 0) continue;
        memcpy(parts[k].shape, t[k].shape, sizeof parts[k].shape);
        ct_shard_full_shape(&parts[k].sh, t[k].ndim, parts[k].shape, t[k].shape);
        t[k].numel = 1;
        for (int d = 0; d < t[k].ndim; d++) t[k].numel *= (size_t)t[k].shape[d];
    }
    *out = parts;
    return CT_OK;
}

/* Every tensor rank calls it with the same list: each shard goes to tensor rank 0, which puts the whole tensor
 * into a new buffer (t[k].data; listed in bufs for the caller to free). */
static ct_status tp_gather(ct_context *ctx, ct_plan *p, ct_st_tensor *t, const tp_part *parts, int n, float **bufs) {
    if (!parts) return CT_OK; /* no tensor group (tp_parts): no shards to gather */
    ct_comm *tp = ct_plan_tensor_group(p);
    const int T = ct_comm_size(tp), root = ct_comm_rank(tp) == 0;
    size_t counts[1024];
    if (T > 1024) return ct_set_error(ctx, CT_E_CONFIG, "checkpoint: tensor groups of more than 1024 ranks");
    for (int k = 0; k < n; k++) {
        bufs[k] = NULL;
        if (parts[k].sh.dim < 0) continue;
        size_t m = 1;
        for (int d = 0; d < t[k].ndim; d++) m *= (size_t)parts[k].shape[d];
        for (int q = 0; q < T; q++) counts[q] = m;
        float *all = root ? malloc(m * (size_t)T * sizeof(float)) : NULL;
        float *whole = root ? calloc(t[k].numel + 1, sizeof(float)) : NULL;
        ct_status s = root && (!all || !whole) ? ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory gathering "
                                                              "'%s' (%zu floats)", t[k].name, t[k].numel) : CT_OK;
        /* a rank without memory still takes part, so that nobody waits forever */
        ct_status g = ct_comm_gatherv_f32(tp, t[k].data, counts, all ? all : whole, 0);
        if (s == CT_OK) s = g;
        for (int q = 0; s == CT_OK && root && q < T; q++) {
            tp_part pq = parts[k];
            pq.sh.rank = q;
            ct_shard_copy(&pq.sh, t[k].ndim, pq.shape, whole, all + (size_t)q * m, 0);
        }
        free(all);
        bufs[k] = whole;
        if (whole) t[k].data = whole;
        if (s != CT_OK) return s;
    }
    return CT_OK;
}

/* After a tensor- or pipeline-parallel save (s: this rank's status): every rank of the group returns the
 * writer's (rank 0's). */
static ct_status writer_status(ct_comm *c, ct_status s) {
    ct_status w = s, b = ct_comm_broadcast(c, &w, sizeof w, 0);
    return s != CT_OK ? s : b != CT_OK ? b : w;
}

static void free_bufs(float **bufs, int n) {
    for (int k = 0; bufs && k < n; k++) free(bufs[k]);
    free(bufs);
}

/* Tensor rank 0 of a save: the model's (mt) and the optimizer's (ot, may be NULL) shards made whole. */
static ct_status tp_whole(ct_context *ctx, ct_plan *plan, ct_st_tensor *mt, int mn, ct_st_tensor *ot, int on,
                          float ***mbufs, float ***obufs) {
    tp_part *mp = NULL, *op = NULL;
    ct_status s = tp_parts(ctx, plan, mt, mn, 1, &mp);
    if (s == CT_OK && ot) s = tp_parts(ctx, plan, ot, on, 0, &op);
    if (s == CT_OK && (!(*mbufs = calloc((size_t)mn + 1, sizeof **mbufs)) ||
                       (ot && !(*obufs = calloc((size_t)on + 1, sizeof **obufs)))))
        s = ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    if (s == CT_OK) s = tp_gather(ctx, plan, mt, mp, mn, *mbufs);
    if (s == CT_OK && ot) s = tp_gather(ctx, plan, ot, op, on, *obufs);
    free(mp);
    free(op);
    return s;
}

/* ---- pipeline stages: the stages' tensors <-> the one-process file ----------------------------
 * A stage plan (ct_compile_opts.stage with a pipeline group) holds some of the model's parameters and buffers.
 * A save gathers every stage's tensors (after tensor parallelism's gather within the stage) on pipeline rank
 * 0, which writes the one-process file: the whole model's order, a tensor held by several stages once
 * (src/io/pp_files.c). A load takes each stage's tensors by name, and checks over the group that the stages
 * took every tensor of the file. */

/* The place in the whole model of each of the n entries of model_tensors (model 1: parameters, then buffers
 * after all parameters) or optim_tensors (state block b's parameters after block b - 1's). */
static int64_t *order_keys(ct_plan *p, int n, int model) {
    const int np = ct_plan_num_params(p);
    int64_t *keys = malloc(((size_t)n + 1) * sizeof *keys);
    for (int k = 0; keys && k < n; k++) {
        if (model) keys[k] = k < np ? ct_plan_param_order(p, k) : ((int64_t)1 << 32) | ct_plan_buffer_order(p, k - np);
        else keys[k] = ((int64_t)(k / np) << 32) | ct_plan_param_order(p, k % np);
    }
    return keys;
}

/* Collective over the pipeline group: on pipeline rank 0, *t (n) becomes the whole model's list (the old one
 * freed; its data in *buf, or still the plan's). contribute 0: a tensor rank other than 0 (shards). */
static ct_status pp_whole(ct_context *ctx, ct_plan *plan, ct_status s, int contribute, int model, ct_st_tensor **t,
                          int *n, float **buf) {
    ct_comm *pp = ct_plan_pipeline_group(plan);
    int64_t *keys = s == CT_OK ? order_keys(plan, *n, model) : NULL;
    if (s == CT_OK && !keys) s = ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    ct_st_tensor *all = NULL;
    int n_all = 0;
    s = ct_pp_gather(ctx, pp, s, *t, keys, *n, contribute, &all, &n_all, buf);
    free(keys);
    if (s == CT_OK && ct_comm_rank(pp) == 0) {
        free(*t);
        *t = all;
        *n = n_all;
    }
    return s;
}

/* ---- weights ----------------------------------------------------------------------------- */

/* The file of ct_weights_save from the model's tensors t (n): a temporary file, written, renamed. */
static ct_status write_weights(ct_context *ctx, const char *path, ct_st_tensor *t, int n) {
    char dir[PATH_MAX], tmp[PATH_MAX];
    dir_of(path, dir, sizeof dir);
    join_path(tmp, sizeof tmp, dir, ".tmp-XXXXXX");
    int fd = mkstemp(tmp);
    if (fd < 0) return ct_set_error(ctx, CT_E_IO, "cannot create a file in '%s': %s", dir, strerror(errno));
    close(fd);
    ct_st_meta m = {0};
    ct_st_meta_set(&m, "format", "pt");
    ct_st_meta_set(&m, "ctrain_format", "weights");
    ct_st_meta_set(&m, "ctrain_version", FORMAT_VERSION);
    ct_st_meta_set(&m, "ctrain_library", "%s", ct_version());
    ct_status s = ct_st_write(ctx, tmp, path, t, n, &m, 1, NULL);
    if (s == CT_OK && rename(tmp, path) != 0)
        s = ct_set_error(ctx, CT_E_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (s != CT_OK) {
        unlink(tmp);
        return s;
    }
    return fsync_dir(ctx, dir);
}

/* Tensor parallel: a collective over the plan's tensor group (tensor rank 0 gathers and writes); pipeline
 * stages: also over the pipeline group (pipeline rank 0 writes). */
ct_status ct_weights_save(ct_context *ctx, const char *path, ct_plan *plan) {
    if (!path || !plan) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_weights_save: path and plan must not be NULL");
    ct_st_tensor *t = NULL;
    int n = 0;
    float **bufs = NULL, **none = NULL; /* tensor parallel: the whole tensors */
    float *pbuf = NULL; /* pipeline stages: the other stages' tensors */
    ct_comm *tp = ct_plan_tensor_group(plan), *pp = ct_plan_pipeline_group(plan);
    ct_status s = model_tensors(ctx, plan, &t, &n);
    const int nt = n; /* bufs' length */
    if (s == CT_OK && tp) s = tp_whole(ctx, plan, t, n, NULL, 0, &bufs, &none);
    int writer = !tp || ct_comm_rank(tp) == 0;
    if (pp) s = pp_whole(ctx, plan, s, writer, 1, &t, &n, &pbuf);
    if (pp) writer = writer && ct_comm_rank(pp) == 0;
    if (s == CT_OK && writer) s = write_weights(ctx, path, t, n);
    free(t);
    free(pbuf);
    free_bufs(bufs, nt);
    if (pp) s = writer_status(pp, s);
    return tp ? writer_status(tp, s) : s;
}

static ct_status load_model_file(ct_context *ctx, const char *path, ct_plan *plan, int require_crc,
                                 uint32_t *crc_out, ct_st_file *f, ct_st_tensor **t_out, const unsigned char ***src_out,
                                 tp_part **parts_out, int *n_out, unsigned char **claimed_out) {
    CT_TRY(ct_st_read(ctx, path, require_crc, f));
    unsigned char *claimed = NULL; /* pipeline stages: the file's tensors this stage takes */
    ct_st_tensor *t = NULL;
    tp_part *parts = NULL;
    int n = 0;
    ct_status s = model_tensors(ctx, plan, &t, &n);
    if (s == CT_OK) s = tp_parts(ctx, plan, t, n, 1, &parts); /* tensor parallel: match the whole tensors */
    const unsigned char **src = s == CT_OK ? calloc((size_t)n + 1, sizeof *src) : NULL;
    if (s == CT_OK && !src) s = ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    if (s == CT_OK && claimed_out && !(claimed = malloc((size_t)f->n_tensors + 1)))
        s = ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    if (s == CT_OK) s = claimed ? ct_st_match_part(ctx, path, f, t, n, src, claimed) : ct_st_match(ctx, path, f, t, n, src);
    if (s != CT_OK) {
        free(t);
        free(src);
        free(parts);
        free(claimed);
        ct_st_close(f);
        return s;
    }
    if (crc_out) *crc_out = f->crc;
    *t_out = t;
    *src_out = src;
    *parts_out = parts;
    *n_out = n;
    if (claimed_out) *claimed_out = claimed;
    return CT_OK;
}

/* Zeroes the parameter and buffer arenas (alignment padding included). */
static void zero_model(ct_plan *plan) {
    float *params, *buffers;
    size_t np, nb;
    ct_plan_param_arena(plan, &params, NULL, &np);
    ct_plan_buffer_arena(plan, &buffers, &nb);
    if (np) memset(params, 0, np * sizeof(float));
    if (nb) memset(buffers, 0, nb * sizeof(float));
}

/* A shard (parts[i], tensor parallel) takes its slices of the whole tensor in the file. */
static void copy_in(const ct_st_tensor *t, const unsigned char **src, const tp_part *parts, int n) {
    for (int i = 0; i < n; i++) {
        if (parts && parts[i].sh.dim >= 0)
            ct_shard_copy(&parts[i].sh, t[i].ndim, parts[i].shape, (float *)(uintptr_t)src[i], t[i].data, 1);
        else memcpy(t[i].data, src[i], t[i].numel * sizeof(float));
    }
}

ct_status ct_weights_load(ct_context *ctx, const char *path, ct_plan *plan) {
    if (!path || !plan) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_weights_load: path and plan must not be NULL");
    ct_st_file f = {0};
    ct_st_tensor *t = NULL;
    const unsigned char **src = NULL;
    tp_part *parts = NULL;
    unsigned char *claimed = NULL;
    int n = 0;
    ct_comm *pp = ct_plan_pipeline_group(plan);
    ct_status s = load_model_file(ctx, path, plan, 0, NULL, &f, &t, &src, &parts, &n, pp ? &claimed : NULL);
    if (pp) /* every tensor of the file taken by some stage */
        s = ct_pp_check(ctx, pp, s, 1, (const ct_st_file *const[]){&f}, (const char *const[]){path},
                        (unsigned char *const[]){claimed});
    if (s == CT_OK) {
        zero_model(plan);
        copy_in(t, src, parts, n);
    }
    free(t);
    free(src);
    free(parts);
    free(claimed);
    ct_st_close(&f);
    return s;
}

/* ---- checkpoints ------------------------------------------------------------------------- */

void ct_train_state_init(ct_train_state *st) {
    memset(st, 0, sizeof *st);
    st->early_stop.best_epoch = -1;
}

void ct_checkpoint_opts_default(ct_checkpoint_opts *o) {
    memset(o, 0, sizeof *o);
    o->keep_last = 3;
    o->fsync = 1;
}

static int parse_step_name(const char *name, int64_t *step) {
    if (strncmp(name, "step-", 5) || !name[5]) return 0;
    int64_t v = 0;
    for (const char *c = name + 5; *c; c++) {
        if (*c < '0' || *c > '9' || v > INT64_MAX / 10 - 10) return 0;
        v = v * 10 + (*c - '0');
    }
    *step = v;
    return 1;
}

/* history: ct_scaler_history_to_json of st->scaler when has_scaler. */
static void fill_state_meta(ct_st_meta *m, const ct_train_state *st, const ct_optim_opts *oo, uint64_t opt_steps,
                            uint32_t model_crc, int n_model, const char *history) {
    char list[128];
    ct_st_meta_set(m, "format", "pt");
    ct_st_meta_set(m, "ctrain_format", "train_state");
    ct_st_meta_set(m, "ctrain_version", FORMAT_VERSION);
    ct_st_meta_set(m, "ctrain_library", "%s", ct_version());
    ct_st_meta_set(m, "model_crc32", "%08lx", (unsigned long)model_crc);
    ct_st_meta_set(m, "model_tensors", "%d", n_model);
    ct_st_meta_set(m, "step", "%lld", (long long)st->step);
    ct_st_meta_set(m, "epoch", "%lld", (long long)st->epoch);
    ct_st_meta_set(m, "batch_in_epoch", "%lld", (long long)st->batch_in_epoch);
    ct_st_meta_set(m, "optimizer", "%s", oo ? ct_optim_kind_name(oo->kind) : "none");
    if (oo) state_list(oo, list, sizeof list);
    ct_st_meta_set(m, "optimizer_state", "%s", oo ? list : "");
    ct_st_meta_set(m, "optimizer_steps", "%llu", (unsigned long long)opt_steps);
    ct_st_meta_set(m, "finished", "%d", st->finished != 0);
    ct_st_meta_set(m, "progress.epoch_loss_sum", "%a", st->epoch_loss_sum);
    ct_st_meta_set(m, "progress.epoch_correct", "%lld", (long long)st->epoch_correct);
    ct_st_meta_set(m, "progress.epoch_seen", "%lld", (long long)st->epoch_seen);
    ct_st_meta_set(m, "progress.test_loss", "%a", st->test_loss);
    ct_st_meta_set(m, "progress.test_acc", "%a", st->test_acc);
    if (st->has_schedule) {
        const ct_schedule_state *s = &st->schedule;
        ct_st_meta_set(m, "schedule.lr", "%a", s->lr);
        ct_st_meta_set(m, "schedule.best", "%a", s->best);
        ct_st_meta_set(m, "schedule.num_bad_epochs", "%lld", (long long)s->num_bad_epochs);
        ct_st_meta_set(m, "schedule.cooldown_counter", "%lld", (long long)s->cooldown_counter);
        ct_st_meta_set(m, "schedule.last_epoch", "%lld", (long long)s->last_epoch);
    }
    if (st->has_early_stop) {
        const ct_early_stop *e = &st->early_stop;
        ct_st_meta_set(m, "early_stop.patience", "%lld", (long long)e->patience);
        ct_st_meta_set(m, "early_stop.min_delta", "%a", e->min_delta);
        ct_st_meta_set(m, "early_stop.mode_max", "%d", e->mode_max);
        ct_st_meta_set(m, "early_stop.best", "%a", e->best);
        ct_st_meta_set(m, "early_stop.best_epoch", "%lld", (long long)e->best_epoch);
        ct_st_meta_set(m, "early_stop.wait", "%lld", (long long)e->wait);
        ct_st_meta_set(m, "early_stop.epoch", "%lld", (long long)e->epoch);
        ct_st_meta_set(m, "early_stop.stopped", "%d", e->stopped);
    }
    if (st->has_scaler) {
        const ct_scaler_state *c = &st->scaler;
        ct_st_meta_set(m, "scaler.scale", "%a", (double)c->scale);
        ct_st_meta_set(m, "scaler.growth_tracker", "%d", (int)c->growth_tracker);
        ct_st_meta_set(m, "scaler.hysteresis_left", "%d", (int)c->hysteresis_left);
        ct_st_meta_set(m, "scaler.min_hits", "%d", (int)c->min_hits);
        ct_st_meta_set(m, "scaler.step", "%llu", (unsigned long long)c->step);
        ct_st_meta_set(m, "scaler.skipped", "%llu", (unsigned long long)c->skipped);
        ct_st_meta_set(m, "scaler.backoffs", "%llu", (unsigned long long)c->backoffs);
        ct_st_meta_set(m, "scaler.growths", "%llu", (unsigned long long)c->growths);
        ct_st_meta_set(m, "scaler.events", "%llu", (unsigned long long)c->events);
        m->long_key[m->n_long] = "scaler.history";
        m->long_val[m->n_long++] = history;
    }
    if (st->recipe_json[0]) {
        m->long_key[m->n_long] = "recipe";
        m->long_val[m->n_long++] = st->recipe_json;
    }
}

/* Typed metadata reads; a missing or malformed value is corruption. */
typedef struct {
    ct_context *ctx;
    const char *path;
    const ct_st_file *f;
    ct_status s;
} meta_rd;

static const char *rd_str(meta_rd *r, const char *key) {
    const char *v = ct_st_meta_str(r->f, key);
    if (!v && r->s == CT_OK)
        r->s = ct_set_error(r->ctx, CT_E_CORRUPT, "'%s': metadata '%s' is missing: the file is corrupt", r->path, key);
    return v ? v : "";
}

static int64_t rd_i64(meta_rd *r, const char *key) {
    const char *v = rd_str(r, key);
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if ((!*v || *end || errno) && r->s == CT_OK)
        r->s = ct_set_error(r->ctx, CT_E_CORRUPT, "'%s': metadata '%s' = '%s' is not an integer: the file is corrupt",
                            r->path, key, v);
    return x;
}

static uint64_t rd_u64(meta_rd *r, const char *key) {
    const char *v = rd_str(r, key);
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if ((!*v || *end || errno || *v == '-') && r->s == CT_OK)
        r->s = ct_set_error(r->ctx, CT_E_CORRUPT, "'%s': metadata '%s' = '%s' is not an integer: the file is corrupt",
                            r->path, key, v);
    return x;
}

static double rd_f64(meta_rd *r, const char *key) {
    const char *v = rd_str(r, key);
    char *end;
    double x = strtod(v, &end);
    if ((!*v || *end) && r->s == CT_OK)
        r->s = ct_set_error(r->ctx, CT_E_CORRUPT, "'%s': metadata '%s' = '%s' is not a number: the file is corrupt",
                            r->path, key, v);
    return x;
}

static ct_status parse_state_meta(ct_context *ctx, const char *path, const ct_st_file *f, ct_train_state *st) {
    meta_rd r = {ctx, path, f, CT_OK};
    const char *fmt = ct_st_meta_str(f, "ctrain_format"), *ver = ct_st_meta_str(f, "ctrain_version");
    if (!fmt || strcmp(fmt, "train_state"))
        return ct_set_error(ctx, CT_E_CORRUPT, "'%s' is not a ctrain train state (ctrain_format '%s')", path,
                            fmt ? fmt : "missing");
    if (!ver || strcmp(ver, FORMAT_VERSION))
        return ct_set_error(ctx, CT_E_UNSUPPORTED,
                            "'%s' has checkpoint format version %s; this ctrain reads version %s", path,
                            ver ? ver : "missing", FORMAT_VERSION);
    ct_train_state_init(st);
    st->step = rd_i64(&r, "step");
    st->epoch = rd_i64(&r, "epoch");
    st->batch_in_epoch = rd_i64(&r, "batch_in_epoch");
    st->optimizer_steps = rd_u64(&r, "optimizer_steps");
    st->finished = (int)rd_i64(&r, "finished");
    st->epoch_loss_sum = rd_f64(&r, "progress.epoch_loss_sum");
    st->epoch_correct = rd_i64(&r, "progress.epoch_correct");
    st->epoch_seen = rd_i64(&r, "progress.epoch_seen");
    st->test_loss = rd_f64(&r, "progress.test_loss");
    st->test_acc = rd_f64(&r, "progress.test_acc");
    if (ct_st_meta_str(f, "schedule.lr")) {
        st->has_schedule = 1;
        st->schedule.lr = rd_f64(&r, "schedule.lr");
        st->schedule.best = rd_f64(&r, "schedule.best");
        st->schedule.num_bad_epochs = rd_i64(&r, "schedule.num_bad_epochs");
        st->schedule.cooldown_counter = rd_i64(&r, "schedule.cooldown_counter");
        st->schedule.last_epoch = rd_i64(&r, "schedule.last_epoch");
    }
    if (ct_st_meta_str(f, "early_stop.patience")) {
        ct_early_stop *e = &st->early_stop;
        st->has_early_stop = 1;
        e->patience = rd_i64(&r, "early_stop.patience");
        e->min_delta = rd_f64(&r, "early_stop.min_delta");
        e->mode_max = (int)rd_i64(&r, "early_stop.mode_max");
        e->best = rd_f64(&r, "early_stop.best");
        e->best_epoch = rd_i64(&r, "early_stop.best_epoch");
        e->wait = rd_i64(&r, "early_stop.wait");
        e->epoch = rd_i64(&r, "early_stop.epoch");
        e->stopped = (int)rd_i64(&r, "early_stop.stopped");
    }
    if (ct_st_meta_str(f, "scaler.scale")) {
        ct_scaler_state *c = &st->scaler;
        st->has_scaler = 1;
        c->scale = (float)rd_f64(&r, "scaler.scale");
        c->growth_tracker = (int32_t)rd_i64(&r, "scaler.growth_tracker");
        c->hysteresis_left = (int32_t)rd_i64(&r, "scaler.hysteresis_left");
        c->min_hits = (int32_t)rd_i64(&r, "scaler.min_hits");
        c->step = rd_u64(&r, "scaler.step");
        c->skipped = rd_u64(&r, "scaler.skipped");
        if (ct_st_meta_str(f, "scaler.events")) {
            c->backoffs = rd_u64(&r, "scaler.backoffs");
            c->growths = rd_u64(&r, "scaler.growths");
            c->events = rd_u64(&r, "scaler.events");
            const char *h = rd_str(&r, "scaler.history");
            if (r.s == CT_OK) r.s = ct_scaler_history_from_json(ctx, path, h, c);
        } else { /* written before the history was kept: only the overflows are known */
            c->events = c->skipped;
        }
    }
    const char *rj = ct_st_meta_str(f, "recipe");
    if (rj) {
        if (strlen(rj) >= sizeof st->recipe_json)
            return ct_set_error(ctx, CT_E_CORRUPT, "'%s': the stored recipe is longer than %zu bytes", path,
                                sizeof st->recipe_json - 1);
        snprintf(st->recipe_json, sizeof st->recipe_json, "%s", rj);
    }
    if (r.s == CT_OK && (st->step < 0 || st->epoch < 0 || st->batch_in_epoch < 0))
        r.s = ct_set_error(ctx, CT_E_CORRUPT, "'%s': negative step/epoch/batch in the metadata: the file is corrupt", path);
    return r.s;
}

/* The extra files the train state lists ("files", "file.N" = "size crc32
 * name"): each must be there with that size and CRC. A train state from
 * before the list checks nothing. */
static ct_status check_extra_files(ct_context *ctx, const char *dir, const char *sp, const ct_st_file *sf) {
    const char *nf = ct_st_meta_str(sf, "files");
    if (!nf) return CT_OK;
    char *end;
    long n = strtol(nf, &end, 10);
    if (*end || end == nf || n < 0 || n > MAX_FILES)
        return ct_set_error(ctx, CT_E_CORRUPT, "'%s': metadata 'files' is '%.20s': the file is corrupt", sp, nf);
    for (long i = 0; i < n; i++) {
        char key[32], name[MAX_FILE_NAME + 8], p[PATH_MAX];
        snprintf(key, sizeof key, "file.%ld", i);
        const char *v = ct_st_meta_str(sf, key);
        unsigned long long size = 0;
        unsigned long want = 0;
        int used = 0;
        if (!v || sscanf(v, "%llu %8lx %47s%n", &size, &want, name, &used) != 3 || v[used] || name[0] == '.' ||
            strchr(name, '/'))
            return ct_set_error(ctx, CT_E_CORRUPT, "'%s': metadata '%s' is damaged: the file is corrupt", sp, key);
        join_path(p, sizeof p, dir, name);
        FILE *f = fopen(p, "rb");
        if (!f)
            return ct_set_error(ctx, CT_E_CORRUPT, "'%s' is missing (the train state lists it): the checkpoint is "
                                "incomplete; use another checkpoint", p);
        unsigned char buf[1 << 14];
        uLong c = crc32(0L, Z_NULL, 0);
        unsigned long long got = 0;
        size_t r;
        while ((r = fread(buf, 1, sizeof buf, f)) > 0) {
            c = crc32(c, buf, (uInt)r);
            got += r;
        }
        int err = ferror(f);
        fclose(f);
        if (err) return ct_set_error(ctx, CT_E_IO, "cannot read '%s': %s", p, strerror(errno));
        if (got != size || c != want)
            return ct_set_error(ctx, CT_E_CORRUPT,
                                "'%s' is damaged: %llu bytes with CRC32 %08lx, the train state records %llu bytes "
                                "with CRC32 %08lx; use another checkpoint",
                                p, got, (unsigned long)c, size, want);
    }
    return CT_OK;
}

const char *ct_checkpoint_format_version(void) { return FORMAT_VERSION; }

ct_status ct_checkpoint_resolve(ct_context *ctx, const char *path, char *out, size_t len) {
    if (!path || !out) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_checkpoint_resolve: path must not be NULL");
    char p[PATH_MAX];
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ct_set_error(ctx, CT_E_IO, "no checkpoint at '%s': %s", path,
                            stat(path, &sb) != 0 ? strerror(errno) : "not a directory");
    join_path(p, sizeof p, path, "latest");
    FILE *f = fopen(p, "rb");
    if (f) {
        char name[300];
        size_t n = fread(name, 1, sizeof name - 1, f);
        fclose(f);
        name[n] = 0;
        while (n && (name[n - 1] == '\n' || name[n - 1] == '\r' || name[n - 1] == ' ')) name[--n] = 0;
        int64_t step;
        if (!parse_step_name(name, &step))
            return ct_set_error(ctx, CT_E_CORRUPT, "'%s' does not name a step directory (step-NNNNNN): it is corrupt", p);
        join_path(out, len, path, name);
        if (stat(out, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return ct_set_error(ctx, CT_E_IO, "'%s' names '%s', which does not exist; pass a step directory to resume", p,
                                name);
        return CT_OK;
    }
    join_path(p, sizeof p, path, STATE_FILE);
    if (stat(p, &sb) == 0) {
        snprintf(out, len, "%s", path);
        return CT_OK;
    }
    return ct_set_error(ctx, CT_E_IO, "no checkpoint in '%s': it holds neither 'latest' nor '%s'", path, STATE_FILE);
}

ct_status ct_checkpoint_save_dir(ct_context *ctx, const char *path, char *out, size_t len) {
    if (!path || !out || !len) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_checkpoint_save_dir: NULL argument");
    char step[PATH_MAX], p[PATH_MAX];
    CT_TRY(ct_checkpoint_resolve(ctx, path, step, sizeof step));
    int w = snprintf(p, sizeof p, "%s", path);
    size_t n = w > 0 ? strlen(p) : 0;
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    if (!strcmp(step, path)) { /* a step directory: its parent */
        char parent[PATH_MAX];
        dir_of(p, parent, sizeof parent);
        w = snprintf(out, len, "%s", parent);
    } else {
        w = snprintf(out, len, "%s", p);
    }
    if (w < 0 || (size_t)w >= len)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "'%s': the save directory's path is too long (at most %zu bytes)",
                            path, len - 1);
    return CT_OK;
}

ct_status ct_checkpoint_load(ct_context *ctx, const char *path, ct_plan *plan, ct_optimizer *opt,
                             ct_train_state *st_out) {
    if (!path) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_checkpoint_load: path must not be NULL");
    if (opt && !plan) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_checkpoint_load: an optimizer needs its plan");
    char dir[PATH_MAX], sp[PATH_MAX] = "", mp[PATH_MAX] = "";
    ct_comm *pp = plan ? ct_plan_pipeline_group(plan) : NULL; /* pipeline stages: each takes its tensors */
    ct_status s = ct_checkpoint_resolve(ctx, path, dir, sizeof dir);
    if (s == CT_OK) {
        join_path(sp, sizeof sp, dir, STATE_FILE);
        join_path(mp, sizeof mp, dir, MODEL_FILE);
    }
    ct_train_state *st = s == CT_OK ? malloc(sizeof *st) : NULL;
    if (s == CT_OK && !st) s = ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    ct_st_file sf = {0}, mf = {0};
    ct_st_tensor *mt = NULL, *ot = NULL;
    const unsigned char **msrc = NULL, **osrc = NULL;
    tp_part *mparts = NULL, *oparts = NULL; /* tensor parallel: the shards */
    unsigned char *mclaimed = NULL, *oclaimed = NULL;
    int mn = 0, on = 0;
    if (s == CT_OK) s = ct_st_read(ctx, sp, 1, &sf);
    if (s == CT_OK) s = parse_state_meta(ctx, sp, &sf, st);
    if (s == CT_OK) s = check_extra_files(ctx, dir, sp, &sf);
    if (s == CT_OK && plan) {
        uint32_t mcrc = 0;
        s = load_model_file(ctx, mp, plan, 1, &mcrc, &mf, &mt, &msrc, &mparts, &mn, pp ? &mclaimed : NULL);
        char hex[16];
        snprintf(hex, sizeof hex, "%08lx", (unsigned long)mcrc);
        const char *want = ct_st_meta_str(&sf, "model_crc32");
        if (s == CT_OK && (!want || strcmp(want, hex)))
            s = ct_set_error(ctx, CT_E_CORRUPT,
                             "'%s' does not belong with '%s' (model CRC32 %s, the train state expects %s): the "
                             "checkpoint directory is mixed up; use another checkpoint",
                             mp, sp, hex, want ? want : "none");
    }
    if (s == CT_OK && opt) {
        ct_optim_opts oo;
        ct_optimizer_get_opts(opt, &oo);
        const char *kind = ct_st_meta_str(&sf, "optimizer"), *list = ct_st_meta_str(&sf, "optimizer_state");
        char mine[128];
        state_list(&oo, mine, sizeof mine);
        if (!kind || !list)
            s = ct_set_error(ctx, CT_E_CORRUPT, "'%s': metadata 'optimizer' is missing: the file is corrupt", sp);
        else if (strcmp(kind, ct_optim_kind_name(oo.kind)))
            s = ct_set_error(ctx, CT_E_CONFIG,
                             "'%s' was saved with optimizer '%s' but this run uses '%s'; resume with the same optimizer",
                             sp, kind, ct_optim_kind_name(oo.kind));
        else if (strcmp(list, mine))
            s = ct_set_error(ctx, CT_E_CONFIG,
                             "'%s' holds %s optimizer state [%s] but this run's %s needs [%s] (momentum, amsgrad or "
                             "centered differ); resume with the same optimizer settings",
                             sp, kind, list, kind, mine);
        if (s == CT_OK) s = optim_tensors(ctx, plan, opt, &ot, &on);
        if (s == CT_OK) s = tp_parts(ctx, plan, ot, on, 0, &oparts);
        if (s == CT_OK && (!(osrc = calloc((size_t)on + 1, sizeof *osrc)) ||
                           (pp && !(oclaimed = malloc((size_t)sf.n_tensors + 1)))))
            s = ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
        if (s == CT_OK) s = pp ? ct_st_match_part(ctx, sp, &sf, ot, on, osrc, oclaimed) : ct_st_match(ctx, sp, &sf, ot, on, osrc);
    }
    if (pp) { /* every tensor of both files taken by some stage (the train state's: with an optimizer) */
        ct_status c = ct_pp_check(ctx, pp, s, 2, (const ct_st_file *const[]){&mf, &sf}, (const char *const[]){mp, sp},
                                  (unsigned char *const[]){mclaimed, opt ? oclaimed : NULL});
        if (s == CT_OK) s = c; /* a failed s as it is (ct_pp_check returns it too): st is read only after CT_OK */
    }
    if (s == CT_OK) {
        /* everything checked: now modify */
        if (plan) {
            /* alignment padding back to zero, as a fresh plan has it */
            zero_model(plan);
            copy_in(mt, msrc, mparts, mn);
            ct_plan_set_step(plan, st->optimizer_steps);
        }
        if (opt) {
            copy_in(ot, osrc, oparts, on);
            ct_optimizer_set_steps(opt, st->optimizer_steps);
        }
        snprintf(st->path, sizeof st->path, "%s", dir);
        if (st_out) *st_out = *st;
    }
    free(mt);
    free(ot);
    free(msrc);
    free(osrc);
    free(mparts);
    free(oparts);
    free(mclaimed);
    free(oclaimed);
    ct_st_close(&sf);
    ct_st_close(&mf);
    free(st);
    return s;
}

/* Deletes leftovers of interrupted saves and all but the newest keep_last
 * step directories up to `step`; step directories after `step` belong to a
 * run that was resumed from an earlier checkpoint and are deleted too. Only
 * what remove_dir_at allows: real directories ctrain wrote, their regular
 * files, no link followed. */
static void prune(const char *dir, int64_t step, int keep_last) {
    int pfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0) return;
    int lfd = dup(pfd);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        if (lfd >= 0) close(lfd);
        close(pfd);
        return;
    }
    int64_t *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    struct stat sb;
    while ((e = readdir(d)) != NULL) {
        int64_t s;
        if (!strncmp(e->d_name, ".tmp-", 5)) {
            if (fstatat(pfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) continue;
            if (S_ISDIR(sb.st_mode)) remove_dir_at(pfd, e->d_name, 0);
            else if (S_ISREG(sb.st_mode)) unlinkat(pfd, e->d_name, 0); /* a `latest` being written */
            continue;
        }
        if (!parse_step_name(e->d_name, &s)) continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            int64_t *ns = realloc(steps, nc * sizeof *ns);
            if (!ns) break;
            steps = ns;
            cap = nc;
        }
        steps[n++] = s;
    }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        size_t newer = 0; /* kept directories newer than steps[i] */
        for (size_t j = 0; j < n; j++) newer += steps[j] > steps[i] && steps[j] <= step;
        if (steps[i] > step || (keep_last > 0 && newer >= (size_t)keep_last)) {
            char name[48];
            snprintf(name, sizeof name, "step-%06lld", (long long)steps[i]);
            remove_dir_at(pfd, name, 1);
        }
    }
    close(pfd);
    free(steps);
}

ct_status ct_checkpoint_save(ct_context *ctx, const char *dir, ct_plan *plan, ct_optimizer *opt,
                             const ct_train_state *st, int keep_last) {
    ct_checkpoint_opts o;
    ct_checkpoint_opts_default(&o);
    o.keep_last = keep_last;
    return ct_checkpoint_save_ex(ctx, dir, plan, opt, st, &o);
}

/* An extra file of the step directory (o->files), written before the
 * directory is renamed into place, so it is committed with the rest. */
static ct_status write_extra_file(ct_context *ctx, const char *dir, const ct_checkpoint_file *f, int do_fsync) {
    if (!f->name || !f->name[0] || f->name[0] == '.' || strchr(f->name, '/') || !strcmp(f->name, MODEL_FILE) ||
        !strcmp(f->name, STATE_FILE) || (f->size && !f->data))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "checkpoint: extra file name '%s' is not a plain new file name",
                            f->name ? f->name : "(null)");
    char p[PATH_MAX];
    join_path(p, sizeof p, dir, f->name);
    FILE *fp = fopen(p, "wb");
    int ok = fp && (f->size == 0 || fwrite(f->data, 1, f->size, fp) == f->size) && fflush(fp) == 0 &&
             (!do_fsync || fsync(fileno(fp)) == 0);
    int e = errno;
    if (fp && fclose(fp) != 0 && ok) ok = 0, e = errno;
    if (!ok) return ct_set_error(ctx, CT_E_IO, "cannot write '%s': %s", p, strerror(e));
    return CT_OK;
}

static ct_status save_ex(ct_context *ctx, const char *dir, ct_optimizer *opt, const ct_train_state *st,
                         const ct_checkpoint_opts *o, ct_st_tensor *mt, int mn, ct_st_tensor *ot, int on);

/* The plan's and optimizer's tensors (tensor parallel: every rank of the plan's tensor group calls it, a
 * collective; tensor rank 0 gathers the shards into whole tensors and writes the one-process checkpoint, and
 * every rank returns its status). Pipeline stages: also a collective over the pipeline group; pipeline rank 0
 * (tensor rank 0) gathers every stage's tensors and writes the one-process checkpoint with its optimizer's step
 * count and this call's train state; every rank returns the writer's status. */
ct_status ct_checkpoint_save_ex(ct_context *ctx, const char *dir, ct_plan *plan, ct_optimizer *opt,
                                const ct_train_state *st, const ct_checkpoint_opts *o) {
    if (!dir || !plan || !st)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_checkpoint_save: dir, plan and state must not be NULL");
    ct_comm *tp = ct_plan_tensor_group(plan), *pp = ct_plan_pipeline_group(plan);
    ct_st_tensor *mt = NULL, *ot = NULL;
    float **mbufs = NULL, **obufs = NULL; /* tensor parallel: the whole tensors gathered from the shards */
    float *mpbuf = NULL, *opbuf = NULL;   /* pipeline stages: the other stages' tensors */
    int mn = 0, on = 0;
    ct_status s = model_tensors(ctx, plan, &mt, &mn);
    if (s == CT_OK && opt) s = optim_tensors(ctx, plan, opt, &ot, &on);
    const int mnt = mn, ont = on; /* the bufs' lengths */
    if (s == CT_OK && tp) s = tp_whole(ctx, plan, mt, mn, ot, on, &mbufs, &obufs);
    int writer = !tp || ct_comm_rank(tp) == 0;
    if (pp) { /* both gathers on every rank (a rank without an optimizer adds none of its state) */
        s = pp_whole(ctx, plan, s, writer, 1, &mt, &mn, &mpbuf);
        s = pp_whole(ctx, plan, s, writer, 0, &ot, &on, &opbuf);
        writer = writer && ct_comm_rank(pp) == 0;
    }
    if (s == CT_OK && writer) s = save_ex(ctx, dir, opt, st, o, mt, mn, opt ? ot : NULL, on);
    free(mt);
    free(ot);
    free(mpbuf);
    free(opbuf);
    free_bufs(mbufs, mnt);
    free_bufs(obufs, ont);
    if (pp) s = writer_status(pp, s);
    return tp ? writer_status(tp, s) : s;
}

static ct_status save_ex(ct_context *ctx, const char *dir, ct_optimizer *opt, const ct_train_state *st,
                         const ct_checkpoint_opts *o, ct_st_tensor *mt, int mn, ct_st_tensor *ot, int on) {
    if (st->step < 0) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_checkpoint_save: step %lld < 0", (long long)st->step);
    ct_checkpoint_opts def;
    if (!o) {
        ct_checkpoint_opts_default(&def);
        o = &def;
    }
    if (strlen(dir) > PATH_MAX - 64) return ct_set_error(ctx, CT_E_INVALID_ARG, "checkpoint directory name is too long");
    if (o->n_files < 0 || o->n_files > MAX_FILES)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "checkpoint: %d extra files; at most %d", o->n_files, MAX_FILES);
    for (int i = 0; i < o->n_files; i++)
        if (!o->files[i].name || strlen(o->files[i].name) > MAX_FILE_NAME)
            return ct_set_error(ctx, CT_E_INVALID_ARG, "checkpoint: extra file name '%s' is longer than %d bytes",
                                o->files[i].name ? o->files[i].name : "(null)", MAX_FILE_NAME);
    CT_TRY(ct_io_make_dirs(ctx, dir, "checkpoint directory"));
    char tmp[PATH_MAX], final[PATH_MAX], p[PATH_MAX], name[48], fkeys[MAX_FILES][24];
    join_path(tmp, sizeof tmp, dir, ".tmp-XXXXXX");
    if (!mkdtemp(tmp)) return ct_set_error(ctx, CT_E_IO, "cannot create a directory in '%s': %s", dir, strerror(errno));
    uint32_t mcrc = 0;
    ct_optim_opts oo;
    ct_st_meta *m = calloc(1, sizeof *m);
    char *history = st->has_scaler ? ct_scaler_history_to_json(&st->scaler) : NULL;
    ct_status s = m && (history || !st->has_scaler) ? CT_OK : ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    if (s == CT_OK) {
        ct_st_meta mm = {0};
        ct_st_meta_set(&mm, "format", "pt");
        ct_st_meta_set(&mm, "ctrain_format", "weights");
        ct_st_meta_set(&mm, "ctrain_version", FORMAT_VERSION);
        ct_st_meta_set(&mm, "ctrain_library", "%s", ct_version());
        ct_st_meta_set(&mm, "step", "%lld", (long long)st->step);
        join_path(p, sizeof p, tmp, MODEL_FILE);
        s = ct_st_write(ctx, p, p, mt, mn, &mm, o->fsync, &mcrc);
    }
    if (s == CT_OK) {
        if (opt) ct_optimizer_get_opts(opt, &oo);
        fill_state_meta(m, st, opt ? &oo : NULL, opt ? ct_optimizer_steps(opt) : (uint64_t)st->step, mcrc, mn,
                        history);
        /* the extra files' sizes and CRCs: a load checks them like the tensors */
        ct_st_meta_set(m, "files", "%d", o->n_files);
        for (int i = 0; i < o->n_files; i++) {
            snprintf(fkeys[i], sizeof fkeys[i], "file.%d", i);
            uLong c = crc32(0L, Z_NULL, 0);
            for (size_t off = 0; off < o->files[i].size; off += 1u << 30)
                c = crc32(c, (const Bytef *)o->files[i].data + off, (uInt)CT_MIN(o->files[i].size - off, (size_t)1 << 30));
            ct_st_meta_set(m, fkeys[i], "%zu %08lx %s", o->files[i].size, (unsigned long)c, o->files[i].name);
        }
        join_path(p, sizeof p, tmp, STATE_FILE);
        s = ct_st_write(ctx, p, p, ot, on, m, o->fsync, NULL);
    }
    free(m);
    for (int i = 0; s == CT_OK && i < o->n_files; i++) s = write_extra_file(ctx, tmp, &o->files[i], o->fsync);
    free(history);
    if (s == CT_OK && o->fsync) s = fsync_dir(ctx, tmp);
    if (s != CT_OK) {
        remove_dir(tmp);
        return s;
    }
    if (o->hook) o->hook(o->hook_user, "written", st->step);
    snprintf(name, sizeof name, "step-%06lld", (long long)st->step);
    join_path(final, sizeof final, dir, name);
    struct stat sb;
    if (lstat(final, &sb) == 0) {
        /* the same step saved again (e.g. after a resume): swap the new directory in with one atomic
         * rename, so `latest` (which may name this step) never names a missing directory */
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) != 0) {
            int e = errno;
            remove_dir(tmp);
            if (e == EINVAL || e == ENOSYS)
                return ct_set_error(ctx, CT_E_IO,
                                    "cannot replace '%s' atomically: this filesystem has no RENAME_EXCHANGE; "
                                    "delete that step directory or save to another directory",
                                    final);
            return ct_set_error(ctx, CT_E_IO, "cannot replace '%s': %s", final, strerror(e));
        }
        if (o->hook) o->hook(o->hook_user, "replaced", st->step);
        remove_dir(tmp); /* the old one, now under the temporary name */
    } else if (rename(tmp, final) != 0) {
        s = ct_set_error(ctx, CT_E_IO, "cannot rename '%s' to '%s': %s", tmp, final, strerror(errno));
        remove_dir(tmp);
        return s;
    }
    if (o->fsync) CT_TRY(fsync_dir(ctx, dir));
    if (o->hook) o->hook(o->hook_user, "renamed", st->step);
    /* latest -> name, atomically */
    join_path(tmp, sizeof tmp, dir, ".tmp-XXXXXX");
    int fd = mkstemp(tmp);
    if (fd < 0) return ct_set_error(ctx, CT_E_IO, "cannot create a file in '%s': %s", dir, strerror(errno));
    char line[64];
    int ll = snprintf(line, sizeof line, "%s\n", name);
    int ok = write(fd, line, (size_t)ll) == ll && (!o->fsync || fsync(fd) == 0);
    int e = errno;
    if (close(fd) != 0 && ok) ok = 0, e = errno;
    join_path(p, sizeof p, dir, "latest");
    if (ok && rename(tmp, p) != 0) ok = 0, e = errno;
    if (!ok) {
        unlink(tmp);
        return ct_set_error(ctx, CT_E_IO, "cannot update '%s': %s", p, strerror(e));
    }
    if (o->fsync) CT_TRY(fsync_dir(ctx, dir));
    if (o->hook) o->hook(o->hook_user, "latest", st->step);
    prune(dir, st->step, o->keep_last);
    return CT_OK;
}
