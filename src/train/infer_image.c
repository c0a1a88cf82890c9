/* src/train/infer_image.c - inference with an image model's checkpoint
 * (ctrain/infer.h): the test split evaluated through the image task exactly
 * as the trainer evaluates it (same recipe, plan and data path), with a
 * confusion matrix, and single JPEG/PNG files through a forward-only plan of
 * batch 1 with the evaluation transform of the recipe. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "ctrain/infer.h"
#include "train_internal.h"

struct ct_classifier {
    ct_context *ctx;
    ct_recipe r;
    char ckpt[4096];   /* the step directory */
    int classes;
    char *names;       /* image folder: the class names, one a line ('\n' -> '\0'); else NULL */
    const char **name; /* [classes] */
    char tmp[32];      /* "class K" */
    double trained_acc, trained_loss;
    ct_image_opts o;   /* the evaluation transform */
    int idx;           /* MNIST / Fashion-MNIST: the loader's normalization table for 28 x 28 files */
    ct_graph *g;       /* the batch-1 plan (on first predict) */
    ct_plan *plan;
    ct_tensor tx, tl;
    float *buf;        /* (C, S, S) image, then FP32 logits */
    ct_image im;
};

static const char *const fmnist_names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                             "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
static const char *const mnist_names[10] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
static const char *const cifar10_names[10] = {"airplane", "automobile", "bird",  "cat",  "deer",
                                              "dog",      "frog",       "horse", "ship", "truck"};
static const char *const cifar100_names[100] = {
    "apple", "aquarium_fish", "baby", "bear", "beaver", "bed", "bee", "beetle", "bicycle", "bottle", "bowl", "boy",
    "bridge", "bus", "butterfly", "camel", "can", "castle", "caterpillar", "cattle", "chair", "chimpanzee", "clock",
    "cloud", "cockroach", "couch", "crab", "crocodile", "cup", "dinosaur", "dolphin", "elephant", "flatfish",
    "forest", "fox", "girl", "hamster", "house", "kangaroo", "keyboard", "lamp", "lawn_mower", "leopard", "lion",
    "lizard", "lobster", "man", "maple_tree", "motorcycle", "mountain", "mouse", "mushroom", "oak_tree", "orange",
    "orchid", "otter", "palm_tree", "pear", "pickup_truck", "pine_tree", "plain", "plate", "poppy", "porcupine",
    "possum", "rabbit", "raccoon", "ray", "road", "rocket", "rose", "sea", "seal", "shark", "shrew", "skunk",
    "skyscraper", "snail", "snake", "spider", "squirrel", "streetcar", "sunflower", "sweet_pepper", "table", "tank",
    "telephone", "television", "tiger", "tractor", "train", "trout", "tulip", "turtle", "wardrobe", "whale",
    "willow_tree", "wolf", "woman", "worm"};

/* The checkpoint's train state (*st: malloc'd, the caller frees it, also on error) and its recipe. */
static ct_status read_state(ct_context *ctx, const char *ckpt, ct_train_state **st, ct_recipe *r) {
    if (!(*st = calloc(1, sizeof **st))) return ct_set_error(ctx, CT_E_OOM, "out of memory reading a checkpoint");
    ct_train_state_init(*st);
    ct_recipe_default(r);
    CT_TRY(ct_checkpoint_load(ctx, ckpt, NULL, NULL, *st));
    if (!(*st)->recipe_json[0])
        return ct_set_error(ctx, CT_E_CONFIG, "checkpoint '%s' holds no recipe (it was not written by ctrain train)",
                            (*st)->path);
    return ct_recipe_parse_json(ctx, (*st)->recipe_json, r);
}

ct_status ct_classifier_recipe(ct_context *ctx, const char *ckpt, ct_recipe *r) {
    if (!ctx || !ckpt || !r) return CT_E_INVALID_ARG;
    ct_train_state *st = NULL;
    ct_status s = read_state(ctx, ckpt, &st, r);
    free(st);
    return s;
}

/* An image folder's class names: the checkpoint's classes.txt, else the training folder's subfolders. */
static ct_status folder_names(ct_classifier *c) {
    char path[4200];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/%s", c->ckpt, CT_TRAIN_CLASSES_FILE);
    FILE *f = fopen(path, "rb");
    if (f) {
        fclose(f);
        CT_TRY(ct_text_read_file(c->ctx, path, &c->names, &len));
        for (size_t i = 0; i < len; i++)
            if (c->names[i] == '\n') c->names[i] = 0, c->classes++;
        if (len && c->names[len - 1]) c->classes++; /* a last line without '\n' (the buffer ends in NUL) */
    } else { /* a checkpoint from before classes.txt: the data's folders (only their names are read) */
        ct_image_set *set = NULL;
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/%s", c->r.data_dir[0] ? c->r.data_dir : "data/imagefolder", c->r.train_dir);
        ct_status s = ct_image_set_open_folder(c->ctx, dir, &c->o, &set);
        if (s != CT_OK)
            return ct_wrap_error(c->ctx, s, NULL, "; the checkpoint has no " CT_TRAIN_CLASSES_FILE ", so the class "
                                 "names come from the training folder: give its dataset's folder with --data-dir");
        c->classes = ct_image_set_classes(set);
        for (int k = 0; k < c->classes; k++) len += strlen(ct_image_set_class_name(set, k)) + 1;
        if (ct_alloc(c->ctx, len + 1, (void **)&c->names) == CT_OK)
            for (int k = 0, at = 0; k < c->classes; k++) {
                strcpy(c->names + at, ct_image_set_class_name(set, k));
                at += (int)strlen(c->names + at) + 1;
            }
        ct_image_set_free(set);
        if (!c->names) return CT_E_OOM;
    }
    if (c->classes < 1) return ct_set_error(c->ctx, CT_E_CORRUPT, "'%s' names no class", path);
    if (!(c->name = calloc((size_t)c->classes, sizeof *c->name))) return ct_set_error(c->ctx, CT_E_OOM, "out of memory");
    for (int k = 0, at = 0; k < c->classes; k++, at += (int)strlen(c->names + at) + 1) c->name[k] = c->names + at;
    return CT_OK;
}

/* The recipe's model must be an image one; the classes and their names. */
static ct_status classifier_open(ct_classifier *c, const char *ckpt, const char *data_dir) {
    ct_context *ctx = c->ctx;
    ct_train_state *st = NULL;
    ct_status s = read_state(ctx, ckpt, &st, &c->r);
    if (st) {
        snprintf(c->ckpt, sizeof c->ckpt, "%s", st->path);
        c->trained_acc = st->test_acc, c->trained_loss = st->test_loss;
    }
    free(st);
    CT_TRY(s);
    const char *model = ct_recipe_enum_name("model", (int)c->r.model);
    if (ct_model_family_of(c->r.model) != CT_MODEL_FAMILY_IMAGE)
        return ct_set_error(ctx, CT_E_CONFIG, "checkpoint '%s' holds a text model (%s), not an image classifier; %s",
                            c->ckpt, model, c->r.model == CT_MODEL_GPT ? "generate text from it with `ctrain sample "
                            "--checkpoint DIR`" : "ctrain eval and predict take image models only");
    if (data_dir && data_dir[0]) {
        if (strlen(data_dir) >= sizeof c->r.data_dir)
            return ct_set_error(ctx, CT_E_INVALID_ARG, "data dir '%s' is longer than %zu bytes", data_dir,
                                sizeof c->r.data_dir - 1);
        snprintf(c->r.data_dir, sizeof c->r.data_dir, "%s", data_dir);
    }
    CT_TRY(ct_task_image_opts(ctx, &c->r, &c->o));
    const ct_dataset_kind d = c->r.dataset;
    c->idx = d == CT_DATASET_MNIST || d == CT_DATASET_FASHION_MNIST;
    if (d == CT_DATASET_IMAGEFOLDER) return folder_names(c);
    c->classes = d == CT_DATASET_CIFAR100 ? 100 : 10;
    c->name = (const char **)(d == CT_DATASET_MNIST ? mnist_names : d == CT_DATASET_FASHION_MNIST ? fmnist_names
                              : d == CT_DATASET_CIFAR10 ? cifar10_names : cifar100_names);
    return CT_OK;
}

ct_status ct_classifier_load(ct_context *ctx, const char *ckpt, const char *data_dir, ct_classifier **out) {
    if (!ctx || !ckpt || !out) return CT_E_INVALID_ARG;
    *out = NULL;
    ct_classifier *c = calloc(1, sizeof *c);
    if (!c) return ct_set_error(ctx, CT_E_OOM, "out of memory");
    c->ctx = ctx;
    ct_recipe_default(&c->r);
    ct_status s = classifier_open(c, ckpt, data_dir);
    if (s != CT_OK) {
        ct_classifier_free(c);
        return s;
    }
    *out = c;
    return CT_OK;
}

void ct_classifier_free(ct_classifier *c) {
    if (!c) return;
    if (c->names) {
        ct_free(c->ctx, c->names);
        free(c->name);
    }
    ct_plan_free(c->plan);
    ct_graph_free(c->g);
    free(c->buf);
    ct_image_free(&c->im);
    free(c);
}

const ct_recipe *ct_classifier_recipe_of(const ct_classifier *c) { return c ? &c->r : NULL; }
int ct_classifier_classes(const ct_classifier *c) { return c ? c->classes : 0; }

const char *ct_classifier_class_name(const ct_classifier *c, int k) {
    if (c && k >= 0 && k < c->classes) return c->name[k];
    if (!c) return "?";
    snprintf(((ct_classifier *)c)->tmp, sizeof c->tmp, "class %d", k);
    return c->tmp;
}

void ct_classifier_trained(const ct_classifier *c, double *accuracy, double *loss) {
    if (accuracy) *accuracy = c ? c->trained_acc : 0;
    if (loss) *loss = c ? c->trained_loss : 0;
}

/* The task, its plan (deterministic: one chunk's batch, as the trainer), the weights, the evaluation. */
static ct_status evaluate_with(ct_classifier *c, ct_task *t, ct_classifier_eval *out) {
    ct_recipe local = c->r;
    if (c->r.deterministic) {
        local.batch_size = c->r.batch_size / c->r.deterministic_chunks;
        local.accumulate_steps = 1;
        CT_TRY(t->chunk(t, c->r.deterministic_chunks));
    }
    ct_plan *p = NULL;
    ct_status s = ct_task_plan(c->ctx, NULL, t, &local, 0, &p);
    if (s == CT_OK) s = ct_checkpoint_load(c->ctx, c->ckpt, p, NULL, NULL);
    if (s == CT_OK) s = t->bind(t, p);
    const int64_t w = s == CT_OK ? ct_task_image_logits_width(t) : 0;
    if (s == CT_OK && !(out->confusion = calloc((size_t)(w * w), sizeof *out->confusion)))
        s = ct_set_error(c->ctx, CT_E_OOM, "out of memory for a %lld x %lld confusion matrix", (long long)w,
                         (long long)w);
    ct_task_eval ev = {0};
    if (s == CT_OK) s = ct_task_image_evaluate(t, &ev, out->confusion);
    ct_plan_free(p);
    CT_TRY(s);
    out->outputs = w;
    out->count = (int64_t)ev.rows;
    for (int64_t k = 0; k < w; k++) out->correct += out->confusion[k * w + k];
    out->loss = ev.loss;
    out->accuracy = ev.accuracy;
    return CT_OK;
}

ct_status ct_classifier_evaluate(ct_classifier *c, ct_classifier_eval *out) {
    if (!c || !out) return CT_E_INVALID_ARG;
    memset(out, 0, sizeof *out);
    ct_task *t = NULL;
    ct_fp_scope fp;
    ct_fp_enter(c->ctx, &fp);
    ct_status s = ct_task_create(c->ctx, &c->r, &t);
    if (s == CT_OK) s = evaluate_with(c, t, out);
    ct_task_free(t);
    ct_fp_leave(&fp);
    if (s != CT_OK) ct_classifier_eval_free(out);
    return s;
}

void ct_classifier_eval_free(ct_classifier_eval *e) {
    if (!e) return;
    free(e->confusion);
    e->confusion = NULL;
}

/* The forward-only plan of batch 1 with the checkpoint's weights. */
static ct_status predict_plan(ct_classifier *c) {
    const ct_image_opts *o = &c->o;
    ct_node x, logits;
    CT_TRY(ct_graph_create(c->ctx, &c->g));
    CT_TRY(ct_input(c->g, "images", CT_F32, 4, (int64_t[]){1, o->channels, o->size, o->size}, &x));
    CT_TRY(ct_model_build(c->g, x, &c->r, c->classes, &logits));
    ct_compile_opts co;
    ct_recipe_compile_opts(&c->r, &co);
    co.build_backward = 0;
    CT_TRY(ct_compile(c->g, CT_NONE, 1, &logits, &co, &c->plan));
    CT_TRY(ct_checkpoint_load(c->ctx, c->ckpt, c->plan, NULL, NULL));
    CT_TRY(ct_plan_tensor(c->plan, x, &c->tx));
    CT_TRY(ct_plan_tensor(c->plan, logits, &c->tl));
    const size_t n = (size_t)CT_MAX(ct_tensor_numel(&c->tx), ct_tensor_numel(&c->tl));
    if (!(c->buf = malloc(n * sizeof(float)))) return ct_set_error(c->ctx, CT_E_OOM, "out of memory");
    return CT_OK;
}

ct_status ct_classifier_outputs(ct_classifier *c, int64_t *outputs) {
    if (!c || !outputs) return CT_E_INVALID_ARG;
    if (!c->plan) {
        ct_status s = predict_plan(c);
        if (s != CT_OK) {
            ct_plan_free(c->plan);
            ct_graph_free(c->g);
            c->plan = NULL, c->g = NULL;
            return s;
        }
    }
    *outputs = c->tl.shape[1];
    return CT_OK;
}

/* The decoded image -> the plan's input (C, S, S), as the evaluation's data path prepares it. */
static void preprocess(ct_classifier *c, float *dst) {
    const ct_image_opts *o = &c->o;
    const ct_image *im = &c->im;
    if (c->idx && im->h == o->size && im->w == o->size) { /* ct_dataset_load_idx's table (src/data/idx.c) */
        for (int i = 0; i < im->h * im->w; i++) dst[i] = ((float)im->px[i] / 255.0f - o->mean[0]) / o->std[0];
        return;
    }
    ct_crop crop;
    ct_image_transform_params(o, im->h, im->w, 0, 0, 0, &crop);
    ct_image_transform(o, im, &crop, dst);
}

ct_status ct_classifier_predict(ct_classifier *c, const void *data, size_t len, const char *name, float *probs) {
    if (!c || (!data && len) || !probs) return CT_E_INVALID_ARG;
    int64_t w;
    CT_TRY(ct_classifier_outputs(c, &w));
    char err[512];
    ct_status s = ct_image_decode(data, len, c->o.channels, c->o.max_pixels, name ? name : "image", &c->im, err,
                                  sizeof err);
    if (s != CT_OK) { /* the decoder's advice is the training set's (bad_images): not for one file */
        char *advice = strstr(err, "; replace or remove the file");
        if (advice) *advice = 0;
        return ct_set_error(c->ctx, s, "%s; give a readable JPEG or PNG file", err);
    }
    preprocess(c, c->buf);
    if (c->tx.dtype != CT_F32) return ct_set_error(c->ctx, CT_E_INTERNAL, "the predict plan's input is not FP32");
    memcpy(c->tx.data, c->buf, (size_t)ct_tensor_numel(&c->tx) * sizeof(float));
    CT_TRY(ct_plan_forward(c->plan, 0));
    ct_tensor f = ct_tensor_make(c->buf, CT_F32, c->tl.ndim, c->tl.shape);
    CT_TRY(c->tl.dtype == CT_F32 ? (memcpy(c->buf, c->tl.data, (size_t)w * sizeof(float)), CT_OK)
                                 : ct_convert(c->ctx, &c->tl, &f));
    double mx = c->buf[0], sum = 0;
    for (int64_t k = 1; k < w; k++) mx = fmax(mx, c->buf[k]);
    for (int64_t k = 0; k < w; k++) sum += exp((double)c->buf[k] - mx);
    for (int64_t k = 0; k < w; k++) probs[k] = (float)(exp((double)c->buf[k] - mx) / sum);
    return CT_OK;
}
