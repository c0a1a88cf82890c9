/* src/comm/bucket.c - gradient buckets (dist.h, docs/distributed.md): the
 * gradient arena cut into contiguous ranges of whole parameters, each summed
 * over the ranks by its own nonblocking allreduce, in place (no copy unless
 * compressed).
 *
 * Planning: the parameters are taken in the order backward finalizes
 * their gradients (ready_order); a bucket grows while the next parameter is
 * its neighbour in the arena (either side, so it stays one contiguous range:
 * no copies) and it is under its cap, the first bucket's cap being
 * first_bucket_bytes, the others' bucket_bytes (DDP's rule: a parameter is
 * added while the bucket is under the cap). The arena holds the parameters
 * in forward order and backward runs roughly in reverse, so a bucket is
 * mostly a run of layers from the end of the arena; a parameter finalized
 * out of that order (a bias after its weight) joins its neighbour's bucket
 * or opens one. Parameters without a gradient get buckets of their own,
 * reduced in ct_buckets_finish. ready_after (the position in ready_order of
 * a bucket's last gradient) tells how early it can start.
 *
 * Overlap: ct_buckets_grad_ready counts a bucket down; at zero the bucket
 * is queued. Open MPI progresses a nonblocking collective only inside MPI
 * calls, so something must call MPI while backward computes:
 *   - CT_BUCKET_PROGRESS_THREAD: a communication thread owns every MPI call
 *     between ct_buckets_begin and the end of ct_buckets_finish (MPI stays
 *     MPI_THREAD_SERIALIZED: the caller makes no MPI call meanwhile, and the
 *     mutex orders the two threads' calls). It starts queued buckets in
 *     queue order (the same on every rank: backward runs the same plan) and
 *     tests the started ones, sleeping POLL_NS between rounds that finished
 *     nothing (a spinning thread would take a core from backward).
 *   - CT_BUCKET_PROGRESS_HOOK: no thread; the caller's grad-ready call starts
 *     the bucket and tests the started ones, so progress happens only at
 *     the next gradients.
 * ct_buckets_finish queues what is left (buckets whose gradients never
 * became ready, or all of them without overlap) and waits for everything.
 *
 * Compression (bf16 / fp16) with error feedback: before a bucket is sent,
 * g + residual is rounded into the bucket's 16-bit copy and the residual
 * becomes what the rounding lost (0 where the value is not finite, so an
 * overflowed step does not poison the next); the ranks sum the 16-bit
 * values (ct_comm_iallreduce_half) and the sum is widened back into the
 * arena.
 *
 * Shard mode (ZeRO, o.shard_offs): each bucket is reduce-scattered instead:
 * its floats in rank k's segment of the arena go to rank k, summed (MPI
 * leaves the result at the bucket's start; the request moves it to this
 * rank's part), and o.done hears of every completed bucket, so that ZeRO can
 * release the rest of its range at once. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"
#include "ctrain/convert.h"
#include "ctrain/dist.h"
#include "comm_internal.h"

#define POLL_NS 20000L /* the progress thread's sleep after a round that completed nothing */

enum { B_WAIT = 0, B_STARTED, B_DONE };

typedef struct bucket {
    size_t off, n;
    int p0, np;       /* parameters [p0, p0 + np)                             */
    int need;         /* parameters of ready_order in it                      */
    int pending;      /* of those, not ready yet in this round                */
    int ready_after;
    int state;        /* B_*: written by the thread that owns MPI             */
    int queued;       /* written by the caller's thread (under the lock)      */
    uint16_t *half;   /* compressed copy (n), NULL without compression        */
    size_t *counts;   /* shard mode: its floats in each rank's segment (world; in B->counts) */
    size_t mine;      /* shard mode: where this rank's part starts in it      */
    ct_comm_request *req;
    double ready_us, start_us, end_us;
} bucket;

struct ct_buckets {
    ct_context *ctx; /* error messages */
    ct_comm *c;
    float *arena;
    size_t n_floats;
    int n_params;
    ct_bucket_opts o;
    bucket *b;
    int nb;
    int *bucket_of;   /* parameter -> bucket                                  */
    unsigned char *seen; /* parameter reported ready in this round            */
    float *residual;  /* error feedback (n_floats), compression only          */
    size_t *counts;   /* shard mode: every bucket's counts, world per bucket  */
    int armed;        /* between begin and finish                             */
    /* the queue of buckets to start, in start order (every rank the same) */
    int *queue;
    int q_len, q_next; /* queued so far, started so far                       */
    int n_done;
    ct_status err;
    /* the progress thread */
    int thread;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    int quit;
};

static double now_us(void) { return 1e-3 * (double)ct_now_ns(); }

void ct_bucket_opts_default(ct_bucket_opts *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->bucket_bytes = (size_t)25 << 20;
    o->first_bucket_bytes = (size_t)1 << 20;
    o->overlap = 1;
    o->progress = CT_BUCKET_PROGRESS_THREAD;
    o->compression = CT_GRAD_COMPRESSION_NONE;
}

/* Rounds bucket k's gradients (+ residual) into its 16-bit copy, keeping what was lost. */
static void compress(ct_buckets *B, bucket *k) {
    const int bf16 = B->o.compression == CT_GRAD_COMPRESSION_BF16;
    float *g = B->arena + k->off, *res = B->residual + k->off;
    float back[1024];
    for (size_t i = 0; i < k->n; i += 1024) {
        size_t m = CT_MIN((size_t)1024, k->n - i);
        for (size_t j = 0; j < m; j++) g[i + j] += res[i + j];
        if (bf16) {
            ct_f32_to_bf16_n(g + i, k->half + i, m, CT_ISA_COUNT);
            ct_bf16_to_f32_n(k->half + i, back, m, CT_ISA_COUNT);
        } else {
            ct_f32_to_f16_n(g + i, k->half + i, m, CT_ISA_COUNT);
            ct_f16_to_f32_n(k->half + i, back, m, CT_ISA_COUNT);
        }
        for (size_t j = 0; j < m; j++) {
            float r = g[i + j] - back[j];
            res[i + j] = isfinite(r) ? r : 0.0f;
        }
    }
}

/* The sum back into the arena: all of the bucket, or (shard mode) this rank's part. */
static void decompress(ct_buckets *B, bucket *k) {
    size_t b = 0, n = k->n;
    if (k->counts) b = k->mine, n = k->counts[ct_comm_rank(B->c)];
    if (B->o.compression == CT_GRAD_COMPRESSION_BF16) ct_bf16_to_f32_n(k->half + b, B->arena + k->off + b, n, CT_ISA_COUNT);
    else ct_f16_to_f32_n(k->half + b, B->arena + k->off + b, n, CT_ISA_COUNT);
}

/* Starts bucket k's allreduce or reduce-scatter (the calling thread owns MPI now). */
static ct_status start(ct_buckets *B, bucket *k) {
    k->start_us = now_us();
    k->state = B_STARTED;
    const int bf16 = B->o.compression == CT_GRAD_COMPRESSION_BF16;
    if (k->half) compress(B, k);
    if (k->counts)
        return k->half ? ct_comm_ireduce_scatter_half(B->c, k->half, k->counts, bf16, k->req)
                       : ct_comm_ireduce_scatter_f32(B->c, B->arena + k->off, k->counts, k->req);
    if (k->half) return ct_comm_iallreduce_half(B->c, k->half, k->n, bf16, k->req);
    return ct_comm_iallreduce_f32(B->c, B->arena + k->off, k->n, CT_REDUCE_SUM, k->req);
}

static void complete(ct_buckets *B, bucket *k) {
    if (k->half) decompress(B, k);
    if (B->o.done) B->o.done(B->o.done_user, k->off, k->n);
    k->end_us = now_us();
    k->state = B_DONE;
}

/* Shard mode: each bucket's floats in each rank's segment of the arena (o.shard_offs). */
static ct_status shard_counts(ct_buckets *B) {
    const int world = ct_comm_size(B->c), me = ct_comm_rank(B->c);
    const size_t *so = B->o.shard_offs;
    for (int k = 0; k < world; k++)
        if (so[k] > so[k + 1] || so[0] != 0 || so[world] != B->n_floats)
            return ct_set_error(B->ctx, CT_E_INVALID_ARG, "ct_buckets_create: shard_offs must increase from 0 to the "
                                "%zu floats of the arena", B->n_floats);
    if (!(B->counts = calloc((size_t)world * (size_t)B->nb + 1, sizeof(size_t))))
        return ct_set_error(B->ctx, CT_E_OOM, "out of memory");
    for (int i = 0; i < B->nb; i++) {
        bucket *k = &B->b[i];
        k->counts = B->counts + (size_t)i * (size_t)world;
        for (int r = 0; r < world; r++) {
            k->counts[r] = ct_overlap(so[r], so[r + 1], k->off, k->off + k->n);
            if (r == me && k->counts[r]) k->mine = CT_MAX(so[r], k->off) - k->off;
        }
    }
    return CT_OK;
}

/* Tests the started buckets; returns how many completed. On an error every
 * bucket counts as done (the job is failing: nothing more is sent). */
static int test_started(ct_buckets *B, ct_status *err) {
    int n = 0;
    for (int q = 0; q < B->q_next; q++) {
        bucket *k = &B->b[B->queue[q]];
        if (k->state != B_STARTED) continue;
        int done = 0;
        ct_status s = ct_comm_test(k->req, &done);
        if (s != CT_OK) {
            *err = s;
            return -1;
        }
        if (done) {
            complete(B, k);
            n++;
        }
    }
    return n;
}

static void fail_all(ct_buckets *B, ct_status s) {
    if (B->err == CT_OK) B->err = s;
    for (int i = 0; i < B->nb; i++) B->b[i].state = B_DONE;
    B->q_next = B->q_len;
    B->n_done = B->nb;
}

static void *progress_main(void *arg) {
    ct_buckets *B = arg;
    ct_fp_thread_flush(B->ctx); /* the reductions' sums: subnormals as in the compute threads */
    pthread_mutex_lock(&B->mu);
    for (;;) {
        while (!B->quit && B->q_next == B->q_len && B->n_done >= B->q_next) pthread_cond_wait(&B->work, &B->mu);
        if (B->quit) break;
        /* start what is queued (outside the lock: the caller keeps queueing) */
        ct_status s = CT_OK;
        while (s == CT_OK && B->q_next < B->q_len) {
            bucket *k = &B->b[B->queue[B->q_next]];
            pthread_mutex_unlock(&B->mu);
            s = start(B, k);
            pthread_mutex_lock(&B->mu);
            B->q_next++;
        }
        int got = 0;
        if (s == CT_OK) {
            pthread_mutex_unlock(&B->mu);
            got = test_started(B, &s);
            pthread_mutex_lock(&B->mu);
        }
        if (s != CT_OK) {
            fail_all(B, s);
            pthread_cond_broadcast(&B->done);
            continue;
        }
        if (got > 0) {
            B->n_done += got;
            pthread_cond_broadcast(&B->done);
            continue;
        }
        if (B->q_next == B->q_len && B->n_done < B->q_next) { /* nothing new: let backward have the core a while */
            pthread_mutex_unlock(&B->mu);
            struct timespec ts = {0, POLL_NS};
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&B->mu);
        }
    }
    pthread_mutex_unlock(&B->mu);
    return NULL;
}

ct_status ct_buckets_create(ct_context *ctx, ct_comm *c, float *arena, size_t n_floats, int n_params, const size_t *param_off,
                            const int *ready_order, int n_ready, const ct_bucket_opts *opts, ct_buckets **out) {
    if (!out) return CT_E_INVALID_ARG;
    *out = NULL;
    if (!c || (!arena && n_floats) || n_params < 0 || (!param_off && n_params) || (!ready_order && n_ready > 0))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_buckets_create: a NULL argument");
    ct_bucket_opts o;
    if (opts) o = *opts;
    else ct_bucket_opts_default(&o);
    if ((unsigned)o.compression >= CT_GRAD_COMPRESSION_COUNT || (unsigned)o.progress >= CT_BUCKET_PROGRESS_COUNT)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_buckets_create: compression %d or progress %d out of range",
                            (int)o.compression, (int)o.progress);
    for (int i = 0; i < n_params; i++)
        if (param_off[i] > param_off[i + 1] || param_off[i + 1] > n_floats)
            return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_buckets_create: parameter %d's range [%zu, %zu) is not "
                                "increasing within the %zu floats of the arena", i, param_off[i], param_off[i + 1], n_floats);
    ct_buckets *B = calloc(1, sizeof *B);
    if (!B) return ct_set_error(ctx, CT_E_OOM, "out of memory planning gradient buckets");
    B->ctx = ctx, B->c = c, B->arena = arena, B->n_floats = n_floats, B->n_params = n_params, B->o = o;
    B->b = calloc((size_t)n_params + 1, sizeof *B->b);
    B->bucket_of = calloc((size_t)n_params + 1, sizeof *B->bucket_of);
    B->seen = calloc((size_t)n_params + 1, 1);
    B->queue = calloc((size_t)n_params + 1, sizeof *B->queue);
    ct_status s = B->b && B->bucket_of && B->seen && B->queue ? CT_OK : CT_E_OOM;
    /* plan: the parameters in backward order, a bucket growing while the next one is its neighbour in the
     * arena (so that it stays one contiguous range) and it is under its cap. A neighbour but for a gap of
     * parameters that become ready within the next LOOKAHEAD gradients (a linear's bias finalized right
     * after its weight) joins too, the gap with it: the bucket then waits for those as well. */
    enum { LOOKAHEAD = 2 };
    if (!ready_order) n_ready = 0; /* (checked above; for the analyzer) */
    int *pos = B->queue; /* borrowed until the first reduction: each parameter's place in ready_order */
    size_t cap = o.first_bucket_bytes && o.bucket_bytes ? o.first_bucket_bytes : o.bucket_bytes, bytes = 0;
    int lo = 0, hi = -1;
    for (int p = 0; s == CT_OK && p < n_params; p++) B->bucket_of[p] = -1, pos[p] = INT_MAX;
    for (int q = n_ready - 1; s == CT_OK && q >= 0; q--)
        if (ready_order[q] >= 0 && ready_order[q] < n_params) pos[ready_order[q]] = q;
    for (int q = 0; s == CT_OK && q < n_ready; q++) {
        int p = ready_order[q];
        if (p < 0 || p >= n_params || B->bucket_of[p] >= 0) continue;
        int g_lo = p, g_hi = p, join = hi >= lo && (cap == 0 || bytes < cap);
        if (join) {
            if (p < lo) g_hi = lo - 1;
            else g_lo = hi + 1;
            for (int g = g_lo; g <= g_hi && join; g++)
                join = g == p || (B->bucket_of[g] < 0 && pos[g] != INT_MAX && pos[g] <= q + LOOKAHEAD);
        }
        if (o.bucket_bytes == 0 && hi >= lo) { /* one bucket of every gradient: the whole arena */
            lo = 0, hi = n_params - 1;
            g_lo = g_hi = p;
        } else if (join) {
            lo = CT_MIN(lo, g_lo), hi = CT_MAX(hi, g_hi);
        } else {
            if (hi >= lo) cap = o.bucket_bytes; /* the first bucket closed */
            lo = hi = g_lo = g_hi = p;
            bytes = 0;
            B->nb++;
        }
        bucket *k = &B->b[B->nb - 1];
        k->p0 = lo, k->np = hi - lo + 1;
        for (int g = g_lo; g <= g_hi; g++) {
            bytes += (param_off[g + 1] - param_off[g]) * sizeof(float);
            k->need++;
            k->ready_after = CT_MAX(k->ready_after, pos[g] + 1); /* its last gradient so far */
            B->bucket_of[g] = B->nb - 1;
        }
    }
    if (o.bucket_bytes == 0 && B->nb == 1) { /* one bucket: every parameter, those without a gradient too */
        B->b[0].p0 = 0, B->b[0].np = n_params;
        for (int p = 0; p < n_params; p++) B->bucket_of[p] = 0;
    }
    /* parameters without a gradient (not in ready_order): runs of them, reduced in ct_buckets_finish (zeros, so
     * that the whole arena holds the sum) */
    for (int p = 0; s == CT_OK && p < n_params; p++) {
        if (B->bucket_of[p] >= 0) continue;
        if (p == 0 || B->bucket_of[p - 1] != B->nb - 1 || B->b[B->nb - 1].need > 0) B->nb++;
        bucket *k = &B->b[B->nb - 1];
        if (!k->np) k->p0 = p;
        k->np++;
        k->ready_after = n_ready;
        B->bucket_of[p] = B->nb - 1;
    }
    for (int i = 0; s == CT_OK && i < B->nb; i++) {
        bucket *k = &B->b[i];
        k->off = param_off[k->p0];
        k->n = param_off[k->p0 + k->np] - k->off;
    }
    /* every parameter in exactly the bucket whose range holds it, and each bucket waiting for each of its
     * parameters that has a gradient (a planning bug would leave a range unreduced: the ranks would diverge) */
    int n_in = 0, n_need = 0, n_ready_params = 0;
    for (int i = 0; s == CT_OK && i < B->nb; i++) n_in += B->b[i].np, n_need += B->b[i].need;
    for (int p = 0; s == CT_OK && p < n_params; p++) {
        const bucket *k = B->bucket_of[p] >= 0 ? &B->b[B->bucket_of[p]] : NULL;
        n_ready_params += pos[p] != INT_MAX;
        if (!k || p < k->p0 || p >= k->p0 + k->np)
            s = ct_set_error(ctx, CT_E_INTERNAL, "gradient buckets: parameter %d is in no bucket's range (a bug in "
                             "src/comm/bucket.c: please report it)", p);
    }
    if (s == CT_OK && (n_in != n_params || n_need != n_ready_params))
        s = ct_set_error(ctx, CT_E_INTERNAL, "gradient buckets: %d of %d parameters in the buckets, %d of %d "
                         "gradients waited for (a bug in src/comm/bucket.c: please report it)", n_in, n_params,
                         n_need, n_ready_params);
    if (B->queue) memset(B->queue, 0, ((size_t)n_params + 1) * sizeof *B->queue);
    if (s == CT_OK && B->nb == 0 && n_floats) { /* no parameters: one bucket of the whole arena */
        B->b[0].n = n_floats;
        B->nb = 1;
    }
    for (int i = 0; s == CT_OK && i < B->nb; i++) {
        if (B->b[i].n > (size_t)INT_MAX) {
            s = ct_set_error(ctx, CT_E_INVALID_ARG, "gradient bucket %d holds %zu floats, more than one allreduce "
                             "takes (INT_MAX): set bucket_size_mb", i, B->b[i].n);
            break;
        }
        s = ct_comm_request_create(c, &B->b[i].req);
        if (s == CT_OK && o.compression != CT_GRAD_COMPRESSION_NONE && B->b[i].n &&
            !(B->b[i].half = malloc(B->b[i].n * sizeof(uint16_t))))
            s = CT_E_OOM;
    }
    if (s == CT_OK && o.compression != CT_GRAD_COMPRESSION_NONE && n_floats &&
        !(B->residual = calloc(n_floats, sizeof(float))))
        s = CT_E_OOM;
    if (s == CT_OK && o.shard_offs) s = shard_counts(B);
    for (int i = 0; s == CT_OK && i < B->nb; i++) B->b[i].state = B_DONE;
    if (s == CT_OK && o.overlap && o.progress == CT_BUCKET_PROGRESS_THREAD && ct_comm_size(c) > 1) {
        if (pthread_mutex_init(&B->mu, NULL) || pthread_cond_init(&B->work, NULL) || pthread_cond_init(&B->done, NULL))
            s = ct_set_error(ctx, CT_E_INTERNAL, "could not create the gradient buckets' mutex");
        else if (pthread_create(&B->th, NULL, progress_main, B))
            s = ct_set_error(ctx, CT_E_INTERNAL, "could not start the communication progress thread");
        else
            B->thread = 1;
    }
    if (s != CT_OK) {
        if (s == CT_E_OOM) ct_set_error(ctx, CT_E_OOM, "out of memory for the gradient buckets");
        ct_buckets_free(B);
        return s;
    }
    *out = B;
    return CT_OK;
}

void ct_buckets_free(ct_buckets *B) {
    if (!B) return;
    if (B->thread) {
        pthread_mutex_lock(&B->mu);
        B->quit = 1;
        pthread_cond_broadcast(&B->work);
        pthread_mutex_unlock(&B->mu);
        pthread_join(B->th, NULL);
        ct_comm_lend(B->c, 0);
        pthread_mutex_destroy(&B->mu);
        pthread_cond_destroy(&B->work);
        pthread_cond_destroy(&B->done);
    }
    for (int i = 0; B->b && i < B->nb; i++) {
        ct_comm_request_free(B->b[i].req);
        free(B->b[i].half);
    }
    free(B->b);
    free(B->bucket_of);
    free(B->seen);
    free(B->queue);
    free(B->residual);
    free(B->counts);
    free(B);
}

int ct_buckets_count(const ct_buckets *B) { return B ? B->nb : 0; }

ct_status ct_buckets_info(const ct_buckets *B, int i, ct_bucket_info *out) {
    if (!B || !out || i < 0 || i >= B->nb) return CT_E_INVALID_ARG;
    const bucket *k = &B->b[i];
    out->off = k->off, out->n = k->n;
    out->first_param = k->p0, out->n_params = k->np;
    out->ready_after = k->ready_after;
    out->ready_us = k->ready_us, out->start_us = k->start_us, out->end_us = k->end_us;
    return CT_OK;
}

int ct_buckets_started(ct_buckets *B) {
    if (!B) return 0;
    if (B->thread) pthread_mutex_lock(&B->mu);
    int n = B->q_next;
    if (B->thread) pthread_mutex_unlock(&B->mu);
    return n;
}

float *ct_buckets_residual(ct_buckets *B, size_t *n) {
    if (n) *n = B && B->residual ? B->n_floats : 0;
    return B ? B->residual : NULL;
}

static void lock(ct_buckets *B) {
    if (B->thread) pthread_mutex_lock(&B->mu);
}
static void unlock(ct_buckets *B) {
    if (B->thread) pthread_mutex_unlock(&B->mu);
}

ct_status ct_buckets_begin(ct_buckets *B) {
    if (!B) return CT_E_INVALID_ARG;
    lock(B);
    if (B->n_done < B->q_next) {
        unlock(B);
        return ct_set_error(B->ctx, CT_E_STATE, "ct_buckets_begin: the last reduction was not finished (ct_buckets_finish)");
    }
    for (int i = 0; i < B->nb; i++) {
        bucket *k = &B->b[i];
        k->pending = k->need;
        k->state = B_WAIT;
        k->queued = 0;
        k->ready_us = k->start_us = k->end_us = 0;
    }
    memset(B->seen, 0, (size_t)B->n_params + 1);
    B->q_len = B->q_next = B->n_done = 0;
    B->err = CT_OK;
    B->armed = 1;
    if (B->thread && B->o.overlap) ct_comm_lend(B->c, 1); /* until ct_buckets_finish: the thread's MPI */
    unlock(B);
    return CT_OK;
}

/* Queues bucket k (lock held in thread mode); in hook mode starts it at once. */
static void enqueue(ct_buckets *B, int k) {
    bucket *b = &B->b[k];
    if (b->queued || B->err != CT_OK) return;
    if (!b->ready_us) b->ready_us = now_us();
    b->queued = 1;
    B->queue[B->q_len++] = k;
}

void ct_buckets_grad_ready(ct_buckets *B, int param) {
    if (!B || !B->armed || param < 0 || param >= B->n_params || B->seen[param]) return;
    B->seen[param] = 1;
    bucket *k = &B->b[B->bucket_of[param]];
    if (--k->pending > 0) return;
    k->ready_us = now_us();
    if (!B->o.overlap) return;
    if (B->thread) {
        pthread_mutex_lock(&B->mu);
        enqueue(B, B->bucket_of[param]);
        pthread_cond_signal(&B->work);
        pthread_mutex_unlock(&B->mu);
        return;
    }
    /* hook mode: start it now, and give the started ones a turn */
    if (B->err != CT_OK) return;
    enqueue(B, B->bucket_of[param]);
    ct_status s = CT_OK;
    while (s == CT_OK && B->q_next < B->q_len) s = start(B, &B->b[B->queue[B->q_next++]]);
    int got = s == CT_OK ? test_started(B, &s) : 0;
    if (s != CT_OK) fail_all(B, s);
    else B->n_done += got;
}

void ct_buckets_poll(ct_buckets *B) {
    if (!B || !B->armed || B->thread || B->err != CT_OK) return;
    ct_status s = CT_OK;
    int got = test_started(B, &s);
    if (s != CT_OK) fail_all(B, s);
    else B->n_done += got;
}

ct_status ct_buckets_finish(ct_buckets *B, double *wait_us) {
    if (!B) return CT_E_INVALID_ARG;
    const double t0 = now_us();
    if (!B->armed) ct_buckets_begin(B); /* finish without begin: one reduction of everything */
    B->armed = 0;
    ct_status s;
    if (B->thread) {
        pthread_mutex_lock(&B->mu);
        for (int i = 0; i < B->nb; i++) enqueue(B, i);
        pthread_cond_signal(&B->work);
        while (B->n_done < B->nb) pthread_cond_wait(&B->done, &B->mu);
        s = B->err;
        pthread_mutex_unlock(&B->mu);
        ct_comm_lend(B->c, 0);
        ct_comm_stats *st = ct_comm_stats_mut(B->c); /* the progress thread is idle now: this thread may count */
        if (st) st->seconds += 1e-6 * (now_us() - t0);
    } else {
        s = B->err;
        for (int i = 0; s == CT_OK && i < B->nb; i++) enqueue(B, i);
        while (s == CT_OK && B->q_next < B->q_len) s = start(B, &B->b[B->queue[B->q_next++]]);
        for (int q = 0; s == CT_OK && q < B->q_next; q++) {
            bucket *k = &B->b[B->queue[q]];
            if (k->state != B_STARTED) continue;
            s = ct_comm_wait(k->req);
            if (s == CT_OK) complete(B, k);
        }
        if (s != CT_OK) fail_all(B, s);
        else B->n_done = B->nb;
    }
    if (wait_us) *wait_us = now_us() - t0;
    return s;
}
