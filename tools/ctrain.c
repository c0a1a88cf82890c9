/* tools/ctrain.c - the `ctrain` command line: `ctrain train` runs a recipe
 * (JSON file and/or flags) with a live progress display and a test-set
 * evaluation. Errors print the library's message and exit non-zero. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ctrain <command> [options]\n"
            "\n"
            "commands:\n"
            "  train      train a model from a recipe (ctrain train --help)\n"
            "  sample     generate text with a GPT checkpoint (ctrain sample --help)\n"
            "  eval       accuracy, per-class accuracy, confusion matrix of an image checkpoint (ctrain eval --help)\n"
            "  predict    top-k classes of JPEG/PNG files with an image checkpoint (ctrain predict --help)\n"
            "  info       show the CPU features and kernels ctrain will use\n"
            "  doctor     read a profiler trace and give a verdict per KPI (ctrain doctor TRACE)\n"
            "  report     draw a metrics log as an HTML page (ctrain report --help)\n"
            "  graph      print a recipe's compiled plan: nodes, fused groups, memory; DOT (ctrain graph --help)\n"
            "  help       this message\n"
            "\n"
            "environment:\n"
            "  CT_ISA=ref|avx2|avx512       lowers the kernel ISA (ref also disables oneDNN)\n"
            "  CT_ONEDNN=0                  disables oneDNN kernels\n"
            "  GOMP_SPINCOUNT, OMP_WAIT_POLICY\n"
            "                               OpenMP waiting; when neither is set, ctrain re-executes itself\n"
            "                               once with GOMP_SPINCOUNT=10000 (idle threads sleep sooner, which\n"
            "                               is much faster on cores shared with other jobs)\n"
            "\n"
            "exit status: 0 success, 1 error (the message says what to do), 2 usage error.\n");
}

int main(int argc, char **argv) {
    /* libgomp's default spin-wait makes steps up to 5x slower on shared cores;
     * it reads the setting only at start-up, so this re-executes ctrain once
     * with GOMP_SPINCOUNT=10000 unless the user chose a policy (context.h).
     * On failure ctrain runs as is. */
    ct_openmp_limit_spin(argv);
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "train")) return ct_cli_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "sample")) return ct_cli_sample(argc - 1, argv + 1);
    if (!strcmp(argv[1], "eval")) return ct_cli_eval(argc - 1, argv + 1);
    if (!strcmp(argv[1], "predict")) return ct_cli_predict(argc - 1, argv + 1);
    if (!strcmp(argv[1], "info")) return ct_cli_info(argc - 1, argv + 1);
    if (!strcmp(argv[1], "doctor")) return ct_cli_doctor(argc - 1, argv + 1);
    if (!strcmp(argv[1], "report")) return ct_cli_report(argc - 1, argv + 1);
    if (!strcmp(argv[1], "graph")) return ct_cli_graph(argc - 1, argv + 1);
    fprintf(stderr, "ctrain: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
