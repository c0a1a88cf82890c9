/* src/kernels/ref/cast.c - CT_OP_CAST: f32 <-> bf16 <-> f16 through
 * ct_convert (bulk, SIMD when the CPU has it, threaded for large tensors;
 * bit-exact with the scalar conversions whatever runs). */
#include "kernels/kernels.h"
#include "ctrain/convert.h"

ct_status ct_k_cast(ct_kargs *k) {
    if (k->node->ia[1]) return CT_OK; /* its input's kernel wrote it (layernorm_bwd+cast) */
    ct_tensor src = k->in[0];
    return ct_convert(k->ctx, &src, &k->out);
}
