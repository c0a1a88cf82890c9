/* ctrain/image.h - image datasets beyond IDX: an ImageFolder of JPEG/PNG
 * files (one subfolder per class, class index = the sorted folder names, as
 * torchvision.datasets.ImageFolder) and the CIFAR-10/100 binary format,
 * decoded on demand and transformed into normalized FP32 (C, S, S):
 *
 *   train: RandomResizedCrop(S, scale, ratio) + RandomHorizontalFlip +
 *          Normalize(mean, std), torchvision's algorithm (10 tries, then the
 *          center fallback; bilinear resize without antialiasing, as
 *          torchvision's functional ops on tensors, antialias=False);
 *   eval:  Resize(resize: the shorter side) + CenterCrop(S) + Normalize.
 *
 * The random choices of sample `index` in epoch `epoch` come from the
 * counter-based Philox RNG keyed by (seed, epoch, index) only, so a batch
 * does not depend on thread count or timing. Bad files (not a JPEG/PNG, 0
 * bytes, truncated, undecodable) fail with CT_E_CORRUPT naming the file, or
 * with CT_BAD_IMAGES_SKIP are replaced by the next good sample in dataset
 * order and counted. Grayscale, CMYK, palette, 16-bit and alpha images are
 * converted to the requested channels (RGB: gray replicated, alpha dropped;
 * gray: PIL's L = (19595 R + 38470 G + 7471 B + 2^15) >> 16).
 *
 * Usage:
 *   ct_image_opts o; ct_image_opts_default(&o); o.size = 32;
 *   ct_image_set *set; ct_dataset ds;
 *   ct_image_set_open_folder(ctx, "data/fmnist-png/train", &o, &set);
 *   ct_dataset_from_image_set(set, &ds);          // images NULL, ds.set = set
 *   ct_prefetcher_create(ctx, &ds, 64, 1, 1, seed, NULL, &pf);  // decodes in its threads
 */
#ifndef CTRAIN_IMAGE_H
#define CTRAIN_IMAGE_H

#include <stddef.h>
#include <stdint.h>
#include "context.h"
#include "data.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_bad_images { CT_BAD_IMAGES_ERROR = 0, CT_BAD_IMAGES_SKIP } ct_bad_images;

typedef struct ct_image_opts {
    int size;            /* output height = width S (default 32)                      */
    int channels;        /* 1 or 3 (default 3)                                        */
    int train;           /* 1: RandomResizedCrop + flip; 0: Resize + CenterCrop (default 0) */
    int resize;          /* eval: shorter side before the center crop (0: size)       */
    float scale[2];      /* RandomResizedCrop area fraction (default 0.08, 1)         */
    float ratio[2];      /* RandomResizedCrop aspect ratio (default 3/4, 4/3)         */
    int flip;            /* train: horizontal flip with p = 0.5 (default 1)           */
    float mean[3], std[3]; /* per channel, on x/255 (default 0.5, 0.5)              */
    ct_bad_images bad;   /* default CT_BAD_IMAGES_ERROR                               */
    int64_t max_pixels;  /* larger images are bad (default 1 << 26)                    */
    int pad;             /* train: > 0 takes torchvision's RandomCrop(size, padding=pad)
                            instead of RandomResizedCrop: an S x S window of the image
                            padded with black (pixel 0) on every side, no resampling   */
} ct_image_opts;
void ct_image_opts_default(ct_image_opts *o);

/* ---- decoding (src/data/image_decode.c) --------------------------------------
 * A decoded image: rows of w pixels of c interleaved uint8 channels (HWC).
 * The buffer grows as needed and is reused; free it with ct_image_free. */
typedef struct ct_image {
    uint8_t *px;
    size_t cap;
    int h, w, c;
} ct_image;
/* Decodes a JPEG or PNG held in memory into `channels` (1 or 3) channels.
 * Thread-safe (needs no context): errors are CT_E_CORRUPT (not an image,
 * truncated, undecodable, larger than max_pixels) or CT_E_OOM, with a
 * message in err (which names `name`). */
ct_status ct_image_decode(const void *data, size_t len, int channels, int64_t max_pixels, const char *name,
                          ct_image *out, char *err, size_t errlen);
void ct_image_free(ct_image *im);

/* ---- transforms (src/data/augment.c) -------------------------------------------
 * A crop box in the source image and whether the output is mirrored. */
typedef struct ct_crop {
    int top, left, h, w;
    int flip;
} ct_crop;
/* torchvision's RandomResizedCrop.get_params for an H x W image with the
 * uniform numbers u[0..40) in [0, 1): try t uses u[4t..4t+4) (area, log
 * ratio, top, left); after 10 failed tries the center fallback. */
void ct_rrc_params(int H, int W, const float scale[2], const float ratio[2], const double u[40], ct_crop *out);
/* The crop box of sample `index` in `epoch` (RandomResizedCrop + flip when
 * o->train, RandomCrop + flip when o->train and o->pad > 0: the box is S x S
 * and may start up to pad pixels outside the image, else the eval Resize + CenterCrop as a box in the source plus
 * the virtual resized size) from Philox(seed, epoch, index). */
void ct_image_transform_params(const ct_image_opts *o, int H, int W, uint64_t seed, uint64_t epoch,
                               int64_t index, ct_crop *crop);
/* Resamples box `crop` of im (bilinear, align_corners=False, no antialias;
 * with o->train and o->pad > 0 the S x S box is copied, black outside im)
 * to S x S (S = o->size), mirrors it when crop->flip, scales by 1/255 and
 * normalizes with o->mean / o->std into dst (o->channels, S, S). For eval
 * (o->train 0) the box is the whole image resized to the virtual size and
 * cropped at its center, as torchvision's Resize + CenterCrop. im->c must
 * equal o->channels. */
void ct_image_transform(const ct_image_opts *o, const ct_image *im, const ct_crop *crop, float *dst);

/* ---- datasets (src/data/image_folder.c, src/data/cifar.c) ----------------------- */
typedef struct ct_image_set ct_image_set;
/* `dir`/<class>/<file>.{jpg,jpeg,png} (case-insensitive; other files are
 * ignored, as torchvision does), classes = sorted subfolder names. Only the
 * file names are read here; images are decoded by ct_image_set_get. */
ct_status ct_image_set_open_folder(ct_context *ctx, const char *dir, const ct_image_opts *o, ct_image_set **out);
/* CIFAR binary records: cifar10 (classes 10): `dir`/data_batch_{1..5}.bin
 * for split "train", test_batch.bin for "test"; cifar100 (classes 100):
 * train.bin / test.bin with a coarse and a fine label byte (the fine label
 * is used). A record is its label byte(s) + 3072 bytes (R, G, B planes of
 * 32x32). Loaded into memory. */
ct_status ct_image_set_open_cifar(ct_context *ctx, const char *dir, const char *split, int classes,
                                  const ct_image_opts *o, ct_image_set **out);
/* Same as open_cifar on the bytes of one file (classes 10 or 100). */
ct_status ct_image_set_cifar_from_memory(ct_context *ctx, const void *data, size_t len, int classes,
                                         const ct_image_opts *o, ct_image_set **out);
void ct_image_set_free(ct_image_set *set);
int64_t ct_image_set_count(const ct_image_set *set);
int ct_image_set_classes(const ct_image_set *set);
const char *ct_image_set_class_name(const ct_image_set *set, int k); /* folder name; NULL for CIFAR */
const ct_image_opts *ct_image_set_opts(const ct_image_set *set);
/* Sample `index`: decodes (scratch: a per-thread ct_image, reused), then
 * transforms with the random choices of (seed, epoch, index) into dst (C, S,
 * S) and its label. Thread-safe for distinct scratch buffers; needs no
 * context: errors go to err. */
ct_status ct_image_set_get(ct_image_set *set, int64_t index, uint64_t seed, uint64_t epoch, ct_image *scratch,
                           float *dst, int32_t *label, char *err, size_t errlen);
/* Statistics since open (all threads): bad files seen (each counted once),
 * samples produced and the CPU seconds the producing threads spent reading,
 * decoding and transforming them (images / seconds: the rate of one thread
 * with a core to itself). */
typedef struct ct_image_stats {
    int64_t bad, images;
    double seconds;
} ct_image_stats;
void ct_image_set_stats(const ct_image_set *set, ct_image_stats *out);
/* A dataset view of the set for ct_loader / ct_prefetcher: n, c = channels,
 * h = w = size, n_classes; images and labels NULL, set = set (not owned: the
 * set must outlive it; ct_dataset_free leaves the set alone). */
ct_status ct_dataset_from_image_set(ct_image_set *set, ct_dataset *out);

#ifdef __cplusplus
}
#endif
#endif
