/* src/comm/groups.c - process groups (dist.h, "process groups"): the world
 * factored as tensor x data x pipeline, each group a sub-communicator
 * (MPI_Comm_split with the group's index as color and the rank's place in it
 * as key, so group ranks follow the documented order). The sizes are agreed
 * on first: ranks that disagree fail alike instead of splitting into groups
 * that never meet. */
#include <stdlib.h>

#include "core/internal.h"
#include "comm_internal.h"

int ct_comm_grid_world_rank(const ct_comm_grid *g, int tensor_rank, int data_rank, int pipeline_rank) {
    if (!g) return 0;
    return tensor_rank + g->tensor * (data_rank + g->data * pipeline_rank);
}

void ct_comm_grid_free(ct_comm_grid *g) {
    if (!g) return;
    ct_comm_free(g->tensor_group);
    ct_comm_free(g->data_group);
    ct_comm_free(g->pipeline_group);
    free(g);
}

static ct_status check_sizes(ct_comm *world, int tensor, int pipeline) {
    ct_context *ctx = ct_comm_context(world);
    const int n = ct_comm_size(world);
    if (tensor < 1 || pipeline < 1)
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "process groups: tensor (%d) and pipeline (%d) group sizes must be at least 1", tensor,
                            pipeline);
    const long long tp = (long long)tensor * pipeline;
    if (tp > n || n % tp)
        return ct_set_error(ctx, CT_E_CONFIG,
                            "a world of %d rank%s does not factor into tensor parallel %d x pipeline %d x data: launch a "
                            "multiple of %lld ranks (mpirun -np %lld, %lld, ...) or change the group sizes",
                            n, n == 1 ? "" : "s", tensor, pipeline, tp, tp, 2 * tp);
    uint64_t h = ct_hash64(&tensor, sizeof tensor, CT_HASH64_INIT);
    h = ct_hash64(&pipeline, sizeof pipeline, h);
    return ct_comm_agree(world, "the process grid (tensor and pipeline group sizes)", h,
                         "every rank must be started with the same tensor and pipeline sizes");
}

ct_status ct_comm_grid_create(ct_comm *world, int tensor, int pipeline, ct_comm_grid **out) {
    if (!world || !out) return ct_set_error(NULL, CT_E_INVALID_ARG, "ct_comm_grid_create: NULL argument");
    *out = NULL;
    CT_TRY(check_sizes(world, tensor, pipeline));
    ct_comm_grid *g = calloc(1, sizeof *g);
    if (!g) return ct_set_error(ct_comm_context(world), CT_E_OOM, "out of memory creating the process groups");
    const int r = ct_comm_rank(world);
    g->tensor = tensor;
    g->pipeline = pipeline;
    g->data = ct_comm_size(world) / (tensor * pipeline);
    g->tensor_rank = r % tensor;
    g->data_rank = (r / tensor) % g->data;
    g->pipeline_rank = r / (tensor * g->data);
    /* color: which group of that kind (every other coordinate); key: the place in it */
    const int tp_color = g->data_rank + g->data * g->pipeline_rank;
    const int dp_color = g->tensor_rank + tensor * g->pipeline_rank;
    const int pp_color = g->tensor_rank + tensor * g->data_rank;
    ct_status s = ct_comm_split(world, tp_color, g->tensor_rank, "tensor parallel", &g->tensor_group);
    if (s == CT_OK) s = ct_comm_split(world, dp_color, g->data_rank, "data parallel", &g->data_group);
    if (s == CT_OK) s = ct_comm_split(world, pp_color, g->pipeline_rank, "pipeline", &g->pipeline_group);
    if (s != CT_OK) {
        ct_comm_grid_free(g);
        return s;
    }
    *out = g;
    return CT_OK;
}
