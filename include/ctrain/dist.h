/* ctrain/dist.h - the communicator: the processes of one training job (the
 * "world"), each with a rank in [0, size), and the collectives data parallel
 * training needs (src/comm/comm.c, over MPI).
 *
 * A program that is started by an MPI launcher (mpirun / mpiexec, Slurm's
 * srun, any PMIx or PMI launcher: ct_comm_launched) gets a world of all the
 * launched processes; MPI is initialized by ct_comm_world_create unless the
 * program already did it. A program started any other way gets a world of
 * one process that makes no MPI call at all, so the same binary trains on
 * one process or many:
 *
 *   ct_comm *w;
 *   if (ct_comm_world_create(ctx, &w) != CT_OK) ...      // one per process
 *   float *g; size_t n; ct_plan_param_arena(plan, NULL, &g, &n);
 *   ct_comm_allreduce_f32(w, g, n, CT_REDUCE_AVG);        // every rank, same n
 *   if (ct_comm_rank(w) == 0) ... write the checkpoint ...
 *   ct_comm_barrier(w);
 *   ct_comm_free(w);                                       // finalizes MPI if it started it
 *
 * Collectives must be called by every rank of the world in the same order
 * with the same sizes. Any MPI failure (a rank that died, a broken network)
 * is returned as CT_E_DIST with MPI's message, never an abort: the
 * communicator sets MPI_ERRORS_RETURN. A program whose rank failed while the
 * other ranks may be waiting in a collective ends the job with
 * ct_comm_abort. Results of a reduction are the same bits on every rank.
 *
 * Nonblocking: ct_comm_iallreduce_f32 starts a reduction of a contiguous
 * range (a bucket of the gradient arena) into a request created beforehand
 * (a training step allocates nothing); ct_comm_test / ct_comm_wait finish it.
 * Open MPI progresses a nonblocking collective only inside MPI calls, so the
 * caller must test it from time to time (or wait). Calls are serialized: MPI
 * is initialized with MPI_THREAD_SERIALIZED, so two threads must never call
 * the communicator at the same time. */
#ifndef CTRAIN_DIST_H
#define CTRAIN_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "context.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_comm ct_comm;

typedef enum ct_reduce_op {
    CT_REDUCE_SUM = 0,
    CT_REDUCE_AVG,  /* the sum divided by the world size */
    CT_REDUCE_MAX,
    CT_REDUCE_MIN,
    CT_REDUCE_COUNT
} ct_reduce_op;

/* 1 when the environment says an MPI launcher started this process:
 * OMPI_COMM_WORLD_SIZE (Open MPI's mpirun), PMIX_RANK, PMI_RANK / PMI_SIZE
 * (MPICH, Intel MPI, srun --mpi=pmi2), or a Slurm job step of more than one
 * task (SLURM_STEP_ID with SLURM_STEP_NUM_TASKS or SLURM_NTASKS > 1). */
int ct_comm_launched(void);

/* The world communicator. Launched (ct_comm_launched): initializes MPI with
 * MPI_THREAD_SERIALIZED if nobody did yet, and works on a duplicate of
 * MPI_COMM_WORLD with MPI_ERRORS_RETURN; otherwise a world of size 1 and no
 * MPI call. Errors (CT_E_DIST: MPI could not start, or was finalized
 * already) are recorded on ctx, as are the errors of every later call (see
 * ct_comm_set_context). */
ct_status ct_comm_world_create(ct_context *ctx, ct_comm **out);
/* Frees the communicator; finalizes MPI when ct_comm_world_create initialized
 * it (MPI cannot be initialized again in this process). Accepts NULL. Every
 * rank calls it: MPI_Finalize waits for the others. */
void ct_comm_free(ct_comm *c);
/* Ends every process of the job with exit code `code` (MPI_Abort): for a
 * rank that failed while others may wait in a collective for it. A world of
 * one process, or NULL: returns, and the caller exits as usual. */
void ct_comm_abort(ct_comm *c, int code);
/* The context whose last error records the communicator's failures from now
 * on (the one given to ct_comm_world_create until then); must outlive its use. */
void ct_comm_set_context(ct_comm *c, ct_context *ctx);

int ct_comm_rank(const ct_comm *c);       /* 0 for NULL                           */
int ct_comm_size(const ct_comm *c);       /* 1 for NULL                           */
int ct_comm_local_rank(const ct_comm *c); /* rank among this host's processes     */
int ct_comm_local_size(const ct_comm *c); /* processes of the job on this host    */
int ct_comm_uses_mpi(const ct_comm *c);   /* 1 when launched (even a world of 1)   */

/* In place, every rank: x (n) <- op over the ranks' x. */
ct_status ct_comm_allreduce_f32(ct_comm *c, float *x, size_t n, ct_reduce_op op);
ct_status ct_comm_allreduce_f64(ct_comm *c, double *x, size_t n, ct_reduce_op op);
/* buf (bytes) <- root's buf on every rank. */
ct_status ct_comm_broadcast(ct_comm *c, void *buf, size_t bytes, int root);
/* Returns when every rank has called it. A rank that waits sleeps between
 * polls (after a short spin) instead of taking a core from the ranks still
 * working: use it to wait for rank 0's checkpoint or evaluation. */
ct_status ct_comm_barrier(ct_comm *c);
/* recv (size * bytes) <- every rank's send (bytes), in rank order. */
ct_status ct_comm_allgather(ct_comm *c, const void *send, size_t bytes, void *recv);

/* 64-bit FNV-1a of data, continuing from h (start with CT_HASH64_INIT). */
#define CT_HASH64_INIT 0xcbf29ce484222325ull
uint64_t ct_hash64(const void *data, size_t len, uint64_t h);
/* Every rank passes its hash of `what` (e.g. "the recipe"); when they are not
 * all equal to rank 0's, every rank returns CT_E_DIST naming `what`, the
 * ranks that differ and `advice` (NULL: run the same recipe on every rank):
 * an allgather, so every rank sees all the hashes and fails alike. */
ct_status ct_comm_agree(ct_comm *c, const char *what, uint64_t hash, const char *advice);

/* ---- process groups ------------------------------------------------------------- */
/* The world factored as tensor x data x pipeline: world size = tensor * data *
 * pipeline. Rank order (Megatron's): tensor-parallel neighbours are consecutive
 * world ranks (so, with mpirun's by-slot mapping, on the same host first), then
 * data, then pipeline:
 *     world rank = tensor_rank + tensor * (data_rank + data * pipeline_rank)
 * Each group is a communicator of its own, for every collective of this header:
 * the tensor group holds the ranks that differ only in tensor_rank, and so on.
 * Built for tensor and pipeline parallelism; data parallel alone is the grid
 * (1, world, 1). */
typedef struct ct_comm_grid {
    int tensor, data, pipeline;                /* the group sizes                    */
    int tensor_rank, data_rank, pipeline_rank; /* this rank's place in each group    */
    ct_comm *tensor_group, *data_group, *pipeline_group;
} ct_comm_grid;
/* Collective over world (every rank calls it with the same sizes: checked with
 * ct_comm_agree, so a mismatch is CT_E_DIST naming the ranks, not a hang). A
 * world whose size is not a multiple of tensor * pipeline is CT_E_CONFIG saying
 * which sizes fit. The groups are freed by ct_comm_grid_free, before the world. */
ct_status ct_comm_grid_create(ct_comm *world, int tensor, int pipeline, ct_comm_grid **out);
void ct_comm_grid_free(ct_comm_grid *g); /* accepts NULL */
/* The world rank at a place of the grid (the order above). */
int ct_comm_grid_world_rank(const ct_comm_grid *g, int tensor_rank, int data_rank, int pipeline_rank);

/* ---- nonblocking ---------------------------------------------------------------- */
typedef struct ct_comm_request ct_comm_request;
ct_status ct_comm_request_create(ct_comm *c, ct_comm_request **out);
void ct_comm_request_free(ct_comm_request *r); /* accepts NULL; the request must not be active */
/* Starts reducing x (n floats, at most INT_MAX) in place; x must stay
 * untouched until the request completes. CT_REDUCE_AVG divides when it
 * completes (in ct_comm_test / ct_comm_wait). The request must be idle. */
ct_status ct_comm_iallreduce_f32(ct_comm *c, float *x, size_t n, ct_reduce_op op, ct_comm_request *r);
/* *done <- 1 when the request completed (it is idle again); drives progress. */
ct_status ct_comm_test(ct_comm_request *r, int *done);
/* Completes the request (returns at once when it is idle). */
ct_status ct_comm_wait(ct_comm_request *r);

/* Starts a sum of n 16-bit floats (bf16 when bf16 is 1, else IEEE fp16) in
 * place: each pairwise step adds in FP32 and rounds to nearest even, so the
 * result is the same bits on every rank. For compressed gradient buckets;
 * completes like ct_comm_iallreduce_f32 (ct_comm_test / ct_comm_wait). */
ct_status ct_comm_iallreduce_half(ct_comm *c, uint16_t *x, size_t n, int bf16, ct_comm_request *r);
/* ZeRO's nonblocking v-collectives, in place on x, which holds counts[k] elements for each rank k back to
 * back (rank k's segment at counts[0] + ... + counts[k-1]; each at most INT_MAX, and so their sum). A
 * reduce-scatter leaves in this rank's segment the sum of every rank's segment (the other segments are
 * undefined afterwards); the half variant sums 16-bit floats as ct_comm_iallreduce_half does. An allgather
 * fills every segment from its rank (this rank's segment is read, not written). The counts are copied; x
 * must stay untouched until the request completes (ct_comm_test / ct_comm_wait). */
ct_status ct_comm_ireduce_scatter_f32(ct_comm *c, float *x, const size_t *counts, ct_comm_request *r);
ct_status ct_comm_ireduce_scatter_half(ct_comm *c, uint16_t *x, const size_t *counts, int bf16, ct_comm_request *r);
ct_status ct_comm_iallgatherv_f32(ct_comm *c, float *x, const size_t *counts, ct_comm_request *r);
ct_status ct_comm_iallgatherv_u16(ct_comm *c, uint16_t *x, const size_t *counts, ct_comm_request *r); /* bf16 / fp16 */

/* ---- gradient buckets (src/comm/bucket.c, docs/distributed.md) ----------------- */
/* The gradient arena cut into buckets, each a contiguous range of whole
 * parameters, filled in the order backward finalizes the gradients while
 * the next parameter is a neighbour in the arena (or would be but for
 * parameters whose gradients come within the next 2, which join with it):
 * the first bucket up to
 * first_bucket_bytes, the others up to bucket_bytes (a parameter is added
 * while the bucket is under its cap, as DDP does). With
 * overlap, a bucket's allreduce (sum, in place) starts as soon as the last
 * of its parameters' gradients is final (ct_buckets_grad_ready, from the
 * executor's grad-ready hook) and progresses while backward runs; without,
 * every bucket starts in ct_buckets_finish. Compression sends each bucket
 * as bf16 / fp16 with error feedback: what rounding lost is kept per rank
 * (the residual, one float per gradient) and added to the next step's
 * gradient before rounding. */
typedef enum ct_grad_compression {
    CT_GRAD_COMPRESSION_NONE = 0,
    CT_GRAD_COMPRESSION_BF16,
    CT_GRAD_COMPRESSION_FP16,
    CT_GRAD_COMPRESSION_COUNT
} ct_grad_compression;

typedef enum ct_bucket_progress {
    CT_BUCKET_PROGRESS_THREAD = 0, /* a communication thread starts and tests the requests           */
    CT_BUCKET_PROGRESS_HOOK,       /* the caller's thread, in ct_buckets_grad_ready (no extra thread) */
    CT_BUCKET_PROGRESS_COUNT
} ct_bucket_progress;

typedef struct ct_bucket_opts {
    size_t bucket_bytes;       /* cap of a bucket (0: the whole arena is one bucket)   */
    size_t first_bucket_bytes; /* cap of the first bucket (0: bucket_bytes)            */
    int overlap;               /* 1: start each bucket when its gradients are final    */
    ct_bucket_progress progress;
    ct_grad_compression compression;
    /* ZeRO (shard mode): world + 1 increasing offsets of the ranks' segments of the arena (0 ... n_floats);
     * each bucket is reduce-scattered: this rank's part of it ends as the sum over the ranks, the rest is
     * undefined. NULL: each bucket is allreduced. Read by ct_buckets_create only. */
    const size_t *shard_offs;
    /* Called when a bucket's reduction completed, with its range of the arena, on the thread that completed
     * it (the progress thread, or the caller's); NULL: none. */
    void (*done)(void *user, size_t off, size_t n);
    void *done_user;
} ct_bucket_opts;
/* 25 MiB buckets, a 1 MiB first bucket, overlap on, progress thread, no compression (PyTorch DDP's sizes). */
void ct_bucket_opts_default(ct_bucket_opts *o);

typedef struct ct_buckets ct_buckets;
/* arena (n_floats) is the gradient arena; parameter i (0 <= i < n_params)
 * owns [param_off[i], param_off[i + 1]) (param_off[n_params] == n_floats,
 * increasing); ready_order lists the parameters in the order backward
 * finalizes their gradients (n_ready entries; parameters missing from it
 * are waited for in ct_buckets_finish). Errors go to ctx. The communicator must outlive the
 * buckets; between ct_buckets_begin and ct_buckets_finish the caller must
 * make no other call on it (the progress thread may be using it). */
ct_status ct_buckets_create(ct_context *ctx, ct_comm *c, float *arena, size_t n_floats, int n_params,
                            const size_t *param_off, const int *ready_order, int n_ready, const ct_bucket_opts *o, ct_buckets **out);
void ct_buckets_free(ct_buckets *b); /* accepts NULL; waits for nothing: call after ct_buckets_finish */
/* Hook progress (no thread): tests the started buckets (their completions run o.done) without starting any;
 * for a caller that wants progress between gradients (ZeRO-3 calls it before every node). A no-op otherwise. */
void ct_buckets_poll(ct_buckets *b);

typedef struct ct_bucket_info {
    size_t off, n;        /* the range of the arena (floats)                          */
    int first_param, n_params;
    int ready_after;      /* gradients of ready_order finalized before it can start (n_ready: at the end) */
    /* the last ct_buckets_finish, on ct_profiler_now_us's clock (CLOCK_MONOTONIC, microseconds) */
    double ready_us, start_us, end_us;
} ct_bucket_info;
int ct_buckets_count(const ct_buckets *b);
ct_status ct_buckets_info(const ct_buckets *b, int i, ct_bucket_info *out);

/* A new reduction: every bucket waits for its gradients again. */
ct_status ct_buckets_begin(ct_buckets *b);
/* Parameter `param`'s gradient is final (the grad-ready hook). Outside
 * begin..finish: ignored. Errors are kept and returned by finish. */
void ct_buckets_grad_ready(ct_buckets *b, int param);
/* Starts the buckets not started yet and waits for all: the arena holds the
 * sum over the ranks (decoded from bf16/fp16 when compressed). *wait_us
 * (may be NULL) <- how long this call waited. */
ct_status ct_buckets_finish(ct_buckets *b, double *wait_us);
/* Buckets whose allreduce was started since ct_buckets_begin (the progress
 * thread may start them a little after they were queued). */
int ct_buckets_started(ct_buckets *b);
/* Error feedback: the residual (n_floats, this rank's), NULL without compression. */
float *ct_buckets_residual(ct_buckets *b, size_t *n);

/* What went over the communicator since it was created: calls and bytes
 * per kind (an allreduce counts its buffer's bytes once), and the seconds
 * the callers spent blocked inside its calls (a nonblocking allreduce: its
 * ct_comm_wait, or the wait for a progress thread's buckets in
 * ct_buckets_finish; not its time in flight, which overlaps backward). */
typedef struct ct_comm_stats {
    uint64_t allreduce_calls, allreduce_bytes;
    uint64_t broadcast_calls, broadcast_bytes;
    uint64_t allgather_calls, allgather_bytes;
    uint64_t barrier_calls;
    double seconds;
    uint64_t reduce_scatter_calls, reduce_scatter_bytes; /* ZeRO (zero_collectives.c): bytes of the whole buffer */
    uint64_t send_calls, send_bytes, recv_calls, recv_bytes; /* point to point (pipeline stages) */
} ct_comm_stats;
void ct_comm_get_stats(const ct_comm *c, ct_comm_stats *out);

/* ---- point to point (pipeline stages) ------------------------------------------------------
 * Nonblocking: the buffer belongs to the request until it completes (ct_comm_test, ct_comm_wait or
 * ct_comm_wait_for). peer: a rank of c; tag: 0 .. ct_comm_max_tag(c). A world of one has no peer. */
ct_status ct_comm_isend(ct_comm *c, const void *buf, size_t bytes, int peer, int tag, ct_comm_request *r);
ct_status ct_comm_irecv(ct_comm *c, void *buf, size_t bytes, int peer, int tag, ct_comm_request *r);
/* Waits at most timeout_s seconds (<= 0: forever), polling politely and marked busy with `what` for a
 * watchdog. Not done by then: CT_E_DIST "... waited N s for <what>", the request left active (cancelled
 * when the caller frees it with ct_comm_request_cancel). */
ct_status ct_comm_wait_for(ct_comm_request *r, double timeout_s, const char *what);
/* Cancels an active point-to-point request (after a timeout) and frees it; accepts NULL. */
void ct_comm_request_cancel(ct_comm_request *r);
int ct_comm_max_tag(const ct_comm *c);

/* ---- watchdog ---------------------------------------------------------------------------------
 * 1 while this process is inside a blocking call of the communicator (a
 * collective, a barrier, a wait), with the seconds since it entered and the
 * MPI call's name; 0 otherwise. Safe to call from another thread (a watchdog:
 * a call that never returns means another rank hangs). ct_comm_enter /
 * ct_comm_leave mark such a call (for collectives written outside comm.c). */
int ct_comm_busy(ct_comm *c, double *seconds, const char **what);
/* Which communicator the call in progress is on: a group's calls (ct_comm_grid) also show on their world, so
 * one watchdog on the world sees them all: "the world", "the tensor parallel group", ... */
const char *ct_comm_busy_group(ct_comm *c);
/* "the world" or the group's name ("the data parallel group"). */
const char *ct_comm_name(const ct_comm *c);
void ct_comm_enter(ct_comm *c, const char *what);
void ct_comm_leave(ct_comm *c);

/* ---- deterministic and sharded collectives (src/comm/zero_collectives.c) -------------------------
 * For the deterministic mode and ZeRO (docs/distributed.md). */

/* In place, every rank: x (n) <- the sum over the ranks, added in a fixed
 * binary tree: rank r's value is leaf r, pairs (2i, 2i+1) first, then pairs
 * of pairs, and so on (recursive doubling; each addition is lower + higher,
 * which IEEE makes the same bits on both partners). A caller that has summed
 * its own 2^k leaves in the same pairwise tree gets the sum of 2^k x size
 * leaves in one tree shape whatever the world size: the same bits at 1, 2 or
 * 4 ranks. The world size must be a power of two (CT_E_CONFIG otherwise).
 * tmp: n floats of scratch. */
ct_status ct_comm_tree_allreduce_f32(ct_comm *c, float *x, size_t n, float *tmp);

typedef enum ct_rs_algo {
    CT_RS_AUTO = 0, /* MPI below ct_comm_ring_threshold_bytes, the ring from there */
    CT_RS_MPI,      /* MPI_Reduce_scatter (in place)                                */
    CT_RS_RING,     /* a ring of size - 1 MPI_Sendrecv steps (zero_collectives.c)          */
} ct_rs_algo;
/* Sum-reduce-scatter in place: x holds sum(counts) floats on every rank
 * (counts[0..size) the segments, in rank order); afterwards rank r's
 * segment of x (at offset counts[0] + ... + counts[r-1]) holds the sum of
 * every rank's segment r. The rest of x is undefined afterwards. tmp: at
 * least max(counts) floats (the ring's receive buffer; may be NULL for
 * CT_RS_MPI). Segments of at most INT_MAX floats. */
ct_status ct_comm_reduce_scatter_f32(ct_comm *c, float *x, const size_t *counts, ct_rs_algo algo, float *tmp);
/* In place: every rank's segment of x (counts as above) to every rank. */
ct_status ct_comm_allgatherv_f32(ct_comm *c, float *x, const size_t *counts);
/* Rank root's recv (sum(counts) floats; NULL elsewhere) <- every rank's send
 * (counts[rank] floats), in rank order. */
ct_status ct_comm_gatherv_f32(ct_comm *c, const float *send, const size_t *counts, float *recv, int root);
/* The buffer size (bytes, the whole buffer) from which CT_RS_AUTO takes the
 * ring: measured on this project's machine (docs/distributed.md, "ZeRO");
 * the environment variable CT_RS_RING_FROM (bytes) overrides it. */
size_t ct_comm_ring_threshold_bytes(void);

#ifdef __cplusplus
}
#endif
#endif
