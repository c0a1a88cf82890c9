/* src/train/task_image.c - the image task: IDX datasets (MNIST,
 * Fashion-MNIST) through the loader or the background prefetcher, image
 * folders (JPEG/PNG) and CIFAR decoded and transformed by the prefetcher's
 * threads (ctrain/image.h; evaluation: Resize + CenterCrop), any image model
 * of the model table (ct_model_build) with cross entropy, training accuracy from the logits, and test
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
    /* deterministic mode (img_chunk): this rank's rows of the step's `accum` global batches read into
     * stage_x / stage_y, then handed to the plan in `chunks` slices of each; the evaluation covers the whole
     * test split on every rank */
    int chunks, accum;
    float *stage_x;
    int32_t *stage_y;
    int64_t stage_rows;
    ct_image_set *train_set, *test_set; /* imagefolder / cifar: decoded on demand */
    char *classes_txt;  /* imagefolder: the class names, one a line (CT_TRAIN_CLASSES_FILE of checkpoints) */
    size_t classes_len;
    /* dynamic shapes: the plan's variants for partial batches (ct_plan_add_shape), by rows */
    int64_t var_rows[4];
    int var_id[4], n_var;
    int64_t full;      /* the batch the plan was compiled for */
    ct_model_build_fn build_fn; /* ct_task_image_custom: the program's model (NULL: the model table's) */
    void *build_user;
    ct_task *self;
} image_task;

/* Logits as FP32: a low-precision plan stores BF16/FP16 logits, converted into buf. */
static const float *logits_f32(image_task *it) {
    const ct_tensor *tl = &it->tl;
    if (tl->dtype == CT_F32) return tl->data;
    ct_tensor f = ct_tensor_make(it->logits_buf, CT_F32, tl->ndim, tl->shape);
    return ct_convert(it->ctx, tl, &f) == CT_OK ? it->logits_buf : tl->data;
}

/* Correct argmax predictions of n rows of c logits; confusion (may be NULL): (c, c) counts, row = label, column =
 * prediction, added to (labels outside [0, c), e.g. the padding's -100, are not counted). */
static int64_t argmax_correct(const float *logits, const int32_t *labels, int64_t n, int64_t c, int64_t *confusion) {
    int64_t ok = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t best = 0;
        for (int64_t j = 1; j < c; j++)
            if (logits[i * c + j] > logits[i * c + best]) best = j;
        ok += best == labels[i];
        if (confusion && labels[i] >= 0 && labels[i] < c) confusion[labels[i] * c + best]++;
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
    if (it->build_fn) CT_TRY(it->build_fn(it->build_user, g, x, ds->n_classes, &logits)); /* the program's */
    else CT_TRY(ct_model_build(g, x, r, ds->n_classes, &logits)); /* the model table's builder (src/models/) */
    CT_TRY(ct_cross_entropy(g, logits, y, r->label_smoothing, -100, loss));
    it->x = x, it->y = y, it->logits = logits;
    keep[0] = logits;
    *n_keep = 1;
    return CT_OK;
}

/* The plan's views of the inputs and the logits (their shapes follow the
 * selected variant). */
static ct_status img_views(image_task *it) {
    CT_TRY(ct_plan_tensor(it->plan, it->x, &it->tx));
    CT_TRY(ct_plan_tensor(it->plan, it->y, &it->ty));
    return ct_plan_tensor(it->plan, it->logits, &it->tl);
}

/* Runs the plan at `rows` rows from now on: the compiled batch (variant 0)
 * or a partial one, whose variant is built on first use (the same graph
 * built for `rows`; docs/dynamic-shapes.md). */
static ct_status img_use_rows(image_task *it, int64_t rows) {
    int v = 0;
    if (rows != it->tx.shape[0] || ct_plan_shape(it->plan) != 0) {
        int k = 0;
        while (k < it->n_var && it->var_rows[k] != rows) k++;
        if (rows == it->full) v = 0;
        else if (k < it->n_var) v = it->var_id[k];
        else {
            ct_graph *g;
            CT_TRY(ct_graph_create(it->ctx, &g));
            ct_recipe r = it->r;
            r.batch_size = rows;
            ct_node loss = CT_NONE, keep[8];
            int n_keep = 0;
            ct_status s = img_build(it->self, g, &r, &loss, &n_keep, keep);
            if (s == CT_OK) s = ct_plan_add_shape(it->plan, g, loss, n_keep, keep, &v);
            ct_graph_free(g);
            CT_TRY(s);
            if (it->n_var < 4) { /* at most the last training and the last test batch */
                it->var_rows[it->n_var] = rows;
                it->var_id[it->n_var++] = v;
            }
        }
    }
    if (v == ct_plan_shape(it->plan)) return CT_OK;
    CT_TRY(ct_plan_set_shape(it->plan, v));
    return img_views(it);
}

static ct_status img_bind(ct_task *t, ct_plan *p) {
    image_task *it = t->impl;
    if (it->plan != p || ct_plan_num_shapes(p) == 1) it->n_var = 0; /* a pipeline binds again per slot */
    it->plan = p;
    CT_TRY(ct_plan_set_shape(p, 0));
    CT_TRY(img_views(it));
    it->full = it->tx.shape[0];
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

/* Deterministic: micro-batch m is slice m / A of this rank's rows of the step's global batch m % A (A =
 * accum; ct_task.chunk). The A batches are read at m == 0: all of them, or (the epoch's end) none: every
 * rank's step then ends at micro-batch 0. Every batch is whole (drop_last). */
static ct_status next_chunk(image_task *it, int micro, int64_t *rows) {
    const int64_t per = it->r.batch_size / it->size, b = it->tx.shape[0];
    const size_t px = (size_t)(ct_tensor_numel(&it->tx) / b);
    if (micro == 0) {
        it->stage_rows = 0;
        for (int a = 0; a < it->accum; a++) {
            int64_t n = 0;
            float *x = it->stage_x + (size_t)(a * per) * px;
            CT_TRY(it->pf ? ct_prefetcher_next(it->pf, x, it->stage_y + a * per, &n)
                          : ct_loader_next(it->ld, x, it->stage_y + a * per, &n));
            if (n < per) { /* the epoch's end */
                it->stage_rows = 0;
                break;
            }
            it->stage_rows += n;
        }
    }
    *rows = 0;
    if (it->stage_rows < it->accum * per) return CT_OK;
    const int64_t lo = (int64_t)(micro % it->accum) * per + (int64_t)(micro / it->accum) * b;
    memcpy(it->tx.data, it->stage_x + (size_t)lo * px, (size_t)b * px * sizeof(float));
    memcpy(it->ty.data, it->stage_y + lo, (size_t)b * sizeof(int32_t));
    *rows = b;
    return img_use_rows(it, b);
}

static ct_status img_next(ct_task *t, int64_t step, int micro, int64_t *rows) {
    image_task *it = t->impl;
    (void)step;
    if (it->chunks > 1 || it->accum > 1) return next_chunk(it, micro, rows);
    CT_TRY(it->pf ? ct_prefetcher_next(it->pf, it->tx.data, it->ty.data, rows)
                  : ct_loader_next(it->ld, it->tx.data, it->ty.data, rows));
    /* dynamic_shapes: the last partial batch trains at its size (the loader
     * wrote its rows contiguously at the start of the inputs) */
    return *rows > 0 ? img_use_rows(it, *rows) : CT_OK;
}

static int64_t img_correct(ct_task *t, int64_t rows) {
    image_task *it = t->impl;
    return argmax_correct(logits_f32(it), it->ty.data, rows, it->tl.shape[1], NULL);
}

/* The test split in eval mode, in batches of the plan's size (data
 * parallel: batch k on rank k % size); the last partial batch runs at its
 * size (dynamic_shapes), or is padded with ignored labels (-100) so the
 * padding does not count. */
static ct_status evaluate_confusion(ct_task *t, ct_task_eval *out, int64_t *confusion) {
    image_task *it = t->impl;
    CT_TRY(img_use_rows(it, it->full));
    int64_t B = it->tx.shape[0];
    ct_loader *ld = NULL;
    ct_prefetcher *pf = NULL; /* an image set: decoded by the prefetcher (in order, eval transform) */
    if (it->test.set) {
        ct_prefetch_opts po;
        ct_prefetch_opts_default(&po);
        po.buffer_size = it->r.prefetch > 0 ? it->r.prefetch : 1;
        po.threads = it->r.prefetch > 0 ? it->r.prefetch_threads : 0;
        CT_TRY(ct_prefetcher_create(it->ctx, &it->test, B, 0, 0, 0, &po, &pf));
    } else {
        CT_TRY(ct_loader_create(it->ctx, &it->test, B, 0, 0, 0, &ld));
        ct_loader_start_epoch(ld, 0);
    }
    double tot_loss = 0;
    int64_t correct = 0, seen = 0, got;
    ct_status s = CT_OK;
    const int64_t nb = pf ? ct_prefetcher_num_batches(pf) : ct_loader_num_batches(ld);
    for (int64_t k = 0; k < nb; k++) {
        if (!it->chunks && k % it->size != it->rank) { /* data parallel: test batch k is rank k % size's */
            if ((s = pf ? ct_prefetcher_skip(pf, 1) : ct_loader_skip(ld, 1)) != CT_OK) break;
            continue;
        }
        s = pf ? ct_prefetcher_next(pf, it->tx.data, it->ty.data, &got) : ct_loader_next(ld, it->tx.data, it->ty.data, &got);
        if (s != CT_OK || got == 0) break;
        if (got < B && it->r.dynamic_shapes && (s = img_use_rows(it, got)) != CT_OK) break;
        int32_t *lab = it->ty.data;
        for (int64_t i = got; i < B; i++) lab[i] = -100;
        if ((s = ct_plan_forward(it->plan, 0)) != CT_OK) break;
        float l = 0.0f; /* a pipeline stage without the loss reads none */
        ct_plan_loss(it->plan, &l);
        tot_loss += (double)l * (double)got;
        correct += argmax_correct(logits_f32(it), lab, got, it->tl.shape[1], confusion); /* the logits' width */
        seen += got;
    }
    ct_loader_free(ld);
    ct_prefetcher_free(pf);
    if (s == CT_OK) s = img_use_rows(it, B);
    if (s != CT_OK) return s;
    out->loss = seen ? tot_loss / (double)seen : 0;
    out->accuracy = seen ? (double)correct / (double)seen : 0;
    out->count = (double)seen;
    out->rows = (double)seen;
    out->detail[0] = 0;
    if (it->train_set) { /* decode + transform throughput of the training images so far */
        ct_image_stats st;
        ct_image_set_stats(it->train_set, &st);
        snprintf(out->detail, sizeof out->detail, "(decode+augment %.0f img/s per thread-CPU-s, %lld bad skipped",
                 st.seconds > 0 ? (double)st.images / st.seconds : 0.0, (long long)st.bad);
    }
    return CT_OK;
}

static ct_status img_evaluate(ct_task *t, ct_task_eval *out) { return evaluate_confusion(t, out, NULL); }

ct_status ct_task_image_evaluate(ct_task *t, ct_task_eval *out, int64_t *confusion) {
    if (!t || t->evaluate != img_evaluate) return CT_E_INVALID_ARG;
    image_task *it = t->impl;
    if (!it->plan) return ct_set_error(it->ctx, CT_E_INVALID_ARG, "the image task has no plan yet (bind it first)");
    return evaluate_confusion(t, out, confusion);
}

const char *ct_task_image_class_name(ct_task *t, int k) {
    if (!t || t->evaluate != img_evaluate) return NULL;
    return ct_image_set_class_name(((image_task *)t->impl)->test_set, k);
}

int64_t ct_task_image_logits_width(ct_task *t) {
    if (!t || t->evaluate != img_evaluate || !((image_task *)t->impl)->plan) return 0;
    return ((image_task *)t->impl)->tl.shape[1];
}

/* The last partial training batch is dropped unless dynamic_shapes runs it
 * at its size; data parallel always drops it (a rank could get no rows). */
/* data parallel and the deterministic mode (whose chunks must not depend on the world size) drop the last
 * partial batch */
static int drop_last(const image_task *it) { return !it->r.dynamic_shapes || it->size > 1 || it->r.deterministic; }

/* The training batches through the prefetcher (prefetch > 0 or augment),
 * with rows [off, off + rows) of each batch (rows 0: all). */
static ct_status make_prefetcher(image_task *it, int64_t off, int64_t rows) {
    const ct_recipe *r = &it->r;
    ct_prefetch_opts po;
    ct_prefetch_opts_default(&po);
    po.buffer_size = r->prefetch > 0 ? r->prefetch : 1;
    po.threads = r->prefetch > 0 ? r->prefetch_threads : 0; /* 0: synchronous */
    po.augment = it->train_set ? 0 : r->augment; /* an image set transforms itself */
    po.pad_value = -it->mean / it->stdv; /* a normalized 0 pixel */
    po.shard_offset = off;
    po.shard_rows = rows;
    ct_prefetcher_free(it->pf);
    it->pf = NULL;
    return ct_prefetcher_create(it->ctx, &it->train, r->batch_size, 1, drop_last(it), r->seed, &po, &it->pf);
}

/* "0.485,0.456,0.406" (or one value for every channel; "": 0.5) into v[3]. */
static ct_status parse_floats(ct_context *ctx, const char *key, const char *text, int channels, float *v) {
    for (int c = 0; c < 3; c++) v[c] = 0.5f;
    if (!text[0]) return CT_OK;
    int n = 0;
    const char *p = text;
    while (*p && n < 3) {
        char *end;
        double x = strtod(p, &end);
        if (end == p || !(x > -1e6 && x < 1e6)) break;
        v[n++] = (float)x;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') p++;
    }
    if (*p || (n != 1 && n != channels))
        return ct_set_error(ctx, CT_E_CONFIG,
                            "recipe key '%s': '%s' is not 1 or %d comma-separated numbers (one per image channel)", key,
                            text, channels);
    if (n == 1) v[1] = v[2] = v[0];
    return CT_OK;
}

ct_status ct_task_image_opts(ct_context *ctx, const ct_recipe *r, ct_image_opts *out) {
    ct_image_opts o;
    ct_image_opts_default(&o);
    if (r->dataset == CT_DATASET_MNIST || r->dataset == CT_DATASET_FASHION_MNIST) { /* IDX: 28 x 28 gray */
        o.size = 28, o.channels = 1;
        o.mean[0] = o.mean[1] = o.mean[2] = r->dataset == CT_DATASET_MNIST ? 0.1307f : 0.2860f;
        o.std[0] = o.std[1] = o.std[2] = r->dataset == CT_DATASET_MNIST ? 0.3081f : 0.3530f;
        *out = o;
        return CT_OK;
    }
    o.size = r->image_size > 0 ? r->image_size : 32;
    o.channels = r->image_channels;
    if (o.channels != 1 && o.channels != 3)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key 'image_channels': %d must be 1 or 3", o.channels);
    o.resize = r->resize_size;
    if (o.resize && o.resize < o.size)
        return ct_set_error(ctx, CT_E_CONFIG,
                            "recipe key 'resize_size': %d is smaller than image_size %d; the center crop must fit "
                            "(0: image_size)",
                            o.resize, o.size);
    o.scale[0] = r->crop_scale_min, o.scale[1] = r->crop_scale_max;
    o.ratio[0] = r->crop_ratio_min, o.ratio[1] = r->crop_ratio_max;
    if (o.scale[0] > o.scale[1] || o.ratio[0] > o.ratio[1])
        return ct_set_error(ctx, CT_E_CONFIG, "recipe keys crop_scale_min/max (%g, %g) and crop_ratio_min/max (%g, "
                            "%g): each min must be <= its max", (double)o.scale[0], (double)o.scale[1],
                            (double)o.ratio[0], (double)o.ratio[1]);
    o.flip = r->hflip;
    o.pad = r->crop_padding;
    o.bad = r->bad_images ? CT_BAD_IMAGES_SKIP : CT_BAD_IMAGES_ERROR;
    CT_TRY(parse_floats(ctx, "mean", r->mean, o.channels, o.mean));
    CT_TRY(parse_floats(ctx, "std", r->std, o.channels, o.std));
    for (int c = 0; c < o.channels; c++)
        if (!(o.std[c] > 0)) return ct_set_error(ctx, CT_E_CONFIG, "recipe key 'std': every value must be > 0");
    *out = o;
    return CT_OK;
}

/* classes_txt from the training folder's class names. */
static ct_status make_classes_txt(image_task *it) {
    size_t len = 0;
    const int k = ct_image_set_classes(it->train_set);
    for (int i = 0; i < k; i++) len += strlen(ct_image_set_class_name(it->train_set, i)) + 1;
    if (!(it->classes_txt = malloc(len + 1))) return ct_set_error(it->ctx, CT_E_OOM, "out of memory (class names)");
    for (int i = 0; i < k; i++) {
        const char *name = ct_image_set_class_name(it->train_set, i);
        memcpy(it->classes_txt + it->classes_len, name, strlen(name));
        it->classes_len += strlen(name);
        it->classes_txt[it->classes_len++] = '\n';
    }
    return CT_OK;
}

/* dataset imagefolder / cifar10 / cifar100: the training set (augment:
 * RandomResizedCrop + flip, else the eval transform) and the evaluation
 * set, with the recipe's image keys. */
static ct_status open_image_sets(image_task *it, const ct_recipe *r) {
    ct_context *ctx = it->ctx;
    ct_image_opts o;
    CT_TRY(ct_task_image_opts(ctx, r, &o));
    it->mean = o.mean[0], it->stdv = o.std[0];
    const char *ds = ct_recipe_enum_name("dataset", (int)r->dataset);
    char root[300], dir[400];
    if (r->data_dir[0]) snprintf(root, sizeof root, "%s", r->data_dir);
    else snprintf(root, sizeof root, "data/%s", ds);
    ct_image_opts ot = o, oe = o;
    ot.train = r->augment;
    oe.train = 0;
    if (r->dataset == CT_DATASET_IMAGEFOLDER) {
        snprintf(dir, sizeof dir, "%s/%s", root, r->train_dir);
        CT_TRY(ct_image_set_open_folder(ctx, dir, &ot, &it->train_set));
        snprintf(dir, sizeof dir, "%s/%s", root, r->val_dir);
        CT_TRY(ct_image_set_open_folder(ctx, dir, &oe, &it->test_set));
        int kt = ct_image_set_classes(it->train_set), ke = ct_image_set_classes(it->test_set);
        for (int k = 0; k < kt && k < ke; k++)
            if (strcmp(ct_image_set_class_name(it->train_set, k), ct_image_set_class_name(it->test_set, k))) {
                ke = -1;
                break;
            }
        if (ke != kt)
            return ct_set_error(ctx, CT_E_CONFIG,
                                "the class folders of %s/%s and %s/%s differ (%d vs %d classes, or other names); "
                                "both splits need the same class folders",
                                root, r->train_dir, root, r->val_dir, kt, ct_image_set_classes(it->test_set));
        CT_TRY(make_classes_txt(it));
    } else {
        int classes = r->dataset == CT_DATASET_CIFAR100 ? 100 : 10;
        CT_TRY(ct_image_set_open_cifar(ctx, root, "train", classes, &ot, &it->train_set));
        CT_TRY(ct_image_set_open_cifar(ctx, root, "test", classes, &oe, &it->test_set));
    }
    CT_TRY(ct_dataset_from_image_set(it->train_set, &it->train));
    return ct_dataset_from_image_set(it->test_set, &it->test);
}

static ct_status img_shard(ct_task *t, int rank, int size) {
    image_task *it = t->impl;
    const int64_t b = it->r.batch_size / size; /* the trainer checked that it divides */
    it->rank = rank;
    it->size = size;
    if (size > 1 && it->r.dynamic_shapes) { /* drop the partial last batch: every rank gets rows */
        ct_loader_free(it->ld);
        it->ld = NULL;
        CT_TRY(ct_loader_create(it->ctx, &it->train, it->r.batch_size, 1, 1, it->r.seed, &it->ld));
    }
    CT_TRY(ct_loader_set_shard(it->ld, size > 1 ? rank * b : 0, size > 1 ? b : 0));
    return it->pf ? make_prefetcher(it, size > 1 ? rank * b : 0, size > 1 ? b : 0) : CT_OK;
}

static ct_status img_chunk(ct_task *t, int n) {
    image_task *it = t->impl;
    const int64_t rows = it->r.batch_size / it->size; /* this rank's rows of a global batch */
    const size_t px = (size_t)(it->train.c * it->train.h * it->train.w);
    if (n < 1 || rows % n)
        return ct_set_error(it->ctx, CT_E_CONFIG, "deterministic: %lld rows per rank do not cut into %d chunks",
                            (long long)rows, n);
    it->chunks = n;
    it->accum = it->r.accumulate_steps > 1 ? it->r.accumulate_steps : 1; /* the step's global batches */
    free(it->stage_x);
    free(it->stage_y);
    it->stage_x = malloc((size_t)(rows * it->accum) * px * sizeof(float));
    it->stage_y = malloc((size_t)(rows * it->accum) * sizeof(int32_t));
    if (!it->stage_x || !it->stage_y)
        return ct_set_error(it->ctx, CT_E_OOM, "out of memory for the deterministic mode's batch (%lld rows)",
                            (long long)rows);
    return CT_OK;
}

static void img_describe(ct_task *t, const ct_plan_stats *ps, char *buf, size_t len) {
    image_task *it = t->impl;
    char cvt[192] = "";
    if (ps->cast_bytes)
        snprintf(cvt, sizeof cvt, " (incl. FP32 conversion copies, up to %.1f MiB)", (double)ps->cast_bytes / 1048576.0);
    if (it->train_set) { /* the folder's classes, the decoders and the transforms */
        const ct_image_opts *o = ct_image_set_opts(it->train_set);
        char aug[48];
        if (!o->train) snprintf(aug, sizeof aug, "Resize+CenterCrop");
        else if (o->pad > 0) snprintf(aug, sizeof aug, "RandomCrop(pad %d)%s", o->pad, o->flip ? "+flip" : "");
        else snprintf(aug, sizeof aug, "RandomResizedCrop%s", o->flip ? "+flip" : "");
        snprintf(cvt + strlen(cvt), sizeof cvt - strlen(cvt), "; %d classes, %s%s", ct_image_set_classes(it->train_set),
                 aug, o->bad ? ", skips bad images" : "");
    }
    snprintf(buf, len, "%s on %s (%lld train / %lld test images, %dx%lldx%lld), %d params, %.1f MiB activations%s",
             ct_recipe_enum_name("model", (int)it->r.model), ct_recipe_enum_name("dataset", (int)it->r.dataset),
             (long long)it->train.n, (long long)it->test.n, (int)it->train.c, (long long)it->train.h,
             (long long)it->train.w, (int)(ps->param_bytes / 4), (double)ps->activation_bytes / 1048576.0, cvt);
}

/* An image folder's class names go into every checkpoint (ctrain predict names the classes without the data). */
static ct_status img_files(ct_task *t, ct_checkpoint_file *files, int *n, int max) {
    image_task *it = t->impl;
    *n = 0;
    if (!it->classes_txt || max < 1) return CT_OK;
    files[0] = (ct_checkpoint_file){CT_TRAIN_CLASSES_FILE, it->classes_txt, it->classes_len};
    *n = 1;
    return CT_OK;
}

static void img_free(ct_task *t) {
    image_task *it = t->impl;
    free(it->classes_txt);
    ct_prefetcher_free(it->pf);
    ct_loader_free(it->ld);
    ct_dataset_free(it->ctx, &it->train);
    ct_dataset_free(it->ctx, &it->test);
    ct_image_set_free(it->train_set);
    ct_image_set_free(it->test_set);
    free(it->logits_buf);
    free(it->stage_x);
    free(it->stage_y);
    free(it);
    free(t);
}

/* The image-set key set away from its default (they do nothing for IDX data), or NULL. */
static const char *image_set_key(const ct_recipe *r) {
    ct_recipe d;
    ct_recipe_default(&d);
    return strcmp(r->train_dir, d.train_dir) ? "train_dir" : strcmp(r->val_dir, d.val_dir) ? "val_dir"
           : r->image_size != d.image_size ? "image_size" : r->image_channels != d.image_channels
           ? "image_channels" : r->resize_size != d.resize_size ? "resize_size" : r->mean[0] ? "mean"
           : r->std[0] ? "std" : r->crop_scale_min != d.crop_scale_min ? "crop_scale_min"
           : r->crop_scale_max != d.crop_scale_max ? "crop_scale_max" : r->crop_ratio_min != d.crop_ratio_min
           ? "crop_ratio_min" : r->crop_ratio_max != d.crop_ratio_max ? "crop_ratio_max"
           : r->hflip != d.hflip ? "hflip" : r->crop_padding ? "crop_padding" : r->bad_images != d.bad_images ? "bad_images" : NULL;
}

/* MNIST / Fashion-MNIST (IDX files): the splits, the loader and the prefetcher. */
static ct_status open_idx(image_task *it, const ct_recipe *r) {
    ct_context *ctx = it->ctx;
    char dir[300];
    const char *ds = ct_recipe_enum_name("dataset", (int)r->dataset);
    if (r->data_dir[0]) snprintf(dir, sizeof dir, "%s", r->data_dir);
    else snprintf(dir, sizeof dir, "data/%s", ds);
    const char *key = image_set_key(r);
    if (key)
        return ct_set_error(ctx, CT_E_CONFIG,
                            "recipe key '%s' applies to dataset imagefolder, cifar10 or cifar100, not to the "
                            "IDX dataset '%s'; remove it or change the dataset",
                            key, ds);
    ct_image_opts o;
    CT_TRY(ct_task_image_opts(ctx, r, &o)); /* the dataset's normalization */
    const float mean = o.mean[0], stdv = o.std[0];
    it->mean = mean;
    it->stdv = stdv;
    ct_status s = ct_dataset_load_idx(ctx, dir, "train", mean, stdv, &it->train);
    if (s == CT_OK) s = ct_dataset_load_idx(ctx, dir, "t10k", mean, stdv, &it->test);
    if (s == CT_E_IO || s == CT_E_CORRUPT) /* name the fix: the data comes from scripts/setup.sh */
        ct_wrap_error(ctx, s, NULL, "; run scripts/setup.sh to install the datasets into data/, or set data_dir");
    if (s == CT_OK) s = ct_loader_create(ctx, &it->train, r->batch_size, 1, drop_last(it), r->seed, &it->ld);
    if (s == CT_OK && (r->prefetch > 0 || r->augment)) s = make_prefetcher(it, 0, 0);
    return s;
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
    t->checkpoint_files = img_files;
    t->shard = img_shard;
    t->chunk = img_chunk;
    t->free = img_free;
    it->rank = 0;
    it->size = 1;
    it->self = t;
    ct_status s;
    if (r->dataset == CT_DATASET_IMAGEFOLDER || r->dataset == CT_DATASET_CIFAR10 || r->dataset == CT_DATASET_CIFAR100) {
        s = open_image_sets(it, r);
        if (s == CT_OK) s = ct_loader_create(ctx, &it->train, r->batch_size, 1, 1, r->seed, &it->ld);
        if (s == CT_OK) s = make_prefetcher(it, 0, 0);
    } else s = open_idx(it, r);
    if (s != CT_OK) {
        img_free(t);
        return s;
    }
    *out = t;
    return CT_OK;
}

ct_status ct_task_image_custom(ct_context *ctx, const ct_recipe *r, ct_model_build_fn build, void *user,
                               ct_task **out) {
    if (!r || !build || !out)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_task_image_custom: r, build and out must not be NULL");
    *out = NULL;
    if (ct_model_family_of(r->model) != CT_MODEL_FAMILY_IMAGE)
        return ct_set_error(ctx, CT_E_CONFIG, "a custom model trains on image data: the recipe's model '%s' is a text "
                            "model; use an image model's recipe (e.g. recipes/mnist_mlp.json)",
                            ct_model_name(r->model));
    CT_TRY(ct_recipe_validate(ctx, r));
    CT_TRY(ct_task_image_create(ctx, r, out));
    image_task *it = (*out)->impl;
    it->build_fn = build;
    it->build_user = user;
    return CT_OK;
}
