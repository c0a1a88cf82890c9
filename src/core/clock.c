/* src/core/clock.c - the library's one monotonic clock (CLOCK_MONOTONIC):
 * step timings, the profiler's timestamps, MPI progress and hang detection,
 * metrics' flush interval, the CPU speed measurements. */
#include <time.h>

#include "core/internal.h"

int64_t ct_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + (int64_t)ts.tv_nsec;
}

double ct_now_s(void) { return 1e-9 * (double)ct_now_ns(); }
