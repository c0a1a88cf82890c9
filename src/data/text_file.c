/* src/data/text_file.c - ct_text_read_file: a whole file into memory,
 * NUL-terminated. Its own file because both the tokenizer (text.c) and the
 * GPT-2 BPE tables (bpe.c) read files and neither calls the other's
 * functions for it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "ctrain/text.h"

ct_status ct_text_read_file(ct_context *ctx, const char *path, char **data, size_t *len) {
    if (data) *data = NULL;
    if (len) *len = 0;
    if (!ctx || !path || !data || !len)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_text_read_file: ctx, path, data and len must not be NULL");
    const char *advice = strstr(path, "data/text") ? "run scripts/setup.sh to fetch the text data"
                                                   : "check the path";
    FILE *f = fopen(path, "rb");
    if (!f)
        return ct_set_error(ctx, CT_E_IO, "cannot open %s (%s); %s", path, strerror(errno), advice);
    long sz = -1;
    if (fseek(f, 0, SEEK_END) == 0) sz = ftell(f);
    if (sz < 0 || fseek(f, 0, SEEK_SET) != 0) {
        int e = errno;
        fclose(f);
        return ct_set_error(ctx, CT_E_IO, "cannot read %s (%s); it must be a regular file: %s", path, strerror(e),
                            advice);
    }
    char *buf = NULL;
    ct_status s = ct_alloc(ctx, (size_t)sz + 1, (void **)&buf);
    if (s != CT_OK) {
        fclose(f);
        return s;
    }
    size_t got = fread(buf, 1, (size_t)sz, f);
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (got != (size_t)sz) {
        ct_free(ctx, buf);
        return ct_set_error(ctx, CT_E_IO, "cannot read %s: got %zu of %ld bytes (%s); %s", path, got, sz,
                            err ? strerror(err) : "the file shrank while reading", advice);
    }
    buf[sz] = 0;
    *data = buf;
    *len = (size_t)sz;
    return CT_OK;
}
