/* src/data/loader.c - batches of a ct_dataset in a seeded order.
 *
 * The permutation of epoch e is a Fisher-Yates shuffle of the identity
 * driven by the counter-based Philox RNG keyed by (seed, stream = e), so it
 * depends only on (seed, epoch): never on the previous epochs, call order or
 * thread count. Everything is allocated in ct_loader_create; ct_loader_next
 * only copies into the caller's buffers. The loader keeps a pointer to the
 * dataset, which must outlive it. */
#include <string.h>

#include "core/internal.h"
#include "ctrain/data.h"
#include "data/loader_internal.h"

/* Domain tag in the high bits of the Philox stream so the loader's random
 * numbers never coincide with other users of the same seed. */
#define LOADER_STREAM_TAG 0x4C4F414400000000ull /* "LOAD" */

struct ct_loader {
    ct_context *ctx;
    const ct_dataset *ds;
    int64_t n, batch, sample; /* sample: floats per sample (C*H*W) */
    int shuffle, drop_last;
    uint64_t seed, epoch;
    int64_t pos;
    int64_t shard_off, shard_rows; /* rows 0: whole batches */
    int64_t *perm;
};

ct_status ct_loader_create(ct_context *ctx, const ct_dataset *ds, int64_t batch, int shuffle, int drop_last,
                           uint64_t seed, ct_loader **out) {
    if (out) *out = NULL;
    if (!ctx || !ds || !out)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_loader_create: ctx, ds and out must not be NULL");
    if (ds->n <= 0 || ((!ds->images || !ds->labels) && !ds->set) || ds->c <= 0 || ds->h <= 0 || ds->w <= 0)
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "ct_loader_create: the dataset is empty or not loaded (n %lld); load it with "
                            "ct_dataset_load_idx first",
                            (long long)ds->n);
    if (batch <= 0)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "batch size %lld must be positive", (long long)batch);
    if (drop_last && batch > ds->n)
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "batch size %lld exceeds the %lld samples of the dataset with drop_last: no batch "
                            "would be produced; lower the batch size",
                            (long long)batch, (long long)ds->n);
    void *mem = NULL, *perm = NULL;
    CT_TRY(ct_alloc(ctx, sizeof(ct_loader), &mem));
    ct_status s = ct_alloc(ctx, (size_t)ds->n * sizeof(int64_t), &perm);
    if (s != CT_OK) {
        ct_free(ctx, mem);
        return s;
    }
    ct_loader *l = mem;
    memset(l, 0, sizeof *l);
    l->ctx = ctx;
    l->ds = ds;
    l->n = ds->n;
    l->batch = batch;
    l->sample = ds->c * ds->h * ds->w;
    l->shuffle = shuffle != 0;
    l->drop_last = drop_last != 0;
    l->seed = seed;
    l->perm = perm;
    ct_loader_start_epoch(l, 0);
    *out = l;
    return CT_OK;
}

void ct_loader_free(ct_loader *l) {
    if (!l) return;
    ct_context *ctx = l->ctx;
    ct_free(ctx, l->perm);
    ct_free(ctx, l);
}

int64_t ct_loader_num_batches(const ct_loader *l) {
    if (!l) return 0;
    return l->drop_last ? l->n / l->batch : (l->n + l->batch - 1) / l->batch;
}

void ct_loader_start_epoch(ct_loader *l, uint64_t epoch) {
    if (!l) return;
    l->epoch = epoch;
    l->pos = 0;
    int64_t n = l->n, *p = l->perm;
    for (int64_t i = 0; i < n; i++) p[i] = i;
    if (!l->shuffle) return;
    uint64_t stream = LOADER_STREAM_TAG ^ epoch;
    uint32_t r[4];
    /* Fisher-Yates from the top: step k (k = 0..n-2) swaps slot i = n-1-k
     * with a slot j uniform in [0, i], from the 32-bit word k of the stream
     * (n <= 2^31, so (r * (i+1)) >> 32 fits and is < i+1). */
    for (int64_t k = 0; k < n - 1; k++) {
        if ((k & 3) == 0) ct_philox(l->seed, stream, (uint64_t)k >> 2, r);
        int64_t i = n - 1 - k;
        int64_t j = (int64_t)(((uint64_t)r[k & 3] * (uint64_t)(i + 1)) >> 32);
        int64_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
}

ct_status ct_loader_next(ct_loader *l, float *images, int32_t *labels, int64_t *got) {
    if (got) *got = 0;
    if (!l) return CT_E_INVALID_ARG;
    if (!images || !labels || !got)
        return ct_set_error(l->ctx, CT_E_INVALID_ARG, "ct_loader_next: images, labels and got must not be NULL");
    if (l->ds->set)
        return ct_set_error(l->ctx, CT_E_UNSUPPORTED,
                            "ct_loader_next: the dataset is an image set decoded on demand; read it through "
                            "ct_prefetcher (threads 0 for the calling thread)");
    int64_t left = l->n - l->pos;
    if (left <= 0 || (l->drop_last && left < l->batch)) return CT_OK; /* end of epoch */
    int64_t b = CT_MIN(l->batch, left);
    /* this shard's rows [lo, hi) of the batch (all of it without a shard) */
    int64_t lo = l->shard_rows ? CT_MIN(l->shard_off, b) : 0, hi = l->shard_rows ? CT_MIN(lo + l->shard_rows, b) : b;
    const ct_dataset *ds = l->ds;
    const int64_t *p = l->perm + l->pos + lo;
    size_t sz = (size_t)l->sample;
    if (!l->shuffle) {
        memcpy(images, ds->images + (size_t)(l->pos + lo) * sz, (size_t)(hi - lo) * sz * sizeof(float));
        memcpy(labels, ds->labels + l->pos + lo, (size_t)(hi - lo) * sizeof(int32_t));
    } else {
        for (int64_t i = 0; i < hi - lo; i++) {
            memcpy(images + (size_t)i * sz, ds->images + (size_t)p[i] * sz, sz * sizeof(float));
            labels[i] = ds->labels[p[i]];
        }
    }
    l->pos += b;
    *got = hi - lo;
    return CT_OK;
}

const int64_t *ct_loader_perm_(const ct_loader *l) { return l->perm; }

ct_status ct_loader_set_shard(ct_loader *l, int64_t offset, int64_t rows) {
    if (!l) return CT_E_INVALID_ARG;
    if (offset < 0 || rows < 0 || offset + rows > l->batch || (rows == 0 && offset != 0))
        return ct_set_error(l->ctx, CT_E_INVALID_ARG,
                            "ct_loader_set_shard: rows [%lld, %lld) are not inside a batch of %lld (rows 0 with "
                            "offset 0: whole batches)",
                            (long long)offset, (long long)(offset + rows), (long long)l->batch);
    l->shard_off = offset;
    l->shard_rows = rows;
    return CT_OK;
}

ct_status ct_loader_skip(ct_loader *l, int64_t batches) {
    if (!l) return CT_E_INVALID_ARG;
    if (batches < 0)
        return ct_set_error(l->ctx, CT_E_INVALID_ARG, "ct_loader_skip: batches %lld must be >= 0", (long long)batches);
    int64_t left = (l->n - l->pos) / l->batch; /* full batches left; the partial one counts below */
    if (batches > left) l->pos = l->n;
    else l->pos += batches * l->batch;
    return CT_OK;
}
