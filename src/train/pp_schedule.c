/* src/train/pp_schedule.c - the pipeline schedules (pipeline.c runs them):
 * the ordered forward / backward actions of each pipeline rank, and a
 * simulation of all ranks together (a rank's receive blocks until its peer
 * sent; sends never block) that proves a schedule finishes and measures
 * its activation slots and its bubble. Pure functions: no MPI. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "train_internal.h"

const char *ct_pp_schedule_name(int kind) {
    return kind == CT_PP_GPIPE ? "gpipe" : kind == CT_PP_INTERLEAVED ? "interleaved" : "1f1b";
}

/* Interleaved: virtual micro-batch k's chunk (forward order; backward: the chunks reversed) and micro-batch. */
static int vchunk(int k, int P, int v, int fwd) {
    int c = (k % (P * v)) / P;
    return fwd ? c : v - 1 - c;
}
static int vmicro(int k, int P, int v) { return (k / (P * v)) * P + k % P; }

int ct_pp_schedule(int kind, int P, int v, int M, int r, ct_pp_action *out) {
    int n = 0;
    if (kind == CT_PP_GPIPE) {
        for (int m = 0; m < M; m++) out[n++] = (ct_pp_action){1, 0, m};
        for (int m = 0; m < M; m++) out[n++] = (ct_pp_action){0, 0, m};
        return n;
    }
    if (kind == CT_PP_1F1B || v == 1) {
        const int nw = CT_MIN(P - r - 1, M);
        for (int m = 0; m < nw; m++) out[n++] = (ct_pp_action){1, 0, m};
        for (int i = 0; i < M - nw; i++) {
            out[n++] = (ct_pp_action){1, 0, nw + i};
            out[n++] = (ct_pp_action){0, 0, i};
        }
        for (int m = M - nw; m < M; m++) out[n++] = (ct_pp_action){0, 0, m};
        return n;
    }
    /* Megatron's interleaved 1F1B: M a multiple of P; warm up with (P - r - 1) x 2 + (v - 1) x P forwards */
    const int N = M * v;
    int nw = M == P ? N : CT_MIN((P - r - 1) * 2 + (v - 1) * P, N);
    for (int k = 0; k < nw; k++) out[n++] = (ct_pp_action){1, vchunk(k, P, v, 1), vmicro(k, P, v)};
    for (int i = 0; i < N - nw; i++) {
        out[n++] = (ct_pp_action){1, vchunk(nw + i, P, v, 1), vmicro(nw + i, P, v)};
        out[n++] = (ct_pp_action){0, vchunk(i, P, v, 0), vmicro(i, P, v)};
    }
    for (int k = N - nw; k < N; k++) out[n++] = (ct_pp_action){0, vchunk(k, P, v, 0), vmicro(k, P, v)};
    return n;
}

/* Whether action a of rank r can run: its input from the neighbouring piece is there (done[] per piece and
 * micro-batch: 1 forward done, 2 backward done). */
static int ready(const ct_pp_action *a, int r, int P, int n_pieces, int M, const uint8_t *done) {
    const int k = a->chunk * P + r;
    if (a->fwd) return k == 0 || done[(size_t)(k - 1) * (size_t)M + (size_t)a->micro] >= 1;
    if (done[(size_t)k * (size_t)M + (size_t)a->micro] < 1) return 0; /* its own forward */
    return k == n_pieces - 1 || done[(size_t)(k + 1) * (size_t)M + (size_t)a->micro] >= 2;
}

ct_status ct_pp_simulate(ct_context *ctx, int kind, int P, int v, int M, ct_pp_sim *out) {
    memset(out, 0, sizeof *out);
    const int per = 2 * M * v, n_pieces = P * v;
    ct_pp_action *acts = malloc(sizeof *acts * (size_t)P * (size_t)per);
    int *pos = calloc((size_t)P, sizeof *pos), *fly = calloc((size_t)P, sizeof *fly);
    uint8_t *done = calloc((size_t)n_pieces * (size_t)M, 1);
    if (!acts || !pos || !fly || !done) {
        free(acts), free(pos), free(fly), free(done);
        return ct_set_error(ctx, CT_E_OOM, "out of memory simulating the pipeline schedule");
    }
    for (int r = 0; r < P; r++) {
        const int n = ct_pp_schedule(kind, P, v, M, r, acts + (size_t)r * (size_t)per);
        if (n != per) { /* every action the simulation reads is written: 1f1b and gpipe make 2 M (v must be 1) */
            free(acts), free(pos), free(fly), free(done);
            return ct_set_error(ctx, CT_E_INTERNAL, "pipeline schedule %s: rank %d has %d actions, not 2 x %d "
                                "micro-batches x %d virtual stages (1f1b and gpipe take 1)", ct_pp_schedule_name(kind),
                                r, n, M, v);
        }
    }
    /* time steps of one action each (forward = backward = 1 unit, a simplification) */
    int left = P * per, t = 0;
    while (left > 0) {
        int moved = 0;
        uint8_t *snap = malloc((size_t)n_pieces * (size_t)M);
        if (!snap) break;
        memcpy(snap, done, (size_t)n_pieces * (size_t)M); /* one step: everybody sees the previous state */
        for (int r = 0; r < P; r++) {
            if (pos[r] == per) continue;
            const ct_pp_action *a = acts + (size_t)r * (size_t)per + pos[r];
            if (!ready(a, r, P, n_pieces, M, snap)) continue;
            done[(size_t)(a->chunk * P + r) * (size_t)M + (size_t)a->micro] = a->fwd ? 1 : 2;
            fly[r] += a->fwd ? 1 : -1;
            if (fly[r] > out->slots[r < CT_PP_MAX_SIM ? r : CT_PP_MAX_SIM - 1])
                out->slots[r < CT_PP_MAX_SIM ? r : CT_PP_MAX_SIM - 1] = fly[r];
            pos[r]++, left--, moved = 1;
        }
        free(snap);
        t++;
        if (!moved) break;
    }
    out->finished = left == 0;
    out->time_units = t;
    /* each rank works per units of the schedule: its bubble is the idle share of the makespan */
    out->bubble = t > 0 ? 1.0 - (double)per / (double)t : 0;
    free(acts), free(pos), free(fly), free(done);
    if (!out->finished)
        return ct_set_error(ctx, CT_E_INTERNAL, "pipeline schedule %s deadlocks at P %d, virtual stages %d, %d "
                            "micro-batches", ct_pp_schedule_name(kind), P, v, M);
    return CT_OK;
}
