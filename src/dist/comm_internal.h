/* src/dist/comm_internal.h - what the collectives outside comm.c (zero.c)
 * need of the communicator: its MPI communicator (MPI_COMM_NULL for a world
 * of one process), its context, its statistics, and comm.c's error message
 * for a failed MPI call. */
#ifndef CT_DIST_COMM_INTERNAL_H
#define CT_DIST_COMM_INTERNAL_H

#include <mpi.h>

#include "ctrain/dist.h"

MPI_Comm ct_comm_mpi_handle(ct_comm *c);
ct_context *ct_comm_context(ct_comm *c);
ct_comm_stats *ct_comm_stats_mut(ct_comm *c);
ct_status ct_comm_mpi_fail(ct_comm *c, int err, const char *what);

#endif
