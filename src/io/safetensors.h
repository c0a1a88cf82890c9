/* src/io/safetensors.h - reading and writing safetensors files (F32
 * tensors, string metadata, ctrain's CRC32 in __metadata__.ctrain_crc32):
 * src/io/safetensors.c. Used by the weights and checkpoint code
 * (checkpoint.c); docs/checkpoint-format.md describes the files. Internal. */
#ifndef CT_IO_SAFETENSORS_H
#define CT_IO_SAFETENSORS_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "core/internal.h"

/* A tensor to write, or to find in a file (name, shape) and copy into (data). */
typedef struct {
    char name[128];      /* a node name (< 64 chars), maybe with a prefix such as "optimizer.exp_avg." */
    int ndim;
    int64_t shape[CT_MAX_DIMS];
    float *data;
    size_t numel;
} ct_st_tensor;



/* String metadata to write (at most 64 short values and one long one). */
typedef struct {
    const char *key[64];
    char val[64][64];
    const char *long_key[2]; /* long values (the recipe, the loss-scale history) */
    const char *long_val[2];
    int n, n_long;
} ct_st_meta;

/* Sets key (a string that outlives m) to a formatted value. */
void ct_st_meta_set(ct_st_meta *m, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Writes a complete safetensors file to `path` (which must not be visible
 * to readers yet: a temporary name), fsync'd when do_fsync; `shown` names the
 * file in messages. *crc_out (may be NULL): the file's CRC. */
ct_status ct_st_write(ct_context *ctx, const char *path, const char *shown, const ct_st_tensor *t, int n,
                      const ct_st_meta *m, int do_fsync, uint32_t *crc_out);

/* A file read whole into memory and checked. */
typedef struct {
    unsigned char *buf;
    size_t size, data_off, data_size;
    cJSON *header, *meta;
    int n_tensors;
    uint32_t crc;
    int has_crc;
} ct_st_file;

/* Reads and checks a whole safetensors file (size, header, every entry,
 * offsets covering the data exactly, the CRC). require_crc: the file must
 * carry ctrain's checksum (checkpoints); otherwise it is checked if present. */
ct_status ct_st_read(ct_context *ctx, const char *path, int require_crc, ct_st_file *f);
void ct_st_close(ct_st_file *f);
/* Matches the file's tensors against `want` (same names, same shapes, no
 * others); src[i] is where want[i]'s data starts in the file. */
ct_status ct_st_match(ct_context *ctx, const char *shown, const ct_st_file *f, const ct_st_tensor *want, int n,
                      const unsigned char **src);
/* As ct_st_match for a part of the model (a pipeline stage's tensors): want's tensors must be in the file with
 * the same shapes, the file may hold others; claimed (f->n_tensors bytes) <- 1 for the file's tensors (header
 * order, __metadata__ skipped) that want names, 0 for the others. Every tensor of the file must be claimed by
 * some stage: see ct_st_unclaimed. */
ct_status ct_st_match_part(ct_context *ctx, const char *shown, const ct_st_file *f, const ct_st_tensor *want, int n,
                           const unsigned char **src, unsigned char *claimed);
/* The error for the file's tensor j (header order) that no part claimed: CT_E_CONFIG "from another model"
 * (`who` says whose model lacks it), or CT_E_CORRUPT when it is a second entry of a name. */
ct_status ct_st_unclaimed(ct_context *ctx, const char *shown, const ct_st_file *f, int j, const char *who);
/* A string of __metadata__, NULL when absent. */
const char *ct_st_meta_str(const ct_st_file *f, const char *key);

#endif
