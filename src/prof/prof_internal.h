/* src/prof/prof_internal.h - the profiler's recording entry points, used
 * by its node hook (profiler.c). */
#ifndef CT_PROF_INTERNAL_H
#define CT_PROF_INTERNAL_H
#include "ctrain/profile.h"
/* 1 when op events are being recorded now. */
int ct_prof_ops_active(const ct_profiler *p);
/* Records node `node`, run by `kernel` (a static string), from t0_us to now. */
void ct_prof_op(ct_profiler *p, int node, const char *kernel, double t0_us);
/* The unit whose peak bounds an op run by implementation `impl`
 * (ct_node_event.impl): 0 FP32 FMAs, 1 AVX512-BF16, 2 AMX BF16. */
int ct_prof_unit_of(const char *impl);
#endif
