/* placeholder: oneDNN kernels decline, so the reference runs */
#include "kernels/kernels.h"
ct_status ct_k_matmul_onednn(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status ct_k_linear_onednn(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status ct_k_conv2d_onednn(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status ct_k_conv2d_bwd_data_onednn(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
ct_status ct_k_conv2d_bwd_weight_onednn(ct_kargs *k) { (void)k; return CT_E_UNSUPPORTED; }
void ct_onednn_cache_free(void *cache) { (void)cache; }
