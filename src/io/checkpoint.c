/* src/io/checkpoint.c - safetensors files (weights) and checkpoints that
 * resume a run bit for bit. docs/checkpoint-format.md describes the files.
 *
 * Writing: the header is built with cJSON (metadata first, then the tensors
 * in arena order), padded with spaces to a multiple of 8 bytes, and a CRC32
 * over every byte of the file (the 8-byte length, the header with the
 * checksum's own 8 hex digits read as "00000000", and the data) is patched
 * into __metadata__.ctrain_crc32. Files go to a temporary name, are fsync'd
 * and renamed into place; the directory is fsync'd after each rename.
 *
 * Reading: the whole file is read into memory and checked (size, header
 * length, JSON, every entry's dtype/shape/offsets, offsets inside the file
 * and covering it exactly, then the CRC) before anything is copied into the
 * plan or optimizer, so a failed load leaves them untouched. */
#define _GNU_SOURCE /* memmem */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "amp/scaler_internal.h"
#include "core/internal.h"
#include "ctrain/checkpoint.h"
#include "graph/plan.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c writes the host's float bytes: safetensors is little-endian"
#endif

#define CRC_KEY "\"ctrain_crc32\":\""
#define MAX_HEADER (100u << 20) /* as the safetensors reference implementation */
#define MODEL_FILE "model.safetensors"
#define STATE_FILE "train_state.safetensors"
#define FORMAT_VERSION "1"

/* ---- small helpers ------------------------------------------------------------------- */

typedef struct {
    char name[CT_NAME_LEN + 64];
    int ndim;
    int64_t shape[CT_MAX_DIMS];
    float *data;
    size_t numel;
} st_tensor;

static void shape_text(int ndim, const int64_t *shape, char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
}

static void join_path(char *out, size_t len, const char *dir, const char *name) {
    size_t n = strlen(dir);
    int w = snprintf(out, len, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name);
    if (w < 0 || (size_t)w >= len) out[0] = 0; /* too long: an empty path fails to open */
}

static ct_status fsync_dir(ct_context *ctx, const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return ct_set_error(ctx, CT_E_IO, "cannot open directory '%s' to sync it: %s", dir, strerror(errno));
    int r = fsync(fd);
    int e = errno;
    close(fd);
    if (r != 0 && e != EINVAL && e != EROFS)
        return ct_set_error(ctx, CT_E_IO, "cannot sync directory '%s': %s", dir, strerror(e));
    return CT_OK;
}

static void dir_of(const char *path, char *out, size_t len) {
    snprintf(out, len, "%s", path);
    char *slash = strrchr(out, '/');
    if (!slash) snprintf(out, len, ".");
    else if (slash == out) out[1] = 0;
    else *slash = 0;
}

/* mkdir -p */
static ct_status make_dirs(ct_context *ctx, const char *dir) {
    char buf[PATH_MAX];
    if (strlen(dir) >= sizeof buf) return ct_set_error(ctx, CT_E_INVALID_ARG, "checkpoint directory name is too long");
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return ct_set_error(ctx, CT_E_IO, "cannot create directory '%s': %s", buf, strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ct_set_error(ctx, CT_E_IO, "'%s' exists and is not a directory; pass another checkpoint directory", dir);
    return CT_OK;
}

/* rm -r of a checkpoint step / temporary directory (one level of files). */
static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[PATH_MAX];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            join_path(p, sizeof p, dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* ---- the tensors of a plan and an optimizer --------------------------------------------- */

static ct_status model_tensors(ct_context *ctx, ct_plan *p, st_tensor **out, int *n_out) {
    int np = p->n_params, nb = 0;
    for (int i = 0; i < p->g.n; i++) nb += p->g.nodes[i].op == CT_OP_BUFFER;
    st_tensor *t = calloc((size_t)(np + nb) + 1, sizeof *t);
    if (!t) return ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    int k = 0;
    for (int i = 0; i < np; i++, k++) {
        const ct_node_def *d = &p->g.nodes[p->params[i]];
        snprintf(t[k].name, sizeof t[k].name, "%s", d->name);
        t[k].ndim = d->ndim;
        memcpy(t[k].shape, d->shape, sizeof d->shape);
        t[k].data = p->param_arena + p->param_off[i];
        t[k].numel = (size_t)ct_node_numel(d);
    }
    for (int i = 0; i < p->g.n; i++) {
        const ct_node_def *d = &p->g.nodes[i];
        if (d->op != CT_OP_BUFFER) continue;
        snprintf(t[k].name, sizeof t[k].name, "%s", d->name);
        t[k].ndim = d->ndim;
        memcpy(t[k].shape, d->shape, sizeof d->shape);
        t[k].data = p->pn[i].data;
        t[k].numel = (size_t)ct_node_numel(d);
        k++;
    }
    *out = t;
    *n_out = k;
    return CT_OK;
}

/* PyTorch's names for the optimizer's state blocks (include/ctrain/optim.h). */
static int state_names(const ct_optim_opts *o, const char *names[4]) {
    int n = 0;
    switch (o->kind) {
    case CT_OPTIM_SGD:
        if (o->momentum != 0.0f) names[n++] = "momentum_buffer";
        break;
    case CT_OPTIM_ADAMW:
    case CT_OPTIM_ADAM:
        names[n++] = "exp_avg";
        names[n++] = "exp_avg_sq";
        if (o->amsgrad) names[n++] = "max_exp_avg_sq";
        break;
    case CT_OPTIM_RMSPROP:
        names[n++] = "square_avg";
        if (o->momentum > 0.0f) names[n++] = "momentum_buffer";
        if (o->centered) names[n++] = "grad_avg";
        break;
    case CT_OPTIM_ADAGRAD: names[n++] = "sum"; break;
    case CT_OPTIM_LAMB:
        names[n++] = "exp_avg";
        names[n++] = "exp_avg_sq";
        break;
    }
    return n;
}

static void state_list(const ct_optim_opts *o, char *buf, size_t len) {
    const char *names[4];
    int n = state_names(o, names);
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; i < n && off < len; i++) off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? "," : "", names[i]);
}

/* "optimizer.<state>.<param>" for every state block and parameter. */
static ct_status optim_tensors(ct_context *ctx, ct_plan *p, ct_optimizer *opt, st_tensor **out, int *n_out) {
    ct_optim_opts oo;
    float *state;
    size_t n_state, n;
    ct_optimizer_get_opts(opt, &oo);
    ct_optimizer_state(opt, &state, &n_state);
    ct_plan_param_arena(p, NULL, NULL, &n);
    const char *names[4];
    int nb = state_names(&oo, names);
    if ((size_t)nb * n != n_state)
        return ct_set_error(ctx, CT_E_INTERNAL, "checkpoint: the %s optimizer holds %zu state floats, expected %d x %zu",
                            ct_optim_kind_name(oo.kind), n_state, nb, n);
    st_tensor *t = calloc((size_t)(nb * p->n_params) + 1, sizeof *t);
    if (!t) return ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    int k = 0;
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < p->n_params; i++, k++) {
            const ct_node_def *d = &p->g.nodes[p->params[i]];
            snprintf(t[k].name, sizeof t[k].name, "optimizer.%s.%s", names[b], d->name);
            t[k].ndim = d->ndim;
            memcpy(t[k].shape, d->shape, sizeof d->shape);
            t[k].data = state + (size_t)b * n + p->param_off[i];
            t[k].numel = (size_t)ct_node_numel(d);
        }
    *out = t;
    *n_out = k;
    return CT_OK;
}

/* ---- safetensors writer ------------------------------------------------------------------ */

typedef struct {
    const char *key[64];
    char val[64][64];
    const char *long_key[2]; /* long values (the recipe, the loss-scale history) */
    const char *long_val[2];
    int n, n_long;
} meta_kv;

static void meta_set(meta_kv *m, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void meta_set(meta_kv *m, const char *key, const char *fmt, ...) {
    if (m->n >= 64) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->val[m->n], sizeof m->val[m->n], fmt, ap);
    va_end(ap);
    m->key[m->n++] = key;
}

/* Writes a complete safetensors file to `path` (which must not be visible
 * to readers yet: a temporary name), fsync'd. *crc_out: the file's CRC. */
static ct_status st_write(ct_context *ctx, const char *path, const char *shown, const st_tensor *t, int n,
                          const meta_kv *m, int do_fsync, uint32_t *crc_out) {
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

/* ---- safetensors reader ------------------------------------------------------------------ */

typedef struct {
    unsigned char *buf;
    size_t size, data_off, data_size;
    cJSON *header, *meta;
    int n_tensors;
    uint32_t crc;
    int has_crc;
} st_file;

static void st_close(st_file *f) {
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
static ct_status st_entry(ct_context *ctx, const char *shown, const st_file *f, const cJSON *e, int *ndim,
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
static ct_status st_read(ct_context *ctx, const char *path, int require_crc, st_file *f) {
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
        st_close(f);
        return ct_set_error(ctx, CT_E_IO, "cannot read '%s' (%zu of %zu bytes)", path, got, size);
    }
    uint64_t hl;
    memcpy(&hl, f->buf, 8);
    if (hl > size - 8 || hl > MAX_HEADER || hl < 2) {
        st_close(f);
        return ct_set_error(ctx, CT_E_CORRUPT,
                            "'%s' is truncated or not a safetensors file: header length %llu but the file has %zu "
                            "bytes",
                            path, (unsigned long long)hl, size);
    }
    f->data_off = 8 + (size_t)hl;
    f->data_size = size - f->data_off;
    char *text = malloc((size_t)hl + 1);
    if (!text) {
        st_close(f);
        return ct_set_error(ctx, CT_E_OOM, "out of memory reading '%s'", path);
    }
    memcpy(text, f->buf + 8, (size_t)hl);
    text[hl] = 0;
    f->header = cJSON_ParseWithOpts(text, NULL, 1);
    free(text);
    if (!f->header || !cJSON_IsObject(f->header)) {
        st_close(f);
        return ct_set_error(ctx, CT_E_CORRUPT, "'%s': the header is not valid JSON: the file is corrupt or truncated",
                            path);
    }
    f->meta = cJSON_GetObjectItemCaseSensitive(f->header, "__metadata__");
    if (f->meta && !cJSON_IsObject(f->meta)) {
        st_close(f);
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
    if (s != CT_OK && s != CT_E_CORRUPT && crc_state != 1) { /* e.g. a damaged dtype: still corruption */
        char msg[1024];
        const char *m = ct_context_last_error(ctx), *colon = strstr(m, ": ");
        snprintf(msg, sizeof msg, "%s", colon ? colon + 2 : m);
        s = ct_set_error(ctx, CT_E_CORRUPT, "%s (the file is damaged)", msg);
    }
    if (s == CT_OK && crc_state < 0)
        s = ct_set_error(ctx, CT_E_CORRUPT,
                         "'%s' is corrupt: its CRC32 is %08lx but the file records %s; restore it from a copy or use "
                         "an older checkpoint",
                         path, (unsigned long)crc, hex);
    if (s == CT_OK && crc_state == 0 && require_crc)
        s = ct_set_error(ctx, CT_E_CORRUPT, "'%s' has no ctrain_crc32 checksum: it is corrupt or not a ctrain checkpoint",
                         path);
    if (s != CT_OK) {
        st_close(f);
        return s;
    }
    f->crc = (uint32_t)crc;
    f->has_crc = crc_state == 1;
    return CT_OK;
}

/* Matches the file's tensors against `want` (same names, same shapes, no
 * others); src[i] is where want[i]'s data starts in the file. prefix limits
 * the file entries considered (NULL: all). */
static ct_status st_match(ct_context *ctx, const char *shown, const st_file *f, const st_tensor *want, int n,
                          const unsigned char **src) {
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(f->header, want[i].name);
        char ws[96], fs[96];
        shape_text(want[i].ndim, want[i].shape, ws, sizeof ws);
        if (!e)
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
    }
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

static const char *meta_str(const st_file *f, const char *key) {
    const cJSON *it = f->meta ? cJSON_GetObjectItemCaseSensitive(f->meta, key) : NULL;
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

/* ---- weights ----------------------------------------------------------------------------- */

ct_status ct_weights_save(ct_context *ctx, const char *path, ct_plan *plan) {
    if (!path || !plan) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_weights_save: path and plan must not be NULL");
    char dir[PATH_MAX], tmp[PATH_MAX];
    dir_of(path, dir, sizeof dir);
    join_path(tmp, sizeof tmp, dir, ".tmp-XXXXXX");
    int fd = mkstemp(tmp);
    if (fd < 0) return ct_set_error(ctx, CT_E_IO, "cannot create a file in '%s': %s", dir, strerror(errno));
    close(fd);
    st_tensor *t = NULL;
    int n = 0;
    meta_kv m = {0};
    meta_set(&m, "format", "pt");
    meta_set(&m, "ctrain_format", "weights");
    meta_set(&m, "ctrain_version", FORMAT_VERSION);
    ct_status s = model_tensors(ctx, plan, &t, &n);
    if (s == CT_OK) s = st_write(ctx, tmp, path, t, n, &m, 1, NULL);
    free(t);
    if (s == CT_OK && rename(tmp, path) != 0)
        s = ct_set_error(ctx, CT_E_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (s != CT_OK) {
        unlink(tmp);
        return s;
    }
    return fsync_dir(ctx, dir);
}

static ct_status load_model_file(ct_context *ctx, const char *path, ct_plan *plan, int require_crc,
                                 uint32_t *crc_out, st_file *f, st_tensor **t_out, const unsigned char ***src_out,
                                 int *n_out) {
    CT_TRY(st_read(ctx, path, require_crc, f));
    st_tensor *t = NULL;
    int n = 0;
    ct_status s = model_tensors(ctx, plan, &t, &n);
    const unsigned char **src = s == CT_OK ? calloc((size_t)n + 1, sizeof *src) : NULL;
    if (s == CT_OK && !src) s = ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    if (s == CT_OK) s = st_match(ctx, path, f, t, n, src);
    if (s != CT_OK) {
        free(t);
        free(src);
        st_close(f);
        return s;
    }
    if (crc_out) *crc_out = f->crc;
    *t_out = t;
    *src_out = src;
    *n_out = n;
    return CT_OK;
}

static void copy_in(const st_tensor *t, const unsigned char **src, int n) {
    for (int i = 0; i < n; i++) memcpy(t[i].data, src[i], t[i].numel * sizeof(float));
}

ct_status ct_weights_load(ct_context *ctx, const char *path, ct_plan *plan) {
    if (!path || !plan) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_weights_load: path and plan must not be NULL");
    st_file f;
    st_tensor *t;
    const unsigned char **src;
    int n;
    CT_TRY(load_model_file(ctx, path, plan, 0, NULL, &f, &t, &src, &n));
    memset(plan->param_arena, 0, plan->n_param_floats * sizeof(float));
    memset(plan->buffer_arena, 0, plan->n_buffer_floats * sizeof(float));
    copy_in(t, src, n);
    free(t);
    free(src);
    st_close(&f);
    return CT_OK;
}

/* ---- checkpoints ------------------------------------------------------------------------- */

void ct_train_state_init(ct_train_state *st) {
    memset(st, 0, sizeof *st);
    st->early_stop.best_epoch = -1;
}

void ct_checkpoint_opts_default(ct_checkpoint_opts *o) {
    memset(o, 0, sizeof *o);
    o->keep_last = 3;
    o->fsync = 1;
}

static int parse_step_name(const char *name, int64_t *step) {
    if (strncmp(name, "step-", 5) || !name[5]) return 0;
    int64_t v = 0;
    for (const char *c = name + 5; *c; c++) {
        if (*c < '0' || *c > '9' || v > INT64_MAX / 10 - 10) return 0;
        v = v * 10 + (*c - '0');
    }
    *step = v;
    return 1;
}

/* history: ct_scaler_history_to_json of st->scaler when has_scaler. */
static void fill_state_meta(meta_kv *m, const ct_train_state *st, const ct_optim_opts *oo, uint64_t opt_steps,
                            uint32_t model_crc, int n_model, const char *history) {
    char list[128];
    meta_set(m, "format", "pt");
    meta_set(m, "ctrain_format", "train_state");
    meta_set(m, "ctrain_version", FORMAT_VERSION);
    meta_set(m, "model_crc32", "%08lx", (unsigned long)model_crc);
    meta_set(m, "model_tensors", "%d", n_model);
    meta_set(m, "step", "%lld", (long long)st->step);
    meta_set(m, "epoch", "%lld", (long long)st->epoch);
    meta_set(m, "batch_in_epoch", "%lld", (long long)st->batch_in_epoch);
    meta_set(m, "optimizer", "%s", oo ? ct_optim_kind_name(oo->kind) : "none");
    if (oo) state_list(oo, list, sizeof list);
    meta_set(m, "optimizer_state", "%s", oo ? list : "");
    meta_set(m, "optimizer_steps", "%llu", (unsigned long long)opt_steps);
    meta_set(m, "finished", "%d", st->finished != 0);
    meta_set(m, "progress.epoch_loss_sum", "%a", st->epoch_loss_sum);
    meta_set(m, "progress.epoch_correct", "%lld", (long long)st->epoch_correct);
    meta_set(m, "progress.epoch_seen", "%lld", (long long)st->epoch_seen);
    meta_set(m, "progress.test_loss", "%a", st->test_loss);
    meta_set(m, "progress.test_acc", "%a", st->test_acc);
    if (st->has_schedule) {
        const ct_schedule_state *s = &st->schedule;
        meta_set(m, "schedule.lr", "%a", s->lr);
        meta_set(m, "schedule.best", "%a", s->best);
        meta_set(m, "schedule.num_bad_epochs", "%lld", (long long)s->num_bad_epochs);
        meta_set(m, "schedule.cooldown_counter", "%lld", (long long)s->cooldown_counter);
        meta_set(m, "schedule.last_epoch", "%lld", (long long)s->last_epoch);
    }
    if (st->has_early_stop) {
        const ct_early_stop *e = &st->early_stop;
        meta_set(m, "early_stop.patience", "%lld", (long long)e->patience);
        meta_set(m, "early_stop.min_delta", "%a", e->min_delta);
        meta_set(m, "early_stop.mode_max", "%d", e->mode_max);
        meta_set(m, "early_stop.best", "%a", e->best);
        meta_set(m, "early_stop.best_epoch", "%lld", (long long)e->best_epoch);
        meta_set(m, "early_stop.wait", "%lld", (long long)e->wait);
        meta_set(m, "early_stop.epoch", "%lld", (long long)e->epoch);
        meta_set(m, "early_stop.stopped", "%d", e->stopped);
    }
    if (st->has_scaler) {
        const ct_scaler_state *c = &st->scaler;
        meta_set(m, "scaler.scale", "%a", (double)c->scale);
        meta_set(m, "scaler.growth_tracker", "%d", (int)c->growth_tracker);
        meta_set(m, "scaler.hysteresis_left", "%d", (int)c->hysteresis_left);
        meta_set(m, "scaler.min_hits", "%d", (int)c->min_hits);
        meta_set(m, "scaler.step", "%llu", (unsigned long long)c->step);
        meta_set(m, "scaler.skipped", "%llu", (unsigned long long)c->skipped);
        meta_set(m, "scaler.backoffs", "%llu", (unsigned long long)c->backoffs);
        meta_set(m, "scaler.growths", "%llu", (unsigned long long)c->growths);
        meta_set(m, "scaler.events", "%llu", (unsigned long long)c->events);
        m->long_key[m->n_long] = "scaler.history";
        m->long_val[m->n_long++] = history;
    }
    if (st->recipe_json[0]) {
        m->long_key[m->n_long] = "recipe";
        m->long_val[m->n_long++] = st->recipe_json;
    }
}

/* Typed metadata reads; a missing or malformed value is corruption. */
typedef struct {
    ct_context *ctx;
    const char *path;
    const st_file *f;
    ct_status s;
} meta_rd;

static const char *rd_str(meta_rd *r, const char *key) {
    const char *v = meta_str(r->f, key);
    if (!v && r->s == CT_OK)
        r->s = ct_set_error(r->ctx, CT_E_CORRUPT, "'%s': metadata '%s' is missing: the file is corrupt", r->path, key);
    return v ? v : "";
}

static int64_t rd_i64(meta_rd *r, const char *key) {
    const char *v = rd_str(r, key);
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if ((!*v || *end || errno) && r->s == CT_OK)
        r->s = ct_set_error(r->ctx, CT_E_CORRUPT, "'%s': metadata '%s' = '%s' is not an integer: the file is corrupt",
                            r->path, key, v);
    return x;
}

static uint64_t rd_u64(meta_rd *r, const char *key) {
    const char *v = rd_str(r, key);
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if ((!*v || *end || errno || *v == '-') && r->s == CT_OK)
        r->s = ct_set_error(r->ctx, CT_E_CORRUPT, "'%s': metadata '%s' = '%s' is not an integer: the file is corrupt",
                            r->path, key, v);
    return x;
}

static double rd_f64(meta_rd *r, const char *key) {
    const char *v = rd_str(r, key);
    char *end;
    double x = strtod(v, &end);
    if ((!*v || *end) && r->s == CT_OK)
        r->s = ct_set_error(r->ctx, CT_E_CORRUPT, "'%s': metadata '%s' = '%s' is not a number: the file is corrupt",
                            r->path, key, v);
    return x;
}

static ct_status parse_state_meta(ct_context *ctx, const char *path, const st_file *f, ct_train_state *st) {
    meta_rd r = {ctx, path, f, CT_OK};
    const char *fmt = meta_str(f, "ctrain_format"), *ver = meta_str(f, "ctrain_version");
    if (!fmt || strcmp(fmt, "train_state"))
        return ct_set_error(ctx, CT_E_CORRUPT, "'%s' is not a ctrain train state (ctrain_format '%s')", path,
                            fmt ? fmt : "missing");
    if (!ver || strcmp(ver, FORMAT_VERSION))
        return ct_set_error(ctx, CT_E_UNSUPPORTED,
                            "'%s' has checkpoint format version %s; this ctrain reads version %s", path,
                            ver ? ver : "missing", FORMAT_VERSION);
    ct_train_state_init(st);
    st->step = rd_i64(&r, "step");
    st->epoch = rd_i64(&r, "epoch");
    st->batch_in_epoch = rd_i64(&r, "batch_in_epoch");
    st->optimizer_steps = rd_u64(&r, "optimizer_steps");
    st->finished = (int)rd_i64(&r, "finished");
    st->epoch_loss_sum = rd_f64(&r, "progress.epoch_loss_sum");
    st->epoch_correct = rd_i64(&r, "progress.epoch_correct");
    st->epoch_seen = rd_i64(&r, "progress.epoch_seen");
    st->test_loss = rd_f64(&r, "progress.test_loss");
    st->test_acc = rd_f64(&r, "progress.test_acc");
    if (meta_str(f, "schedule.lr")) {
        st->has_schedule = 1;
        st->schedule.lr = rd_f64(&r, "schedule.lr");
        st->schedule.best = rd_f64(&r, "schedule.best");
        st->schedule.num_bad_epochs = rd_i64(&r, "schedule.num_bad_epochs");
        st->schedule.cooldown_counter = rd_i64(&r, "schedule.cooldown_counter");
        st->schedule.last_epoch = rd_i64(&r, "schedule.last_epoch");
    }
    if (meta_str(f, "early_stop.patience")) {
        ct_early_stop *e = &st->early_stop;
        st->has_early_stop = 1;
        e->patience = rd_i64(&r, "early_stop.patience");
        e->min_delta = rd_f64(&r, "early_stop.min_delta");
        e->mode_max = (int)rd_i64(&r, "early_stop.mode_max");
        e->best = rd_f64(&r, "early_stop.best");
        e->best_epoch = rd_i64(&r, "early_stop.best_epoch");
        e->wait = rd_i64(&r, "early_stop.wait");
        e->epoch = rd_i64(&r, "early_stop.epoch");
        e->stopped = (int)rd_i64(&r, "early_stop.stopped");
    }
    if (meta_str(f, "scaler.scale")) {
        ct_scaler_state *c = &st->scaler;
        st->has_scaler = 1;
        c->scale = (float)rd_f64(&r, "scaler.scale");
        c->growth_tracker = (int32_t)rd_i64(&r, "scaler.growth_tracker");
        c->hysteresis_left = (int32_t)rd_i64(&r, "scaler.hysteresis_left");
        c->min_hits = (int32_t)rd_i64(&r, "scaler.min_hits");
        c->step = rd_u64(&r, "scaler.step");
        c->skipped = rd_u64(&r, "scaler.skipped");
        if (meta_str(f, "scaler.events")) {
            c->backoffs = rd_u64(&r, "scaler.backoffs");
            c->growths = rd_u64(&r, "scaler.growths");
            c->events = rd_u64(&r, "scaler.events");
            const char *h = rd_str(&r, "scaler.history");
            if (r.s == CT_OK) r.s = ct_scaler_history_from_json(ctx, path, h, c);
        } else { /* written before the history was kept: only the overflows are known */
            c->events = c->skipped;
        }
    }
    const char *rj = meta_str(f, "recipe");
    if (rj) {
        if (strlen(rj) >= sizeof st->recipe_json)
            return ct_set_error(ctx, CT_E_CORRUPT, "'%s': the stored recipe is longer than %zu bytes", path,
                                sizeof st->recipe_json - 1);
        snprintf(st->recipe_json, sizeof st->recipe_json, "%s", rj);
    }
    if (r.s == CT_OK && (st->step < 0 || st->epoch < 0 || st->batch_in_epoch < 0))
        r.s = ct_set_error(ctx, CT_E_CORRUPT, "'%s': negative step/epoch/batch in the metadata: the file is corrupt", path);
    return r.s;
}

ct_status ct_checkpoint_resolve(ct_context *ctx, const char *path, char *out, size_t len) {
    if (!path || !out) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_checkpoint_resolve: path must not be NULL");
    char p[PATH_MAX];
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ct_set_error(ctx, CT_E_IO, "no checkpoint at '%s': %s", path,
                            stat(path, &sb) != 0 ? strerror(errno) : "not a directory");
    join_path(p, sizeof p, path, "latest");
    FILE *f = fopen(p, "rb");
    if (f) {
        char name[300];
        size_t n = fread(name, 1, sizeof name - 1, f);
        fclose(f);
        name[n] = 0;
        while (n && (name[n - 1] == '\n' || name[n - 1] == '\r' || name[n - 1] == ' ')) name[--n] = 0;
        int64_t step;
        if (!parse_step_name(name, &step))
            return ct_set_error(ctx, CT_E_CORRUPT, "'%s' does not name a step directory (step-NNNNNN): it is corrupt", p);
        join_path(out, len, path, name);
        if (stat(out, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return ct_set_error(ctx, CT_E_IO, "'%s' names '%s', which does not exist; pass a step directory to resume", p,
                                name);
        return CT_OK;
    }
    join_path(p, sizeof p, path, STATE_FILE);
    if (stat(p, &sb) == 0) {
        snprintf(out, len, "%s", path);
        return CT_OK;
    }
    return ct_set_error(ctx, CT_E_IO, "no checkpoint in '%s': it holds neither 'latest' nor '%s'", path, STATE_FILE);
}

ct_status ct_checkpoint_load(ct_context *ctx, const char *path, ct_plan *plan, ct_optimizer *opt,
                             ct_train_state *st_out) {
    if (!path) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_checkpoint_load: path must not be NULL");
    if (opt && !plan) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_checkpoint_load: an optimizer needs its plan");
    char dir[PATH_MAX], sp[PATH_MAX], mp[PATH_MAX];
    CT_TRY(ct_checkpoint_resolve(ctx, path, dir, sizeof dir));
    join_path(sp, sizeof sp, dir, STATE_FILE);
    join_path(mp, sizeof mp, dir, MODEL_FILE);
    ct_train_state *st = malloc(sizeof *st);
    if (!st) return ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    st_file sf = {0}, mf = {0};
    st_tensor *mt = NULL, *ot = NULL;
    const unsigned char **msrc = NULL, **osrc = NULL;
    int mn = 0, on = 0;
    ct_status s = st_read(ctx, sp, 1, &sf);
    if (s == CT_OK) s = parse_state_meta(ctx, sp, &sf, st);
    if (s == CT_OK && plan) {
        uint32_t mcrc = 0;
        s = load_model_file(ctx, mp, plan, 1, &mcrc, &mf, &mt, &msrc, &mn);
        char hex[16];
        snprintf(hex, sizeof hex, "%08lx", (unsigned long)mcrc);
        const char *want = meta_str(&sf, "model_crc32");
        if (s == CT_OK && (!want || strcmp(want, hex)))
            s = ct_set_error(ctx, CT_E_CORRUPT,
                             "'%s' does not belong with '%s' (model CRC32 %s, the train state expects %s): the "
                             "checkpoint directory is mixed up; use another checkpoint",
                             mp, sp, hex, want ? want : "none");
    }
    if (s == CT_OK && opt) {
        ct_optim_opts oo;
        ct_optimizer_get_opts(opt, &oo);
        const char *kind = meta_str(&sf, "optimizer"), *list = meta_str(&sf, "optimizer_state");
        char mine[128];
        state_list(&oo, mine, sizeof mine);
        if (!kind || !list)
            s = ct_set_error(ctx, CT_E_CORRUPT, "'%s': metadata 'optimizer' is missing: the file is corrupt", sp);
        else if (strcmp(kind, ct_optim_kind_name(oo.kind)))
            s = ct_set_error(ctx, CT_E_CONFIG,
                             "'%s' was saved with optimizer '%s' but this run uses '%s'; resume with the same optimizer",
                             sp, kind, ct_optim_kind_name(oo.kind));
        else if (strcmp(list, mine))
            s = ct_set_error(ctx, CT_E_CONFIG,
                             "'%s' holds %s optimizer state [%s] but this run's %s needs [%s] (momentum, amsgrad or "
                             "centered differ); resume with the same optimizer settings",
                             sp, kind, list, kind, mine);
        if (s == CT_OK) s = optim_tensors(ctx, plan, opt, &ot, &on);
        if (s == CT_OK && !(osrc = calloc((size_t)on + 1, sizeof *osrc)))
            s = ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
        if (s == CT_OK) s = st_match(ctx, sp, &sf, ot, on, osrc);
    }
    if (s == CT_OK) {
        /* everything checked: now modify */
        if (plan) {
            /* alignment padding back to zero, as a fresh plan has it */
            memset(plan->param_arena, 0, plan->n_param_floats * sizeof(float));
            memset(plan->buffer_arena, 0, plan->n_buffer_floats * sizeof(float));
            copy_in(mt, msrc, mn);
            ct_plan_set_step(plan, st->optimizer_steps);
        }
        if (opt) {
            copy_in(ot, osrc, on);
            ct_optimizer_set_steps(opt, st->optimizer_steps);
        }
        snprintf(st->path, sizeof st->path, "%s", dir);
        if (st_out) *st_out = *st;
    }
    free(mt);
    free(ot);
    free(msrc);
    free(osrc);
    st_close(&sf);
    st_close(&mf);
    free(st);
    return s;
}

/* Deletes leftovers of interrupted saves and all but the newest keep_last
 * step directories up to `step`; step directories after `step` belong to a
 * run that was resumed from an earlier checkpoint and are deleted too. */
static void prune(const char *dir, int64_t step, int keep_last) {
    DIR *d = opendir(dir);
    if (!d) return;
    int64_t *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    char p[PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        int64_t s;
        if (!strncmp(e->d_name, ".tmp-", 5)) {
            join_path(p, sizeof p, dir, e->d_name);
            remove_dir(p);
            unlink(p);
            continue;
        }
        if (!parse_step_name(e->d_name, &s)) continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            int64_t *ns = realloc(steps, nc * sizeof *ns);
            if (!ns) break;
            steps = ns;
            cap = nc;
        }
        steps[n++] = s;
    }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        size_t newer = 0; /* kept directories newer than steps[i] */
        for (size_t j = 0; j < n; j++) newer += steps[j] > steps[i] && steps[j] <= step;
        if (steps[i] > step || (keep_last > 0 && newer >= (size_t)keep_last)) {
            char name[48];
            snprintf(name, sizeof name, "step-%06lld", (long long)steps[i]);
            join_path(p, sizeof p, dir, name);
            remove_dir(p);
        }
    }
    free(steps);
}

ct_status ct_checkpoint_save(ct_context *ctx, const char *dir, ct_plan *plan, ct_optimizer *opt,
                             const ct_train_state *st, int keep_last) {
    ct_checkpoint_opts o;
    ct_checkpoint_opts_default(&o);
    o.keep_last = keep_last;
    return ct_checkpoint_save_ex(ctx, dir, plan, opt, st, &o);
}

ct_status ct_checkpoint_save_ex(ct_context *ctx, const char *dir, ct_plan *plan, ct_optimizer *opt,
                                const ct_train_state *st, const ct_checkpoint_opts *o) {
    if (!dir || !plan || !st)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_checkpoint_save: dir, plan and state must not be NULL");
    if (st->step < 0) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_checkpoint_save: step %lld < 0", (long long)st->step);
    ct_checkpoint_opts def;
    if (!o) {
        ct_checkpoint_opts_default(&def);
        o = &def;
    }
    if (strlen(dir) > PATH_MAX - 64) return ct_set_error(ctx, CT_E_INVALID_ARG, "checkpoint directory name is too long");
    CT_TRY(make_dirs(ctx, dir));
    char tmp[PATH_MAX], final[PATH_MAX], p[PATH_MAX], name[48];
    join_path(tmp, sizeof tmp, dir, ".tmp-XXXXXX");
    if (!mkdtemp(tmp)) return ct_set_error(ctx, CT_E_IO, "cannot create a directory in '%s': %s", dir, strerror(errno));
    st_tensor *mt = NULL, *ot = NULL;
    int mn = 0, on = 0;
    uint32_t mcrc = 0;
    ct_optim_opts oo;
    meta_kv *m = calloc(1, sizeof *m);
    char *history = st->has_scaler ? ct_scaler_history_to_json(&st->scaler) : NULL;
    ct_status s = m && (history || !st->has_scaler) ? CT_OK : ct_set_error(ctx, CT_E_OOM, "checkpoint: out of memory");
    if (s == CT_OK) s = model_tensors(ctx, plan, &mt, &mn);
    if (s == CT_OK && opt) s = optim_tensors(ctx, plan, opt, &ot, &on);
    if (s == CT_OK) {
        meta_kv mm = {0};
        meta_set(&mm, "format", "pt");
        meta_set(&mm, "ctrain_format", "weights");
        meta_set(&mm, "ctrain_version", FORMAT_VERSION);
        meta_set(&mm, "step", "%lld", (long long)st->step);
        join_path(p, sizeof p, tmp, MODEL_FILE);
        s = st_write(ctx, p, p, mt, mn, &mm, o->fsync, &mcrc);
    }
    if (s == CT_OK) {
        if (opt) ct_optimizer_get_opts(opt, &oo);
        fill_state_meta(m, st, opt ? &oo : NULL, opt ? ct_optimizer_steps(opt) : (uint64_t)st->step, mcrc, mn,
                        history);
        join_path(p, sizeof p, tmp, STATE_FILE);
        s = st_write(ctx, p, p, ot, on, m, o->fsync, NULL);
    }
    free(mt);
    free(ot);
    free(m);
    free(history);
    if (s == CT_OK && o->fsync) s = fsync_dir(ctx, tmp);
    if (s != CT_OK) {
        remove_dir(tmp);
        return s;
    }
    if (o->hook) o->hook(o->hook_user, "written", st->step);
    snprintf(name, sizeof name, "step-%06lld", (long long)st->step);
    join_path(final, sizeof final, dir, name);
    struct stat sb;
    if (stat(final, &sb) == 0) { /* the same step saved again (e.g. after a resume): move the old one aside */
        char old[PATH_MAX];
        join_path(old, sizeof old, dir, ".tmp-XXXXXX");
        if (!mkdtemp(old) || rename(final, old) != 0) {
            s = ct_set_error(ctx, CT_E_IO, "cannot replace '%s': %s", final, strerror(errno));
            remove_dir(tmp);
            return s;
        }
        remove_dir(old);
    }
    if (rename(tmp, final) != 0) {
        s = ct_set_error(ctx, CT_E_IO, "cannot rename '%s' to '%s': %s", tmp, final, strerror(errno));
        remove_dir(tmp);
        return s;
    }
    if (o->fsync) CT_TRY(fsync_dir(ctx, dir));
    if (o->hook) o->hook(o->hook_user, "renamed", st->step);
    /* latest -> name, atomically */
    join_path(tmp, sizeof tmp, dir, ".tmp-XXXXXX");
    int fd = mkstemp(tmp);
    if (fd < 0) return ct_set_error(ctx, CT_E_IO, "cannot create a file in '%s': %s", dir, strerror(errno));
    char line[64];
    int ll = snprintf(line, sizeof line, "%s\n", name);
    int ok = write(fd, line, (size_t)ll) == ll && (!o->fsync || fsync(fd) == 0);
    int e = errno;
    if (close(fd) != 0 && ok) ok = 0, e = errno;
    join_path(p, sizeof p, dir, "latest");
    if (ok && rename(tmp, p) != 0) ok = 0, e = errno;
    if (!ok) {
        unlink(tmp);
        return ct_set_error(ctx, CT_E_IO, "cannot update '%s': %s", p, strerror(e));
    }
    if (o->fsync) CT_TRY(fsync_dir(ctx, dir));
    if (o->hook) o->hook(o->hook_user, "latest", st->step);
    prune(dir, st->step, o->keep_last);
    return CT_OK;
}
