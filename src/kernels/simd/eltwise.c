/* src/kernels/simd/eltwise.c - SIMD kernels (placeholder: declines, so the reference runs). */
#include "simd.h"

ct_status CT_FN(unary)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(unary_bwd)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(scale)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(binary)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(dropout)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
