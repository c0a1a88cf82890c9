/* src/data/image_internal.h - the ct_image_set shared by image_folder.c
 * (the set, files, sample access) and cifar.c (in-memory records). */
#ifndef CT_DATA_IMAGE_INTERNAL_H
#define CT_DATA_IMAGE_INTERNAL_H
#include <stdatomic.h>

#include "ctrain/image.h"

#define CT_CIFAR_PIXELS 3072 /* 3 planes of 32x32 */

/* Names packed in one buffer: name i starts at buf + off[i] (malloc'd). */
typedef struct ct_namelist {
    char *buf;
    size_t len, cap;
    size_t *off;
    size_t n, ncap;
} ct_namelist;

struct ct_image_set {
    ct_context *ctx;
    ct_image_opts o;
    int64_t n;
    int classes;
    ct_namelist class_names; /* folder: the class folder names, sorted                  */
    int32_t *labels;        /* n (ct_alloc)                                            */
    /* folder: sample i is the file dir/path[i] */
    char *dir;
    ct_namelist paths;      /* n, relative to dir ("class/file.png")                   */
    /* cifar: sample i is the record rec[i * CT_CIFAR_PIXELS] (C, 32, 32) */
    uint8_t *rec;           /* n * CT_CIFAR_PIXELS (ct_alloc)                          */
    atomic_uchar *bad;      /* n flags: the file was found bad (ct_alloc)              */
    atomic_llong n_bad, n_images, ns;
};

/* A zeroed set with o's options checked (CT_E_INVALID_ARG naming the bad
 * field); n_alloc: also allocates labels and bad flags for n samples. */
ct_status ct_image_set_new_(ct_context *ctx, const ct_image_opts *o, ct_image_set **out);
ct_status ct_image_set_alloc_samples_(ct_image_set *set, int64_t n);
#endif
