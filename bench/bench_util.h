/* bench/bench_util.h - what the C benches share: BENCH_DIE_IF (a failed ctrain call ends the bench with
 * the library's message; BENCH_NAME, defined before the include, names the bench), a monotonic clock and
 * qsort's comparison of doubles. */
#ifndef CT_BENCH_UTIL_H
#define CT_BENCH_UTIL_H
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ctrain/ctrain.h"

#ifndef BENCH_NAME
#error "define BENCH_NAME (the bench's name, for its messages) before including bench_util.h"
#endif

#define DIE_IF(ctx, expr)                                                                          \
    do {                                                                                           \
        ct_status s_ = (expr);                                                                     \
        if (s_ != CT_OK) {                                                                         \
            fprintf(stderr, BENCH_NAME ": %s failed: %s: %s\n", #expr, ct_status_name(s_),         \
                    (ctx) ? ct_context_last_error(ctx) : "");                                      \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

static inline double bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* qsort's comparison of doubles (medians of timings) */
static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
#endif
