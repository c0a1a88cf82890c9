/* src/data/prefetch.c - background batch loading into a ring of slots.
 *
 * Batch k of the epoch goes into slot k % R (R = buffer_size). A worker may
 * claim batch k only while k < next_out + R, i.e. the consumer has taken
 * batch k - R out of that slot, so each slot has one writer at a time and
 * workers fill slots without holding the lock. The consumer waits for slot
 * next_out % R to hold batch next_out, copies it out and frees the slot.
 * start_epoch / skip bump a generation counter and wait until no worker is
 * filling (in_flight == 0) before they touch the permutation or the ring, so
 * a batch of an old epoch is never handed out. The content of batch k is a
 * pure function of (seed, epoch, k): the loader's permutation and the
 * augmentation's counter-based random numbers, keyed by the sample's
 * position in the epoch. A dataset backed by an image set (ctrain/image.h)
 * is decoded and transformed here, in the workers, by ct_image_set_get with
 * its own random choices keyed by (seed, epoch, sample index); a failure is
 * kept in the slot and returned by ct_prefetcher_next with its message. */
#include <pthread.h>
#include <string.h>

#include "core/internal.h"
#include "ctrain/data.h"
#include "ctrain/image.h"
#include "data/loader_internal.h"

/* Domain tag of the augmentation's Philox stream ("AUGM"). */
#define AUG_STREAM_TAG 0x4155474D00000000ull

typedef struct pf_slot {
    float *images;
    int32_t *labels;
    int64_t batch; /* batch index held, -1: none */
    int64_t got;
    ct_status st;  /* an image set's failure while filling, message in err */
    char err[512];
} pf_slot;

struct ct_prefetcher {
    ct_context *ctx;
    const ct_dataset *ds;
    ct_loader *ld; /* the permutation */
    ct_prefetch_opts o;
    int64_t batch, sample, nb;
    uint64_t seed, epoch;
    pf_slot *slots;
    pthread_t *tids;
    int n_started, sync_ok; /* sync_ok: mutex/conds initialized */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_ready, cv_idle;
    int quit;
    uint64_t gen;
    int64_t next_claim, next_out;
    int in_flight;
    ct_image sync_scratch; /* threads 0: the decode buffer of the calling thread */
};

void ct_prefetch_opts_default(ct_prefetch_opts *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->buffer_size = 4;
    o->threads = 1;
    o->crop_pad = 2;
    o->flip = 1;
}

/* Fills batch k of the current epoch into images/labels; returns the count,
 * or -1 with *st and err set when an image set's sample fails. */
static int64_t fill_batch(const ct_prefetcher *pf, int64_t k, float *images, int32_t *labels, ct_image *scratch,
                          ct_status *st, char *err, size_t errlen) {
    const ct_dataset *ds = pf->ds;
    int64_t start = k * pf->batch, b = CT_MIN(pf->batch, ds->n - start);
    if (pf->o.shard_rows) { /* this shard's rows of the batch; positions stay the epoch's */
        int64_t lo = CT_MIN(pf->o.shard_offset, b);
        b = CT_MIN(lo + pf->o.shard_rows, b) - lo;
        start += lo;
    }
    const int64_t *p = ct_loader_perm_(pf->ld) + start;
    size_t sz = (size_t)pf->sample;
    const int64_t C = ds->c, H = ds->h, W = ds->w;
    const int pad = pf->o.augment ? pf->o.crop_pad : 0, flip = pf->o.augment && pf->o.flip;
    uint64_t stream = AUG_STREAM_TAG ^ pf->epoch;
    *st = CT_OK;
    if (ds->set) {
        for (int64_t i = 0; i < b; i++)
            if ((*st = ct_image_set_get(ds->set, p[i], pf->seed, pf->epoch, scratch, images + (size_t)i * sz,
                                        &labels[i], err, errlen)) != CT_OK)
                return -1;
        return b;
    }
    for (int64_t i = 0; i < b; i++) {
        const float *src = ds->images + (size_t)p[i] * sz;
        float *dst = images + (size_t)i * sz;
        labels[i] = ds->labels[p[i]];
        if (!pf->o.augment) {
            memcpy(dst, src, sz * sizeof(float));
            continue;
        }
        uint64_t pos = (uint64_t)(start + i) * 4u; /* 3 numbers per sample, counter-based */
        int span = 2 * pad + 1;
        int dx = (int)(ct_rand_uniform(pf->seed, stream, pos) * (float)span) - pad;
        int dy = (int)(ct_rand_uniform(pf->seed, stream, pos + 1) * (float)span) - pad;
        if (dx > pad) dx = pad;
        if (dy > pad) dy = pad;
        int fl = flip && ct_rand_uniform(pf->seed, stream, pos + 2) < 0.5f;
        for (int64_t c = 0; c < C; c++)
            for (int64_t y = 0; y < H; y++) {
                int64_t sy = y + dy;
                float *drow = dst + (size_t)((c * H + y) * W);
                if (sy < 0 || sy >= H) {
                    for (int64_t x = 0; x < W; x++) drow[x] = pf->o.pad_value;
                    continue;
                }
                const float *srow = src + (size_t)((c * H + sy) * W);
                for (int64_t x = 0; x < W; x++) {
                    int64_t sx = (fl ? W - 1 - x : x) + dx;
                    drow[x] = (sx >= 0 && sx < W) ? srow[sx] : pf->o.pad_value;
                }
            }
    }
    return b;
}

static void *worker(void *arg) {
    ct_prefetcher *pf = arg;
    const int64_t R = pf->o.buffer_size;
    ct_image scratch = {0};
    ct_fp_thread_flush(pf->ctx); /* augmentation arithmetic: subnormals as in the compute threads */
    pthread_mutex_lock(&pf->mu);
    for (;;) {
        while (!pf->quit && !(pf->next_claim < pf->nb && pf->next_claim < pf->next_out + R))
            pthread_cond_wait(&pf->cv_work, &pf->mu);
        if (pf->quit) break;
        int64_t k = pf->next_claim++;
        uint64_t g = pf->gen;
        pf_slot *sl = &pf->slots[k % R];
        pf->in_flight++;
        pthread_mutex_unlock(&pf->mu);
        ct_status st;
        int64_t got = fill_batch(pf, k, sl->images, sl->labels, &scratch, &st, sl->err, sizeof sl->err);
        pthread_mutex_lock(&pf->mu);
        if (g == pf->gen) {
            sl->batch = k;
            sl->got = got;
            sl->st = st;
            pthread_cond_broadcast(&pf->cv_ready);
        }
        if (--pf->in_flight == 0) pthread_cond_broadcast(&pf->cv_idle);
    }
    pthread_mutex_unlock(&pf->mu);
    ct_image_free(&scratch);
    return NULL;
}

/* With the lock held: invalidates what was prefetched and waits until no
 * worker is filling a slot. */
static void quiesce(ct_prefetcher *pf) {
    pf->gen++;
    while (pf->in_flight > 0) pthread_cond_wait(&pf->cv_idle, &pf->mu);
    for (int i = 0; i < pf->o.buffer_size; i++) pf->slots[i].batch = -1;
}

static void stop_workers(ct_prefetcher *pf) {
    if (!pf->sync_ok) return;
    pthread_mutex_lock(&pf->mu);
    pf->quit = 1;
    pthread_cond_broadcast(&pf->cv_work);
    pthread_mutex_unlock(&pf->mu);
    for (int i = 0; i < pf->n_started; i++) pthread_join(pf->tids[i], NULL);
    pf->n_started = 0;
}

void ct_prefetcher_free(ct_prefetcher *pf) {
    if (!pf) return;
    ct_context *ctx = pf->ctx;
    stop_workers(pf);
    if (pf->sync_ok) {
        pthread_cond_destroy(&pf->cv_work);
        pthread_cond_destroy(&pf->cv_ready);
        pthread_cond_destroy(&pf->cv_idle);
        pthread_mutex_destroy(&pf->mu);
    }
    if (pf->slots)
        for (int i = 0; i < pf->o.buffer_size; i++) {
            ct_free(ctx, pf->slots[i].images);
            ct_free(ctx, pf->slots[i].labels);
        }
    ct_free(ctx, pf->slots);
    ct_free(ctx, pf->tids);
    ct_image_free(&pf->sync_scratch);
    ct_loader_free(pf->ld);
    ct_free(ctx, pf);
}

ct_status ct_prefetcher_create(ct_context *ctx, const ct_dataset *ds, int64_t batch, int shuffle, int drop_last,
                               uint64_t seed, const ct_prefetch_opts *o, ct_prefetcher **out) {
    if (out) *out = NULL;
    if (!ctx || !ds || !out)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_prefetcher_create: ctx, ds and out must not be NULL");
    ct_prefetch_opts opts;
    if (o) opts = *o;
    else ct_prefetch_opts_default(&opts);
    if (opts.buffer_size < 1 || opts.buffer_size > 4096)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "prefetch buffer_size %d must be in [1, 4096]", opts.buffer_size);
    if (opts.threads < 0 || opts.threads > 256)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "prefetch threads %d must be in [0, 256] (0: synchronous)",
                            opts.threads);
    if (opts.augment && ds->set)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "prefetch augment (pad-crop + flip) is for in-memory datasets; an "
                            "image set transforms its samples itself (ct_image_opts.train)");
    if (opts.augment && (opts.crop_pad < 0 || opts.crop_pad > 64))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "prefetch crop_pad %d must be in [0, 64]", opts.crop_pad);
    if (opts.shard_offset < 0 || opts.shard_rows < 0 || opts.shard_offset + opts.shard_rows > batch ||
        (opts.shard_rows == 0 && opts.shard_offset != 0))
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "prefetch shard rows [%lld, %lld) are not inside a batch of %lld (shard_rows 0 with "
                            "shard_offset 0: whole batches)",
                            (long long)opts.shard_offset, (long long)(opts.shard_offset + opts.shard_rows),
                            (long long)batch);
    ct_loader *ld = NULL;
    CT_TRY(ct_loader_create(ctx, ds, batch, shuffle, drop_last, seed, &ld));
    void *mem = NULL;
    ct_status s = ct_alloc(ctx, sizeof(ct_prefetcher), &mem);
    if (s != CT_OK) {
        ct_loader_free(ld);
        return s;
    }
    ct_prefetcher *pf = mem;
    memset(pf, 0, sizeof *pf);
    pf->ctx = ctx;
    pf->ds = ds;
    pf->ld = ld;
    pf->o = opts;
    pf->batch = batch;
    pf->sample = ds->c * ds->h * ds->w;
    pf->seed = seed;
    pf->nb = ct_loader_num_batches(ld);
    const int R = opts.buffer_size;
    const int64_t rows = opts.shard_rows ? opts.shard_rows : batch; /* rows a slot holds */
    void *p = NULL;
    if ((s = ct_alloc(ctx, (size_t)R * sizeof(pf_slot), &p)) != CT_OK) goto fail;
    pf->slots = p;
    memset(pf->slots, 0, (size_t)R * sizeof(pf_slot));
    if (opts.threads > 0) /* synchronous mode fills the caller's buffers directly */
        for (int i = 0; i < R; i++) {
            pf->slots[i].batch = -1;
            if ((s = ct_alloc(ctx, (size_t)rows * (size_t)pf->sample * sizeof(float), &p)) != CT_OK) goto fail;
            pf->slots[i].images = p;
            if ((s = ct_alloc(ctx, (size_t)rows * sizeof(int32_t), &p)) != CT_OK) goto fail;
            pf->slots[i].labels = p;
        }
    if ((s = ct_alloc(ctx, (size_t)CT_MAX(opts.threads, 1) * sizeof(pthread_t), &p)) != CT_OK) goto fail;
    pf->tids = p;
    if (pthread_mutex_init(&pf->mu, NULL) != 0) {
        s = ct_set_error(ctx, CT_E_OOM, "ct_prefetcher_create: cannot create a mutex");
        goto fail;
    }
    pthread_cond_init(&pf->cv_work, NULL);
    pthread_cond_init(&pf->cv_ready, NULL);
    pthread_cond_init(&pf->cv_idle, NULL);
    pf->sync_ok = 1;
    pf->epoch = 0; /* ct_loader_create started epoch 0 */
    for (int i = 0; i < opts.threads; i++) {
        if (pthread_create(&pf->tids[i], NULL, worker, pf) != 0) {
            s = ct_set_error(ctx, CT_E_OOM, "ct_prefetcher_create: cannot start prefetch thread %d of %d; use fewer "
                             "prefetch threads", i + 1, opts.threads);
            goto fail;
        }
        pf->n_started++;
    }
    *out = pf;
    return CT_OK;
fail:
    ct_prefetcher_free(pf);
    return s;
}

int64_t ct_prefetcher_num_batches(const ct_prefetcher *pf) { return pf ? pf->nb : 0; }

ct_status ct_prefetcher_start_epoch(ct_prefetcher *pf, uint64_t epoch) {
    if (!pf) return CT_E_INVALID_ARG;
    pthread_mutex_lock(&pf->mu);
    quiesce(pf);
    ct_loader_start_epoch(pf->ld, epoch);
    pf->epoch = epoch;
    pf->next_claim = pf->next_out = 0;
    pthread_cond_broadcast(&pf->cv_work);
    pthread_mutex_unlock(&pf->mu);
    return CT_OK;
}

ct_status ct_prefetcher_skip(ct_prefetcher *pf, int64_t batches) {
    if (!pf) return CT_E_INVALID_ARG;
    if (batches < 0)
        return ct_set_error(pf->ctx, CT_E_INVALID_ARG, "ct_prefetcher_skip: batches %lld must be >= 0",
                            (long long)batches);
    if (batches == 0) return CT_OK;
    pthread_mutex_lock(&pf->mu);
    quiesce(pf);
    pf->next_out = batches > pf->nb - pf->next_out ? pf->nb : pf->next_out + batches;
    pf->next_claim = pf->next_out;
    pthread_cond_broadcast(&pf->cv_work);
    pthread_mutex_unlock(&pf->mu);
    return CT_OK;
}

ct_status ct_prefetcher_next(ct_prefetcher *pf, float *images, int32_t *labels, int64_t *got) {
    if (got) *got = 0;
    if (!pf) return CT_E_INVALID_ARG;
    if (!images || !labels || !got)
        return ct_set_error(pf->ctx, CT_E_INVALID_ARG,
                            "ct_prefetcher_next: images, labels and got must not be NULL");
    if (pf->o.threads == 0) { /* synchronous */
        if (pf->next_out >= pf->nb) return CT_OK;
        ct_status st;
        char err[512];
        int64_t n = fill_batch(pf, pf->next_out, images, labels, &pf->sync_scratch, &st, err, sizeof err);
        if (st != CT_OK) return ct_set_error(pf->ctx, st, "%s", err);
        pf->next_out++;
        *got = n;
        return CT_OK;
    }
    pthread_mutex_lock(&pf->mu);
    int64_t k = pf->next_out;
    if (k >= pf->nb) {
        pthread_mutex_unlock(&pf->mu);
        return CT_OK;
    }
    pf_slot *sl = &pf->slots[k % pf->o.buffer_size];
    while (sl->batch != k) pthread_cond_wait(&pf->cv_ready, &pf->mu);
    pthread_mutex_unlock(&pf->mu);
    if (sl->st != CT_OK) /* the slot keeps batch k: a retry reports the same failure */
        return ct_set_error(pf->ctx, sl->st, "%s", sl->err);
    /* the slot is ours: no worker claims batch k + R before next_out moves */
    memcpy(images, sl->images, (size_t)sl->got * (size_t)pf->sample * sizeof(float));
    memcpy(labels, sl->labels, (size_t)sl->got * sizeof(int32_t));
    *got = sl->got;
    pthread_mutex_lock(&pf->mu);
    sl->batch = -1;
    pf->next_out++;
    pthread_cond_broadcast(&pf->cv_work);
    pthread_mutex_unlock(&pf->mu);
    return CT_OK;
}
