/* tests/fuzz/fuzz_trace.c - the Chrome-trace reader of `ctrain doctor`
 * (src/prof/doctor.c, ct_doctor_analyze_json) on arbitrary bytes, then the
 * printed report. Invariants: a failure is CT_E_CORRUPT (not JSON,
 * truncated) or CT_E_CONFIG (no traceEvents) with a message; a report has
 * verdicts in range, event counts >= 0 and never more steps than events;
 * printing it writes a few lines. Casts of the trace's numbers are
 * checked by UBSan (float-cast-overflow in the clang build). */
#include <stdio.h>
#include <string.h>

#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ct_context *ctx = fuzz_ctx();
    ct_doctor_report r;
    ct_status s = ct_doctor_analyze_json(ctx, (const char *)data, size, &r);
    if (s != CT_OK) {
        fuzz_check_error(s);
        FUZZ_CHECK(s == CT_E_CORRUPT || s == CT_E_CONFIG, "a bad trace is CT_E_CORRUPT or CT_E_CONFIG");
        return 0;
    }
    FUZZ_CHECK(r.events >= 0 && r.steps >= 0 && r.steps <= r.events, "0 <= steps <= events");
    FUZZ_CHECK(r.dropped >= 0, "dropped events >= 0");
    FUZZ_CHECK(r.amp.events >= 0 && r.amp.overflows <= r.amp.events && r.amp.backoffs <= r.amp.events &&
                   r.amp.growths <= r.amp.events,
               "amp counts within the amp events");
    FUZZ_CHECK(r.pipeline_steps >= 0 && r.pipeline_steps <= r.events, "0 <= pipeline schedules <= events");
    ct_verdict v[] = {r.v_compute, r.v_memory, r.v_comm, r.v_data, r.v_amp, r.v_pipeline};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        FUZZ_CHECK(v[i] == CT_VERDICT_OK || v[i] == CT_VERDICT_WARN || v[i] == CT_VERDICT_UNKNOWN, "a verdict");
    FUZZ_CHECK(memchr(r.amp.first_nonfinite, 0, sizeof r.amp.first_nonfinite) != NULL, "a terminated tensor name");
    fuzz_note("trace: %lld events, %d steps", (long long)r.events, r.steps);
    ct_doctor_print(&r, fuzz_sink(8192)); /* a few lines */
    FUZZ_CHECK(fuzz_sink_count() > 0, "a report is printed");
    return 0;
}
