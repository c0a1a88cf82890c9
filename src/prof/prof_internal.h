/* src/prof/prof_internal.h - the executor's hook into the profiler (plan.c). */
#ifndef CT_PROF_INTERNAL_H
#define CT_PROF_INTERNAL_H
#include "ctrain/profile.h"
/* 1 when op events are being recorded now (checked only when a profiler is attached). */
int ct_prof_ops_active(const ct_profiler *p);
/* Records node `node` of the attached plan, run by kernel `slot`, from t0_us to now. */
void ct_prof_op(ct_profiler *p, int node, int slot, double t0_us);
#endif
