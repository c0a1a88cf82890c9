/* src/kernels/onednn/lowp.c - whether matmul, linear and conv2d (forward,
 * backward data, backward weights) read and write BF16 themselves through
 * oneDNN's bf16 primitives in a context, or compute on FP32 copies
 * (ct_context_lowp_native, include/ctrain/graph.h). The plan asks once per
 * compile (kernel selection); `ctrain info` prints the line.
 *
 * The rule: native where oneDNN runs BF16 in hardware that is faster than
 * the FP32 FMAs, and the context allows AVX-512 and oneDNN (CT_ISA,
 * CT_ONEDNN). oneDNN's effective ISA (which ONEDNN_MAX_CPU_ISA can lower)
 * says what it runs: AMX is always native; AVX512-BF16 alone is native when
 * its dot products give more FLOPs per second than FP32 FMAs, measured once
 * per process (ct_cpu_bf16_dot_ratio: about 2x on AMD Zen 4 / 5; about 0.5x
 * on Intel Sapphire / Emerald Rapids, whose BF16 matmuls without AMX ran
 * 1.3-1.6x slower than FP32's). Otherwise matmul, linear and conv2d get FP32
 * copies and the SIMD kernels still read BF16. CT_BF16_NATIVE=1
 * forces the native path on any CPU where the context allows it: on plain
 * AVX-512 oneDNN 2.6 emulates BF16 in its JIT kernels (slower than the FP32
 * copies; this is how the path is tested without BF16 hardware), and below
 * AVX-512 it has no BF16 primitive at all, so every node falls back to FP32
 * copies at its first run (the executor's fallback, graph/executor.c).
 * CT_BF16_NATIVE=0 turns it off. FP16 is never native: oneDNN 2.6 has no
 * FP16 matmul or convolution on CPUs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl_debug.h>

#include "ctrain/graph.h"
#include "kernels/onednn/onednn.h"

static int isa_has(dnnl_cpu_isa_t have, dnnl_cpu_isa_t want) {
    return ((unsigned)have & (unsigned)want) == (unsigned)want;
}

/* oneDNN's name of its effective ISA without the "cpu_isa_" prefix. */
static const char *isa_name(dnnl_cpu_isa_t isa) {
    const char *n = dnnl_cpu_isa2str(isa);
    return n && !strncmp(n, "cpu_isa_", 8) ? n + 8 : (n ? n : "unknown");
}

/* The implementation oneDNN picks for a 64x64x64 matmul in dt (bf16 in,
 * bf16 out), e.g. "gemm:jit" or "brg:avx512_core_amx"; "none" when it has
 * none. */
static void matmul_impl(dnnl_data_type_t dt, char *out, size_t len) {
    snprintf(out, len, "none");
    dnnl_engine_t eng;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) return;
    const dnnl_dims_t dims = {64, 64}, strides = {64, 1};
    dnnl_memory_desc_t md;
    dnnl_matmul_desc_t d;
    dnnl_primitive_desc_t pd;
    if (dnnl_memory_desc_init_by_strides(&md, 2, dims, dt, strides) == dnnl_success &&
        dnnl_matmul_desc_init(&d, &md, &md, NULL, &md) == dnnl_success &&
        dnnl_primitive_desc_create(&pd, &d, NULL, eng, NULL) == dnnl_success) {
        const char *impl = NULL;
        if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
            snprintf(out, len, "%s", impl);
        dnnl_primitive_desc_destroy(pd);
    }
    dnnl_engine_destroy(eng);
}

ct_status ct_context_lowp_native(ct_context *ctx, ct_dtype dt, int *native, char *how, size_t how_len) {
    if (!ctx || !native) return CT_E_INVALID_ARG;
    *native = 0;
    if (how && how_len) how[0] = 0;
    if (dt != CT_BF16 && dt != CT_F16)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "lowp_native: %s is not a low-precision dtype (bf16 or f16)",
                            ct_dtype_name(dt));
    int force = -1;
    const char *env = dt == CT_BF16 ? getenv("CT_BF16_NATIVE") : NULL;
    if (env && *env) {
        if (!strcmp(env, "0")) force = 0;
        else if (!strcmp(env, "1")) force = 1;
        else
            return ct_set_error(ctx, CT_E_CONFIG,
                                "CT_BF16_NATIVE='%s' is not 0 or 1: 1 forces oneDNN's BF16 primitives for matmul, "
                                "linear and conv2d, 0 gives them FP32 copies; unset it for the default (native "
                                "on AMX, or on AVX512-BF16 where it beats FP32 FMAs: ctrain info)",
                                env);
    }
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    const int hw = isa_has(isa, dnnl_cpu_isa_avx512_core_bf16); /* AMX's value includes these bits */
    const int amx = isa_has(isa, dnnl_cpu_isa_avx512_core_amx);
    const char *why;
    char buf[320];
    if (dt == CT_F16) why = "FP32 copies: oneDNN 2.6 has no FP16 matmul or convolution on CPUs";
    else if (!ct_context_use_onednn(ctx))
        why = "FP32 copies: oneDNN is off (CT_ONEDNN=0, CT_ISA=ref or ct_context_opts.use_onednn)";
    else if (ct_context_isa(ctx) < CT_ISA_AVX512)
        why = "FP32 copies: the context's ISA is below AVX-512 (CT_ISA or ct_context_opts.isa)";
    else if (force == 0) why = "FP32 copies: CT_BF16_NATIVE=0";
    else if (force == 1) {
        *native = 1;
        why = hw ? "native (CT_BF16_NATIVE=1; oneDNN runs BF16 in hardware here anyway)"
              : isa_has(isa, dnnl_cpu_isa_avx512_core)
                  ? "native, forced by CT_BF16_NATIVE=1: without AVX512-BF16 oneDNN emulates BF16 in its AVX-512 "
                    "kernels (slower than FP32 copies: for testing)"
                  : "forced by CT_BF16_NATIVE=1, but oneDNN has no BF16 primitive below AVX-512: each node falls "
                    "back to FP32 copies at its first run";
    } else if (amx) {
        *native = 1;
        why = "native: oneDNN runs BF16 on AMX tiles";
    } else if (hw) {
        double r = ct_cpu_bf16_dot_ratio();
        *native = r > 1.0;
        snprintf(buf, sizeof buf,
                 *native ? "native: oneDNN runs BF16 on AVX512-BF16, whose dot products give %.2fx the FLOP rate of "
                           "FP32 FMAs here (measured)"
                         : "FP32 copies: this CPU's AVX512-BF16 dot products give %.2fx the FLOP rate of its FP32 "
                           "FMAs (measured), so BF16 matmuls run faster on FP32 (no AMX here); CT_BF16_NATIVE=1 "
                           "forces oneDNN's BF16",
                 r);
        why = buf;
    } else
        why = "FP32 copies: oneDNN has no AVX512-BF16 or AMX here (CT_BF16_NATIVE=1 forces its emulated BF16)";
    if (how && how_len) {
        char impl[64];
        matmul_impl(dt == CT_BF16 ? dnnl_bf16 : dnnl_f16, impl, sizeof impl);
        snprintf(how, how_len, "%s [oneDNN ISA %s, %s matmul: %s]", why, isa_name(isa), ct_dtype_name(dt), impl);
    }
    return CT_OK;
}
