/* src/io/safetensors.c - safetensors files (src/io/safetensors.h).
 *
 * Writing: the header is built with cJSON (metadata first, then the tensors
 * in the given order), padded with spaces to a multiple of 8 bytes, and a
 * CRC32 over every byte of the file (the 8-byte length, the header with the
 * checksum's own 8 hex digits read as "00000000", and the data) is patched
 * into __metadata__.ctrain_crc32.
 *
 * Reading: the whole file is read into memory and checked (size, header
 * length, JSON, every entry's dtype/shape/offsets, offsets inside the file
 * and covering it exactly, then the CRC) before the caller copies anything,
 * so a failed load leaves its destination untouched. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/safetensors.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c writes the host's float bytes: safetensors is little-endian"
#endif

#define CRC_KEY "\"ctrain_crc32\":\""
#define MAX_HEADER (100u << 20) /* as the safetensors reference implementation */

static void shape_text(int ndim, const int64_t *shape, char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
}

/* ---- writer ------------------------------------------------------------------------------- */

void ct_st_meta_set(ct_st_meta *m, const char *key, const char *fmt, ...) {
    if (m->n >= 64) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->val[m->n], sizeof m->val[m->n], fmt, ap);
    va_end(ap);
    m->key[m->n++] = key;
}

/* Writes a complete safetensors file to `path` (which must not be visible
 * to readers yet: a temporary name), fsync'd. *crc_out: the file's CRC. */
ct_status ct_st_write(ct_context *ctx, const char *path, const char *shown, const ct_st_tensor *t, int n,
                      const ct_st_meta *m, int do_fsync, uint32_t *crc_out) {
    cJSON *root = cJSON_CreateObject(), *meta = root ? cJSON_AddObjectToObject(root, "__metadata__") : NULL;
    int ok = meta && cJSON_AddStringToObject(meta, "ctrain_crc32", "00000000");
    for (int i = 0; ok && m && i < m->n; i++) ok = cJSON_AddStringToObject(meta, m->key[i], m->val[i]) != NULL;
    for (int i = 0; ok && m && i < m->n_long; i++)
        ok = cJSON_AddStringToObject(meta, m->long_key[i], m->long_val[i]) != NULL;
    size_t off = 0;
    for (int i = 0; ok && i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(root, t[i].name);
        cJSON *sh = e ? cJSON_AddArrayToObject(e, "shape") : NULL, *of = NULL;
        ok = e && cJSON_AddStringToObject(e, "dtype", "F32") && sh;
        for (int d = 0; ok && d < t[i].ndim; d++) ok = cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
        if (ok) ok = (of = cJSON_AddArrayToObject(e, "data_offsets")) != NULL;
        if (ok) ok = cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        off += t[i].numel * sizeof(float);
        if (ok) ok = cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
    }
    char *json = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!json) return ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory building the header of '%s'", shown);
    size_t jl = strlen(json), hl = ct_align_up(8 + jl, 8) - 8;
    char *hdr = malloc(8 + hl);
    if (!hdr) {
        cJSON_free(json);
        return ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory building the header of '%s'", shown);
    }
    uint64_t hl64 = hl;
    memcpy(hdr, &hl64, 8);
    memcpy(hdr + 8, json, jl);
    memset(hdr + 8 + jl, ' ', hl - jl);
    cJSON_free(json);
    char *crcpos = memmem(hdr + 8, hl, CRC_KEY, strlen(CRC_KEY));
    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc32(crc, (const Bytef *)hdr, (uInt)(8 + hl));
    for (int i = 0; i < n; i++) {
        const unsigned char *p = (const unsigned char *)t[i].data;
        size_t left = t[i].numel * sizeof(float);
        while (left) {
            uInt c = left > (1u << 30) ? (1u << 30) : (uInt)left;
            crc = crc32(crc, p, c);
            p += c;
            left -= c;
        }
    }
    char hex[9];
    snprintf(hex, sizeof hex, "%08lx", (unsigned long)crc);
    memcpy(crcpos + strlen(CRC_KEY), hex, 8);
    if (crc_out) *crc_out = (uint32_t)crc;

    FILE *f = fopen(path, "wb");
    if (!f) {
        free(hdr);
        return ct_set_error(ctx, CT_E_IO, "cannot create '%s': %s; check the directory exists and is writable", shown,
                            strerror(errno));
    }
    int wok = fwrite(hdr, 1, 8 + hl, f) == 8 + hl;
    free(hdr);
    for (int i = 0; wok && i < n; i++)
        wok = t[i].numel == 0 || fwrite(t[i].data, sizeof(float), t[i].numel, f) == t[i].numel;
    int e = errno;
    if (wok && fflush(f) != 0) wok = 0, e = errno;
    if (wok && do_fsync && fsync(fileno(f)) != 0) wok = 0, e = errno;
    if (fclose(f) != 0 && wok) wok = 0, e = errno;
    if (!wok) {
        unlink(path);
        return ct_set_error(ctx, CT_E_IO, "cannot write '%s': %s (disk full?)", shown, strerror(e));
    }
    return CT_OK;
}

/* ---- reader ------------------------------------------------------------------------------- */

void ct_st_close(ct_st_file *f) {
    free(f->buf);
    cJSON_Delete(f->header);
    memset(f, 0, sizeof *f);
}

static int read_u64_item(const cJSON *it, uint64_t *v) {
    if (!cJSON_IsNumber(it)) return 0;
    double d = it->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d) return 0;
    *v = (uint64_t)d;
    return 1;
}

/* Parses and checks one header entry: F32, shape, offsets within the data. */
static ct_status st_entry(ct_context *ctx, const char *shown, const ct_st_file *f, const cJSON *e, int *ndim,
                          int64_t shape[CT_MAX_DIMS], uint64_t *begin, uint64_t *end) {
    const char *name = e->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) ||
        cJSON_GetArraySize(of) != 2)
        return ct_set_error(ctx, CT_E_CORRUPT,
                            "'%s': header entry '%s' lacks dtype/shape/data_offsets: the file is corrupt", shown, name);
    if (strcmp(dt->valuestring, "F32"))
        return ct_set_error(ctx, CT_E_UNSUPPORTED, "'%s': tensor '%s' has dtype %s; ctrain reads F32 tensors only",
                            shown, name, dt->valuestring);
    int nd = cJSON_GetArraySize(sh);
    if (nd > CT_MAX_DIMS)
        return ct_set_error(ctx, CT_E_CORRUPT, "'%s': tensor '%s' has %d dims (at most %d)", shown, name, nd, CT_MAX_DIMS);
    uint64_t numel = 1, b, en;
    for (int d = 0; d < nd; d++) {
        uint64_t v;
        if (!read_u64_item(cJSON_GetArrayItem(sh, d), &v) || v > (1ull << 40) || (v && numel > (1ull << 50) / v))
            return ct_set_error(ctx, CT_E_CORRUPT, "'%s': tensor '%s' has a bad shape: the file is corrupt", shown, name);
        shape[d] = (int64_t)v;
        numel *= v;
    }
    if (!read_u64_item(cJSON_GetArrayItem(of, 0), &b) || !read_u64_item(cJSON_GetArrayItem(of, 1), &en) || b > en)
        return ct_set_error(ctx, CT_E_CORRUPT, "'%s': tensor '%s' has bad data_offsets: the file is corrupt", shown, name);
    if (en - b != numel * 4)
        return ct_set_error(ctx, CT_E_CORRUPT,
                            "'%s': tensor '%s' holds %llu bytes but its shape needs %llu: the file is corrupt", shown,
                            name, (unsigned long long)(en - b), (unsigned long long)(numel * 4));
    if (en > f->data_size)
        return ct_set_error(ctx, CT_E_CORRUPT,
                            "'%s' is truncated: tensor '%s' ends at byte %llu of the data but the file holds %zu; "
                            "the file was cut short (interrupted copy or full disk)",
                            shown, name, (unsigned long long)en, f->data_size);
    *ndim = nd;
    *begin = b;
    *end = en;
    return CT_OK;
}

/* Reads and checks a whole safetensors file. require_crc: the file must
 * carry ctrain's checksum (checkpoints); otherwise it is checked if present. */
ct_status ct_st_read(ct_context *ctx, const char *path, int require_crc, ct_st_file *f) {
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    if (!fp) return ct_set_error(ctx, CT_E_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(fp);
        return ct_set_error(ctx, CT_E_IO, "'%s' is not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {
        fclose(fp);
        return ct_set_error(ctx, CT_E_CORRUPT,
                            "'%s' is truncated: %zu bytes, a safetensors file starts with an 8-byte header length", path,
                            size);
    }
    f->buf = malloc(size);
    if (!f->buf) {
        fclose(fp);
        return ct_set_error(ctx, CT_E_OOM, "out of memory reading '%s' (%zu bytes)", path, size);
    }
    size_t got = fread(f->buf, 1, size, fp);
    fclose(fp);
    f->size = got;
    if (got != size) {
        ct_st_close(f);
        return ct_set_error(ctx, CT_E_IO, "cannot read '%s' (%zu of %zu bytes)", path, got, size);
    }
    uint64_t hl;
    memcpy(&hl, f->buf, 8);
    if (hl > size - 8 || hl > MAX_HEADER || hl < 2) {
        ct_st_close(f);
        return ct_set_error(ctx, CT_E_CORRUPT,
                            "'%s' is truncated or not a safetensors file: header length %llu but the file has %zu "
                            "bytes",
                            path, (unsigned long long)hl, size);
    }
    f->data_off = 8 + (size_t)hl;
    f->data_size = size - f->data_off;
    char *text = malloc((size_t)hl + 1);
    if (!text) {
        ct_st_close(f);
        return ct_set_error(ctx, CT_E_OOM, "out of memory reading '%s'", path);
    }
    memcpy(text, f->buf + 8, (size_t)hl);
    text[hl] = 0;
    f->header = cJSON_ParseWithOpts(text, NULL, 1);
    free(text);
    if (!f->header || !cJSON_IsObject(f->header)) {
        ct_st_close(f);
        return ct_set_error(ctx, CT_E_CORRUPT, "'%s': the header is not valid JSON: the file is corrupt or truncated",
                            path);
    }
    f->meta = cJSON_GetObjectItemCaseSensitive(f->header, "__metadata__");
    if (f->meta && !cJSON_IsObject(f->meta)) {
        ct_st_close(f);
        return ct_set_error(ctx, CT_E_CORRUPT, "'%s': __metadata__ is not an object: the file is corrupt", path);
    }
    /* the checksum first: a damaged file is CT_E_CORRUPT whatever the damage */
    int crc_state = 0; /* 0: none, 1: good, -1: bad */
    char hex[9] = "";
    uLong crc = 0;
    char *cp = memmem(f->buf + 8, (size_t)hl, CRC_KEY, strlen(CRC_KEY));
    if (cp && (size_t)(cp - (char *)f->buf) + strlen(CRC_KEY) + 8 <= f->data_off) {
        char *hp = cp + strlen(CRC_KEY), *endp, saved[8];
        memcpy(hex, hp, 8);
        hex[8] = 0;
        unsigned long want = strtoul(hex, &endp, 16);
        memcpy(saved, hp, 8);
        memset(hp, '0', 8);
        crc = crc32(0L, Z_NULL, 0);
        const unsigned char *p = f->buf;
        size_t left = f->size;
        while (left) {
            uInt c = left > (1u << 30) ? (1u << 30) : (uInt)left;
            crc = crc32(crc, p, c);
            p += c;
            left -= c;
        }
        memcpy(hp, saved, 8);
        int lower = 1; /* as written: "%08lx"; an upper-case digit would parse to the same value */
        for (int k = 0; k < 8; k++) lower &= (hex[k] >= '0' && hex[k] <= '9') || (hex[k] >= 'a' && hex[k] <= 'f');
        crc_state = !*endp && lower && crc == want ? 1 : -1;
    }
    uint64_t max_end = 0;
    ct_status s = CT_OK;
    for (const cJSON *e = f->header->child; e && s == CT_OK; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) continue;
        int nd;
        int64_t shape[CT_MAX_DIMS];
        uint64_t b = 0, en = 0;
        s = st_entry(ctx, path, f, e, &nd, shape, &b, &en);
        if (s == CT_OK && en > max_end) max_end = en;
        f->n_tensors++;
    }
    if (s == CT_OK && max_end != f->data_size)
        s = ct_set_error(ctx, CT_E_CORRUPT, "'%s': the header describes %llu data bytes but the file holds %zu: %s", path,
                         (unsigned long long)max_end, f->data_size,
                         max_end > f->data_size ? "the file is truncated" : "the file is corrupt");
    if (s != CT_OK && s != CT_E_CORRUPT && crc_state != 1) /* e.g. a damaged dtype: still corruption */
        s = ct_wrap_error(ctx, CT_E_CORRUPT, NULL, " (the file is damaged)");
    if (s == CT_OK && crc_state < 0)
        s = ct_set_error(ctx, CT_E_CORRUPT,
                         "'%s' is corrupt: its CRC32 is %08lx but the file records %s; restore it from a copy or use "
                         "an older checkpoint",
                         path, (unsigned long)crc, hex);
    if (s == CT_OK && crc_state == 0 && require_crc)
        s = ct_set_error(ctx, CT_E_CORRUPT, "'%s' has no ctrain_crc32 checksum: it is corrupt or not a ctrain checkpoint",
                         path);
    if (s != CT_OK) {
        ct_st_close(f);
        return s;
    }
    f->crc = (uint32_t)crc;
    f->has_crc = crc_state == 1;
    return CT_OK;
}

/* The index of header entry e among the file's tensors (header order, __metadata__ skipped). */
static int entry_index(const ct_st_file *f, const cJSON *e) {
    int j = 0;
    for (const cJSON *c = f->header->child; c && c != e; c = c->next) j += strcmp(c->string, "__metadata__") != 0;
    return j;
}

/* want's tensors in the file with the same shapes; src[i] <- where want[i]'s data starts; claimed (may be
 * NULL): claimed[j] <- 1 for the file's tensor j that want names. */
static ct_status match_wanted(ct_context *ctx, const char *shown, const ct_st_file *f, const ct_st_tensor *want, int n,
                              const unsigned char **src, unsigned char *claimed) {
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(f->header, want[i].name);
        char ws[96], fs[96];
        shape_text(want[i].ndim, want[i].shape, ws, sizeof ws);
        if (!e || e == f->meta)
            return ct_set_error(ctx, CT_E_CONFIG,
                                "'%s' is from another model: this model's tensor '%s' %s is not in it; resume with the "
                                "recipe the checkpoint was saved with",
                                shown, want[i].name, ws);
        int nd;
        int64_t shape[CT_MAX_DIMS];
        uint64_t b, en;
        CT_TRY(st_entry(ctx, shown, f, e, &nd, shape, &b, &en));
        int same = nd == want[i].ndim;
        for (int d = 0; same && d < nd; d++) same = shape[d] == want[i].shape[d];
        if (!same) {
            shape_text(nd, shape, fs, sizeof fs);
            return ct_set_error(ctx, CT_E_CONFIG,
                                "'%s' is from another model: tensor '%s' has shape %s in the checkpoint but %s in this "
                                "model; resume with the recipe the checkpoint was saved with",
                                shown, want[i].name, fs, ws);
        }
        src[i] = f->buf + f->data_off + b;
        if (claimed) claimed[entry_index(f, e)] = 1;
    }
    return CT_OK;
}

/* Matches the file's tensors against `want` (same names, same shapes, no
 * others); src[i] is where want[i]'s data starts in the file. */
ct_status ct_st_match(ct_context *ctx, const char *shown, const ct_st_file *f, const ct_st_tensor *want, int n,
                      const unsigned char **src) {
    CT_TRY(match_wanted(ctx, shown, f, want, n, src, NULL));
    if (f->n_tensors != n) {
        for (const cJSON *e = f->header->child; e; e = e->next) {
            if (!strcmp(e->string, "__metadata__")) continue;
            int found = 0;
            for (int i = 0; i < n && !found; i++) found = !strcmp(e->string, want[i].name);
            if (!found)
                return ct_set_error(ctx, CT_E_CONFIG,
                                    "'%s' is from another model: its tensor '%s' is not in this model; resume with the "
                                    "recipe the checkpoint was saved with",
                                    shown, e->string);
        }
        return ct_set_error(ctx, CT_E_CORRUPT, "'%s' names a tensor twice: the file is corrupt", shown);
    }
    return CT_OK;
}

ct_status ct_st_match_part(ct_context *ctx, const char *shown, const ct_st_file *f, const ct_st_tensor *want, int n,
                           const unsigned char **src, unsigned char *claimed) {
    memset(claimed, 0, (size_t)f->n_tensors);
    return match_wanted(ctx, shown, f, want, n, src, claimed);
}

ct_status ct_st_unclaimed(ct_context *ctx, const char *shown, const ct_st_file *f, int j, const char *who) {
    const cJSON *e = f->header->child;
    for (int k = -1; e; e = e->next)
        if (strcmp(e->string, "__metadata__") && ++k == j) break;
    if (!e) return ct_set_error(ctx, CT_E_INTERNAL, "'%s' has no tensor %d", shown, j);
    if (cJSON_GetObjectItemCaseSensitive(f->header, e->string) != e) /* a second entry of a claimed name */
        return ct_set_error(ctx, CT_E_CORRUPT, "'%s' names tensor '%s' twice: the file is corrupt", shown, e->string);
    return ct_set_error(ctx, CT_E_CONFIG,
                        "'%s' is from another model: its tensor '%s' is not in this model (%s); resume with the recipe "
                        "the checkpoint was saved with",
                        shown, e->string, who);
}

const char *ct_st_meta_str(const ct_st_file *f, const char *key) {
    const cJSON *it = f->meta ? cJSON_GetObjectItemCaseSensitive(f->meta, key) : NULL;
    return it && cJSON_IsString(it) ? it->valuestring : NULL;
}
