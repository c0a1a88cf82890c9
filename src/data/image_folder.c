/* src/data/image_folder.c - ct_image_set: an ImageFolder of JPEG/PNG files
 * (torchvision.datasets.ImageFolder's layout and class order) or CIFAR
 * records (cifar.c), and sample access for the prefetcher's threads:
 * read + decode (image_decode.c) + transform (augment.c), the bad-image
 * policy and the decode statistics.
 *
 * Open reads only the folder listing: class = each subfolder of `dir`,
 * sorted by name (byte order, as Python's sorted), samples = the files
 * directly inside it whose names end in .jpg, .jpeg or .png (any case),
 * sorted by name. A file that fails to decode is CT_E_CORRUPT naming it, or
 * (bad_images skip) is flagged bad, counted once and replaced by the next
 * good sample in dataset order (index + 1, + 2, ... wrapping), keeping the
 * random choices of the requested index. ct_image_set_get needs no context
 * and allocates only the file buffer: the worker threads call it. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "core/internal.h"
#include "data/image_internal.h"

#define MAX_FILE_BYTES ((int64_t)1 << 30)

ct_status ct_image_set_new_(ct_context *ctx, const ct_image_opts *o, ct_image_set **out) {
    *out = NULL;
    ct_image_opts d;
    if (!o) {
        ct_image_opts_default(&d);
        o = &d;
    }
    if (o->size < 1 || o->size > 8192)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "image size %d must be in [1, 8192]", o->size);
    if (o->channels != 1 && o->channels != 3)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "image channels %d must be 1 or 3", o->channels);
    if (o->resize != 0 && (o->resize < o->size || o->resize > 16384))
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "eval resize %d must be 0 (the image size) or in [image size %d, 16384]: the center crop "
                            "must fit inside the resized image",
                            o->resize, o->size);
    if (!(o->scale[0] > 0 && o->scale[0] <= o->scale[1] && o->scale[1] <= 1))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "crop scale (%g, %g) must satisfy 0 < min <= max <= 1",
                            (double)o->scale[0], (double)o->scale[1]);
    if (!(o->ratio[0] > 0 && o->ratio[0] <= o->ratio[1] && o->ratio[1] < 1e4))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "crop ratio (%g, %g) must satisfy 0 < min <= max",
                            (double)o->ratio[0], (double)o->ratio[1]);
    for (int c = 0; c < o->channels; c++)
        if (!(o->std[c] > 0) || !(o->mean[c] > -1e6f && o->mean[c] < 1e6f))
            return ct_set_error(ctx, CT_E_INVALID_ARG, "normalization of channel %d: std %g must be > 0 and mean %g finite",
                                c, (double)o->std[c], (double)o->mean[c]);
    if (o->bad != CT_BAD_IMAGES_ERROR && o->bad != CT_BAD_IMAGES_SKIP)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "bad image policy %d is neither error nor skip", (int)o->bad);
    if (o->max_pixels < 1) return ct_set_error(ctx, CT_E_INVALID_ARG, "max_pixels must be positive");
    ct_image_set *s = calloc(1, sizeof *s);
    if (!s) return ct_set_error(ctx, CT_E_OOM, "out of memory creating an image set");
    s->ctx = ctx;
    s->o = *o;
    *out = s;
    return CT_OK;
}

ct_status ct_image_set_alloc_samples_(ct_image_set *set, int64_t n) {
    void *p = NULL;
    CT_TRY(ct_alloc(set->ctx, (size_t)n * sizeof(int32_t), &p));
    set->labels = p;
    CT_TRY(ct_alloc(set->ctx, (size_t)n * sizeof(atomic_uchar), &p));
    set->bad = p;
    for (int64_t i = 0; i < n; i++) atomic_init(&set->bad[i], 0);
    set->n = n;
    return CT_OK;
}

void ct_image_set_free(ct_image_set *set) {
    if (!set) return;
    ct_context *ctx = set->ctx;
    free(set->class_names.buf);
    free(set->class_names.off);
    free(set->paths.buf);
    free(set->paths.off);
    free(set->dir);
    ct_free(ctx, set->labels);
    ct_free(ctx, set->bad);
    ct_free(ctx, set->rec);
    free(set);
}

int64_t ct_image_set_count(const ct_image_set *set) { return set ? set->n : 0; }
int ct_image_set_classes(const ct_image_set *set) { return set ? set->classes : 0; }
const char *ct_image_set_class_name(const ct_image_set *set, int k) {
    return set && k >= 0 && k < set->classes && set->class_names.buf ? set->class_names.buf + set->class_names.off[k]
                                                                      : NULL;
}
const ct_image_opts *ct_image_set_opts(const ct_image_set *set) { return set ? &set->o : NULL; }

void ct_image_set_stats(const ct_image_set *set, ct_image_stats *out) {
    memset(out, 0, sizeof *out);
    if (!set) return;
    out->bad = atomic_load(&((ct_image_set *)set)->n_bad);
    out->images = atomic_load(&((ct_image_set *)set)->n_images);
    out->seconds = (double)atomic_load(&((ct_image_set *)set)->ns) * 1e-9;
}

ct_status ct_dataset_from_image_set(ct_image_set *set, ct_dataset *out) {
    if (!set || !out) return CT_E_INVALID_ARG;
    memset(out, 0, sizeof *out);
    out->n = set->n;
    out->c = set->o.channels;
    out->h = out->w = set->o.size;
    out->n_classes = set->classes;
    out->set = set;
    return CT_OK;
}

/* ---- the folder listing -------------------------------------------------------- */

/* Grows *p (elements of `size` bytes, *cap of them) to hold `need`: a new
 * block and a copy (gcc's analyzer misreads realloc of a NULL start). */
static int grow(void **p, size_t *cap, size_t need, size_t size, size_t used) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = malloc(c * size);
    if (!q) return 0;
    if (used) memcpy(q, *p, used * size);
    free(*p);
    *p = q;
    *cap = c;
    return 1;
}

static int names_push(ct_namelist *l, const char *s) {
    size_t k = strlen(s) + 1;
    void *b = l->buf, *o = l->off;
    int ok = grow(&b, &l->cap, l->len + k, 1, l->len);
    l->buf = b;
    ok = ok && grow(&o, &l->ncap, l->n + 1, sizeof(size_t), l->n);
    l->off = o;
    if (!ok || !l->buf || !l->off) return 0;
    memcpy(l->buf + l->len, s, k);
    l->off[l->n++] = l->len;
    l->len += k;
    return 1;
}

static const char *names_at(const ct_namelist *l, size_t i) { return l->buf + l->off[i]; }

static void names_free(ct_namelist *l) {
    free(l->buf);
    free(l->off);
    memset(l, 0, sizeof *l);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Sorts the names by bytes (Python's sorted); 0 when out of memory. */
static int names_sort(ct_namelist *l) {
    if (l->n < 2) return 1;
    const char **v = malloc(l->n * sizeof *v);
    if (!v) return 0;
    for (size_t i = 0; i < l->n; i++) v[i] = l->buf + l->off[i];
    qsort(v, l->n, sizeof *v, cmp_str);
    for (size_t i = 0; i < l->n; i++) l->off[i] = (size_t)(v[i] - l->buf);
    free(v);
    return 1;
}

static int is_image_name(const char *name) {
    size_t n = strlen(name);
    static const char *const ext[] = {".jpg", ".jpeg", ".png"};
    for (int i = 0; i < 3; i++) {
        size_t e = strlen(ext[i]);
        if (n > e && !strcasecmp(name + n - e, ext[i])) return 1;
    }
    return 0;
}

/* Sorted names in `path` that are folders (dirs 1) or image files (dirs 0). */
static ct_status list_dir(ct_context *ctx, const char *path, int dirs, ct_namelist *out) {
    DIR *d = opendir(path);
    if (!d)
        return ct_set_error(ctx, CT_E_IO, "cannot open the image folder %s (%s); check data_dir", path,
                            strerror(errno));
    struct dirent *e;
    char full[4096];
    ct_status s = CT_OK;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue; /* ".", "..", and hidden names (torchvision would take those) */
        snprintf(full, sizeof full, "%s/%s", path, e->d_name);
        struct stat st;
        if (stat(full, &st) != 0) continue;
        int isdir = S_ISDIR(st.st_mode);
        if (dirs ? !isdir : (isdir || !is_image_name(e->d_name))) continue;
        if (!names_push(out, e->d_name)) {
            s = ct_set_error(ctx, CT_E_OOM, "out of memory listing %s", path);
            break;
        }
    }
    closedir(d);
    if (s == CT_OK && !names_sort(out)) s = ct_set_error(ctx, CT_E_OOM, "out of memory listing %s", path);
    return s;
}

ct_status ct_image_set_open_folder(ct_context *ctx, const char *dir, const ct_image_opts *o, ct_image_set **out) {
    if (out) *out = NULL;
    if (!ctx || !dir || !out)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_image_set_open_folder: ctx, dir and out must not be NULL");
    ct_image_set *set;
    CT_TRY(ct_image_set_new_(ctx, o, &set));
    ct_namelist *classes = &set->class_names, *files = &set->paths; /* freed with the set */
    size_t *end = NULL; /* end[k]: files of classes 0..k */
    char path[4096];
    ct_status s = list_dir(ctx, dir, 1, classes);
    if (s == CT_OK && classes->n == 0)
        s = ct_set_error(ctx, CT_E_IO, "the image folder %s has no class subfolders; it must hold one folder per "
                         "class with the JPEG/PNG images inside", dir);
    if (s == CT_OK && classes->n > (1u << 20)) s = ct_set_error(ctx, CT_E_CONFIG, "%s has over 2^20 classes", dir);
    if (s == CT_OK && !(end = calloc(classes->n, sizeof *end)))
        s = ct_set_error(ctx, CT_E_OOM, "out of memory listing %s", dir);
    for (size_t k = 0; s == CT_OK && k < classes->n; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, names_at(classes, k));
        ct_namelist names = {0};
        s = list_dir(ctx, path, 0, &names);
        if (s == CT_OK && names.n == 0)
            s = ct_set_error(ctx, CT_E_IO, "class folder %s holds no .jpg/.jpeg/.png file; add images or remove "
                             "the folder", path);
        for (size_t i = 0; s == CT_OK && i < names.n; i++) {
            snprintf(path, sizeof path, "%s/%s", names_at(classes, k), names_at(&names, i));
            if (!names_push(files, path)) s = ct_set_error(ctx, CT_E_OOM, "out of memory listing %s", dir);
        }
        end[k] = files->n;
        names_free(&names);
    }
    if (s == CT_OK && files->n > ((size_t)1 << 31)) s = ct_set_error(ctx, CT_E_CONFIG, "%s has over 2^31 images", dir);
    if (s == CT_OK) s = ct_image_set_alloc_samples_(set, (int64_t)files->n);
    if (s == CT_OK && !(set->dir = strdup(dir))) s = ct_set_error(ctx, CT_E_OOM, "out of memory");
    if (s == CT_OK) {
        set->classes = (int)classes->n;
        for (size_t i = 0, k = 0; i < files->n; i++) {
            while (i >= end[k]) k++;
            set->labels[i] = (int32_t)k;
        }
    }
    free(end);
    if (s != CT_OK) {
        ct_image_set_free(set);
        return s;
    }
    *out = set;
    return CT_OK;
}

/* ---- one sample -------------------------------------------------------------------- */

/* The whole file into a new buffer (free) or an error in err. */
static ct_status read_file(const char *path, unsigned char **buf, size_t *len, char *err, size_t errlen) {
    *buf = NULL, *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open image %s (%s); check the file and its permissions", path, strerror(errno));
        return CT_E_IO;
    }
    ct_status s = CT_OK;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
        snprintf(err, errlen, "cannot read image %s (not a regular file?)", path);
        s = CT_E_IO;
    } else if ((int64_t)n > MAX_FILE_BYTES) {
        snprintf(err, errlen, "image %s has %ld bytes, more than 1 GiB; it is not an image this reader takes", path, n);
        s = CT_E_CORRUPT;
    } else if (!(*buf = malloc(n ? (size_t)n : 1))) {
        snprintf(err, errlen, "out of memory reading %s (%ld bytes)", path, n);
        s = CT_E_OOM;
    } else if (n && fread(*buf, 1, (size_t)n, f) != (size_t)n) {
        snprintf(err, errlen, "cannot read image %s (%s)", path, strerror(errno));
        s = CT_E_IO;
    }
    fclose(f);
    if (s != CT_OK) {
        free(*buf);
        *buf = NULL;
    } else {
        *len = (size_t)n;
    }
    return s;
}

/* Decodes sample i (no transform) into im. */
static ct_status load_sample(ct_image_set *set, int64_t i, ct_image *im, char *err, size_t errlen) {
    const int C = set->o.channels;
    if (set->rec) { /* CIFAR: planes (C, 32, 32) -> HWC */
        const uint8_t *r = set->rec + (size_t)i * CT_CIFAR_PIXELS;
        if (im->cap < (size_t)CT_CIFAR_PIXELS) {
            uint8_t *p = realloc(im->px, CT_CIFAR_PIXELS);
            if (!p) {
                snprintf(err, errlen, "out of memory for a CIFAR image");
                return CT_E_OOM;
            }
            im->px = p, im->cap = CT_CIFAR_PIXELS;
        }
        im->h = im->w = 32, im->c = C;
        for (int p = 0; p < 1024; p++) {
            unsigned R = r[p], G = r[1024 + p], B = r[2048 + p];
            if (C == 3) im->px[3 * p] = (uint8_t)R, im->px[3 * p + 1] = (uint8_t)G, im->px[3 * p + 2] = (uint8_t)B;
            else im->px[p] = (uint8_t)((19595u * R + 38470u * G + 7471u * B + 0x8000u) >> 16);
        }
        return CT_OK;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", set->dir, names_at(&set->paths, (size_t)i));
    unsigned char *buf;
    size_t len;
    ct_status s = read_file(path, &buf, &len, err, errlen);
    if (s != CT_OK) return s;
    s = ct_image_decode(buf, len, C, set->o.max_pixels, path, im, err, errlen);
    free(buf);
    return s;
}

/* CPU time of the calling thread: the decode cost, not inflated when the
 * machine is oversubscribed and the worker waits for a core. */
static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

ct_status ct_image_set_get(ct_image_set *set, int64_t index, uint64_t seed, uint64_t epoch, ct_image *scratch,
                           float *dst, int32_t *label, char *err, size_t errlen) {
    if (!set || !scratch || !dst || !label || index < 0 || index >= set->n) {
        snprintf(err, errlen, "ct_image_set_get: sample %lld is not in the set, or an argument is NULL",
                 (long long)index);
        return CT_E_INVALID_ARG;
    }
    int64_t t0 = now_ns(), i = index;
    ct_status s = CT_E_CORRUPT;
    char first[512] = "";
    for (int64_t tries = 0; tries < set->n; tries++, i = (i + 1) % set->n) {
        if (set->o.bad == CT_BAD_IMAGES_SKIP && atomic_load_explicit(&set->bad[i], memory_order_relaxed)) continue;
        s = load_sample(set, i, scratch, err, errlen);
        if (s == CT_OK || s != CT_E_CORRUPT || set->o.bad != CT_BAD_IMAGES_SKIP) break;
        if (!first[0]) snprintf(first, sizeof first, "%s", err);
        if (!atomic_exchange(&set->bad[i], 1)) atomic_fetch_add(&set->n_bad, 1);
    }
    if (s == CT_E_CORRUPT && set->o.bad == CT_BAD_IMAGES_SKIP)
        snprintf(err, errlen, "every image of the set is bad (bad_images skip); the first: %s", first);
    if (s != CT_OK) return s;
    ct_crop crop;
    ct_image_transform_params(&set->o, scratch->h, scratch->w, seed, epoch, index, &crop);
    ct_image_transform(&set->o, scratch, &crop, dst);
    *label = set->labels[i];
    atomic_fetch_add(&set->n_images, 1);
    atomic_fetch_add(&set->ns, now_ns() - t0);
    return CT_OK;
}
