/* ctrain/data.h - datasets (IDX files for MNIST / Fashion-MNIST, plain or
 * gzipped), normalization, seeded shuffling and batching. */
#ifndef CTRAIN_DATA_H
#define CTRAIN_DATA_H

#include <stdint.h>
#include "context.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An IDX array as stored: U8 data with up to 4 dims. */
typedef struct ct_idx {
    int ndim;
    int64_t shape[4];
    uint8_t *data;   /* owned, freed by ct_idx_free */
    int64_t numel;
} ct_idx;

/* Reads a plain or gzipped IDX file (unsigned-byte type only). Errors:
 * CT_E_IO (missing/unreadable), CT_E_CORRUPT (bad magic, bad dims,
 * truncated). */
ct_status ct_idx_load(ct_context *ctx, const char *path, ct_idx *out);
void ct_idx_free(ct_context *ctx, ct_idx *idx);

/* An in-memory image classification dataset: images as normalized FP32
 * (N, C, H, W), labels I32 (N). */
typedef struct ct_dataset {
    int64_t n, c, h, w;
    int n_classes;
    float *images;   /* N*C*H*W */
    int32_t *labels; /* N */
    struct ct_image_set *set; /* non-NULL: images and labels are NULL and samples are
                                 decoded on demand by the prefetcher (ctrain/image.h) */
} ct_dataset;

/* Loads `<dir>/<prefix>-images-idx3-ubyte[.gz]` and labels for split
 * "train" or "t10k"; normalizes (x/255 - mean)/std. */
ct_status ct_dataset_load_idx(ct_context *ctx, const char *dir, const char *split,
                              float mean, float std, ct_dataset *out);
void ct_dataset_free(ct_context *ctx, ct_dataset *ds);

/* Batches in a seeded order. The permutation for an epoch depends only on
 * (seed, epoch). The last partial batch is dropped when drop_last. */
typedef struct ct_loader ct_loader;
ct_status ct_loader_create(ct_context *ctx, const ct_dataset *ds, int64_t batch, int shuffle,
                           int drop_last, uint64_t seed, ct_loader **out);
void ct_loader_free(ct_loader *l);
int64_t ct_loader_num_batches(const ct_loader *l);
/* Starts epoch `epoch` (reshuffles). */
void ct_loader_start_epoch(ct_loader *l, uint64_t epoch);
/* Copies the next batch into images (B*C*H*W floats) and labels (B ints).
 * *got is the number of samples copied (0 at end of epoch). */
ct_status ct_loader_next(ct_loader *l, float *images, int32_t *labels, int64_t *got);

/* Skips the next `batches` batches of the epoch in progress without
 * copying them (resuming mid-epoch: start_epoch(e) then skip(k) continues
 * exactly where batch k of epoch e would start). Allocates nothing. */
ct_status ct_loader_skip(ct_loader *l, int64_t batches);

/* Data parallel: from now on ct_loader_next copies only the rows
 * [offset, offset + rows) of each batch (clipped to a short last batch) to
 * the start of the caller's buffers, and *got counts them; the order, the
 * batches, num_batches and skip stay those of the whole batch, so rank k of
 * n (offset k * batch / n, rows batch / n) reads its slice of the very
 * batches one process would. rows 0: the whole batch again. */
ct_status ct_loader_set_shard(ct_loader *l, int64_t offset, int64_t rows);

/* ---- prefetcher (src/data/prefetch.c) -------------------------------------
 * Background threads (POSIX) fill a ring of `buffer_size` batches while the
 * caller trains, so loading, normalizing and augmenting never stall compute.
 * Batch k of epoch e is the loader's batch k (same permutation for the same
 * (seed, shuffle, drop_last)), augmented with random choices drawn from the
 * counter RNG keyed by (seed, epoch, position in the epoch): the content of
 * every batch depends only on (seed, epoch, k), never on the number of
 * threads or on timing. With augment off the batches equal ct_loader's bit
 * for bit. Everything is allocated in ct_prefetcher_create; next copies
 * into the caller's buffers and allocates nothing. A dataset backed by an
 * image set (ds->set, ctrain/image.h) is decoded and transformed in the
 * workers (augment must be off: the set has its own transforms, keyed by
 * (seed, epoch, sample index)); a sample that fails makes ct_prefetcher_next
 * return its status (CT_E_CORRUPT / CT_E_IO naming the file). */
typedef struct ct_prefetch_opts {
    int buffer_size;   /* batches in the ring (default 4, >= 1)                  */
    int threads;       /* worker threads (default 1); 0: synchronous, next
                          decodes the batch in the calling thread              */
    int augment;       /* random crop + horizontal flip (default off)          */
    int crop_pad;      /* crop padding in pixels when augmenting (default 2)    */
    int flip;          /* horizontal flip with p = 0.5 when augmenting (default 1) */
    float pad_value;   /* value of the padding (normalized 0 pixel: -mean/std) */
    int64_t shard_offset, shard_rows; /* rows 0 (default): whole batches; else only the rows
                          [offset, offset + rows) of each batch, as ct_loader_set_shard;
                          the augmentation stays keyed by the row's place in the epoch */
} ct_prefetch_opts;
void ct_prefetch_opts_default(ct_prefetch_opts *o);

typedef struct ct_prefetcher ct_prefetcher;
/* o NULL: defaults. Starts epoch 0. The dataset must outlive the prefetcher. */
ct_status ct_prefetcher_create(ct_context *ctx, const ct_dataset *ds, int64_t batch, int shuffle, int drop_last,
                               uint64_t seed, const ct_prefetch_opts *o, ct_prefetcher **out);
/* Stops the workers (also mid-epoch) and frees everything. */
void ct_prefetcher_free(ct_prefetcher *pf);
int64_t ct_prefetcher_num_batches(const ct_prefetcher *pf);
/* Starts epoch `epoch`: drops what was prefetched and refills from batch 0. */
ct_status ct_prefetcher_start_epoch(ct_prefetcher *pf, uint64_t epoch);
/* Skips the next `batches` batches of the epoch (as ct_loader_skip). */
ct_status ct_prefetcher_skip(ct_prefetcher *pf, int64_t batches);
/* Copies the next batch into images (B*C*H*W) and labels (B); blocks only
 * while that batch is not ready. *got: samples copied (0 at end of epoch). */
ct_status ct_prefetcher_next(ct_prefetcher *pf, float *images, int32_t *labels, int64_t *got);

#ifdef __cplusplus
}
#endif
#endif
