/* src/comm/comm.c - the communicator of dist.h over MPI (Open MPI 4.1 here).
 *
 * A world of one process (not launched by an MPI launcher) makes no MPI
 * call: every collective is a local no-op (an average divides by 1, an
 * allgather copies). A launched world works on its own duplicate of
 * MPI_COMM_WORLD; MPI_ERRORS_RETURN is set on both, so a failure (a rank
 * that died, a network error) comes back here and becomes CT_E_DIST with
 * MPI's message instead of MPI's default abort. Large buffers go in pieces
 * of at most INT_MAX elements (MPI counts are int). The barrier is an
 * MPI_Ibarrier polled with growing sleeps, so ranks waiting for rank 0's
 * checkpoint leave the cores to it. Every call adds to ct_comm_stats. */
#include <limits.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"
#include "ctrain/convert.h"
#include "ctrain/dist.h"
#include "comm_internal.h"

struct ct_comm {
    ct_context *ctx;    /* error messages                                       */
    int mpi;            /* launched: MPI calls go to `comm`                     */
    int owns_mpi;       /* ct_comm_world_create initialized MPI: finalize it    */
    MPI_Comm comm;      /* duplicate of MPI_COMM_WORLD                          */
    int rank, size, local_rank, local_size;
    ct_comm_stats st;
    /* the blocking call in progress (ct_comm_busy, for a watchdog thread): since when (monotonic ns; 0: none) */
    atomic_llong busy_ns;
    _Atomic(const char *) busy_what;
    _Atomic(const char *) busy_group; /* the group whose call it is ("the world", "the tensor parallel group") */
    ct_comm *root;      /* a group's world (its calls also mark the world's busy state); NULL for the world */
    char name[48];      /* "the world", "the tensor parallel group", ...    */
    MPI_Op half_op[2]; /* ct_comm_iallreduce_half: [0] fp16, [1] bf16 sums (created on first use) */
    /* a bucket progress thread makes MPI calls from ct_buckets_begin to ct_buckets_finish: no other call meanwhile */
    atomic_int lent;
};

struct ct_comm_request {
    ct_comm *c;
    MPI_Request req;
    int active;
    float *x; /* CT_REDUCE_AVG: divided on completion */
    size_t n;
    int avg;
    /* the v-collectives: int counts and displacements (world entries, kept until completion), and a
     * reduce-scatter's move of its result from the start of the buffer to this rank's segment */
    int *cnt, *dsp;
    char *mv_base;
    size_t mv_off, mv_bytes;
};

static int env_int(const char *name, long *v) {
    const char *e = getenv(name);
    if (!e || !*e) return 0;
    char *end;
    long x = strtol(e, &end, 10);
    if (*end) return 0;
    *v = x;
    return 1;
}

int ct_comm_launched(void) {
    long v;
    if (env_int("OMPI_COMM_WORLD_SIZE", &v) || env_int("PMIX_RANK", &v) || env_int("PMI_RANK", &v) ||
        env_int("PMI_SIZE", &v))
        return 1;
    if (getenv("SLURM_STEP_ID") &&
        ((env_int("SLURM_STEP_NUM_TASKS", &v) && v > 1) || (env_int("SLURM_NTASKS", &v) && v > 1)))
        return 1;
    return 0;
}

/* A group's call marks its world too, so that a watchdog on the world sees every group's calls. */
void ct_comm_enter(ct_comm *c, const char *what) {
    if (!c) return;
    long long now = (long long)ct_now_ns();
    for (ct_comm *m = c; m; m = m == c ? c->root : NULL) {
        atomic_store(&m->busy_what, what);
        atomic_store(&m->busy_group, (const char *)c->name);
        atomic_store(&m->busy_ns, now);
    }
}

void ct_comm_leave(ct_comm *c) {
    if (!c) return;
    atomic_store(&c->busy_ns, 0LL);
    if (c->root) atomic_store(&c->root->busy_ns, 0LL);
}

int ct_comm_busy(ct_comm *c, double *seconds, const char **what) {
    long long t = c ? atomic_load(&c->busy_ns) : 0;
    if (!t) return 0;
    if (seconds) *seconds = 1e-9 * (double)((long long)ct_now_ns() - t);
    if (what) *what = atomic_load(&c->busy_what);
    return 1;
}

const char *ct_comm_busy_group(ct_comm *c) {
    const char *g = c ? atomic_load(&c->busy_group) : NULL;
    return g && g[0] ? g : "the world";
}

const char *ct_comm_name(const ct_comm *c) { return c && c->name[0] ? c->name : "the world"; }

/* CT_E_DIST naming the MPI call, the rank and MPI's message. */
static ct_status mpi_fail(ct_comm *c, int err, const char *what) {
    ct_comm_leave(c);
    char msg[MPI_MAX_ERROR_STRING + 1] = "";
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", err);
    msg[MPI_MAX_ERROR_STRING] = 0;
    return ct_set_error(c ? c->ctx : NULL, CT_E_DIST,
                        "%s failed on rank %d of %d of %s: %s; another rank may have died or the network failed (see "
                        "the launcher's messages, docs/distributed.md)",
                        what, c ? c->rank : 0, c ? c->size : 1, ct_comm_name(c), msg[0] ? msg : "no message from MPI");
}

/* c's ranks on this host: local_rank / local_size. */
static ct_status find_local(ct_comm *c, const char *what) {
    MPI_Comm local = MPI_COMM_NULL;
    int err = MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local);
    if (err != MPI_SUCCESS) return mpi_fail(c, err, what);
    MPI_Comm_rank(local, &c->local_rank);
    MPI_Comm_size(local, &c->local_size);
    MPI_Comm_free(&local);
    return CT_OK;
}

/* *out = c when s is CT_OK, else c freed. */
static ct_status finish_create(ct_comm *c, ct_status s, ct_comm **out) {
    if (s != CT_OK) {
        ct_comm_free(c);
        return s;
    }
    *out = c;
    return CT_OK;
}

ct_status ct_comm_world_create(ct_context *ctx, ct_comm **out) {
    if (!out) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_comm_world_create: out must not be NULL");
    *out = NULL;
    ct_comm *c = calloc(1, sizeof *c);
    if (!c) return ct_set_error(ctx, CT_E_OOM, "out of memory creating the communicator");
    c->ctx = ctx;
    c->rank = c->local_rank = 0;
    c->size = c->local_size = 1;
    c->comm = MPI_COMM_NULL;
    c->half_op[0] = c->half_op[1] = MPI_OP_NULL;
    if (!ct_comm_launched()) {
        *out = c;
        return CT_OK;
    }
    int init = 0, fin = 0, err;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (fin) {
        free(c);
        return ct_set_error(ctx, CT_E_DIST,
                            "MPI was finalized already in this process: create the world communicator once per "
                            "process and free it at the end");
    }
    if (!init) {
        int provided = 0;
        if ((err = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided)) != MPI_SUCCESS) {
            free(c);
            return ct_set_error(ctx, CT_E_DIST,
                                "MPI_Init_thread failed (error %d): the process looks launched by mpirun/srun (%s) "
                                "but MPI cannot start; check the launcher and the Open MPI installation",
                                err, getenv("OMPI_COMM_WORLD_SIZE") ? "OMPI_COMM_WORLD_SIZE is set" : "PMI/Slurm variables are set");
        }
        c->owns_mpi = 1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    c->mpi = 1;
    ct_status s = CT_OK;
    if ((err = MPI_Comm_dup(MPI_COMM_WORLD, &c->comm)) != MPI_SUCCESS) s = mpi_fail(c, err, "MPI_Comm_dup");
    if (s == CT_OK) MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    if (s == CT_OK && (err = MPI_Comm_rank(c->comm, &c->rank)) != MPI_SUCCESS) s = mpi_fail(c, err, "MPI_Comm_rank");
    if (s == CT_OK && (err = MPI_Comm_size(c->comm, &c->size)) != MPI_SUCCESS) s = mpi_fail(c, err, "MPI_Comm_size");
    if (s == CT_OK) s = find_local(c, "MPI_Comm_split_type (the ranks of this host)");
    return finish_create(c, s, out);
}

ct_status ct_comm_split(ct_comm *parent, int color, int key, const char *what, ct_comm **out) {
    if (!parent || !out) return ct_set_error(parent ? parent->ctx : NULL, CT_E_INVALID_ARG, "ct_comm_split: NULL argument");
    *out = NULL;
    ct_comm *c = calloc(1, sizeof *c);
    if (!c) return ct_set_error(parent->ctx, CT_E_OOM, "out of memory creating the %s communicator", what);
    c->ctx = parent->ctx;
    c->root = parent->root ? parent->root : parent;
    snprintf(c->name, sizeof c->name, "the %s group", what);
    c->size = c->local_size = 1;
    c->comm = MPI_COMM_NULL;
    c->half_op[0] = c->half_op[1] = MPI_OP_NULL;
    if (!parent->mpi) { /* a world of one process: every group is that process */
        *out = c;
        return CT_OK;
    }
    c->mpi = 1;
    char call[96];
    snprintf(call, sizeof call, "MPI_Comm_split (the %s groups)", what);
    int err;
    ct_status s = ct_comm_claim(parent, "ct_comm_split");
    if (s == CT_OK) ct_comm_enter(parent, call);
    if (s == CT_OK && (err = MPI_Comm_split(parent->comm, color, key, &c->comm)) != MPI_SUCCESS)
        s = mpi_fail(parent, err, call);
    if (s == CT_OK) {
        ct_comm_leave(parent);
        MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
        MPI_Comm_rank(c->comm, &c->rank);
        MPI_Comm_size(c->comm, &c->size);
        s = find_local(c, "MPI_Comm_split_type (a group's ranks on this host)");
    }
    return finish_create(c, s, out);
}

void ct_comm_free(ct_comm *c) {
    if (!c) return;
    if (c->mpi) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) {
            for (int i = 0; i < 2; i++)
                if (c->half_op[i] != MPI_OP_NULL) MPI_Op_free(&c->half_op[i]);
            if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
            if (c->owns_mpi) MPI_Finalize();
        }
    }
    free(c);
}

void ct_comm_abort(ct_comm *c, int code) {
    if (!c || !c->mpi) return;
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(c->comm != MPI_COMM_NULL ? c->comm : MPI_COMM_WORLD, code);
}

void ct_comm_set_context(ct_comm *c, ct_context *ctx) {
    if (c) c->ctx = ctx;
}

int ct_comm_rank(const ct_comm *c) { return c ? c->rank : 0; }
int ct_comm_size(const ct_comm *c) { return c ? c->size : 1; }
int ct_comm_local_rank(const ct_comm *c) { return c ? c->local_rank : 0; }
int ct_comm_local_size(const ct_comm *c) { return c ? c->local_size : 1; }
int ct_comm_uses_mpi(const ct_comm *c) { return c ? c->mpi : 0; }

void ct_comm_get_stats(const ct_comm *c, ct_comm_stats *out) {
    if (!out) return;
    if (c) *out = c->st;
    else memset(out, 0, sizeof *out);
}

static MPI_Op mpi_op(ct_reduce_op op) {
    switch (op) {
    case CT_REDUCE_MAX: return MPI_MAX;
    case CT_REDUCE_MIN: return MPI_MIN;
    default: return MPI_SUM;
    }
}

void ct_comm_lend(ct_comm *c, int on) {
    if (c) atomic_store(&c->lent, on != 0);
}

ct_status ct_comm_claim(ct_comm *c, const char *fn) {
    if (!c || !atomic_load(&c->lent)) return CT_OK;
    return ct_set_error(c->ctx, CT_E_STATE, "%s while the gradient buckets' progress thread is still sending (MPI is "
                        "initialized MPI_THREAD_SERIALIZED, and the ranks must issue their collectives in the same "
                        "order): call ct_buckets_finish first", fn);
}

static ct_status check_op(ct_comm *c, ct_reduce_op op, const void *x, size_t n, const char *fn) {
    if (!c) return CT_E_INVALID_ARG;
    if ((unsigned)op >= CT_REDUCE_COUNT)
        return ct_set_error(c->ctx, CT_E_INVALID_ARG, "%s: reduce op %d is not a ct_reduce_op", fn, (int)op);
    if (!x && n) return ct_set_error(c->ctx, CT_E_INVALID_ARG, "%s: x must not be NULL", fn);
    return CT_OK;
}

/* In pieces of at most INT_MAX elements. */
static ct_status allreduce(ct_comm *c, void *x, size_t n, size_t esize, MPI_Datatype t, ct_reduce_op op,
                           const char *what) {
    CT_TRY(ct_comm_claim(c, what));
    c->st.allreduce_calls++;
    c->st.allreduce_bytes += n * esize;
    if (!c->mpi || n == 0) return CT_OK;
    double t0 = ct_now_s();
    ct_comm_enter(c, what);
    for (size_t off = 0; off < n;) {
        int k = (int)CT_MIN(n - off, (size_t)INT_MAX);
        int err = MPI_Allreduce(MPI_IN_PLACE, (char *)x + off * esize, k, t, mpi_op(op), c->comm);
        if (err != MPI_SUCCESS) return mpi_fail(c, err, what);
        off += (size_t)k;
    }
    ct_comm_leave(c);
    c->st.seconds += ct_now_s() - t0;
    return CT_OK;
}

ct_status ct_comm_allreduce_f32(ct_comm *c, float *x, size_t n, ct_reduce_op op) {
    CT_TRY(check_op(c, op, x, n, "ct_comm_allreduce_f32"));
    CT_TRY(allreduce(c, x, n, sizeof(float), MPI_FLOAT, op, "MPI_Allreduce (float)"));
    if (op == CT_REDUCE_AVG && c->size > 1) {
        const float d = (float)c->size;
        for (size_t i = 0; i < n; i++) x[i] /= d;
    }
    return CT_OK;
}

ct_status ct_comm_allreduce_f64(ct_comm *c, double *x, size_t n, ct_reduce_op op) {
    CT_TRY(check_op(c, op, x, n, "ct_comm_allreduce_f64"));
    CT_TRY(allreduce(c, x, n, sizeof(double), MPI_DOUBLE, op, "MPI_Allreduce (double)"));
    if (op == CT_REDUCE_AVG && c->size > 1)
        for (size_t i = 0; i < n; i++) x[i] /= (double)c->size;
    return CT_OK;
}

ct_status ct_comm_broadcast(ct_comm *c, void *buf, size_t bytes, int root) {
    if (!c) return CT_E_INVALID_ARG;
    if (root < 0 || root >= c->size)
        return ct_set_error(c->ctx, CT_E_INVALID_ARG, "ct_comm_broadcast: root %d is not a rank of the %d", root, c->size);
    if (!buf && bytes) return ct_set_error(c->ctx, CT_E_INVALID_ARG, "ct_comm_broadcast: buf must not be NULL");
    CT_TRY(ct_comm_claim(c, "ct_comm_broadcast"));
    c->st.broadcast_calls++;
    c->st.broadcast_bytes += bytes;
    if (!c->mpi || bytes == 0) return CT_OK;
    double t0 = ct_now_s();
    ct_comm_enter(c, "MPI_Bcast");
    for (size_t off = 0; off < bytes;) {
        int k = (int)CT_MIN(bytes - off, (size_t)INT_MAX);
        int err = MPI_Bcast((char *)buf + off, k, MPI_BYTE, root, c->comm);
        if (err != MPI_SUCCESS) return mpi_fail(c, err, "MPI_Bcast");
        off += (size_t)k;
    }
    ct_comm_leave(c);
    c->st.seconds += ct_now_s() - t0;
    return CT_OK;
}

/* Polls r until it completes: spins ~50 us, then sleeps 10 us, doubling up to 1 ms between polls. */
static int wait_polite(MPI_Request *r) {
    int done = 0, err;
    double t0 = ct_now_s();
    long sleep_ns = 10000;
    while (!done) {
        if ((err = MPI_Test(r, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS) return err;
        if (done || ct_now_s() - t0 < 50e-6) continue;
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000) sleep_ns *= 2;
    }
    return MPI_SUCCESS;
}

ct_status ct_comm_barrier(ct_comm *c) {
    if (!c) return CT_E_INVALID_ARG;
    CT_TRY(ct_comm_claim(c, "ct_comm_barrier"));
    c->st.barrier_calls++;
    if (!c->mpi || c->size == 1) return CT_OK;
    double t0 = ct_now_s();
    MPI_Request r;
    ct_comm_enter(c, "MPI_Ibarrier");
    int err = MPI_Ibarrier(c->comm, &r);
    if (err == MPI_SUCCESS) err = wait_polite(&r);
    if (err != MPI_SUCCESS) return mpi_fail(c, err, "MPI_Ibarrier");
    ct_comm_leave(c);
    c->st.seconds += ct_now_s() - t0;
    return CT_OK;
}

ct_status ct_comm_allgather(ct_comm *c, const void *send, size_t bytes, void *recv) {
    if (!c) return CT_E_INVALID_ARG;
    if ((!send || !recv) && bytes)
        return ct_set_error(c->ctx, CT_E_INVALID_ARG, "ct_comm_allgather: send and recv must not be NULL");
    if (bytes > (size_t)INT_MAX)
        return ct_set_error(c->ctx, CT_E_INVALID_ARG, "ct_comm_allgather: %zu bytes per rank is more than INT_MAX",
                            bytes);
    CT_TRY(ct_comm_claim(c, "ct_comm_allgather"));
    c->st.allgather_calls++;
    c->st.allgather_bytes += bytes * (size_t)c->size;
    if (!c->mpi) {
        if (bytes) memmove(recv, send, bytes);
        return CT_OK;
    }
    double t0 = ct_now_s();
    ct_comm_enter(c, "MPI_Allgather");
    int err = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->comm);
    if (err != MPI_SUCCESS) return mpi_fail(c, err, "MPI_Allgather");
    ct_comm_leave(c);
    c->st.seconds += ct_now_s() - t0;
    return CT_OK;
}

uint64_t ct_hash64(const void *data, size_t len, uint64_t h) {
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

ct_status ct_comm_agree(ct_comm *c, const char *what, uint64_t hash, const char *advice) {
    if (!c) return CT_E_INVALID_ARG;
    if (c->size == 1) return CT_OK;
    uint64_t *all = calloc((size_t)c->size, sizeof *all);
    if (!all) return ct_set_error(c->ctx, CT_E_OOM, "out of memory comparing %s across ranks", what);
    ct_status s = ct_comm_allgather(c, &hash, sizeof hash, all);
    if (s == CT_OK) {
        char ranks[256] = "";
        size_t o = 0;
        int n_diff = 0, first = 0;
        for (int i = 1; i < c->size; i++) {
            if (all[i] == all[0]) continue;
            if (!n_diff) first = i;
            if (n_diff < 16 && o < sizeof ranks)
                o += (size_t)snprintf(ranks + o, sizeof ranks - o, "%s%d", n_diff ? ", " : "", i);
            n_diff++;
        }
        if (n_diff > 16 && o < sizeof ranks) snprintf(ranks + o, sizeof ranks - o, " and %d more", n_diff - 16);
        if (n_diff)
            s = ct_set_error(c->ctx, CT_E_DIST,
                             "%s differs between the ranks: rank%s %s %s from rank 0's (hash %016llx on rank %d, "
                             "%016llx on rank 0); %s",
                             what, n_diff > 1 ? "s" : "", ranks, n_diff > 1 ? "differ" : "differs",
                             (unsigned long long)all[first], first, (unsigned long long)all[0],
                             advice ? advice : "every rank must run the same recipe with the same flags and data");
    }
    free(all);
    return s;
}

/* ---- nonblocking ---------------------------------------------------------------------------- */

ct_status ct_comm_request_create(ct_comm *c, ct_comm_request **out) {
    if (!c || !out) return ct_set_error(c ? c->ctx : NULL, CT_E_INVALID_ARG, "ct_comm_request_create: NULL argument");
    ct_comm_request *r = calloc(1, sizeof *r);
    if (!r) return ct_set_error(c->ctx, CT_E_OOM, "out of memory creating a communication request");
    r->c = c;
    r->req = MPI_REQUEST_NULL;
    *out = r;
    return CT_OK;
}

void ct_comm_request_free(ct_comm_request *r) {
    if (!r) return;
    free(r->cnt);
    free(r->dsp);
    free(r);
}

static void finish(ct_comm_request *r) {
    if (r->avg && r->c->size > 1) {
        const float d = (float)r->c->size;
        for (size_t i = 0; i < r->n; i++) r->x[i] /= d;
    }
    if (r->mv_bytes && r->mv_off) memmove(r->mv_base + r->mv_off, r->mv_base, r->mv_bytes);
    r->mv_bytes = 0;
    r->active = 0; /* (its time in flight overlapped other work: the seconds count what ct_comm_wait blocked) */
}

ct_status ct_comm_iallreduce_f32(ct_comm *c, float *x, size_t n, ct_reduce_op op, ct_comm_request *r) {
    CT_TRY(check_op(c, op, x, n, "ct_comm_iallreduce_f32"));
    if (!r || r->c != c)
        return ct_set_error(c->ctx, CT_E_INVALID_ARG, "ct_comm_iallreduce_f32: the request is NULL or of another communicator");
    if (r->active)
        return ct_set_error(c->ctx, CT_E_STATE, "ct_comm_iallreduce_f32: the request is still active; wait for it first");
    if (n > (size_t)INT_MAX)
        return ct_set_error(c->ctx, CT_E_INVALID_ARG, "ct_comm_iallreduce_f32: %zu floats is more than INT_MAX; split "
                            "the range into buckets", n);
    c->st.allreduce_calls++;
    c->st.allreduce_bytes += n * sizeof(float);
    r->x = x, r->n = n, r->avg = op == CT_REDUCE_AVG;
    r->active = 1;
    if (!c->mpi || n == 0) {
        finish(r);
        return CT_OK;
    }
    /* the request is waited for in ct_comm_test / ct_comm_wait (the caller's job: a bucket overlaps backward) */
    int err = MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, mpi_op(op), c->comm, &r->req);
    if (err != MPI_SUCCESS) {
        r->active = 0;
        return mpi_fail(c, err, "MPI_Iallreduce"); /* NOLINT(clang-analyzer-optin.mpi.MPI-Checker): see docs/lint.md */
    }
    return CT_OK; /* NOLINT(clang-analyzer-optin.mpi.MPI-Checker): waited for in ct_comm_wait / ct_comm_test */
}

ct_status ct_comm_test(ct_comm_request *r, int *done) {
    if (!r || !done) return CT_E_INVALID_ARG;
    *done = 1;
    if (!r->active) return CT_OK;
    int flag = 0, err = MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE);
    if (err != MPI_SUCCESS) {
        r->active = 0;
        return mpi_fail(r->c, err, "MPI_Test (nonblocking allreduce)");
    }
    *done = flag;
    if (flag) finish(r);
    return CT_OK;
}

ct_status ct_comm_wait(ct_comm_request *r) {
    if (!r) return CT_E_INVALID_ARG;
    if (!r->active) return CT_OK;
    ct_comm_enter(r->c, "MPI_Wait (nonblocking allreduce)");
    const double t0 = ct_now_s();
    int err = MPI_Wait(&r->req, MPI_STATUS_IGNORE); /* NOLINT(clang-analyzer-optin.mpi.MPI-Checker): started in ct_comm_iallreduce_f32 */
    if (err != MPI_SUCCESS) {
        r->active = 0;
        return mpi_fail(r->c, err, "MPI_Wait (nonblocking allreduce)");
    }
    ct_comm_leave(r->c);
    r->c->st.seconds += ct_now_s() - t0;
    finish(r);
    return CT_OK;
}

/* ---- point to point ------------------------------------------------------------------------ */

static ct_status p2p_check(ct_comm *c, const void *buf, size_t bytes, int peer, int tag, ct_comm_request *r,
                           const char *fn) {
    if (!c) return CT_E_INVALID_ARG;
    if ((!buf && bytes) || !r || r->c != c)
        return ct_set_error(c->ctx, CT_E_INVALID_ARG, "%s: NULL buffer or a request of another communicator", fn);
    if (r->active) return ct_set_error(c->ctx, CT_E_STATE, "%s: the request is still active; wait for it first", fn);
    if (peer < 0 || peer >= c->size || peer == c->rank || !c->mpi)
        return ct_set_error(c->ctx, CT_E_INVALID_ARG, "%s: peer %d is not another rank of %s (%d ranks)", fn, peer,
                            ct_comm_name(c), c->size);
    if (tag < 0 || tag > ct_comm_max_tag(c))
        return ct_set_error(c->ctx, CT_E_INVALID_ARG, "%s: tag %d outside 0 .. %d", fn, tag, ct_comm_max_tag(c));
    if (bytes > (size_t)INT_MAX)
        return ct_set_error(c->ctx, CT_E_INVALID_ARG, "%s: %zu bytes is more than INT_MAX", fn, bytes);
    r->x = NULL, r->n = 0, r->avg = 0;
    return CT_OK;
}

int ct_comm_max_tag(const ct_comm *c) {
    if (!c || !c->mpi) return 32767;
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag); /* defined on the world (every communicator's) */
    return flag && ub ? *ub : 32767;
}

ct_status ct_comm_isend(ct_comm *c, const void *buf, size_t bytes, int peer, int tag, ct_comm_request *r) {
    CT_TRY(p2p_check(c, buf, bytes, peer, tag, r, "ct_comm_isend"));
    c->st.send_calls++;
    c->st.send_bytes += bytes;
    int err = MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, c->comm, &r->req);
    if (err != MPI_SUCCESS) return mpi_fail(c, err, "MPI_Isend"); /* NOLINT(clang-analyzer-optin.mpi.MPI-Checker) */
    r->active = 1;
    return CT_OK; /* NOLINT(clang-analyzer-optin.mpi.MPI-Checker): completed in ct_comm_wait_for / ct_comm_test */
}

ct_status ct_comm_irecv(ct_comm *c, void *buf, size_t bytes, int peer, int tag, ct_comm_request *r) {
    CT_TRY(p2p_check(c, buf, bytes, peer, tag, r, "ct_comm_irecv"));
    c->st.recv_calls++;
    c->st.recv_bytes += bytes;
    int err = MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, c->comm, &r->req);
    if (err != MPI_SUCCESS) return mpi_fail(c, err, "MPI_Irecv"); /* NOLINT(clang-analyzer-optin.mpi.MPI-Checker) */
    r->active = 1;
    return CT_OK; /* NOLINT(clang-analyzer-optin.mpi.MPI-Checker): completed in ct_comm_wait_for / ct_comm_test */
}

ct_status ct_comm_wait_for(ct_comm_request *r, double timeout_s, const char *what) {
    if (!r) return CT_E_INVALID_ARG;
    if (!r->active) return CT_OK;
    ct_comm *c = r->c;
    ct_comm_enter(c, what);
    const double t0 = ct_now_s();
    long sleep_ns = 10000;
    for (;;) {
        int done = 0, err = MPI_Test(&r->req, &done, MPI_STATUS_IGNORE);
        if (err != MPI_SUCCESS) {
            r->active = 0;
            return mpi_fail(c, err, what);
        }
        if (done) break;
        const double t = ct_now_s() - t0;
        if (timeout_s > 0 && t > timeout_s) {
            ct_comm_leave(c);
            c->st.seconds += t;
            return ct_set_error(c->ctx, CT_E_DIST,
                                "rank %d of %s waited %.0f s for %s (comm_timeout %g s): that rank hangs (stopped, "
                                "deadlocked, or its host unreachable), or its stage runs another configuration; raise "
                                "comm_timeout if a stage is legitimately that slow",
                                c->rank, ct_comm_name(c), t, what, timeout_s);
        }
        if (t < 50e-6) continue;
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000) sleep_ns *= 2;
    }
    ct_comm_leave(c);
    c->st.seconds += ct_now_s() - t0;
    r->active = 0;
    return CT_OK;
}

void ct_comm_request_cancel(ct_comm_request *r) {
    if (!r) return;
    if (r->active && r->c->mpi) {
        MPI_Cancel(&r->req);
        MPI_Request_free(&r->req);
    }
    free(r);
}

/* ---- for the other collectives of src/comm/ (zero_collectives.c; comm_internal.h) ----------- */
MPI_Comm ct_comm_mpi_handle(ct_comm *c) { return c && c->mpi ? c->comm : MPI_COMM_NULL; }
ct_context *ct_comm_context(ct_comm *c) { return c ? c->ctx : NULL; }
ct_comm_stats *ct_comm_stats_mut(ct_comm *c) { return c ? &c->st : NULL; }
ct_status ct_comm_mpi_fail(ct_comm *c, int err, const char *what) { return mpi_fail(c, err, what); }
/* The user ops of ct_comm_iallreduce_half: inout[i] <- round(in[i] + inout[i]), added in FP32 (the bulk
 * conversions of convert.h, bit for bit the scalar ones, in pieces on the stack). */
static void sum_half(const uint16_t *in, uint16_t *inout, int len, int bf16) {
    float a[512], b[512];
    for (int i = 0; i < len; i += 512) {
        size_t m = (size_t)CT_MIN(512, len - i);
        if (bf16) {
            ct_bf16_to_f32_n(in + i, a, m, CT_ISA_COUNT);
            ct_bf16_to_f32_n(inout + i, b, m, CT_ISA_COUNT);
        } else {
            ct_f16_to_f32_n(in + i, a, m, CT_ISA_COUNT);
            ct_f16_to_f32_n(inout + i, b, m, CT_ISA_COUNT);
        }
        for (size_t j = 0; j < m; j++) a[j] += b[j];
        if (bf16) ct_f32_to_bf16_n(a, inout + i, m, CT_ISA_COUNT);
        else ct_f32_to_f16_n(a, inout + i, m, CT_ISA_COUNT);
    }
}
static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)t;
    sum_half(in, inout, *len, 1);
}
static void sum_f16(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)t;
    sum_half(in, inout, *len, 0);
}

ct_status ct_comm_iallreduce_half(ct_comm *c, uint16_t *x, size_t n, int bf16, ct_comm_request *r) {
    if (!c) return CT_E_INVALID_ARG;
    if (!x && n) return ct_set_error(c->ctx, CT_E_INVALID_ARG, "ct_comm_iallreduce_half: x must not be NULL");
    if (!r || r->c != c)
        return ct_set_error(c->ctx, CT_E_INVALID_ARG, "ct_comm_iallreduce_half: the request is NULL or of another communicator");
    if (r->active)
        return ct_set_error(c->ctx, CT_E_STATE, "ct_comm_iallreduce_half: the request is still active; wait for it first");
    if (n > (size_t)INT_MAX)
        return ct_set_error(c->ctx, CT_E_INVALID_ARG, "ct_comm_iallreduce_half: %zu values is more than INT_MAX; split "
                            "the range into buckets", n);
    c->st.allreduce_calls++;
    c->st.allreduce_bytes += n * sizeof(uint16_t);
    r->x = NULL, r->n = 0, r->avg = 0;
    r->active = 1;
    if (!c->mpi || n == 0) {
        finish(r);
        return CT_OK;
    }
    const int k = bf16 != 0;
    int err;
    if (c->half_op[k] == MPI_OP_NULL && (err = MPI_Op_create(k ? sum_bf16 : sum_f16, 1, &c->half_op[k])) != MPI_SUCCESS) {
        r->active = 0;
        return mpi_fail(c, err, "MPI_Op_create (16-bit float sum)");
    }
    err = MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, MPI_UINT16_T, c->half_op[k], c->comm, &r->req);
    if (err != MPI_SUCCESS) {
        r->active = 0;
        return mpi_fail(c, err, "MPI_Iallreduce (16-bit floats)"); /* NOLINT(clang-analyzer-optin.mpi.MPI-Checker): see docs/lint.md */
    }
    return CT_OK; /* NOLINT(clang-analyzer-optin.mpi.MPI-Checker): waited for in ct_comm_wait / ct_comm_test */
}

/* ---- nonblocking v-collectives (ZeRO's buckets and parameter gathers) ----------------------------- */

/* The request's int counts / displacements for counts[] (elements of `elem` bytes), allocated on first use. */
static ct_status v_counts(ct_comm *c, ct_comm_request *r, const size_t *counts, size_t elem, const char *fn, size_t *total) {
    if (!r || r->c != c)
        return ct_set_error(c->ctx, CT_E_INVALID_ARG, "%s: the request is NULL or of another communicator", fn);
    if (r->active) return ct_set_error(c->ctx, CT_E_STATE, "%s: the request is still active; wait for it first", fn);
    if (!counts) return ct_set_error(c->ctx, CT_E_INVALID_ARG, "%s: counts must not be NULL", fn);
    if (!r->cnt && (!(r->cnt = malloc(sizeof(int) * (size_t)c->size)) || !(r->dsp = malloc(sizeof(int) * (size_t)c->size)))) {
        free(r->cnt);
        r->cnt = NULL;
        return ct_set_error(c->ctx, CT_E_OOM, "out of memory for %d counts", c->size);
    }
    size_t off = 0;
    for (int k = 0; k < c->size; k++) {
        if (counts[k] > (size_t)INT_MAX || off > (size_t)INT_MAX)
            return ct_set_error(c->ctx, CT_E_INVALID_ARG, "%s: %zu elements at %zu: more than INT_MAX; use smaller buckets",
                                fn, counts[k], off);
        r->cnt[k] = (int)counts[k], r->dsp[k] = (int)off;
        off += counts[k];
    }
    if (off > (size_t)INT_MAX) /* (the header's promise: the sum fits too) */
        return ct_set_error(c->ctx, CT_E_INVALID_ARG, "%s: %zu elements in all: more than INT_MAX; use smaller buckets",
                            fn, off);
    (void)elem;
    *total = off;
    r->x = NULL, r->n = 0, r->avg = 0, r->mv_bytes = 0;
    return CT_OK;
}

/* Starts the reduce-scatter (sum) of x in place: `type` / `op` the element type and sum. */
static ct_status ireduce_scatter(ct_comm *c, void *x, const size_t *counts, size_t elem, MPI_Datatype type, MPI_Op op,
                                 ct_comm_request *r, const char *fn) {
    size_t total;
    CT_TRY(v_counts(c, r, counts, elem, fn, &total));
    if (!x && total) return ct_set_error(c->ctx, CT_E_INVALID_ARG, "%s: x must not be NULL", fn);
    c->st.reduce_scatter_calls++;
    c->st.reduce_scatter_bytes += total * elem;
    r->active = 1;
    if (!c->mpi || c->size == 1 || total == 0) {
        finish(r);
        return CT_OK;
    }
    r->mv_base = x, r->mv_off = (size_t)r->dsp[c->rank] * elem, r->mv_bytes = counts[c->rank] * elem;
    int err = MPI_Ireduce_scatter(MPI_IN_PLACE, x, r->cnt, type, op, c->comm, &r->req);
    if (err != MPI_SUCCESS) {
        r->active = 0;
        r->mv_bytes = 0;
        return mpi_fail(c, err, "MPI_Ireduce_scatter"); /* NOLINT(clang-analyzer-optin.mpi.MPI-Checker): see docs/lint.md */
    }
    return CT_OK; /* NOLINT(clang-analyzer-optin.mpi.MPI-Checker): waited for in ct_comm_wait / ct_comm_test */
}

ct_status ct_comm_ireduce_scatter_f32(ct_comm *c, float *x, const size_t *counts, ct_comm_request *r) {
    if (!c) return CT_E_INVALID_ARG;
    return ireduce_scatter(c, x, counts, sizeof(float), MPI_FLOAT, MPI_SUM, r, "ct_comm_ireduce_scatter_f32");
}

ct_status ct_comm_ireduce_scatter_half(ct_comm *c, uint16_t *x, const size_t *counts, int bf16, ct_comm_request *r) {
    if (!c) return CT_E_INVALID_ARG;
    const int k = bf16 != 0;
    int err;
    if (c->mpi && c->half_op[k] == MPI_OP_NULL &&
        (err = MPI_Op_create(k ? sum_bf16 : sum_f16, 1, &c->half_op[k])) != MPI_SUCCESS)
        return mpi_fail(c, err, "MPI_Op_create (16-bit float sum)");
    return ireduce_scatter(c, x, counts, sizeof(uint16_t), MPI_UINT16_T, c->half_op[k], r, "ct_comm_ireduce_scatter_half");
}

static ct_status iallgatherv(ct_comm *c, void *x, const size_t *counts, size_t elem, MPI_Datatype type,
                             ct_comm_request *r, const char *fn) {
    size_t total;
    CT_TRY(v_counts(c, r, counts, elem, fn, &total));
    if (!x && total) return ct_set_error(c->ctx, CT_E_INVALID_ARG, "%s: x must not be NULL", fn);
    c->st.allgather_calls++;
    c->st.allgather_bytes += total * elem;
    r->active = 1;
    if (!c->mpi || c->size == 1 || total == 0) {
        finish(r);
        return CT_OK;
    }
    int err = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, r->cnt, r->dsp, type, c->comm, &r->req);
    if (err != MPI_SUCCESS) {
        r->active = 0;
        return mpi_fail(c, err, "MPI_Iallgatherv"); /* NOLINT(clang-analyzer-optin.mpi.MPI-Checker): see docs/lint.md */
    }
    return CT_OK; /* NOLINT(clang-analyzer-optin.mpi.MPI-Checker): waited for in ct_comm_wait / ct_comm_test */
}

ct_status ct_comm_iallgatherv_f32(ct_comm *c, float *x, const size_t *counts, ct_comm_request *r) {
    if (!c) return CT_E_INVALID_ARG;
    return iallgatherv(c, x, counts, sizeof(float), MPI_FLOAT, r, "ct_comm_iallgatherv_f32");
}

ct_status ct_comm_iallgatherv_u16(ct_comm *c, uint16_t *x, const size_t *counts, ct_comm_request *r) {
    if (!c) return CT_E_INVALID_ARG;
    return iallgatherv(c, x, counts, sizeof(uint16_t), MPI_UINT16_T, r, "ct_comm_iallgatherv_u16");
}
