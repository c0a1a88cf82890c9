/* bench/pingpong.c - the link under the ranks, measured through MPI: a
 * ping-pong between ranks 0 and 1 (one-way time = half the round trip) and
 * an in-place MPI_Allreduce (sum of floats) over all ranks, swept over
 * message sizes. bench/scale.py fits latency and bandwidth from its lines:
 *
 *   PP bytes=B us=T min_us=M   one-way time of a B-byte message (median and fastest of the rounds)
 *   AR np=N bytes=B us=T min_us=M   one allreduce of B bytes over N ranks (the same)
 *
 *   mpirun -np 2 build-bench/bench/pingpong [--max-mb 64] [--budget-ms 150]
 *   scripts/netns_mpirun.sh -n 1 --rate 1gbit -- build-bench/bench/pingpong
 *
 * Each size runs repetitions until about budget-ms has passed (at least 3),
 * in 5 rounds, after 3 warm-up repetitions; the median and the fastest round
 * are printed (on a loaded machine the fastest is the link, the median the
 * link plus the scheduler). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* repetitions so that one round lasts about budget_s (rank 0 decides, everyone follows) */
static int reps_for(double one, double budget_s) {
    int r = one > 0 ? (int)(budget_s / one) : 1000;
    return r < 3 ? 3 : (r > 10000 ? 10000 : r);
}

static double pingpong(char *buf, int bytes, int rank, int reps) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < reps; i++) {
        if (rank == 0) {
            MPI_Send(buf, bytes, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
            MPI_Recv(buf, bytes, MPI_BYTE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(buf, bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - t0) / reps / 2;
}

static double allreduce(float *buf, int count, int reps) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < reps; i++) MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = (MPI_Wtime() - t0) / reps;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return t;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    double max_mb = 64, budget_ms = 150;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--max-mb")) max_mb = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--budget-ms")) budget_ms = atof(argv[i + 1]);
    }
    long max_bytes = (long)(max_mb * 1048576.0);
    if (np < 2 || max_bytes < 8) {
        if (rank == 0) fprintf(stderr, "pingpong: needs at least 2 ranks and --max-mb of at least 8 bytes\n");
        MPI_Finalize();
        return 2;
    }
    char *buf = calloc((size_t)max_bytes, 1);
    if (!buf) {
        fprintf(stderr, "pingpong: out of memory for %ld bytes\n", max_bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    char host[MPI_MAX_PROCESSOR_NAME];
    int hl;
    MPI_Get_processor_name(host, &hl);
    if (rank == 0) printf("ENV np=%d host0=%s max_bytes=%ld budget_ms=%.0f\n", np, host, max_bytes, budget_ms);
    enum { ROUNDS = 5 };
    for (int kind = 0; kind < 2; kind++) {
        for (long b = 8; b <= max_bytes; b *= 4) {
            double one = kind == 0 ? pingpong(buf, (int)b, rank, 3) : allreduce((float *)buf, (int)(b / 4), 3);
            MPI_Bcast(&one, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
            int reps = reps_for(one, budget_ms / 1000.0 / ROUNDS);
            double t[ROUNDS];
            for (int r = 0; r < ROUNDS; r++)
                t[r] = kind == 0 ? pingpong(buf, (int)b, rank, reps) : allreduce((float *)buf, (int)(b / 4), reps);
            qsort(t, ROUNDS, sizeof t[0], cmp_d);
            if (rank == 0) {
                if (kind == 0) printf("PP bytes=%ld us=%.3f min_us=%.3f reps=%d\n", b, t[ROUNDS / 2] * 1e6, t[0] * 1e6, reps);
                else printf("AR np=%d bytes=%ld us=%.3f min_us=%.3f reps=%d\n", np, b, t[ROUNDS / 2] * 1e6, t[0] * 1e6, reps);
                fflush(stdout);
            }
        }
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
