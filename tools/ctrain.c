/* tools/ctrain.c - the `ctrain` command line: `ctrain train` runs a recipe
 * (JSON file and/or flags) with a live progress display and a test-set
 * evaluation. Errors print the library's message and exit non-zero. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ctrain <command> [options]\n"
            "\n"
            "commands:\n"
            "  train      train a model from a recipe (ctrain train --help)\n"
            "  sample     generate text with a GPT checkpoint (ctrain sample --help)\n"
            "  info       show the CPU features and kernels ctrain will use\n"
            "  doctor     read a profiler trace and give a verdict per KPI (ctrain doctor TRACE)\n"
            "  report     draw a metrics log as an HTML page (ctrain report --help)\n"
            "  help       this message\n"
            "\n"
            "environment: CT_ISA=ref|avx2|avx512 lowers the kernel ISA (ref also disables oneDNN),\n"
            "             CT_ONEDNN=0 disables oneDNN kernels.\n");
}

/* OpenMP threads that wait at a barrier spin for a long time by default
 * (GOMP_SPINCOUNT 300000). On a machine shared with other jobs that makes a
 * step 5x slower (measured: 50 MLP steps 15.7 s vs 3.3 s beside a 2-thread
 * neighbour) for no gain when quiet. libgomp reads the setting only at
 * start-up, so ctrain re-executes itself once with a short spin unless the
 * user chose a policy. */
static void bound_openmp_spin(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("GOMP_SPINCOUNT", "10000", 1) != 0) return;
    execv("/proc/self/exe", argv); /* returns only on failure: run as is */
}

int main(int argc, char **argv) {
    bound_openmp_spin(argv);
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "train")) return ct_cli_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "sample")) return ct_cli_sample(argc - 1, argv + 1);
    if (!strcmp(argv[1], "info")) return ct_cli_info(argc - 1, argv + 1);
    if (!strcmp(argv[1], "doctor")) return ct_cli_doctor(argc - 1, argv + 1);
    if (!strcmp(argv[1], "report")) return ct_cli_report(argc - 1, argv + 1);
    fprintf(stderr, "ctrain: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
