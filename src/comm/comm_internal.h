/* src/comm/comm_internal.h - what the files outside comm.c (zero_collectives.c,
 * bucket.c, groups.c) need of the communicator: its MPI communicator
 * (MPI_COMM_NULL for a world of one process), its context, its statistics,
 * comm.c's error message for a failed MPI call, and sub-communicators. */
#ifndef CT_COMM_COMM_INTERNAL_H
#define CT_COMM_COMM_INTERNAL_H

#include <mpi.h>

#include "ctrain/dist.h"

MPI_Comm ct_comm_mpi_handle(ct_comm *c);
ct_context *ct_comm_context(ct_comm *c);
ct_comm_stats *ct_comm_stats_mut(ct_comm *c);
ct_status ct_comm_mpi_fail(ct_comm *c, int err, const char *what);
/* ct_buckets (bucket.c) lends the communicator to its progress thread
 * between ct_buckets_begin and ct_buckets_finish; meanwhile every blocking
 * collective (comm.c, zero_collectives.c) refuses with CT_E_STATE (ct_comm_claim)
 * instead of racing the thread (MPI_THREAD_SERIALIZED) or sending its
 * collective between two buckets on one rank only. */
void ct_comm_lend(ct_comm *c, int on);
/* A sub-communicator (collective over parent, MPI_Comm_split): the parent's ranks of
 * the same color, ordered by key; `what` names the groups in messages ("tensor
 * parallel"). Under a world of one process, a group of one without MPI. Freed by
 * ct_comm_free (which finalizes nothing: the world owns MPI). */
ct_status ct_comm_split(ct_comm *parent, int color, int key, const char *what, ct_comm **out);
ct_status ct_comm_claim(ct_comm *c, const char *fn);

#endif
