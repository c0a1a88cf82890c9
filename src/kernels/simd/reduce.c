/* src/kernels/simd/reduce.c - SIMD kernels (placeholder: declines, so the reference runs). */
#include "simd.h"

ct_status CT_FN(sum)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(broadcast_to)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(sum_to)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
