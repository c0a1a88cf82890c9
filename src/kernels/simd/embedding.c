/* src/kernels/simd/embedding.c - SIMD kernels (placeholder: declines, so the reference runs). */
#include "simd.h"

ct_status CT_FN(embedding)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(embedding_bwd)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
