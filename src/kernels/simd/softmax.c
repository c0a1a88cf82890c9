/* src/kernels/simd/softmax.c - SIMD kernels (placeholder: declines, so the reference runs). */
#include "simd.h"

ct_status CT_FN(softmax)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(log_softmax)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(softmax_bwd)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(log_softmax_bwd)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(cross_entropy)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status CT_FN(cross_entropy_bwd)(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
