/* src/io/pp_files.c - weights files and checkpoints of pipeline stages (src/io/pp_files.h).
 *
 * A save stays in the one-process format: every stage's list of tensors (name, shape, place in the whole
 * model) goes to every rank (two allgathers), each rank sorts the union by place, and the data of each tensor
 * that pipeline rank 0 lacks comes from the lowest rank holding it (one gatherv per tensor, only that rank
 * sending). A tensor held by several stages (a tied embedding) is written once.
 *
 * A load takes each stage's tensors by name; one allreduce (MAX) of a "taken" flag per tensor of the file
 * then checks that the stages together took them all, so a file with a tensor no stage has is still the
 * "from another model" error, on every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/pp_files.h"

/* One tensor of a stage's list, as it travels. */
typedef struct {
    int64_t key, numel;
    int64_t shape[CT_MAX_DIMS];
    int32_t ndim, pad;
    char name[128];
} pp_desc;

/* One entry of the union: rank q's tensor j. */
typedef struct {
    int64_t key;
    int q, j;
} pp_entry;

static int entry_cmp(const void *a, const void *b) {
    const pp_entry *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->q < y->q ? -1 : x->q > y->q;
}

/* Every rank's list (all, M entries a rank) as one union sorted by key, each key once (its lowest rank);
 * CT_E_INTERNAL when two ranks describe one key differently. */
static ct_status pp_union(ct_context *ctx, const pp_desc *all, const int *counts, int P, int M, pp_entry **out,
                          int *n_out) {
    int total = 0;
    for (int q = 0; q < P; q++) total += counts[q];
    pp_entry *e = calloc((size_t)total + 1, sizeof *e);
    if (!e) return ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    int k = 0;
    for (int q = 0; q < P; q++)
        for (int j = 0; j < counts[q]; j++, k++) e[k] = (pp_entry){all[(size_t)q * M + j].key, q, j};
    qsort(e, (size_t)total, sizeof *e, entry_cmp);
    int u = 0;
    for (int i = 0; i < total; i++) {
        if (u && e[u - 1].key == e[i].key) {
            const pp_desc *a = &all[(size_t)e[u - 1].q * M + e[u - 1].j], *b = &all[(size_t)e[i].q * M + e[i].j];
            if (strcmp(a->name, b->name) || a->ndim != b->ndim || a->numel != b->numel ||
                memcmp(a->shape, b->shape, sizeof a->shape)) {
                ct_status s = ct_set_error(ctx, CT_E_INTERNAL,
                                           "checkpoint: pipeline ranks %d and %d hold '%s' and '%s' at one place of "
                                           "the model (or one tensor with two shapes): the stages were built from "
                                           "different models; build every stage from the same model",
                                           e[u - 1].q, e[i].q, a->name, b->name);
                free(e);
                return s;
            }
            continue;
        }
        e[u++] = e[i];
    }
    *out = e;
    *n_out = u;
    return CT_OK;
}

/* The lists of every rank: counts[q] tensors of rank q at all[q * M ...]. A rank's failure (s) reaches all. */
static ct_status pp_lists(ct_context *ctx, ct_comm *pp, ct_status s, const ct_st_tensor *t, const int64_t *keys,
                          int mine, int *counts, pp_desc **all_out, int *M_out) {
    const int P = ct_comm_size(pp);
    int hdr[2] = {s == CT_OK ? mine : 0, (int)s}, *hdrs = calloc((size_t)P * 2, sizeof(int));
    if (!hdrs) return ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    ct_status g = ct_comm_allgather(pp, hdr, sizeof hdr, hdrs);
    int M = 0, failed = -1;
    for (int q = 0; g == CT_OK && q < P; q++) {
        counts[q] = hdrs[2 * q];
        if (counts[q] > M) M = counts[q];
        if (hdrs[2 * q + 1] != CT_OK && failed < 0) failed = q;
    }
    ct_status fs = failed >= 0 ? (ct_status)hdrs[2 * failed + 1] : CT_OK;
    free(hdrs);
    if (g != CT_OK) return g;
    if (s != CT_OK) return s;
    if (failed >= 0)
        return ct_set_error(ctx, fs, "checkpoint: pipeline rank %d could not gather its tensors (%s; its message says "
                            "why)", failed, ct_status_name(fs));
    pp_desc *send = calloc((size_t)M + 1, sizeof *send), *all = calloc((size_t)M * (size_t)P + 1, sizeof *all);
    if (!send || !all) {
        free(send);
        free(all);
        return ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory"); /* small: the others fail alike */
    }
    for (int j = 0; j < counts[ct_comm_rank(pp)]; j++) {
        send[j].key = keys[j];
        send[j].numel = (int64_t)t[j].numel;
        send[j].ndim = t[j].ndim;
        memcpy(send[j].shape, t[j].shape, sizeof send[j].shape);
        memcpy(send[j].name, t[j].name, sizeof send[j].name);
    }
    g = M ? ct_comm_allgather(pp, send, (size_t)M * sizeof *send, all) : CT_OK;
    free(send);
    if (g != CT_OK) {
        free(all);
        return g;
    }
    *all_out = all;
    *M_out = M;
    return CT_OK;
}

ct_status ct_pp_gather(ct_context *ctx, ct_comm *pp, ct_status s, const ct_st_tensor *t, const int64_t *keys, int n,
                       int contribute, ct_st_tensor **out, int *n_out, float **buf) {
    *out = NULL;
    *n_out = 0;
    *buf = NULL;
    const int P = ct_comm_size(pp), me = ct_comm_rank(pp), root = me == 0;
    int *counts = calloc((size_t)P, sizeof *counts), M = 0, u = 0;
    size_t *sizes = calloc((size_t)P, sizeof *sizes);
    pp_desc *all = NULL;
    pp_entry *e = NULL;
    if (!counts || !sizes) {
        free(counts);
        free(sizes);
        return ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    }
    s = pp_lists(ctx, pp, s, t, keys, contribute ? n : 0, counts, &all, &M);
    if (s == CT_OK) s = pp_union(ctx, all, counts, P, M, &e, &u);
    /* pipeline rank 0 makes room for what it lacks, and says whether it could */
    size_t need = 0;
    for (int i = 0; s == CT_OK && i < u; i++) need += e[i].q ? (size_t)all[(size_t)e[i].q * M + e[i].j].numel : 0;
    float *data = s == CT_OK && root ? malloc((need + 1) * sizeof(float)) : NULL;
    ct_st_tensor *o = s == CT_OK && root ? calloc((size_t)u + 1, sizeof *o) : NULL;
    int ok = !root || (data && o);
    ct_status g = s == CT_OK ? ct_comm_broadcast(pp, &ok, sizeof ok, 0) : CT_OK;
    if (s == CT_OK) s = g;
    if (s == CT_OK && !ok)
        s = ct_set_error(ctx, CT_E_OOM, "checkpoint: pipeline rank 0 has no memory for the other stages' tensors "
                         "(%zu floats)", need);
    size_t off = 0;
    float dummy = 0;
    for (int i = 0; s == CT_OK && i < u; i++) {
        const pp_desc *d = &all[(size_t)e[i].q * M + e[i].j];
        if (root) {
            snprintf(o[i].name, sizeof o[i].name, "%s", d->name);
            o[i].ndim = d->ndim;
            memcpy(o[i].shape, d->shape, sizeof o[i].shape);
            o[i].numel = (size_t)d->numel;
            o[i].data = e[i].q ? data + off : t[e[i].j].data;
        }
        if (!e[i].q || !d->numel) continue;
        memset(sizes, 0, (size_t)P * sizeof *sizes);
        sizes[e[i].q] = (size_t)d->numel;
        s = ct_comm_gatherv_f32(pp, me == e[i].q ? t[e[i].j].data : &dummy, sizes, root ? data + off : NULL, 0);
        off += (size_t)d->numel;
    }
    free(counts);
    free(sizes);
    free(all);
    free(e);
    if (s != CT_OK || !root) {
        free(o);
        free(data);
        return s;
    }
    *out = o;
    *n_out = u;
    *buf = data;
    return CT_OK;
}

ct_status ct_pp_check(ct_context *ctx, ct_comm *pp, ct_status s, int nf, const ct_st_file *const *files,
                      const char *const *paths, unsigned char *const *claimed) {
    float head[9] = {0};
    if (nf > 4) return ct_set_error(ctx, CT_E_INTERNAL, "ct_pp_check: %d files (at most 4)", nf);
    size_t total = 0;
    for (int k = 0; s == CT_OK && k < nf; k++) total += (size_t)files[k]->n_tensors;
    float *taken = s == CT_OK ? malloc((total + 1) * sizeof(float)) : NULL;
    if (s == CT_OK && !taken) s = ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    head[0] = (float)s;
    for (int k = 0; k < nf; k++) {
        float n = s == CT_OK ? (float)files[k]->n_tensors : -1.0f;
        head[1 + 2 * k] = n;
        head[2 + 2 * k] = -n;
    }
    ct_status g = ct_comm_allreduce_f32(pp, head, (size_t)(1 + 2 * nf), CT_REDUCE_MAX);
    if (g != CT_OK || s != CT_OK || head[0] > 0) {
        free(taken);
        if (g != CT_OK || s != CT_OK) return g != CT_OK ? g : s;
        ct_status fs = (ct_status)(int)head[0];
        return ct_set_error(ctx, fs, "another pipeline stage could not load its part of '%s' (%s; its message says "
                            "why)", paths[0], ct_status_name(fs));
    }
    for (int k = 0; k < nf; k++)
        if (head[1 + 2 * k] != -head[2 + 2 * k]) {
            free(taken);
            return ct_set_error(ctx, CT_E_CONFIG,
                                "the pipeline stages read different files as '%s' (from %.0f to %.0f tensors): "
                                "every stage must load the same file",
                                paths[k], (double)-head[2 + 2 * k], (double)head[1 + 2 * k]);
        }
    size_t off = 0;
    for (int k = 0; k < nf; k++)
        for (int j = 0; j < files[k]->n_tensors; j++) taken[off++] = claimed[k] ? (float)claimed[k][j] : 1.0f;
    s = total ? ct_comm_allreduce_f32(pp, taken, total, CT_REDUCE_MAX) : CT_OK;
    off = 0;
    for (int k = 0; s == CT_OK && k < nf; k++)
        for (int j = 0; s == CT_OK && j < files[k]->n_tensors; j++, off++)
            if (taken[off] == 0.0f) s = ct_st_unclaimed(ctx, paths[k], files[k], j, "no pipeline stage has it");
    free(taken);
    return s;
}
