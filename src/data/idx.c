/* src/data/idx.c - IDX files (the MNIST / Fashion-MNIST format), plain or
 * gzipped, and the in-memory image classification dataset built from them.
 *
 * IDX layout: magic 0x00 0x00 <type> <ndim>, then ndim big-endian uint32
 * dims, then the data row-major. Only the unsigned-byte type (0x08) is
 * supported. zlib's gz* functions read plain and gzipped files alike. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/internal.h"
#include "ctrain/data.h"

#define IDX_TYPE_U8 0x08
#define IDX_MAX_NUMEL ((uint64_t)1 << 31)
#define IDX_READ_CHUNK ((unsigned)1 << 30) /* gzread takes at most INT_MAX */
#define IDX_GZ_BUFFER (256u << 10)         /* zlib input buffer */
#define IDX_CHUNK ((size_t)1 << 20)        /* bytes converted per step (>= 2x buffer: plain reads go direct) */
#define IDX_MAX_LABEL 9                    /* MNIST / Fashion-MNIST: 10 classes */

static const char *type_name(int t) {
    switch (t) {
        case 0x08: return "unsigned byte";
        case 0x09: return "signed byte";
        case 0x0B: return "int16";
        case 0x0C: return "int32";
        case 0x0D: return "float32";
        case 0x0E: return "float64";
        default: return "unknown";
    }
}

/* Maps a zlib read failure on `path` to a status with a message. `what`
 * names what was being read. */
static ct_status gz_fail(ct_context *ctx, gzFile gz, const char *path, const char *what) {
    int err = errno, zerr = Z_OK;
    const char *zmsg = gzerror(gz, &zerr);
    if (zerr == Z_ERRNO)
        return ct_set_error(ctx, CT_E_IO, "cannot read %s (%s) while reading the %s; check the file is readable",
                            path, strerror(err), what);
    if (zerr == Z_MEM_ERROR)
        return ct_set_error(ctx, CT_E_OOM, "out of memory in zlib while reading %s; free some memory", path);
    if (!zmsg || !*zmsg) zmsg = "read error";
    if (!strncmp(zmsg, "<fd:", 4) && strstr(zmsg, ": ")) zmsg = strstr(zmsg, ": ") + 2; /* "<fd:3>: msg" */
    return ct_set_error(ctx, CT_E_CORRUPT,
                        "%s is not a valid gzip stream (%s) while reading the %s; the file is damaged or "
                        "truncated, download it again",
                        path, zmsg, what);
}

/* Reads exactly `n` bytes, or fewer at end of stream. Returns CT_OK and the
 * count in *got, or an error for a stream failure. */
static ct_status gz_read_full(ct_context *ctx, gzFile gz, const char *path, const char *what, void *buf,
                              uint64_t n, uint64_t *got) {
    uint64_t done = 0;
    while (done < n) {
        uint64_t left = n - done;
        unsigned want = left > IDX_READ_CHUNK ? IDX_READ_CHUNK : (unsigned)left;
        int r = gzread(gz, (char *)buf + done, want);
        if (r < 0) return gz_fail(ctx, gz, path, what);
        if (r == 0) break;
        done += (uint64_t)r;
    }
    *got = done;
    /* A short read may be a clean end of stream or a damaged gzip stream. */
    if (done < n) {
        int zerr = Z_OK;
        gzerror(gz, &zerr);
        if (zerr != Z_OK) return gz_fail(ctx, gz, path, what);
    }
    return CT_OK;
}

/* Reads the last `n` bytes of the payload (n may be the whole payload).
 * All but the last byte go straight into buf; the last byte is read through
 * a bounce buffer with a larger request. Filling the caller's buffer exactly
 * would let zlib stop with the gzip trailer half consumed and then report a
 * clean end of file for a truncated trailer; asking for more makes it run
 * to the end of the member (or report the truncation). */
static ct_status gz_read_payload_end(ct_context *ctx, gzFile gz, const char *path, const char *what, void *buf,
                                     uint64_t n, uint64_t *got) {
    *got = 0;
    if (n == 0) return CT_OK;
    CT_TRY(gz_read_full(ctx, gz, path, what, buf, n - 1, got));
    if (*got < n - 1) return CT_OK;
    unsigned char tail[64];
    int r = gzread(gz, tail, sizeof tail);
    if (r < 0) return gz_fail(ctx, gz, path, what);
    int zerr = Z_OK;
    gzerror(gz, &zerr);
    if (zerr != Z_OK) return gz_fail(ctx, gz, path, what);
    if (r > 0) {
        ((unsigned char *)buf)[n - 1] = tail[0];
        *got = n;
    }
    return CT_OK;
}

/* For a gzip stream: decompress whatever follows the payload so zlib checks
 * the member's CRC-32 and length. The trailing bytes themselves are ignored. */
static ct_status gz_verify_rest(ct_context *ctx, gzFile gz, const char *path) {
    if (gzdirect(gz)) return CT_OK; /* plain file: trailing garbage is ignored */
    char buf[16384];
    for (;;) {
        int r = gzread(gz, buf, sizeof buf);
        if (r < 0) return gz_fail(ctx, gz, path, "end of the stream");
        if (r == 0) break;
    }
    int zerr = Z_OK;
    gzerror(gz, &zerr);
    if (zerr != Z_OK) return gz_fail(ctx, gz, path, "end of the stream");
    return CT_OK;
}

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* An open IDX file positioned at its data. */
typedef struct idx_file {
    gzFile gz;
    const char *path;
    int ndim;
    int64_t shape[4];
    uint64_t numel;
} idx_file;

static ct_status idx_header(ct_context *ctx, idx_file *f) {
    gzFile gz = f->gz;
    const char *path = f->path;
    unsigned char hdr[4 + 4 * 4];
    uint64_t got = 0;
    CT_TRY(gz_read_full(ctx, gz, path, "header", hdr, 4, &got));
    if (got < 4)
        return ct_set_error(ctx, CT_E_CORRUPT,
                            "%s is truncated: %llu byte(s), too short for an IDX header; download the file again",
                            path, (unsigned long long)got);
    uint32_t magic = be32(hdr);
    if (hdr[0] != 0 || hdr[1] != 0)
        return ct_set_error(ctx, CT_E_CORRUPT,
                            "%s has a bad magic number 0x%08X (an IDX file starts with 0x0000TTDD: type, dims); "
                            "check the path points to an MNIST-style IDX file, plain or gzipped",
                            path, (unsigned)magic);
    int type = hdr[2], ndim = hdr[3];
    if (type != IDX_TYPE_U8)
        return ct_set_error(ctx, CT_E_CORRUPT,
                            "%s has unsupported IDX data type code 0x%02X (%s); only unsigned byte (0x08) data "
                            "is supported, convert the file",
                            path, (unsigned)type, type_name(type));
    if (ndim < 1 || ndim > 4)
        return ct_set_error(ctx, CT_E_CORRUPT,
                            "%s declares %d dimensions (magic 0x%08X); 1 to 4 are supported, the file is damaged "
                            "or not an image/label IDX file",
                            path, ndim, (unsigned)magic);
    CT_TRY(gz_read_full(ctx, gz, path, "header", hdr + 4, (uint64_t)4 * ndim, &got));
    if (got < (uint64_t)4 * ndim)
        return ct_set_error(ctx, CT_E_CORRUPT,
                            "%s is truncated inside its header (%d dims declared, %llu of %d dim bytes present); "
                            "download the file again",
                            path, ndim, (unsigned long long)got, 4 * ndim);
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        uint32_t v = be32(hdr + 4 + 4 * d);
        if (v == 0)
            return ct_set_error(ctx, CT_E_CORRUPT,
                                "%s has dimension %d of size 0; the file is damaged or empty, download it again",
                                path, d);
        f->shape[d] = v;
        numel *= v; /* numel <= 2^31 before, v < 2^32: no overflow */
        if (numel > IDX_MAX_NUMEL)
            return ct_set_error(ctx, CT_E_CORRUPT,
                                "%s declares more than 2^31 elements (dimension %d is %u); the header is damaged "
                                "or the file is not an IDX file",
                                path, d, (unsigned)v);
    }
    f->ndim = ndim;
    f->numel = numel;
    return CT_OK;
}

/* Opens `path` and reads its header. On failure nothing stays open. */
static ct_status idx_open(ct_context *ctx, const char *path, idx_file *f) {
    memset(f, 0, sizeof *f);
    f->path = path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ct_set_error(ctx, CT_E_IO, "cannot open %s: %s; check the path and the data directory", path,
                            strerror(errno));
    struct stat st;
    int have_st = fstat(fd, &st) == 0;
    if (have_st && S_ISDIR(st.st_mode)) {
        close(fd);
        return ct_set_error(ctx, CT_E_IO, "cannot read %s: it is a directory; pass the path of an IDX file",
                            path);
    }
    f->gz = gzdopen(fd, "rb");
    if (!f->gz) {
        close(fd);
        return ct_set_error(ctx, CT_E_OOM, "cannot open %s: out of memory in zlib", path);
    }
    gzbuffer(f->gz, IDX_GZ_BUFFER);
    ct_status s = idx_header(ctx, f);
    /* a plain file must hold what its header promises: checked before anything is allocated for it (a
     * 28-byte file must not cost a 1 GiB allocation first) */
    uint64_t hdr_bytes = 4 + (uint64_t)4 * (uint64_t)f->ndim;
    if (s == CT_OK && have_st && S_ISREG(st.st_mode) && gzdirect(f->gz) &&
        (uint64_t)st.st_size < hdr_bytes + f->numel)
        s = ct_set_error(ctx, CT_E_CORRUPT,
                         "%s is truncated: the header promises %llu data bytes but only %llu are present; "
                         "download the file again",
                         path, (unsigned long long)f->numel, (unsigned long long)((uint64_t)st.st_size - hdr_bytes));
    if (s != CT_OK) {
        gzclose(f->gz); /* also closes fd */
        f->gz = NULL;
    }
    return s;
}

static void idx_close(idx_file *f) {
    if (f->gz) gzclose(f->gz);
    f->gz = NULL;
}

static ct_status idx_truncated(ct_context *ctx, const idx_file *f, uint64_t got) {
    return ct_set_error(ctx, CT_E_CORRUPT,
                        "%s is truncated: the header promises %llu data bytes but only %llu are present; "
                        "download the file again",
                        f->path, (unsigned long long)f->numel, (unsigned long long)got);
}

/* Reads all the data of an open file into buf (numel bytes) and checks the
 * rest of a gzip stream. */
static ct_status idx_read_all(ct_context *ctx, idx_file *f, uint8_t *buf) {
    uint64_t got = 0;
    CT_TRY(gz_read_payload_end(ctx, f->gz, f->path, "data", buf, f->numel, &got));
    if (got < f->numel) return idx_truncated(ctx, f, got);
    return gz_verify_rest(ctx, f->gz, f->path);
}

ct_status ct_idx_load(ct_context *ctx, const char *path, ct_idx *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!ctx || !path || !out)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_idx_load: ctx, path and out must not be NULL");
    idx_file f;
    CT_TRY(idx_open(ctx, path, &f));
    void *data = NULL;
    ct_status s = ct_alloc(ctx, (size_t)f.numel, &data);
    if (s != CT_OK)
        s = ct_set_error(ctx, s,
                         "cannot allocate %llu bytes for the contents of %s: out of memory or memory budget "
                         "exceeded; raise the memory budget or free memory",
                         (unsigned long long)f.numel, path);
    else
        s = idx_read_all(ctx, &f, data);
    idx_close(&f);
    if (s != CT_OK) {
        ct_free(ctx, data);
        return s;
    }
    out->ndim = f.ndim;
    memcpy(out->shape, f.shape, sizeof f.shape);
    out->numel = (int64_t)f.numel;
    out->data = data;
    return CT_OK;
}

void ct_idx_free(ct_context *ctx, ct_idx *idx) {
    if (!idx) return;
    if (ctx) ct_free(ctx, idx->data);
    memset(idx, 0, sizeof *idx);
}

/* ---- dataset ------------------------------------------------------------------ */

/* Picks `<dir>/<split>-<kind>-ubyte`, else the same with `.gz`. Writes the
 * chosen path into buf. */
static ct_status find_idx(ct_context *ctx, const char *dir, const char *split, const char *kind, char *buf,
                          size_t cap) {
    int n = snprintf(buf, cap, "%s/%s-%s-ubyte", dir, split, kind);
    if (n < 0 || (size_t)n + 3 >= cap)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "data directory path too long: %s; use a shorter path", dir);
    struct stat st;
    if (stat(buf, &st) == 0 || errno != ENOENT) return CT_OK; /* exists, or ct_idx_load reports why not */
    strcat(buf, ".gz");
    if (stat(buf, &st) == 0 || errno != ENOENT) return CT_OK;
    buf[n] = 0;
    return ct_set_error(ctx, CT_E_IO,
                        "cannot open %s (nor %s.gz): %s; check the data directory holds the %s split "
                        "(MNIST / Fashion-MNIST IDX files, plain or gzipped)",
                        buf, buf, strerror(ENOENT), split);
}

void ct_dataset_free(ct_context *ctx, ct_dataset *ds) {
    if (!ds) return;
    if (ctx) {
        ct_free(ctx, ds->images);
        ct_free(ctx, ds->labels);
    }
    memset(ds, 0, sizeof *ds);
}

ct_status ct_dataset_load_idx(ct_context *ctx, const char *dir, const char *split, float mean, float std,
                              ct_dataset *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!ctx || !dir || !split || !out)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_dataset_load_idx: ctx, dir, split and out must not be NULL");
    if (strcmp(split, "train") != 0 && strcmp(split, "t10k") != 0)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "unknown dataset split \"%s\"; use \"train\" or \"t10k\"",
                            split);
    if (!isfinite(mean) || !isfinite(std) || std == 0.0f)
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "normalization mean %g / std %g invalid; std must be finite and nonzero (MNIST: "
                            "mean 0.1307, std 0.3081)",
                            (double)mean, (double)std);
    char ipath[4096], lpath[4096];
    CT_TRY(find_idx(ctx, dir, split, "images-idx3", ipath, sizeof ipath));
    CT_TRY(find_idx(ctx, dir, split, "labels-idx1", lpath, sizeof lpath));

    /* Image header first, then the (small) labels and their checks, then the
     * images streamed chunk by chunk straight into FP32: no u8 copy of the
     * whole image file is ever held. */
    idx_file im;
    CT_TRY(idx_open(ctx, ipath, &im));
    ct_idx lb;
    void *images = NULL, *labels = NULL, *chunk = NULL;
    ct_status s = ct_idx_load(ctx, lpath, &lb);
    if (s != CT_OK) goto done;
    if (im.ndim != 3) {
        s = ct_set_error(ctx, CT_E_CORRUPT,
                         "%s has %d dimensions; an image file has 3 (count, height, width), check the file is "
                         "an images-idx3 file",
                         ipath, im.ndim);
        goto done;
    }
    if (lb.ndim != 1) {
        s = ct_set_error(ctx, CT_E_CORRUPT,
                         "%s has %d dimensions; a label file has 1 (count), check the file is a labels-idx1 file",
                         lpath, lb.ndim);
        goto done;
    }
    if (im.shape[0] != lb.shape[0]) {
        s = ct_set_error(ctx, CT_E_CORRUPT,
                         "image count %lld in %s does not match label count %lld in %s; the two files belong to "
                         "different datasets or one is damaged, download them again",
                         (long long)im.shape[0], ipath, (long long)lb.shape[0], lpath);
        goto done;
    }
    int max_label = 0;
    for (int64_t i = 0; i < lb.numel; i++) {
        if (lb.data[i] > IDX_MAX_LABEL) {
            s = ct_set_error(ctx, CT_E_CORRUPT,
                             "%s: label %d at index %lld is out of range 0..%d; the file is damaged or not an "
                             "MNIST-style label file",
                             lpath, lb.data[i], (long long)i, IDX_MAX_LABEL);
            goto done;
        }
        if (lb.data[i] > max_label) max_label = lb.data[i];
    }

    int64_t n = im.shape[0];
    size_t chunk_bytes = (size_t)CT_MIN((uint64_t)IDX_CHUNK, im.numel);
    if ((s = ct_alloc(ctx, (size_t)im.numel * sizeof(float), &images)) != CT_OK) goto done;
    if ((s = ct_alloc(ctx, (size_t)n * sizeof(int32_t), &labels)) != CT_OK) goto done;
    if ((s = ct_alloc(ctx, chunk_bytes, &chunk)) != CT_OK) goto done;

    float lut[256];
    for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - mean) / std;
    float *dst = images;
    const uint8_t *src = chunk;
    for (uint64_t off = 0; off < im.numel;) {
        uint64_t want = CT_MIN((uint64_t)chunk_bytes, im.numel - off), got = 0;
        if (off + want < im.numel) s = gz_read_full(ctx, im.gz, ipath, "data", chunk, want, &got);
        else s = gz_read_payload_end(ctx, im.gz, ipath, "data", chunk, want, &got);
        if (s != CT_OK) goto done;
        for (uint64_t i = 0; i < got; i++) dst[off + i] = lut[src[i]];
        off += got;
        if (got < want) {
            s = idx_truncated(ctx, &im, off);
            goto done;
        }
    }
    s = gz_verify_rest(ctx, im.gz, ipath);
    if (s != CT_OK) goto done;
    int32_t *ldst = labels;
    for (int64_t i = 0; i < n; i++) ldst[i] = lb.data[i];

    out->n = n;
    out->c = 1;
    out->h = im.shape[1];
    out->w = im.shape[2];
    out->n_classes = max_label + 1;
    out->images = images;
    out->labels = labels;
    images = labels = NULL;
done:
    idx_close(&im);
    ct_idx_free(ctx, &lb);
    ct_free(ctx, chunk);
    ct_free(ctx, images);
    ct_free(ctx, labels);
    return s;
}
