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
            "  help [CMD] this message, or CMD's options (the same as ctrain CMD --help)\n"
            "  --version  the version of ctrain, its library and its checkpoint format\n"
            "\n"
            "environment:\n"
            "  CT_ISA=ref|avx2|avx512       lowers the kernel ISA (ref also disables oneDNN)\n"
            "  CT_ONEDNN=0|1                0 disables oneDNN kernels\n"
            "  CT_FLUSH_SUBNORMALS=0|1      0 keeps subnormal floats (PyTorch's default; slower), 1 flushes them\n"
            "  CT_HUGE_PAGES=0|1            0: large buffers on 4 KiB pages (1, the default: transparent huge pages)\n"
            "  CT_ATTENTION_AMX=0|1         0: BF16 attention's products on oneDNN primitives (1, the default: AMX\n"
            "                               tiles called directly, where the CPU has them and Dh is a multiple of 32)\n"
            "  CT_MATMUL_AMX=auto|1|0       BF16 linears and matmuls on ctrain's GEMM on AMX tiles (where the CPU\n"
            "                               has them): auto (the default) where the shape is one it is faster on\n"
            "                               (>= 1024 tokens, no side under 128), 1 on every shape, 0 on none\n"
            "                               (oneDNN's primitives)\n"
            "  CT_BF16_NATIVE=0|1           0: BF16/FP16 plans run FP32 copies of every op (for comparison)\n"
            "  CT_ONEDNN_PACK_WEIGHTS=0|1   1: oneDNN's BF16 GEMMs read the weights packed once per update\n"
            "                               (faster evaluation forwards, slower training steps; 0, the default)\n"
            "  CT_ONEDNN_BWD_DATA=fwd|bwd|auto\n"
            "                               stride-1 convolution data gradients as a forward convolution of the\n"
            "                               flipped weights (fwd), as oneDNN's backward (bwd), or by measured\n"
            "                               rule (auto, the default: fwd where oneDNN's forward is the faster kernel)\n"
            "  GOMP_SPINCOUNT, OMP_WAIT_POLICY\n"
            "                               OpenMP waiting; when neither is set, ctrain re-executes itself\n"
            "                               once with GOMP_SPINCOUNT=10000 (idle threads sleep sooner, which\n"
            "                               is much faster on cores shared with other jobs)\n"
            "\n"
            "exit status: 0 success, 1 error (the message says what to do), 2 usage error.\n");
}

/* argv[0] is the command */
static int dispatch(int argc, char **argv) {
    if (!strcmp(argv[0], "train")) return ct_cli_train(argc, argv);
    if (!strcmp(argv[0], "sample")) return ct_cli_sample(argc, argv);
    if (!strcmp(argv[0], "eval")) return ct_cli_eval(argc, argv);
    if (!strcmp(argv[0], "predict")) return ct_cli_predict(argc, argv);
    if (!strcmp(argv[0], "info")) return ct_cli_info(argc, argv);
    if (!strcmp(argv[0], "doctor")) return ct_cli_doctor(argc, argv);
    if (!strcmp(argv[0], "report")) return ct_cli_report(argc, argv);
    if (!strcmp(argv[0], "graph")) return ct_cli_graph(argc, argv);
    fprintf(stderr, "ctrain: unknown command '%s'\n\n", argv[0]);
    usage(stderr);
    return 2;
}

int main(int argc, char **argv) {
    /* libgomp's default spin-wait makes steps up to 5x slower on shared cores;
     * it reads the setting only at start-up, so this re-executes ctrain once
     * with GOMP_SPINCOUNT=10000 unless the user chose a policy (context.h).
     * On failure ctrain runs as is. */
    ct_openmp_limit_spin(argv);
    if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version"))) {
        printf("ctrain %s (libctrain %s, checkpoint format %s)\n", CT_VERSION_STRING, ct_version(),
               ct_checkpoint_format_version());
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "help")) { /* ctrain help CMD: CMD --help */
        char *args[] = {argv[2], "--help", NULL};
        if (strcmp(argv[2], "help")) return dispatch(2, args);
    }
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    return dispatch(argc - 1, argv + 1);
}
