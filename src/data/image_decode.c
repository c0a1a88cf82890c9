/* src/data/image_decode.c - JPEG (libjpeg-turbo) and PNG (libpng) held in
 * memory into 8-bit HWC pixels of 1 or 3 channels.
 *
 * Both libraries report errors through longjmp: libjpeg's default error
 * manager calls exit(), so an error manager here longjmps back instead, and
 * libpng's png_jmpbuf is set the same way. Everything either library
 * allocates is released on both paths (jpeg_destroy_decompress,
 * png_destroy_read_struct); the pixel buffer lives in the caller's ct_image,
 * so nothing the longjmp skips can leak. A JPEG that ends early (libjpeg's
 * JWRN_JPEG_EOF warning: it would fill the rest with gray) is an error, as
 * it is in PIL. Conversions: CMYK/YCCK JPEG -> RGB (Adobe's inverted CMYK
 * when the Adobe marker says so); PNG palette, tRNS, < 8 and 16 bits ->
 * 8-bit, alpha dropped (PIL's convert("RGB")); gray <-> RGB as ctrain/image.h
 * says. Thread-safe: no globals, no context. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include "core/internal.h"
#include "ctrain/image.h"

/* Makes room for h*w*c bytes in im. */
static int image_reserve(ct_image *im, int h, int w, int c) {
    size_t need = (size_t)h * (size_t)w * (size_t)c;
    if (need > im->cap) {
        uint8_t *p = realloc(im->px, need);
        if (!p) return 0;
        im->px = p;
        im->cap = need;
    }
    im->h = h, im->w = w, im->c = c;
    return 1;
}

void ct_image_free(ct_image *im) {
    if (!im) return;
    free(im->px);
    memset(im, 0, sizeof *im);
}

/* PIL's "L" from RGB, in place (reads 3 bytes per pixel, writes 1). */
static void rgb_to_gray(ct_image *im) {
    size_t n = (size_t)im->h * (size_t)im->w;
    uint8_t *p = im->px;
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((19595u * p[3 * i] + 38470u * p[3 * i + 1] + 7471u * p[3 * i + 2] + 0x8000u) >> 16);
    im->c = 1;
}

/* Gray to RGB (the buffer must hold 3 bytes per pixel), from the back. */
static void gray_to_rgb(ct_image *im) {
    size_t n = (size_t)im->h * (size_t)im->w;
    uint8_t *p = im->px;
    for (size_t i = n; i-- > 0;) p[3 * i] = p[3 * i + 1] = p[3 * i + 2] = p[i];
    im->c = 3;
}

/* ---- JPEG ------------------------------------------------------------------------ */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_on_error(j_common_ptr cinfo) {
    jpeg_err *e = (jpeg_err *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jb, 1);
}

/* Warnings (level -1) are ignored except a premature end of data. */
static void jpeg_on_message(j_common_ptr cinfo, int level) {
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_on_error(cinfo);
}

static ct_status decode_jpeg(const unsigned char *data, size_t len, int channels, int64_t max_pixels,
                             const char *name, ct_image *out, char *err, size_t errlen) {
    struct jpeg_decompress_struct cinfo;
    jpeg_err je;
    memset(&je, 0, sizeof je);
    cinfo.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jpeg_on_error;
    je.pub.emit_message = jpeg_on_message;
    volatile int created = 0;
    volatile ct_status st = CT_E_CORRUPT;
    if (setjmp(je.jb)) {
        if (created) jpeg_destroy_decompress(&cinfo);
        if (st == CT_E_OOM) snprintf(err, errlen, "out of memory decoding %s", name);
        else snprintf(err, errlen, "%s is not a decodable JPEG (%s); replace or remove the file, or set "
                      "bad_images to skip", name, je.msg);
        return st;
    }
    jpeg_create_decompress(&cinfo);
    created = 1;
    jpeg_mem_src(&cinfo, data, (unsigned long)len);
    jpeg_read_header(&cinfo, TRUE);
    if ((int64_t)cinfo.image_width * (int64_t)cinfo.image_height > max_pixels) {
        snprintf(je.msg, sizeof je.msg, "%ux%u pixels, more than the limit of %lld", cinfo.image_width,
                 cinfo.image_height, (long long)max_pixels);
        longjmp(je.jb, 1);
    }
    int cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    int gray = cinfo.num_components == 1 || cinfo.jpeg_color_space == JCS_GRAYSCALE;
    if (cmyk) cinfo.out_color_space = JCS_CMYK;
    else if (gray) cinfo.out_color_space = JCS_GRAYSCALE;
    else cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    const int h = (int)cinfo.output_height, w = (int)cinfo.output_width, oc = cinfo.output_components;
    if (oc != (cmyk ? 4 : gray ? 1 : 3)) {
        snprintf(je.msg, sizeof je.msg, "%d output components", oc);
        longjmp(je.jb, 1);
    }
    /* room for the decoded components and for the RGB result */
    if (!image_reserve(out, h, w, CT_MAX(oc, 3))) {
        st = CT_E_OOM;
        longjmp(je.jb, 1);
    }
    out->c = oc;
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = out->px + (size_t)cinfo.output_scanline * (size_t)w * (size_t)oc;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    const int inverted = cinfo.saw_Adobe_marker;
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    if (oc == 4) { /* CMYK -> RGB in place, forward (3 bytes written per 4 read) */
        size_t n = (size_t)h * (size_t)w;
        uint8_t *p = out->px;
        for (size_t i = 0; i < n; i++) {
            unsigned c = p[4 * i], m = p[4 * i + 1], y = p[4 * i + 2], k = p[4 * i + 3];
            if (!inverted) c = 255 - c, m = 255 - m, y = 255 - y, k = 255 - k;
            p[3 * i] = (uint8_t)((c * k + 127) / 255);
            p[3 * i + 1] = (uint8_t)((m * k + 127) / 255);
            p[3 * i + 2] = (uint8_t)((y * k + 127) / 255);
        }
        out->c = 3;
    }
    if (channels == 3 && out->c == 1) gray_to_rgb(out);
    else if (channels == 1 && out->c == 3) rgb_to_gray(out);
    return CT_OK;
}

/* ---- PNG ------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *data;
    size_t len, pos;
    char msg[160];
    int oom;
} png_src;

static void png_read_mem(png_structp png, png_bytep dst, size_t n) {
    png_src *s = png_get_io_ptr(png);
    if (n > s->len - s->pos) png_error(png, "the file ends early (truncated)");
    memcpy(dst, s->data + s->pos, n);
    s->pos += n;
}

static void png_on_error(png_structp png, png_const_charp msg) {
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static ct_status decode_png(const unsigned char *data, size_t len, int channels, int64_t max_pixels, const char *name,
                            ct_image *out, char *err, size_t errlen) {
    png_src src = {data, len, 0, "", 0};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
    if (!png) {
        snprintf(err, errlen, "out of memory decoding %s", name);
        return CT_E_OOM;
    }
    png_infop info = png_create_info_struct(png);
    png_bytep *volatile rows = NULL;
    if (!info || setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, info ? &info : NULL, NULL);
        free(rows);
        if (src.oom) {
            snprintf(err, errlen, "out of memory decoding %s", name);
            return CT_E_OOM;
        }
        snprintf(err, errlen, "%s is not a decodable PNG (%s); replace or remove the file, or set bad_images to skip",
                 name, src.msg[0] ? src.msg : "no memory for its reader");
        return CT_E_CORRUPT;
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_set_user_limits(png, 1u << 20, 1u << 20);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if ((int64_t)w * (int64_t)h > max_pixels) {
        snprintf(src.msg, sizeof src.msg, "%ux%u pixels, more than the limit of %lld", (unsigned)w, (unsigned)h,
                 (long long)max_pixels);
        png_longjmp(png, 1);
    }
    int ct = png_get_color_type(png, info);
    png_set_expand(png);   /* palette -> RGB, gray < 8 bits -> 8, tRNS -> alpha */
    png_set_strip_16(png);
    png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const int oc = png_get_channels(png, info);
    const size_t rowbytes = png_get_rowbytes(png, info);
    if ((oc != 1 && oc != 3) || rowbytes != (size_t)w * (size_t)oc) {
        snprintf(src.msg, sizeof src.msg, "unexpected layout after conversion (%d channels, color type %d)", oc, ct);
        png_longjmp(png, 1);
    }
    rows = malloc(sizeof(png_bytep) * (h ? h : 1));
    if (!rows || !image_reserve(out, (int)h, (int)w, 3)) {
        src.oom = 1;
        png_longjmp(png, 1);
    }
    out->c = oc;
    for (png_uint_32 y = 0; y < h; y++) rows[y] = out->px + (size_t)y * rowbytes;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    if (channels == 3 && out->c == 1) gray_to_rgb(out);
    else if (channels == 1 && out->c == 3) rgb_to_gray(out);
    return CT_OK;
}

ct_status ct_image_decode(const void *data, size_t len, int channels, int64_t max_pixels, const char *name,
                          ct_image *out, char *err, size_t errlen) {
    static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    const unsigned char *d = data;
    if (!name) name = "the image";
    if (!out || (channels != 1 && channels != 3) || (!data && len)) {
        snprintf(err, errlen, "ct_image_decode: out must not be NULL and channels must be 1 or 3 (got %d)", channels);
        return CT_E_INVALID_ARG;
    }
    if (len == 0) {
        snprintf(err, errlen, "%s is empty (0 bytes); replace or remove the file, or set bad_images to skip", name);
        return CT_E_CORRUPT;
    }
    if (len >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF)
        return decode_jpeg(d, len, channels, max_pixels, name, out, err, errlen);
    if (len >= 8 && !memcmp(d, png_sig, 8)) return decode_png(d, len, channels, max_pixels, name, out, err, errlen);
    snprintf(err, errlen, "%s is not a JPEG or PNG image (its first bytes are neither signature); replace or remove "
             "the file, or set bad_images to skip", name);
    return CT_E_CORRUPT;
}
