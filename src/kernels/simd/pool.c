/* src/kernels/simd/pool.c - SIMD kernels (placeholder: declines, so the reference runs). */
#include "simd.h"

ct_status CT_FN(maxpool2d)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(maxpool2d_bwd)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(avgpool2d)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(avgpool2d_bwd)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
