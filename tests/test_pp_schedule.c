/* tests/test_pp_schedule.c - the pipeline schedules (src/train/pp_schedule.c) for P = 1 .. 8 stages and
 * M = 1 .. 16 micro-batches, simulated with every rank (receives block, sends do not):
 *  - each finishes (no deadlock) and runs each (piece, micro-batch) forward and backward exactly once;
 *  - every rank's backwards of a piece come in micro-batch order (the gradients add up in one process's order);
 *  - GPipe holds M micro-batches on the first stage, 1F1B min(P, M): P / M of GPipe's;
 *  - the bubble of GPipe and 1F1B is (P - 1) / (M + P - 1); interleaved's is smaller. */
#include "test.h"
#include "train/train_internal.h"

ct_context *test_ctx(int isa, int use_onednn);

static int check_one(ct_context *ctx, int kind, int P, int v, int M, ct_pp_sim *sim) {
    ct_pp_action *a = malloc(sizeof *a * (size_t)(2 * M * v));
    int *seen = calloc((size_t)(P * v * M * 2), sizeof(int));
    int ok = a && seen;
    for (int r = 0; ok && r < P; r++) {
        int n = ct_pp_schedule(kind, P, v, M, r, a);
        ok = n == 2 * M * v;
        int last_b[64];
        for (int c = 0; c < v; c++) last_b[c] = -1;
        for (int i = 0; ok && i < n; i++) {
            int k = a[i].chunk * P + r;
            seen[(k * M + a[i].micro) * 2 + a[i].fwd]++;
            if (!a[i].fwd) {
                ok = a[i].micro > last_b[a[i].chunk];
                last_b[a[i].chunk] = a[i].micro;
            }
        }
    }
    for (int i = 0; ok && i < P * v * M * 2; i++) ok = seen[i] == 1;
    free(a), free(seen);
    return ok && ct_pp_simulate(ctx, kind, P, v, M, sim) == CT_OK && sim->finished;
}

TEST(schedules_finish_and_hold_what_they_should) {
    ct_context *ctx = test_ctx(-1, 1);
    int runs = 0;
    for (int P = 1; P <= 8; P++)
        for (int M = 1; M <= 16; M++) {
            ct_pp_sim g, f;
            CHECK_MSG(check_one(ctx, CT_PP_GPIPE, P, 1, M, &g), "gpipe P %d M %d: %s", P, M, ct_context_last_error(ctx));
            CHECK_MSG(check_one(ctx, CT_PP_1F1B, P, 1, M, &f), "1f1b P %d M %d: %s", P, M, ct_context_last_error(ctx));
            const double ideal = (double)(P - 1) / (M + P - 1);
            CHECK_MSG(fabs(g.bubble - ideal) < 1e-9 && fabs(f.bubble - ideal) < 1e-9, "P %d M %d: bubble %g / %g, "
                      "ideal %g", P, M, g.bubble, f.bubble, ideal);
            CHECK_MSG(g.slots[0] == M && f.slots[0] == (P < M ? P : M), "P %d M %d: first stage holds %d (gpipe) / %d "
                      "(1f1b)", P, M, g.slots[0], f.slots[0]);
            for (int r = 0; r < P; r++) CHECK(f.slots[r] <= g.slots[r]);
            runs += 2;
            for (int v = 2; v <= 3 && P > 1; v++) {
                if (M % P) continue;
                ct_pp_sim s;
                CHECK_MSG(check_one(ctx, CT_PP_INTERLEAVED, P, v, M, &s), "interleaved P %d v %d M %d: %s", P, v, M,
                          ct_context_last_error(ctx));
                CHECK_MSG(s.bubble < ideal, "interleaved P %d v %d M %d: bubble %g, not below %g", P, v, M, s.bubble,
                          ideal);
                runs++;
            }
        }
    ct_pp_sim a, b, c;
    CHECK_OK(ctx, ct_pp_simulate(ctx, CT_PP_GPIPE, 4, 1, 16, &a));
    CHECK_OK(ctx, ct_pp_simulate(ctx, CT_PP_1F1B, 4, 1, 16, &b));
    CHECK_OK(ctx, ct_pp_simulate(ctx, CT_PP_INTERLEAVED, 4, 2, 16, &c));
    printf("    %d schedules simulated; P 4 M 16: bubble gpipe %.3f, 1f1b %.3f, interleaved(2) %.3f; first stage "
           "holds %d / %d / %d micro-batches\n", runs, a.bubble, b.bubble, c.bubble, a.slots[0], b.slots[0], c.slots[0]);
    ct_context_free(ctx);
}

/* 1f1b and gpipe make 2 M actions whatever v is (the trainer gives them v 1): a simulation with v > 1 is
 * CT_E_INTERNAL, not a read of the actions never written. */
TEST(simulation_refuses_virtual_stages_a_schedule_ignores) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_pp_sim s;
    CHECK(ct_pp_simulate(ctx, CT_PP_GPIPE, 2, 2, 4, &s) == CT_E_INTERNAL);
    CHECK(ct_pp_simulate(ctx, CT_PP_1F1B, 2, 3, 4, &s) == CT_E_INTERNAL);
    CHECK_MSG(strstr(ct_context_last_error(ctx), "1f1b: rank 0 has 8 actions, not 2 x 4 micro-batches x 3"), "%s",
              ct_context_last_error(ctx));
    ct_context_free(ctx);
}

TEST_MAIN(T(schedules_finish_and_hold_what_they_should), T(simulation_refuses_virtual_stages_a_schedule_ignores))
