/* src/data/loader_internal.h - what the prefetcher reads of a ct_loader. */
#ifndef CT_DATA_LOADER_INTERNAL_H
#define CT_DATA_LOADER_INTERNAL_H
#include "ctrain/data.h"
/* The permutation of the current epoch (n entries; identity unshuffled). */
const int64_t *ct_loader_perm_(const ct_loader *l);
#endif
