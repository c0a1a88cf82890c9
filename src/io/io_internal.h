/* src/io/io_internal.h - helpers shared by the files of src/io. Internal. */
#ifndef CT_IO_INTERNAL_H
#define CT_IO_INTERNAL_H

#include "core/internal.h"

/* mkdir -p dir. Errors name `what` (the recipe key or the kind of directory) and the part that failed:
 * CT_E_IO "<what>: cannot create directory 'PART': reason", or "<what> 'dir' exists and is not a directory";
 * CT_E_INVALID_ARG when dir is longer than PATH_MAX. (checkpoint.c) */
ct_status ct_io_make_dirs(ct_context *ctx, const char *dir, const char *what);

#endif
