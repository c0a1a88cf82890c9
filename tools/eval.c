/* tools/eval.c - `ctrain eval` and `ctrain predict`: an image model's
 * checkpoint (ctrain/infer.h) evaluated on its test split (accuracy,
 * per-class accuracy, confusion matrix; --json) or applied to JPEG/PNG files
 * (the top-k classes). The context is the recipe's (threads), as in training,
 * so the evaluation repeats the trainer's exactly. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void eval_usage(FILE *f) {
    fprintf(f, "usage: ctrain eval --checkpoint DIR [--data-dir D] [--json FILE] [--threads N]\n"
               "\n"
               "Evaluates an image model's checkpoint (a save dir or a step dir of `ctrain train`) on its\n"
               "dataset's test split, as the trainer's evaluation does: prints the accuracy (for a run of one\n"
               "process equal to the test accuracy the trainer printed), the per-class accuracy and the\n"
               "confusion matrix (rows: true class, columns: predicted).\n"
               "  --data-dir D   the dataset's folder (default: the recipe's data_dir, else data/<dataset>)\n"
               "  --json FILE    also write the results as JSON\n"
               "  --threads N    threads (default: the recipe's)\n");
}

static void predict_usage(FILE *f) {
    fprintf(f, "usage: ctrain predict --checkpoint DIR [--top-k K] [--data-dir D] [--threads N] IMAGE...\n"
               "\n"
               "Prints the K most likely classes of each JPEG or PNG file with an image model's checkpoint,\n"
               "with the preprocessing of the trainer's evaluation (gray or RGB as the model was trained;\n"
               "Resize + CenterCrop + Normalize from the recipe; MNIST-style models take 28 x 28).\n"
               "  --top-k K      classes to print per image (default 5, or the class count when fewer)\n"
               "  --data-dir D   an image folder model's dataset, only for checkpoints without classes.txt\n"
               "  --threads N    threads (default: the recipe's)\n");
}

typedef struct {
    const char *ckpt, *data_dir, *json;
    long top_k, threads;
    int n_images;
    char **images;
} eval_args;

/* -1 to go on, else the exit code. predict: the positional arguments are images. */
static int parse(int argc, char **argv, int predict, eval_args *a) {
    *a = (eval_args){.top_k = 5, .threads = -1};
    const char *cmd = predict ? "predict" : "eval";
    if (!(a->images = calloc((size_t)argc, sizeof *a->images))) return cli_error(CT_E_OOM, "out of memory");
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            (predict ? predict_usage : eval_usage)(stdout);
            return 0;
        }
        if (f[0] != '-' || !f[1]) {
            if (!predict) {
                fprintf(stderr, "ctrain: error: unexpected argument '%s' (see ctrain eval --help)\n", f);
                return 2;
            }
            a->images[a->n_images++] = argv[i];
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ctrain: error: %s needs a value (see ctrain %s --help)\n", f, cmd);
            return 2;
        }
        const char *v = argv[++i];
        char *end = NULL;
        if (!strcmp(f, "--checkpoint")) a->ckpt = v;
        else if (!strcmp(f, "--data-dir")) a->data_dir = v;
        else if (!strcmp(f, "--json") && !predict) a->json = v;
        else if (!strcmp(f, "--top-k") && predict) a->top_k = strtol(v, &end, 10);
        else if (!strcmp(f, "--threads")) a->threads = strtol(v, &end, 10);
        else {
            fprintf(stderr, "ctrain: error: unknown option '%s' (see ctrain %s --help)\n", f, cmd);
            return 2;
        }
        if (end && (*end || end == v || (!strcmp(f, "--top-k") ? a->top_k < 1 : a->threads < 0))) {
            fprintf(stderr, "ctrain: error: %s: '%s' must be an integer >= %d\n", f, v, !strcmp(f, "--top-k"));
            return 2;
        }
    }
    if (!a->ckpt) {
        fprintf(stderr, "ctrain: error: --checkpoint DIR is required (a save dir or step dir of `ctrain train`)\n");
        return 2;
    }
    if (predict && !a->n_images) {
        fprintf(stderr, "ctrain: error: no IMAGE given (JPEG or PNG files; see ctrain predict --help)\n");
        return 2;
    }
    return -1;
}

/* The recipe's context (threads as trained unless --threads) and the classifier. 0, or the exit code. */
static int open_classifier(const eval_args *a, ct_context **ctx, ct_classifier **c) {
    ct_context_opts co;
    ct_context_opts_default(&co);
    ct_context *c0 = NULL;
    ct_recipe r;
    ct_status s = ct_context_create(&co, &c0);
    if (s != CT_OK) return cli_error(s, "cannot create a context (%s)", ct_status_name(s));
    s = ct_classifier_recipe(c0, a->ckpt, &r);
    if (s != CT_OK) {
        int rc = cli_fail(c0, s, "reading the checkpoint failed");
        ct_context_free(c0);
        return rc;
    }
    ct_context_free(c0);
    if (a->threads >= 0) r.threads = (int)a->threads;
    if ((s = ct_train_context_create(&r, ctx)) != CT_OK) return cli_error(s, "cannot create a context");
    if ((s = ct_classifier_load(*ctx, a->ckpt, a->data_dir, c)) != CT_OK) return cli_fail(*ctx, s, "loading failed");
    return 0;
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

/* The results as JSON into path. 0, or 1 after the error. */
static int write_json(const char *path, const ct_classifier *c, const ct_classifier_eval *e, const char *ckpt) {
    FILE *f = fopen(path, "w");
    if (!f) return cli_error(CT_E_IO, "--json: cannot write '%s': %s", path, strerror(errno));
    const ct_recipe *r = ct_classifier_recipe_of(c);
    const int64_t W = e->outputs;
    double tacc, tloss;
    ct_classifier_trained(c, &tacc, &tloss);
    fprintf(f, "{\"checkpoint\":");
    json_str(f, ckpt);
    fprintf(f, ",\"model\":\"%s\",\"dataset\":\"%s\",\"count\":%lld,\"correct\":%lld,\"accuracy\":%.17g,"
               "\"loss\":%.17g,\"trained_accuracy\":%.17g,\"trained_loss\":%.17g,\"classes\":[",
            ct_recipe_enum_name("model", (int)r->model), ct_recipe_enum_name("dataset", (int)r->dataset),
            (long long)e->count, (long long)e->correct, e->accuracy, e->loss, tacc, tloss);
    for (int64_t k = 0; k < W; k++) {
        if (k) fputc(',', f);
        json_str(f, ct_classifier_class_name(c, (int)k));
    }
    fprintf(f, "],\"per_class\":[");
    for (int64_t k = 0; k < W; k++) {
        int64_t n = 0;
        for (int64_t j = 0; j < W; j++) n += e->confusion[k * W + j];
        fprintf(f, "%s{\"count\":%lld,\"correct\":%lld,\"accuracy\":%.17g}", k ? "," : "", (long long)n,
                (long long)e->confusion[k * W + k], n ? (double)e->confusion[k * W + k] / (double)n : 0.0);
    }
    fprintf(f, "],\"confusion\":[");
    for (int64_t k = 0; k < W; k++) {
        fprintf(f, "%s[", k ? "," : "");
        for (int64_t j = 0; j < W; j++) fprintf(f, "%s%lld", j ? "," : "", (long long)e->confusion[k * W + j]);
        fputc(']', f);
    }
    fprintf(f, "]}\n");
    if (fclose(f)) return cli_error(CT_E_IO, "--json: writing '%s' failed: %s", path, strerror(errno));
    return 0;
}

static void print_eval(const ct_classifier *c, const ct_classifier_eval *e) {
    const int64_t W = e->outputs;
    double tacc;
    ct_classifier_trained(c, &tacc, NULL);
    printf("test accuracy %.2f%% (%lld / %lld), test loss %.4f\n", 100.0 * e->accuracy, (long long)e->correct,
           (long long)e->count, e->loss);
    printf("the trainer's last evaluation (stored in the checkpoint): test accuracy %.2f%%%s\n", 100.0 * tacc,
           tacc == e->accuracy ? " (same)"
           : " (differs: a checkpoint saved between evaluations, another data dir, or a data parallel run)");
    printf("\nper-class accuracy:\n");
    for (int64_t k = 0; k < W; k++) {
        int64_t n = 0;
        for (int64_t j = 0; j < W; j++) n += e->confusion[k * W + j];
        if (!n && k >= ct_classifier_classes(c)) continue;
        printf("  %3lld %-20s %7.2f%%  (%lld / %lld)\n", (long long)k, ct_classifier_class_name(c, (int)k),
               n ? 100.0 * (double)e->confusion[k * W + k] / (double)n : 0.0, (long long)e->confusion[k * W + k],
               (long long)n);
    }
    if (W > 20) {
        printf("\nconfusion matrix: %lld x %lld, in --json FILE\n", (long long)W, (long long)W);
        return;
    }
    printf("\nconfusion matrix (rows: true class, columns: predicted class):\n      ");
    for (int64_t j = 0; j < W; j++) printf(" %6lld", (long long)j);
    printf("\n");
    for (int64_t k = 0; k < W; k++) {
        printf("  %3lld ", (long long)k);
        for (int64_t j = 0; j < W; j++) printf(" %6lld", (long long)e->confusion[k * W + j]);
        printf("\n");
    }
}

int ct_cli_eval(int argc, char **argv) {
    eval_args a;
    int rc = parse(argc, argv, 0, &a);
    if (rc >= 0) {
        free(a.images);
        return rc;
    }
    ct_context *ctx = NULL;
    ct_classifier *c = NULL;
    ct_classifier_eval e = {0};
    rc = open_classifier(&a, &ctx, &c);
    if (rc == 0) {
        const ct_recipe *r = ct_classifier_recipe_of(c);
        printf("evaluating %s (%s on %s)\n", a.ckpt, ct_recipe_enum_name("model", (int)r->model),
               ct_recipe_enum_name("dataset", (int)r->dataset));
        ct_status s = ct_classifier_evaluate(c, &e);
        if (s != CT_OK) rc = cli_fail(ctx, s, "evaluation failed");
    }
    if (rc == 0) print_eval(c, &e);
    if (rc == 0 && a.json) rc = write_json(a.json, c, &e, a.ckpt);
    ct_classifier_eval_free(&e);
    ct_classifier_free(c);
    ct_context_free(ctx);
    free(a.images);
    return rc;
}

/* A whole file into *data (malloc'd). 0, or 1 after the error. */
static int read_file(const char *path, char **data, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return cli_error(CT_E_IO, "cannot read image '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0)
        if ((n += got) == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        return cli_error(bad ? CT_E_IO : CT_E_OOM, "cannot read image '%s'", path);
    }
    *data = buf;
    *len = n;
    return 0;
}

typedef struct {
    float p;
    int k;
} ranked;

static int ranked_desc(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    return x->p < y->p ? 1 : x->p > y->p ? -1 : x->k - y->k;
}

/* One image's top-k lines. 0, or 1 after the error. */
static int predict_one(ct_context *ctx, ct_classifier *c, const char *path, long top_k, int64_t W, float *p,
                       ranked *rk) {
    char *data = NULL;
    size_t len = 0;
    if (read_file(path, &data, &len)) return 1;
    ct_status s = ct_classifier_predict(c, data, len, path, p);
    free(data);
    if (s != CT_OK) return cli_fail(ctx, s, "predict failed");
    for (int64_t k = 0; k < W; k++) rk[k] = (ranked){p[k], (int)k};
    qsort(rk, (size_t)W, sizeof *rk, ranked_desc);
    printf("%s\n", path);
    for (long i = 0; i < top_k && i < W; i++)
        printf("  %7.3f%%  %3d  %s\n", 100.0 * rk[i].p, rk[i].k, ct_classifier_class_name(c, rk[i].k));
    fflush(stdout);
    return 0;
}

int ct_cli_predict(int argc, char **argv) {
    eval_args a;
    int rc = parse(argc, argv, 1, &a);
    if (rc >= 0) {
        free(a.images);
        return rc;
    }
    ct_context *ctx = NULL;
    ct_classifier *c = NULL;
    int64_t W = 0;
    float *p = NULL;
    ranked *rk = NULL;
    rc = open_classifier(&a, &ctx, &c);
    if (rc == 0) {
        ct_status s = ct_classifier_outputs(c, &W);
        if (s != CT_OK) rc = cli_fail(ctx, s, "loading the model failed");
    }
    if (rc == 0 && (!(p = malloc(sizeof *p * (size_t)W)) || !(rk = malloc(sizeof *rk * (size_t)W))))
        rc = cli_error(CT_E_OOM, "out of memory");
    int failed = 0; /* every image is tried; the exit status is 1 when one failed */
    for (int i = 0; rc == 0 && i < a.n_images; i++) failed |= predict_one(ctx, c, a.images[i], a.top_k, W, p, rk);
    if (rc == 0) rc = failed;
    free(p);
    free(rk);
    ct_classifier_free(c);
    ct_context_free(ctx);
    free(a.images);
    return rc;
}
