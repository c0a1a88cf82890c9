/* src/comm/zero_collectives.c - the collectives ZeRO and the deterministic mode add to the
 * communicator (dist.h; docs/distributed.md):
 *   - a tree allreduce whose additions have one fixed shape (recursive
 *     doubling, lower + higher at every level), so that leaves summed
 *     pairwise on one rank and across ranks give the same bits at any
 *     power-of-two world size;
 *   - reduce-scatter, by MPI_Reduce_scatter or by a hand-written ring (the
 *     faster one above a measured size), in place, segments of any length;
 *   - the in-place allgatherv of the updated parameter shards, and a gatherv
 *     of the optimizer-state shards to the rank that writes a checkpoint.
 * A world of one process makes no MPI call. Every call adds to ct_comm_stats. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_internal.h"
#include "core/internal.h"

/* The ring from this many bytes (ct_comm_ring_threshold_bytes): see docs/distributed.md, "ZeRO". */
#define CT_RS_RING_FROM_DEFAULT ((size_t)1 << 20)

/* MPI messages in pieces of at most 2^28 floats (counts are int). */
#define PIECE ((size_t)1 << 28)

static ct_status sendrecv(ct_comm *c, const float *send, size_t ns, int to, float *recv, size_t nr, int from,
                          const char *what) {
    MPI_Comm m = ct_comm_mpi_handle(c);
    for (size_t off = 0; off < ns || off < nr; off += PIECE) {
        int ks = ns > off ? (int)CT_MIN(ns - off, PIECE) : 0, kr = nr > off ? (int)CT_MIN(nr - off, PIECE) : 0;
        int err = MPI_Sendrecv(send + (ks ? off : 0), ks, MPI_FLOAT, to, 73, recv + (kr ? off : 0), kr, MPI_FLOAT,
                               from, 73, m, MPI_STATUS_IGNORE);
        if (err != MPI_SUCCESS) return ct_comm_mpi_fail(c, err, what);
    }
    return CT_OK;
}

ct_status ct_comm_tree_allreduce_f32(ct_comm *c, float *x, size_t n, float *tmp) {
    if (!c) return CT_E_INVALID_ARG;
    const int size = ct_comm_size(c), rank = ct_comm_rank(c);
    if ((!x || !tmp) && n && size > 1)
        return ct_set_error(ct_comm_context(c), CT_E_INVALID_ARG, "ct_comm_tree_allreduce_f32: x and tmp must not be NULL");
    if (size & (size - 1))
        return ct_set_error(ct_comm_context(c), CT_E_CONFIG,
                            "the deterministic reduction needs a power-of-two number of ranks (1, 2, 4, 8, ...), not %d",
                            size);
    CT_TRY(ct_comm_claim(c, "ct_comm_tree_allreduce_f32"));
    ct_comm_stats *st = ct_comm_stats_mut(c);
    st->allreduce_calls++;
    st->allreduce_bytes += n * sizeof(float);
    if (size == 1 || n == 0) return CT_OK;
    double t0 = ct_now_s();
    ct_comm_enter(c, "MPI_Sendrecv (deterministic tree allreduce)");
    for (int mask = 1; mask < size; mask <<= 1) {
        const int peer = rank ^ mask;
        CT_TRY(sendrecv(c, x, n, peer, tmp, n, peer, "MPI_Sendrecv (deterministic tree allreduce)"));
        if (rank < peer)
            for (size_t i = 0; i < n; i++) x[i] = x[i] + tmp[i];
        else
            for (size_t i = 0; i < n; i++) x[i] = tmp[i] + x[i];
    }
    ct_comm_leave(c);
    st->seconds += ct_now_s() - t0;
    return CT_OK;
}

static ct_status check_counts(ct_comm *c, const float *x, const size_t *counts, const char *fn, size_t *total,
                              size_t *max) {
    if (!c) return CT_E_INVALID_ARG;
    if (!counts) return ct_set_error(ct_comm_context(c), CT_E_INVALID_ARG, "%s: counts must not be NULL", fn);
    *total = *max = 0;
    for (int r = 0; r < ct_comm_size(c); r++) {
        if (counts[r] > (size_t)INT_MAX)
            return ct_set_error(ct_comm_context(c), CT_E_INVALID_ARG, "%s: segment %d holds %zu floats, more than INT_MAX",
                                fn, r, counts[r]);
        *total += counts[r];
        *max = CT_MAX(*max, counts[r]);
    }
    if (!x && *total) return ct_set_error(ct_comm_context(c), CT_E_INVALID_ARG, "%s: x must not be NULL", fn);
    return CT_OK;
}

/* int counts and displacements for the MPI v-collectives. */
static ct_status int_counts(ct_comm *c, const size_t *counts, int **cnt, int **dsp) {
    const int size = ct_comm_size(c);
    *cnt = malloc(sizeof(int) * (size_t)size);
    *dsp = malloc(sizeof(int) * (size_t)size);
    if (!*cnt || !*dsp) {
        free(*cnt);
        free(*dsp);
        *cnt = *dsp = NULL;
        return ct_set_error(ct_comm_context(c), CT_E_OOM, "out of memory for %d counts", size);
    }
    size_t off = 0;
    for (int r = 0; r < size; r++) {
        (*cnt)[r] = (int)counts[r];
        (*dsp)[r] = off <= (size_t)INT_MAX ? (int)off : -1;
        off += counts[r];
    }
    return CT_OK;
}

size_t ct_comm_ring_threshold_bytes(void) {
    const char *e = getenv("CT_RS_RING_FROM");
    if (e && *e) {
        char *end;
        unsigned long long v = strtoull(e, &end, 10);
        if (!*end) return (size_t)v;
    }
    return (size_t)CT_RS_RING_FROM_DEFAULT;
}

ct_status ct_comm_reduce_scatter_f32(ct_comm *c, float *x, const size_t *counts, ct_rs_algo algo, float *tmp) {
    size_t total, max;
    CT_TRY(check_counts(c, x, counts, "ct_comm_reduce_scatter_f32", &total, &max));
    const int size = ct_comm_size(c), rank = ct_comm_rank(c);
    CT_TRY(ct_comm_claim(c, "ct_comm_reduce_scatter_f32"));
    ct_comm_stats *st = ct_comm_stats_mut(c);
    st->reduce_scatter_calls++;
    st->reduce_scatter_bytes += total * sizeof(float);
    if (size == 1 || total == 0) return CT_OK;
    if (algo == CT_RS_AUTO) algo = total * sizeof(float) >= ct_comm_ring_threshold_bytes() ? CT_RS_RING : CT_RS_MPI;
    if (algo == CT_RS_RING && !tmp)
        return ct_set_error(ct_comm_context(c), CT_E_INVALID_ARG, "ct_comm_reduce_scatter_f32: the ring needs tmp");
    double t0 = ct_now_s();
    size_t *off = malloc(sizeof(size_t) * ((size_t)size + 1));
    if (!off) return ct_set_error(ct_comm_context(c), CT_E_OOM, "out of memory for %d offsets", size);
    off[0] = 0;
    for (int r = 0; r < size; r++) off[r + 1] = off[r] + counts[r];
    ct_status s = CT_OK;
    ct_comm_enter(c, algo == CT_RS_RING ? "MPI_Sendrecv (ring reduce-scatter)" : "MPI_Reduce_scatter");
    if (algo == CT_RS_RING) {
        /* step k: send segment (rank - k - 1) to the right, receive segment (rank - k - 2) from the left and add
         * it to ours; after size - 1 steps segment `rank` holds every rank's contribution */
        const int right = (rank + 1) % size, left = (rank + size - 1) % size;
        for (int k = 0; k < size - 1 && s == CT_OK; k++) {
            int sg = ((rank - k - 1) % size + size) % size, rg = ((rank - k - 2) % size + size) % size;
            s = sendrecv(c, x + off[sg], counts[sg], right, tmp, counts[rg], left, "MPI_Sendrecv (ring reduce-scatter)");
            float *y = x + off[rg];
            if (s == CT_OK)
                for (size_t i = 0; i < counts[rg]; i++) y[i] += tmp[i];
        }
    } else {
        int *cnt = NULL, *dsp = NULL;
        s = int_counts(c, counts, &cnt, &dsp);
        if (s == CT_OK) {
            int err = MPI_Reduce_scatter(MPI_IN_PLACE, x, cnt, MPI_FLOAT, MPI_SUM, ct_comm_mpi_handle(c));
            if (err != MPI_SUCCESS) s = ct_comm_mpi_fail(c, err, "MPI_Reduce_scatter");
            /* MPI leaves rank r's result at the start of the buffer: move it to its segment */
            else if (off[rank] && counts[rank]) memmove(x + off[rank], x, counts[rank] * sizeof(float));
        }
        free(cnt);
        free(dsp);
    }
    free(off);
    ct_comm_leave(c);
    st->seconds += ct_now_s() - t0;
    return s;
}

ct_status ct_comm_allgatherv_f32(ct_comm *c, float *x, const size_t *counts) {
    size_t total, max;
    CT_TRY(check_counts(c, x, counts, "ct_comm_allgatherv_f32", &total, &max));
    CT_TRY(ct_comm_claim(c, "ct_comm_allgatherv_f32"));
    ct_comm_stats *st = ct_comm_stats_mut(c);
    st->allgather_calls++;
    st->allgather_bytes += total * sizeof(float);
    if (ct_comm_size(c) == 1 || total == 0) return CT_OK;
    if (total > (size_t)INT_MAX)
        return ct_set_error(ct_comm_context(c), CT_E_INVALID_ARG,
                            "ct_comm_allgatherv_f32: %zu floats in all is more than INT_MAX", total);
    double t0 = ct_now_s();
    int *cnt = NULL, *dsp = NULL;
    ct_status s = int_counts(c, counts, &cnt, &dsp);
    ct_comm_enter(c, "MPI_Allgatherv");
    if (s == CT_OK) {
        int err = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, cnt, dsp, MPI_FLOAT, ct_comm_mpi_handle(c));
        if (err != MPI_SUCCESS) s = ct_comm_mpi_fail(c, err, "MPI_Allgatherv");
    }
    free(cnt);
    free(dsp);
    ct_comm_leave(c);
    st->seconds += ct_now_s() - t0;
    return s;
}

ct_status ct_comm_gatherv_f32(ct_comm *c, const float *send, const size_t *counts, float *recv, int root) {
    size_t total, max;
    CT_TRY(check_counts(c, send ? send : recv, counts, "ct_comm_gatherv_f32", &total, &max));
    const int size = ct_comm_size(c), rank = ct_comm_rank(c);
    if (root < 0 || root >= size)
        return ct_set_error(ct_comm_context(c), CT_E_INVALID_ARG, "ct_comm_gatherv_f32: root %d is not a rank of the %d",
                            root, size);
    if ((rank == root && !recv && total) || (!send && counts[rank]))
        return ct_set_error(ct_comm_context(c), CT_E_INVALID_ARG, "ct_comm_gatherv_f32: send / recv must not be NULL");
    CT_TRY(ct_comm_claim(c, "ct_comm_gatherv_f32"));
    ct_comm_stats *st = ct_comm_stats_mut(c);
    st->allgather_calls++;
    st->allgather_bytes += total * sizeof(float);
    if (size == 1) {
        if (counts[0] && recv && send && recv != send) memmove(recv, send, counts[0] * sizeof(float));
        return CT_OK;
    }
    if (total > (size_t)INT_MAX)
        return ct_set_error(ct_comm_context(c), CT_E_INVALID_ARG,
                            "ct_comm_gatherv_f32: %zu floats in all is more than INT_MAX", total);
    double t0 = ct_now_s();
    int *cnt = NULL, *dsp = NULL;
    ct_status s = int_counts(c, counts, &cnt, &dsp);
    ct_comm_enter(c, "MPI_Gatherv");
    if (s == CT_OK) {
        int err = MPI_Gatherv(send, cnt[rank], MPI_FLOAT, recv, cnt, dsp, MPI_FLOAT, root, ct_comm_mpi_handle(c));
        if (err != MPI_SUCCESS) s = ct_comm_mpi_fail(c, err, "MPI_Gatherv");
    }
    free(cnt);
    free(dsp);
    ct_comm_leave(c);
    st->seconds += ct_now_s() - t0;
    return s;
}
