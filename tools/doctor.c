/* tools/doctor.c - `ctrain doctor TRACE`: reads a Chrome trace written by
 * `ctrain train --profile DIR` and prints a verdict per KPI with advice
 * (the loss scale's among them). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ctrain/ctrain.h"

int ct_cli_doctor(int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: ctrain doctor TRACE\n\nReads a Chrome trace (ctrain train --profile DIR writes DIR/trace.json)\n"
               "and prints compute utilization, memory use, communication and data-stall shares and the\n"
               "loss-scale story (overflows, backoffs, growths, final scale, first non-finite tensor) with advice;\n"
               "for a pipeline rank's trace (trace.rank<k>.json), also the pipeline bubble against the\n"
               "schedule's ideal and the time spent receiving from the neighbouring stages.\n"
               "Exit code 0 when the trace could be read, 1 otherwise.\n");
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: ctrain doctor TRACE\n");
        return 2;
    }
    ct_context *ctx = NULL;
    ct_context_opts co;
    ct_context_opts_default(&co);
    co.num_threads = 1;
    ct_status cs = ct_context_create(&co, &ctx);
    if (cs != CT_OK) {
        cli_context_fail(cs);
        return 1;
    }
    ct_doctor_report r;
    ct_status s = ct_doctor_analyze_file(ctx, argv[1], &r);
    if (s != CT_OK) { /* the message carries its code once; the hint is about traces, not checkpoints */
        fprintf(stderr, "ctrain: error: %s\nctrain: hint: %s\n", ct_context_last_error(ctx),
                s == CT_E_IO ? "check the path: ctrain train --profile DIR (or recipe key profile_dir) writes "
                               "DIR/trace.json, pipeline ranks DIR/trace.rank<k>.json"
                : s == CT_E_OOM ? ct_status_advice(s)
                                : "give the Chrome trace that ctrain train --profile DIR wrote (DIR/trace.json); "
                                  "if the run was killed while writing it, profile the run again");
        ct_context_free(ctx);
        return 1;
    }
    printf("trace: %s\n", argv[1]);
    ct_doctor_print(&r, stdout);
    ct_context_free(ctx);
    return 0;
}
