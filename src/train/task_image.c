/* src/train/task_image.c - the image task: IDX datasets (MNIST,
 * Fashion-MNIST) through the loader or the background prefetcher, an MLP, a
 * CNN or a torchvision classifier (resnet*, efficientnet_*, swin_*) with cross entropy, training accuracy from the logits, and test
 * loss / accuracy evaluated on the t10k split every epoch. Data parallel
 * (shard): the loader / prefetcher hand this rank its rows of every global
 * batch, and the evaluation covers every size-th test batch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "train_internal.h"

typedef struct {
    ct_context *ctx;
    ct_recipe r;
    ct_dataset train, test;
    ct_loader *ld;
    ct_prefetcher *pf; /* prefetch > 0 or augment: training batches from the prefetcher */
    ct_plan *plan;
    ct_node x, y, logits;
    ct_tensor tx, ty, tl;
    float *logits_buf; /* FP32 copy of low-precision logits (B*C) */
    size_t logits_cap;
    int rank, size;    /* data parallel: this rank's share of batches and evaluation */
    float mean, stdv;  /* the normalization (the prefetcher pads with a normalized 0) */
} image_task;

/* Logits as FP32: a low-precision plan stores BF16/FP16 logits, converted into buf. */
static const float *logits_f32(image_task *it) {
    const ct_tensor *tl = &it->tl;
    if (tl->dtype == CT_F32) return tl->data;
    ct_tensor f = ct_tensor_make(it->logits_buf, CT_F32, tl->ndim, tl->shape);
    return ct_convert(it->ctx, tl, &f) == CT_OK ? it->logits_buf : tl->data;
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

static ct_status img_build(ct_task *t, ct_graph *g, const ct_recipe *r, ct_node *loss, int *n_keep, ct_node *keep) {
    image_task *it = t->impl;
    const ct_dataset *ds = &it->train;
    int64_t xs[4] = {r->batch_size, ds->c, ds->h, ds->w};
    ct_node x, y, logits;
    CT_TRY(ct_input(g, "images", CT_F32, 4, xs, &x));
    CT_TRY(ct_input(g, "labels", CT_I32, 1, (int64_t[]){r->batch_size}, &y));
    if (r->model == CT_MODEL_MLP) CT_TRY(ct_model_mlp(g, x, r->n_hidden, r->hidden, ds->n_classes, r->activation, r->dropout, &logits));
    else if (ct_model_is_vision(r->model)) {
        ct_vision_config vc;
        CT_TRY(ct_vision_config_default(it->ctx, ct_recipe_enum_name("model", (int)r->model), &vc));
        if (r->num_classes && r->num_classes < ds->n_classes)
            return ct_set_error(it->ctx, CT_E_CONFIG, "recipe key 'num_classes': %lld is fewer than the dataset's %lld "
                                "classes; set 0 (the dataset's) or at least %lld",
                                (long long)r->num_classes, (long long)ds->n_classes, (long long)ds->n_classes);
        vc.num_classes = r->num_classes ? r->num_classes : ds->n_classes;
        vc.cifar_stem = r->cifar_stem, vc.width_div = r->width_div, vc.max_blocks = r->max_blocks;
        if (r->drop_path >= 0) vc.drop_path = r->drop_path; /* -1: the model's */
        vc.dropout = r->dropout;
        CT_TRY(ct_model_vision(g, x, &vc, &logits));
    } else CT_TRY(ct_model_cnn(g, x, r->n_channels, r->channels, ds->n_classes, &logits));
    CT_TRY(ct_cross_entropy(g, logits, y, r->label_smoothing, -100, loss));
    it->x = x, it->y = y, it->logits = logits;
    keep[0] = logits;
    *n_keep = 1;
    return CT_OK;
}

static ct_status img_bind(ct_task *t, ct_plan *p) {
    image_task *it = t->impl;
    it->plan = p;
    CT_TRY(ct_plan_tensor(p, it->x, &it->tx));
    CT_TRY(ct_plan_tensor(p, it->y, &it->ty));
    CT_TRY(ct_plan_tensor(p, it->logits, &it->tl));
    size_t need = (size_t)ct_tensor_numel(&it->tl);
    if (need > it->logits_cap) {
        free(it->logits_buf);
        it->logits_cap = 0;
        if (!(it->logits_buf = malloc(sizeof(float) * need)))
            return ct_set_error(it->ctx, CT_E_OOM, "out of memory for the logits copy");
        it->logits_cap = need;
    }
    return CT_OK;
}

static int64_t img_batches(ct_task *t) {
    image_task *it = t->impl;
    return ct_loader_num_batches(it->ld);
}

static ct_status img_start_epoch(ct_task *t, int64_t epoch, int64_t skip) {
    image_task *it = t->impl;
    if (it->pf) {
        CT_TRY(ct_prefetcher_start_epoch(it->pf, (uint64_t)epoch));
        return skip > 0 ? ct_prefetcher_skip(it->pf, skip) : CT_OK;
    }
    ct_loader_start_epoch(it->ld, (uint64_t)epoch);
    return skip > 0 ? ct_loader_skip(it->ld, skip) : CT_OK;
}

static ct_status img_next(ct_task *t, int64_t step, int micro, int64_t *rows) {
    image_task *it = t->impl;
    (void)step, (void)micro;
    return it->pf ? ct_prefetcher_next(it->pf, it->tx.data, it->ty.data, rows)
                  : ct_loader_next(it->ld, it->tx.data, it->ty.data, rows);
}

static int64_t img_correct(ct_task *t, int64_t rows) {
    image_task *it = t->impl;
    return argmax_correct(logits_f32(it), it->ty.data, rows, it->tl.shape[1]);
}

/* The test split in eval mode, in batches of the plan's size (data
 * parallel: batch k on rank k % size); the last partial batch is padded
 * with ignored labels (-100) so it does not count. */
static ct_status img_evaluate(ct_task *t, ct_task_eval *out) {
    image_task *it = t->impl;
    int64_t B = it->tx.shape[0];
    ct_loader *ld;
    CT_TRY(ct_loader_create(it->ctx, &it->test, B, 0, 0, 0, &ld));
    ct_loader_start_epoch(ld, 0);
    double tot_loss = 0;
    int64_t correct = 0, seen = 0, got;
    ct_status s = CT_OK;
    const int64_t nb = ct_loader_num_batches(ld);
    for (int64_t k = 0; k < nb; k++) {
        if (k % it->size != it->rank) { /* data parallel: test batch k is rank k % size's */
            if ((s = ct_loader_skip(ld, 1)) != CT_OK) break;
            continue;
        }
        if ((s = ct_loader_next(ld, it->tx.data, it->ty.data, &got)) != CT_OK || got == 0) break;
        int32_t *lab = it->ty.data;
        for (int64_t i = got; i < B; i++) lab[i] = -100;
        if ((s = ct_plan_forward(it->plan, 0)) != CT_OK) break;
        float l;
        ct_plan_loss(it->plan, &l);
        tot_loss += (double)l * (double)got;
        correct += argmax_correct(logits_f32(it), lab, got, it->tl.shape[1]); /* the logits' width: num_classes may exceed the dataset's */
        seen += got;
    }
    ct_loader_free(ld);
    if (s != CT_OK) return s;
    out->loss = seen ? tot_loss / (double)seen : 0;
    out->accuracy = seen ? (double)correct / (double)seen : 0;
    out->count = (double)seen;
    out->rows = (double)seen;
    out->detail[0] = 0;
    return CT_OK;
}

/* The training batches through the prefetcher (prefetch > 0 or augment),
 * with rows [off, off + rows) of each batch (rows 0: all). */
static ct_status make_prefetcher(image_task *it, int64_t off, int64_t rows) {
    const ct_recipe *r = &it->r;
    ct_prefetch_opts po;
    ct_prefetch_opts_default(&po);
    po.buffer_size = r->prefetch > 0 ? r->prefetch : 1;
    po.threads = r->prefetch > 0 ? r->prefetch_threads : 0; /* 0: synchronous */
    po.augment = r->augment;
    po.pad_value = -it->mean / it->stdv; /* a normalized 0 pixel */
    po.shard_offset = off;
    po.shard_rows = rows;
    ct_prefetcher_free(it->pf);
    it->pf = NULL;
    return ct_prefetcher_create(it->ctx, &it->train, r->batch_size, 1, 1, r->seed, &po, &it->pf);
}

static ct_status img_shard(ct_task *t, int rank, int size) {
    image_task *it = t->impl;
    const int64_t b = it->r.batch_size / size; /* the trainer checked that it divides */
    it->rank = rank;
    it->size = size;
    CT_TRY(ct_loader_set_shard(it->ld, size > 1 ? rank * b : 0, size > 1 ? b : 0));
    return it->pf ? make_prefetcher(it, size > 1 ? rank * b : 0, size > 1 ? b : 0) : CT_OK;
}

static void img_describe(ct_task *t, const ct_plan_stats *ps, char *buf, size_t len) {
    image_task *it = t->impl;
    char cvt[64] = "";
    if (ps->cast_bytes)
        snprintf(cvt, sizeof cvt, " (incl. FP32 conversion copies, up to %.1f MiB)", (double)ps->cast_bytes / 1048576.0);
    snprintf(buf, len, "%s on %s (%lld train / %lld test images, %dx%lldx%lld), %d params, %.1f MiB activations%s",
             ct_recipe_enum_name("model", (int)it->r.model), ct_recipe_enum_name("dataset", (int)it->r.dataset),
             (long long)it->train.n, (long long)it->test.n, (int)it->train.c, (long long)it->train.h,
             (long long)it->train.w, (int)(ps->param_bytes / 4), (double)ps->activation_bytes / 1048576.0, cvt);
}

static void img_free(ct_task *t) {
    image_task *it = t->impl;
    ct_prefetcher_free(it->pf);
    ct_loader_free(it->ld);
    ct_dataset_free(it->ctx, &it->train);
    ct_dataset_free(it->ctx, &it->test);
    free(it->logits_buf);
    free(it);
    free(t);
}

ct_status ct_task_image_create(ct_context *ctx, const ct_recipe *r, ct_task **out) {
    *out = NULL;
    ct_task *t = calloc(1, sizeof *t);
    image_task *it = calloc(1, sizeof *it);
    if (!t || !it) {
        free(t);
        free(it);
        return ct_set_error(ctx, CT_E_OOM, "out of memory creating the image task");
    }
    it->ctx = ctx;
    it->r = *r;
    t->impl = it;
    t->name = "image";
    t->epochs_from_data = 1;
    t->has_accuracy = 1;
    t->eval_split = "test";
    t->unit = "samples";
    t->unit_per_row = 1;
    t->build = img_build;
    t->bind = img_bind;
    t->batches_per_epoch = img_batches;
    t->start_epoch = img_start_epoch;
    t->next_batch = img_next;
    t->batch_correct = img_correct;
    t->evaluate = img_evaluate;
    t->describe = img_describe;
    t->shard = img_shard;
    t->free = img_free;
    it->rank = 0;
    it->size = 1;
    char dir[300];
    const char *ds = ct_recipe_enum_name("dataset", (int)r->dataset);
    if (r->data_dir[0]) snprintf(dir, sizeof dir, "%s", r->data_dir);
    else snprintf(dir, sizeof dir, "data/%s", ds);
    const float mean = r->dataset == CT_DATASET_MNIST ? 0.1307f : 0.2860f;
    const float stdv = r->dataset == CT_DATASET_MNIST ? 0.3081f : 0.3530f;
    it->mean = mean;
    it->stdv = stdv;
    ct_status s = ct_dataset_load_idx(ctx, dir, "train", mean, stdv, &it->train);
    if (s == CT_OK) s = ct_dataset_load_idx(ctx, dir, "t10k", mean, stdv, &it->test);
    if (s == CT_E_IO || s == CT_E_CORRUPT) /* name the fix: the data comes from scripts/setup.sh */
        ct_wrap_error(ctx, s, NULL, "; run scripts/setup.sh to install the datasets into data/, or set data_dir");
    if (s == CT_OK) s = ct_loader_create(ctx, &it->train, r->batch_size, 1, 1, r->seed, &it->ld);
    if (s == CT_OK && (r->prefetch > 0 || r->augment)) s = make_prefetcher(it, 0, 0);
    if (s != CT_OK) {
        img_free(t);
        return s;
    }
    *out = t;
    return CT_OK;
}
