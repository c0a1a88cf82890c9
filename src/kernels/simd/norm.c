/* src/kernels/simd/norm.c - SIMD kernels (placeholder: declines, so the reference runs). */
#include "simd.h"

ct_status CT_FN(batchnorm)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(batchnorm_bwd_data)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(batchnorm_bwd_gamma)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(layernorm)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(layernorm_bwd_data)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(layernorm_bwd_gamma)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
