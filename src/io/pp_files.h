/* src/io/pp_files.h - weights files and checkpoints of pipeline stages (src/io/pp_files.c): the stages'
 * tensors gathered into the one-process file on pipeline rank 0, and the check that the stages' loads
 * together take every tensor of a file. Used by checkpoint.c. Internal. */
#ifndef CT_IO_PP_FILES_H
#define CT_IO_PP_FILES_H

#include "ctrain/dist.h"
#include "io/safetensors.h"

/* Collective over the pipeline group pp. Every rank passes its tensors t (n of them; data whole tensors) with
 * keys[i], t[i]'s place in the whole model (equal keys on two ranks: copies of one tensor, e.g. a tied
 * embedding), or contribute 0 to add none (a tensor rank other than 0, whose tensors are shards); s: the
 * rank's status so far (a rank that failed still takes part; every rank then returns an error). Pipeline
 * rank 0 gets *out: every key once, in ascending order, taken from the lowest rank holding it; the data of
 * the other ranks' tensors in *buf (the caller frees *out and *buf). Other ranks get *out NULL, *n_out 0.
 * Two ranks giving one key different names or shapes is CT_E_INTERNAL on every rank. */
ct_status ct_pp_gather(ct_context *ctx, ct_comm *pp, ct_status s, const ct_st_tensor *t, const int64_t *keys, int n,
                       int contribute, ct_st_tensor **out, int *n_out, float **buf);

/* Collective over pp after every stage matched its part of the same nf (<= 4) files with ct_st_match_part
 * (s: this rank's status so far; files[k] need not have been read when s != CT_OK). claimed[k]: the file's
 * tensors this rank took (files[k]->n_tensors bytes), or NULL: file k is not checked. Returns s where it
 * failed, the failed rank's code elsewhere; CT_E_CONFIG when the stages read files with different numbers of
 * tensors or a tensor of a file no stage took ("from another model"), on every rank alike. */
ct_status ct_pp_check(ct_context *ctx, ct_comm *pp, ct_status s, int nf, const ct_st_file *const *files,
                      const char *const *paths, unsigned char *const *claimed);

#endif
