/* ctrain/tensor.h - dtypes and tensor descriptors.
 *
 * ct_tensor is a plain descriptor: data pointer, dtype, shape, strides (in
 * elements). It never owns memory; views are just descriptors pointing into
 * memory owned elsewhere (an arena of a plan, or a buffer from ct_alloc). */
#ifndef CTRAIN_TENSOR_H
#define CTRAIN_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CT_MAX_DIMS 6

typedef enum ct_dtype {
    CT_F32 = 0,
    CT_BF16,
    CT_F16,
    CT_I32,
    CT_I64,
    CT_U8,
    CT_DTYPE_COUNT
} ct_dtype;

typedef struct ct_tensor {
    void *data;
    ct_dtype dtype;
    int ndim;
    int64_t shape[CT_MAX_DIMS];
    int64_t strides[CT_MAX_DIMS]; /* in elements */
} ct_tensor;

size_t ct_dtype_size(ct_dtype dt);
const char *ct_dtype_name(ct_dtype dt);

/* Contiguous (row-major) descriptor over `data`. */
ct_tensor ct_tensor_make(void *data, ct_dtype dt, int ndim, const int64_t *shape);
int64_t ct_tensor_numel(const ct_tensor *t);
size_t ct_tensor_nbytes(const ct_tensor *t);
int ct_tensor_is_contiguous(const ct_tensor *t);
/* Writes "[2, 3, 4]" into buf. Returns buf. */
char *ct_shape_str(int ndim, const int64_t *shape, char *buf, size_t len);

/* Scalar conversions (round to nearest even; NaN preserved). */
uint16_t ct_f32_to_bf16(float f);
float ct_bf16_to_f32(uint16_t h);
uint16_t ct_f32_to_f16(float f);
float ct_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif
