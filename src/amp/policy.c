/* src/amp/policy.c - which loss scaling a precision needs by default. */
#include "ctrain/amp.h"

ct_amp_scaling ct_amp_default_scaling(ct_precision p) {
    switch (p) {
    case CT_PRECISION_FP16: return CT_AMP_SCALING_DYNAMIC;
    case CT_PRECISION_FP16_PURE: return CT_AMP_SCALING_STATIC;
    default: return CT_AMP_SCALING_NONE;
    }
}

const char *ct_amp_scaling_name(ct_amp_scaling s) {
    return s == CT_AMP_SCALING_DYNAMIC ? "dynamic" : s == CT_AMP_SCALING_STATIC ? "static" : "off";
}
