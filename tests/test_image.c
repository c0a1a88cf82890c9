/* tests/test_image.c - image data (ctrain/image.h): JPEG/PNG decoding of
 * every color kind (images written here with libjpeg / libpng) and the bad
 * files, the ImageFolder layout and the bad-image policy through the
 * prefetcher, CIFAR records, RandomResizedCrop's parameters, the transforms
 * against torchvision (tests/golden/augment.ctg from
 * scripts/make_augment_golden.py), and the same batches for the same
 * (seed, epoch, index) whatever the prefetch threads. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>

#include "golden.h"
#include "test.h"

/* ---- writing test images ------------------------------------------------------------ */

/* PNG of `format` (png_image's PNG_FORMAT_*) into a new buffer (free). */
static unsigned char *png_bytes(int w, int h, uint32_t format, const void *px, const void *cmap, int ncmap,
                                size_t *len) {
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w, im.height = (png_uint_32)h, im.format = format;
    im.colormap_entries = (png_uint_32)ncmap;
    png_alloc_size_t n = 0;
    if (!png_image_write_to_memory(&im, NULL, &n, 0, px, 0, cmap)) return NULL;
    unsigned char *buf = malloc(n);
    if (!buf || !png_image_write_to_memory(&im, buf, &n, 0, px, 0, cmap)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* JPEG (quality 100) of w x h pixels with `comps` components in `cs`. */
static unsigned char *jpeg_bytes(int w, int h, int comps, J_COLOR_SPACE cs, const uint8_t *px, size_t *len) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&c, &buf, &n);
    c.image_width = (JDIMENSION)w, c.image_height = (JDIMENSION)h;
    c.input_components = comps, c.in_color_space = cs;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 100, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)c.next_scanline * (size_t)w * (size_t)comps);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    *len = n;
    return buf;
}

static void write_file(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (n) fwrite(buf, 1, n, f);
    fclose(f);
}

/* A 16x12 RGB PNG whose pixel (y, x) is (seed + 10x, seed + 10y, seed + x + y). */
static void write_png_rgb(const char *path, int seed) {
    uint8_t px[12 * 16 * 3];
    for (int y = 0; y < 12; y++)
        for (int x = 0; x < 16; x++) {
            uint8_t *p = px + (y * 16 + x) * 3;
            p[0] = (uint8_t)(seed + 10 * x), p[1] = (uint8_t)(seed + 10 * y), p[2] = (uint8_t)(seed + x + y);
        }
    size_t n = 0;
    unsigned char *b = png_bytes(16, 12, PNG_FORMAT_RGB, px, NULL, 0, &n);
    if (b) write_file(path, b, n);
    free(b);
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    return remove(p);
}
static void rm_rf(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static char g_dir[256];
static void cleanup(void) {
    if (g_dir[0]) rm_rf(g_dir);
}
static const char *tmp_root(void) {
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "/tmp/ct_test_image_XXXXXX");
        if (!mkdtemp(g_dir)) exit(2);
        atexit(cleanup);
    }
    return g_dir;
}

/* ---- decoding ----------------------------------------------------------------------- */

TEST(png_color_kinds) {
    enum { W = 5, H = 3 };
    uint8_t rgb[H * W * 3], rgba[H * W * 4], gray[H * W], idx[H * W], cmap[4 * 3];
    uint16_t g16[H * W];
    for (int i = 0; i < H * W; i++) {
        for (int c = 0; c < 3; c++) rgb[3 * i + c] = (uint8_t)(17 * i + 50 * c);
        for (int c = 0; c < 3; c++) rgba[4 * i + c] = rgb[3 * i + c];
        rgba[4 * i + 3] = (uint8_t)(i * 13); /* alpha: dropped, not composited (PIL's convert("RGB")) */
        gray[i] = (uint8_t)(200 - 9 * i);
        idx[i] = (uint8_t)(i % 4);
        g16[i] = (uint16_t)(1000 + 4000 * i);
    }
    for (int k = 0; k < 12; k++) cmap[k] = (uint8_t)(20 * k + 3);
    ct_image im = {0};
    char err[512];
    size_t n;
    unsigned char *b;
    /* RGB: exact */
    CHECK((b = png_bytes(W, H, PNG_FORMAT_RGB, rgb, NULL, 0, &n)));
    CHECK(ct_image_decode(b, n, 3, 1 << 20, "rgb.png", &im, err, sizeof err) == CT_OK);
    free(b);
    CHECK(im.h == H && im.w == W && im.c == 3 && !memcmp(im.px, rgb, sizeof rgb));
    /* RGB to one channel: PIL's L */
    CHECK((b = png_bytes(W, H, PNG_FORMAT_RGB, rgb, NULL, 0, &n)));
    CHECK(ct_image_decode(b, n, 1, 1 << 20, "rgb.png", &im, err, sizeof err) == CT_OK);
    free(b);
    CHECK(im.c == 1);
    for (int i = 0; i < H * W; i++) {
        unsigned l = (19595u * rgb[3 * i] + 38470u * rgb[3 * i + 1] + 7471u * rgb[3 * i + 2] + 0x8000u) >> 16;
        CHECK(im.px[i] == l);
    }
    /* RGBA: alpha dropped */
    CHECK((b = png_bytes(W, H, PNG_FORMAT_RGBA, rgba, NULL, 0, &n)));
    CHECK(ct_image_decode(b, n, 3, 1 << 20, "rgba.png", &im, err, sizeof err) == CT_OK);
    free(b);
    CHECK(im.c == 3 && !memcmp(im.px, rgb, sizeof rgb));
    /* gray: replicated to RGB, or kept */
    CHECK((b = png_bytes(W, H, PNG_FORMAT_GRAY, gray, NULL, 0, &n)));
    CHECK(ct_image_decode(b, n, 3, 1 << 20, "gray.png", &im, err, sizeof err) == CT_OK);
    for (int i = 0; i < H * W; i++) CHECK(im.px[3 * i] == gray[i] && im.px[3 * i + 1] == gray[i] && im.px[3 * i + 2] == gray[i]);
    CHECK(ct_image_decode(b, n, 1, 1 << 20, "gray.png", &im, err, sizeof err) == CT_OK);
    free(b);
    CHECK(im.c == 1 && !memcmp(im.px, gray, sizeof gray));
    /* palette: the colormap's colors */
    CHECK((b = png_bytes(W, H, PNG_FORMAT_RGB_COLORMAP, idx, cmap, 4, &n)));
    CHECK(ct_image_decode(b, n, 3, 1 << 20, "palette.png", &im, err, sizeof err) == CT_OK);
    free(b);
    for (int i = 0; i < H * W; i++)
        for (int c = 0; c < 3; c++) CHECK(im.px[3 * i + c] == cmap[3 * idx[i] + c]);
    /* 16-bit gray: the high byte (libpng's linear format stores the samples as given) */
    CHECK((b = png_bytes(W, H, PNG_FORMAT_LINEAR_Y, g16, NULL, 0, &n)));
    CHECK(ct_image_decode(b, n, 1, 1 << 20, "gray16.png", &im, err, sizeof err) == CT_OK);
    free(b);
    for (int i = 0; i < H * W; i++) CHECK(im.px[i] == g16[i] >> 8);
    /* more pixels than allowed: bad, naming the file */
    CHECK((b = png_bytes(W, H, PNG_FORMAT_RGB, rgb, NULL, 0, &n)));
    CHECK(ct_image_decode(b, n, 3, W * H - 1, "big.png", &im, err, sizeof err) == CT_E_CORRUPT);
    free(b);
    CHECK(strstr(err, "big.png") && strstr(err, "limit"));
    ct_image_free(&im);
}

TEST(jpeg_color_kinds) {
    enum { W = 24, H = 16 };
    uint8_t rgb[H * W * 3], gray[H * W], cmyk[H * W * 4];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) { /* smooth: quality 100 stays within a few levels */
            int i = y * W + x;
            rgb[3 * i] = (uint8_t)(40 + 4 * x), rgb[3 * i + 1] = (uint8_t)(60 + 5 * y), rgb[3 * i + 2] = 128;
            gray[i] = (uint8_t)(30 + 3 * x + 2 * y);
            /* Adobe (inverted) CMYK as libjpeg writes it: 255 = no ink; K 255 leaves C, M, Y as the RGB */
            cmyk[4 * i] = rgb[3 * i], cmyk[4 * i + 1] = rgb[3 * i + 1], cmyk[4 * i + 2] = rgb[3 * i + 2];
            cmyk[4 * i + 3] = 255;
        }
    ct_image im = {0};
    char err[512];
    size_t n;
    unsigned char *b = jpeg_bytes(W, H, 3, JCS_RGB, rgb, &n);
    CHECK(b && ct_image_decode(b, n, 3, 1 << 20, "rgb.jpg", &im, err, sizeof err) == CT_OK);
    CHECK(im.h == H && im.w == W && im.c == 3);
    for (int i = 0; i < H * W * 3; i++) CHECK_MSG(abs(im.px[i] - rgb[i]) <= 4, "rgb %d: %d vs %d", i, im.px[i], rgb[i]);
    /* truncated (half the file): an error naming it, not a gray-filled image */
    CHECK(ct_image_decode(b, n / 2, 3, 1 << 20, "cut.jpg", &im, err, sizeof err) == CT_E_CORRUPT);
    CHECK_MSG(strstr(err, "cut.jpg") != NULL, "%s", err);
    free(b);
    b = jpeg_bytes(W, H, 1, JCS_GRAYSCALE, gray, &n);
    CHECK(b && ct_image_decode(b, n, 3, 1 << 20, "gray.jpg", &im, err, sizeof err) == CT_OK);
    CHECK(im.c == 3);
    for (int i = 0; i < H * W; i++) {
        CHECK(im.px[3 * i] == im.px[3 * i + 1] && im.px[3 * i] == im.px[3 * i + 2]);
        CHECK(abs(im.px[3 * i] - gray[i]) <= 3);
    }
    free(b);
    b = jpeg_bytes(W, H, 4, JCS_CMYK, cmyk, &n);
    CHECK(b && ct_image_decode(b, n, 3, 1 << 20, "cmyk.jpg", &im, err, sizeof err) == CT_OK);
    CHECK(im.c == 3);
    for (int i = 0; i < H * W * 3; i++) CHECK_MSG(abs(im.px[i] - rgb[i]) <= 4, "cmyk %d: %d vs %d", i, im.px[i], rgb[i]);
    CHECK(ct_image_decode(b, n, 1, 1 << 20, "cmyk.jpg", &im, err, sizeof err) == CT_OK && im.c == 1);
    free(b);
    ct_image_free(&im);
}

TEST(bad_files_are_corrupt_and_named) {
    ct_image im = {0};
    char err[512];
    CHECK(ct_image_decode("", 0, 3, 1 << 20, "empty.png", &im, err, sizeof err) == CT_E_CORRUPT);
    CHECK(strstr(err, "empty.png") && strstr(err, "0 bytes"));
    const char *txt = "hello, I am not an image\n";
    CHECK(ct_image_decode(txt, strlen(txt), 3, 1 << 20, "notes.jpg", &im, err, sizeof err) == CT_E_CORRUPT);
    CHECK(strstr(err, "notes.jpg") && strstr(err, "not a JPEG or PNG"));
    uint8_t px[8 * 8 * 3];
    for (int i = 0; i < (int)sizeof px; i++) px[i] = (uint8_t)(i * 7);
    size_t n;
    unsigned char *b = png_bytes(8, 8, PNG_FORMAT_RGB, px, NULL, 0, &n);
    CHECK(b);
    for (size_t cut = 8; cut < n; cut += 9) { /* every truncation fails cleanly */
        ct_status s = ct_image_decode(b, cut, 3, 1 << 20, "cut.png", &im, err, sizeof err);
        CHECK_MSG(s == CT_E_CORRUPT, "cut at %zu of %zu: %s", cut, n, ct_status_name(s));
        CHECK(strstr(err, "cut.png") != NULL);
    }
    b[n / 2] ^= 0x55; /* a flipped byte in IDAT: the CRC or inflate fails */
    CHECK(ct_image_decode(b, n, 3, 1 << 20, "flipped.png", &im, err, sizeof err) == CT_E_CORRUPT);
    free(b);
    b = jpeg_bytes(8, 8, 3, JCS_RGB, px, &n);
    CHECK(b);
    for (size_t cut = 3; cut < n - 2; cut += 17) {
        ct_status s = ct_image_decode(b, cut, 3, 1 << 20, "cut.jpg", &im, err, sizeof err);
        CHECK_MSG(s == CT_E_CORRUPT, "cut at %zu of %zu: %s", cut, n, ct_status_name(s));
    }
    free(b);
    ct_image_free(&im);
}

/* ---- ImageFolder ----------------------------------------------------------------------- */

/* root/{b_cat: 3 images, a_dog: 2 images + notes.txt, c_bird: 1 image}; with_bad: a_dog/1_bad.png is text */
static void make_folder(const char *root, int with_bad) {
    char p[512];
    mkdir(root, 0755);
    const char *cls[3] = {"b_cat", "a_dog", "c_bird"};
    int count[3] = {3, 2, 1};
    for (int k = 0; k < 3; k++) {
        snprintf(p, sizeof p, "%s/%s", root, cls[k]);
        mkdir(p, 0755);
        for (int i = 0; i < count[k]; i++) {
            snprintf(p, sizeof p, "%s/%s/%d.PNG", root, cls[k], i * 2); /* upper case extension counts */
            write_png_rgb(p, 10 * k + i);
        }
    }
    snprintf(p, sizeof p, "%s/a_dog/notes.txt", root);
    write_file(p, "not an image", 12);
    if (with_bad) {
        snprintf(p, sizeof p, "%s/a_dog/1_bad.png", root);
        write_file(p, "not an image", 12);
    }
}

TEST(folder_classes_and_labels) {
    ct_context *ctx = test_ctx(-1, 1);
    char root[512];
    snprintf(root, sizeof root, "%s/folder", tmp_root());
    make_folder(root, 0);
    ct_image_opts o;
    ct_image_opts_default(&o);
    o.size = 12; /* eval: resize the 12-pixel side to 12, center-crop 12 of 16 */
    for (int c = 0; c < 3; c++) o.mean[c] = 0, o.std[c] = 1;
    ct_image_set *set;
    CHECK_OK(ctx, ct_image_set_open_folder(ctx, root, &o, &set));
    CHECK(ct_image_set_count(set) == 6 && ct_image_set_classes(set) == 3);
    CHECK(!strcmp(ct_image_set_class_name(set, 0), "a_dog") && !strcmp(ct_image_set_class_name(set, 2), "c_bird"));
    ct_image scratch = {0};
    float out[3 * 12 * 12];
    int32_t lab;
    char err[512];
    int want[6] = {0, 0, 1, 1, 1, 2};
    int seed_of[6] = {10, 11, 0, 1, 2, 20}; /* a_dog = class 1 of make_folder, b_cat = 0, c_bird = 2 */
    for (int i = 0; i < 6; i++) {
        CHECK(ct_image_set_get(set, i, 1, 0, &scratch, out, &lab, err, sizeof err) == CT_OK);
        CHECK(lab == want[i]);
        /* center crop of 12 from 16 columns: x offset 2; pixel (y, x) -> source (y, x + 2) exactly */
        for (int y = 0; y < 12; y++)
            for (int x = 0; x < 12; x++) {
                float r = (float)(uint8_t)(seed_of[i] + 10 * (x + 2)) / 255.0f;
                float g = (float)(uint8_t)(seed_of[i] + 10 * y) / 255.0f;
                CHECK_MSG(fabsf(out[y * 12 + x] - r) < 1e-6f && fabsf(out[144 + y * 12 + x] - g) < 1e-6f,
                          "sample %d (%d, %d)", i, y, x);
            }
    }
    ct_image_stats st;
    ct_image_set_stats(set, &st);
    CHECK(st.images == 6 && st.bad == 0 && st.seconds > 0);
    ct_image_free(&scratch);
    ct_image_set_free(set);
    /* a missing folder and a class folder without images are errors that name them */
    CHECK(ct_image_set_open_folder(ctx, "/nonexistent/imagefolder", &o, &set) == CT_E_IO);
    CHECK(strstr(ct_context_last_error(ctx), "/nonexistent/imagefolder"));
    char p[600];
    snprintf(p, sizeof p, "%s/d_empty", root);
    mkdir(p, 0755);
    CHECK(ct_image_set_open_folder(ctx, root, &o, &set) == CT_E_IO);
    CHECK(strstr(ct_context_last_error(ctx), "d_empty"));
    rmdir(p);
    ct_context_free(ctx);
}

/* One epoch of the prefetcher into img / lab; returns the samples or -1 (status in *st). */
static int64_t epoch_of(ct_prefetcher *pf, int64_t sample, float *img, int32_t *lab, ct_status *st) {
    int64_t total = 0, got;
    for (;;) {
        if ((*st = ct_prefetcher_next(pf, img + total * sample, lab + total, &got)) != CT_OK) return -1;
        if (!got) return total;
        total += got;
    }
}

TEST(bad_image_policy) {
    ct_context *ctx = test_ctx(-1, 1);
    char root[512];
    snprintf(root, sizeof root, "%s/bad", tmp_root());
    make_folder(root, 1);
    ct_image_opts o;
    ct_image_opts_default(&o);
    o.size = 8;
    for (int threads = 0; threads <= 2; threads += 2) {
        ct_prefetch_opts po;
        ct_prefetch_opts_default(&po);
        po.threads = threads;
        /* error: the run stops naming the file */
        ct_image_set *set;
        ct_dataset ds;
        o.bad = CT_BAD_IMAGES_ERROR;
        CHECK_OK(ctx, ct_image_set_open_folder(ctx, root, &o, &set));
        CHECK(ct_image_set_count(set) == 7);
        CHECK_OK(ctx, ct_dataset_from_image_set(set, &ds));
        ct_prefetcher *pf;
        CHECK_OK(ctx, ct_prefetcher_create(ctx, &ds, 3, 0, 0, 5, &po, &pf));
        float img[7 * 3 * 64];
        int32_t lab[7];
        ct_status st;
        CHECK(epoch_of(pf, 3 * 64, img, lab, &st) == -1 && st == CT_E_CORRUPT);
        CHECK_MSG(strstr(ct_context_last_error(ctx), "a_dog/1_bad.png") != NULL, "%s", ct_context_last_error(ctx));
        ct_prefetcher_free(pf);
        ct_image_set_free(set);
        /* skip: replaced by the next image (a_dog/2.PNG, label 0), counted once over two epochs */
        o.bad = CT_BAD_IMAGES_SKIP;
        CHECK_OK(ctx, ct_image_set_open_folder(ctx, root, &o, &set));
        CHECK_OK(ctx, ct_dataset_from_image_set(set, &ds));
        CHECK_OK(ctx, ct_prefetcher_create(ctx, &ds, 3, 0, 0, 5, &po, &pf));
        for (int e = 0; e < 2; e++) {
            CHECK_OK(ctx, ct_prefetcher_start_epoch(pf, (uint64_t)e));
            CHECK(epoch_of(pf, 3 * 64, img, lab, &st) == 7);
            CHECK(lab[1] == 0 && lab[2] == 0 && !memcmp(img + 64 * 3, img + 2 * 64 * 3, 64 * 3 * sizeof(float)));
        }
        ct_image_stats s;
        ct_image_set_stats(set, &s);
        CHECK(s.bad == 1 && s.images >= 14); /* >: a restarted epoch decodes its prefetched batches again */
        ct_prefetcher_free(pf);
        ct_image_set_free(set);
    }
    ct_context_free(ctx);
}

/* ---- CIFAR -------------------------------------------------------------------------------- */

TEST(cifar_records) {
    ct_context *ctx = test_ctx(-1, 1);
    enum { N = 3 };
    for (int classes = 10; classes <= 100; classes += 90) {
        const int lb = classes == 100 ? 2 : 1, rb = lb + 3072;
        uint8_t *buf = malloc((size_t)N * rb);
        for (int i = 0; i < N; i++) {
            uint8_t *r = buf + i * rb;
            if (lb == 2) r[0] = 3; /* coarse label: ignored */
            r[lb - 1] = (uint8_t)(classes - 1 - i);
            for (int p = 0; p < 3072; p++) r[lb + p] = (uint8_t)(p * 7 + i);
        }
        ct_image_opts o;
        ct_image_opts_default(&o);
        for (int c = 0; c < 3; c++) o.mean[c] = 0, o.std[c] = 1;
        ct_image_set *set;
        CHECK_OK(ctx, ct_image_set_cifar_from_memory(ctx, buf, (size_t)N * rb, classes, &o, &set));
        CHECK(ct_image_set_count(set) == N && ct_image_set_classes(set) == classes);
        ct_image sc = {0};
        float out[3072];
        int32_t lab;
        char err[256];
        for (int i = 0; i < N; i++) {
            CHECK(ct_image_set_get(set, i, 0, 0, &sc, out, &lab, err, sizeof err) == CT_OK);
            CHECK(lab == classes - 1 - i);
            for (int p = 0; p < 3072; p++) CHECK(fabsf(out[p] - (float)(uint8_t)(p * 7 + i) / 255.0f) < 1e-6f);
        }
        ct_image_free(&sc);
        ct_image_set_free(set);
        /* a label out of range and a size that is not whole records */
        buf[rb + lb - 1] = (uint8_t)classes;
        CHECK(ct_image_set_cifar_from_memory(ctx, buf, (size_t)N * rb, classes, &o, &set) == CT_E_CORRUPT);
        CHECK(strstr(ct_context_last_error(ctx), "record 1"));
        CHECK(ct_image_set_cifar_from_memory(ctx, buf, (size_t)N * rb - 1, classes, &o, &set) == CT_E_CORRUPT);
        free(buf);
    }
    /* from files: data_batch_1..5.bin (one record each) + test_batch.bin */
    char dir[512], p[600];
    snprintf(dir, sizeof dir, "%s/cifar", tmp_root());
    mkdir(dir, 0755);
    uint8_t rec[3073];
    for (int f = 1; f <= 6; f++) {
        memset(rec, f, sizeof rec);
        if (f == 6) snprintf(p, sizeof p, "%s/test_batch.bin", dir);
        else snprintf(p, sizeof p, "%s/data_batch_%d.bin", dir, f);
        write_file(p, rec, sizeof rec);
    }
    ct_image_set *tr, *te;
    CHECK_OK(ctx, ct_image_set_open_cifar(ctx, dir, "train", 10, NULL, &tr));
    CHECK_OK(ctx, ct_image_set_open_cifar(ctx, dir, "test", 10, NULL, &te));
    CHECK(ct_image_set_count(tr) == 5 && ct_image_set_count(te) == 1);
    ct_image_set_free(tr);
    ct_image_set_free(te);
    CHECK(ct_image_set_open_cifar(ctx, dir, "train", 100, NULL, &tr) == CT_E_IO);
    CHECK(strstr(ct_context_last_error(ctx), "train.bin"));
    ct_context_free(ctx);
}

/* ---- transforms ------------------------------------------------------------------------------ */

TEST(rrc_params) {
    const float scale[2] = {0.08f, 1.0f}, ratio[2] = {3.0f / 4.0f, 4.0f / 3.0f};
    double u[40];
    ct_crop c;
    /* every try too large (ratio 2 on a square needs w > W): the center fallback, w = W, h = round(W / 2) */
    for (int i = 0; i < 40; i++) u[i] = 0.999;
    const float one[2] = {1.0f, 1.0f}, two[2] = {2.0f, 2.0f};
    ct_rrc_params(31, 31, one, two, u, &c);
    CHECK(c.w == 31 && c.h == 16 && c.top == 7 && c.left == 0);
    /* a wide image with ratio in [3/4, 4/3] and area 1: too wide for any try, fallback h = H, w = round(H * 4/3) */
    ct_rrc_params(10, 100, one, ratio, u, &c);
    CHECK(c.h == 10 && c.w == 13 && c.top == 0 && c.left == 43);
    /* the first try that fits wins: u = 0 -> area 0.08, ratio 3/4, top = left = 0 */
    for (int i = 0; i < 40; i++) u[i] = 0;
    ct_rrc_params(100, 100, scale, ratio, u, &c);
    CHECK(c.top == 0 && c.left == 0 && c.w == 24 && c.h == 33); /* round(sqrt(800 * .75)), round(sqrt(800 / .75)) */
    /* (seed, epoch, index): boxes inside the image, area and ratio in range unless the fallback */
    ct_image_opts o;
    ct_image_opts_default(&o);
    o.train = 1;
    int flips = 0;
    for (int64_t i = 0; i < 2000; i++) {
        ct_image_transform_params(&o, 37, 53, 7, 3, i, &c);
        CHECK(c.top >= 0 && c.left >= 0 && c.h >= 1 && c.w >= 1 && c.top + c.h <= 37 && c.left + c.w <= 53);
        double a = (double)c.h * c.w / (37.0 * 53.0);
        CHECK(a > 0.06 && a <= 1.0);
        flips += c.flip;
        ct_crop d;
        ct_image_transform_params(&o, 37, 53, 7, 3, i, &d);
        CHECK(!memcmp(&c, &d, sizeof c)); /* a pure function of (seed, epoch, index) */
    }
    CHECK(flips > 900 && flips < 1100);
    ct_crop e0, e1;
    int differ = 0;
    for (int64_t i = 0; i < 20; i++) {
        ct_image_transform_params(&o, 37, 53, 7, 0, i, &e0);
        ct_image_transform_params(&o, 37, 53, 7, 1, i, &e1);
        differ += memcmp(&e0, &e1, sizeof e0) != 0;
    }
    CHECK(differ >= 18); /* another epoch, other crops */
}

/* RandomCrop(S, padding=P): every offset in [-P, H + P - S] is drawn, the
 * window is copied (no resampling), black (pixel 0) outside the image, and
 * the flip mirrors the window. */
TEST(padded_random_crop) {
    enum { H = 6, W = 6, S = 6, P = 2, C = 1 };
    uint8_t px[H * W];
    for (int i = 0; i < H * W; i++) px[i] = (uint8_t)(10 + i);
    ct_image im = {px, sizeof px, H, W, C};
    ct_image_opts o;
    ct_image_opts_default(&o);
    o.size = S, o.channels = C, o.train = 1, o.pad = P;
    o.mean[0] = 0.0f, o.std[0] = 1.0f / 255.0f; /* normalized value = pixel value */
    int seen[2 * P + 1][2 * P + 1];
    memset(seen, 0, sizeof seen);
    for (int64_t i = 0; i < 4000; i++) {
        ct_crop c;
        ct_image_transform_params(&o, H, W, 11, 0, i, &c);
        CHECK(c.h == S && c.w == S && c.top >= -P && c.top <= H + P - S && c.left >= -P && c.left <= W + P - S);
        seen[c.top + P][c.left + P]++;
        float out[S * S];
        ct_image_transform(&o, &im, &c, out);
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                int sy = c.top + y, sx = c.left + (c.flip ? S - 1 - x : x);
                float want = sy >= 0 && sy < H && sx >= 0 && sx < W ? (float)px[sy * W + sx] : 0.0f;
                CHECK_MSG(out[y * S + x] == want, "crop (%d, %d) flip %d at (%d, %d): %g, want %g", c.top, c.left,
                          c.flip, y, x, (double)out[y * S + x], (double)want);
            }
    }
    for (int a = 0; a <= 2 * P; a++)
        for (int b = 0; b <= 2 * P; b++) CHECK(seen[a][b] > 80); /* 25 offsets, ~160 each */
    /* an image smaller than the window even with padding: centered, black around */
    ct_crop c;
    ct_image_transform_params(&o, 1, 1, 11, 0, 0, &c);
    CHECK(c.top == -2 && c.left == -2); /* (1 + 4 - 6) / 2 - 2, truncated toward zero: 0 - 2 */
}

/* Resize of a 1 x 70000 strip to a shorter side of 16384 (a longer side of
 * 1.1e9, clamped at 2^30): finite, in range, no overflow (UBSan). */
TEST(extreme_aspect_ratio_eval) {
    enum { W = 70000 };
    uint8_t *px = malloc(W * 3);
    for (int i = 0; i < W * 3; i++) px[i] = (uint8_t)(i % 251);
    ct_image im = {px, W * 3, 1, W, 3};
    ct_image_opts o;
    ct_image_opts_default(&o);
    o.size = 4, o.resize = 16384;
    ct_crop c = {0, 0, 1, W, 0};
    float out[3 * 16];
    ct_image_transform(&o, &im, &c, out);
    free(px);
    for (int i = 0; i < 3 * 16; i++) CHECK(isfinite(out[i]) && out[i] >= -1.0001f && out[i] <= 1.0001f);
}

TEST(transforms_match_torchvision) {
    char err[256];
    gold_file *g = gold_load("augment.ctg", err, sizeof err, 0);
    CHECK_MSG(g != NULL, "%s (regenerate with /usr/bin/python3 scripts/make_augment_golden.py)", err);
    const gold_rec *mean = gold_get(g, "meta.mean"), *std = gold_get(g, "meta.std");
    CHECK(mean && std && mean->numel == 3 && std->numel == 3);
    int n = gold_count(g, "out.");
    CHECK(n >= 20);
    double worst = 0;
    for (int k = 0; k < n; k++) {
        char name[32];
        snprintf(name, sizeof name, "img.%d", k);
        const gold_rec *img = gold_get(g, name);
        snprintf(name, sizeof name, "crop.%d", k);
        const gold_rec *cr = gold_get(g, name);
        snprintf(name, sizeof name, "out.%d", k);
        const gold_rec *out = gold_get(g, name);
        CHECK(img && cr && out && img->dtype == GDT_U8 && img->ndim == 3 && cr->numel == 8);
        const int32_t *p = cr->data;
        ct_image_opts o;
        ct_image_opts_default(&o);
        o.channels = (int)img->dims[2];
        o.train = p[5], o.size = p[6], o.resize = p[7];
        memcpy(o.mean, mean->data, sizeof o.mean);
        memcpy(o.std, std->data, sizeof o.std);
        ct_image im = {(uint8_t *)img->data, 0, (int)img->dims[0], (int)img->dims[1], (int)img->dims[2]};
        ct_crop c = {p[0], p[1], p[2], p[3], p[4]};
        if (!o.train) c = (ct_crop){0, 0, im.h, im.w, 0};
        CHECK(out->numel == (int64_t)o.channels * o.size * o.size);
        float *dst = malloc(sizeof(float) * (size_t)out->numel);
        ct_image_transform(&o, &im, &c, dst);
        const float *ref = out->data;
        double e = 0, mx = 0;
        for (int64_t i = 0; i < out->numel; i++) {
            e = fmax(e, fabs((double)dst[i] - ref[i]));
            mx = fmax(mx, fabs(ref[i]));
        }
        free(dst);
        e /= mx > 0 ? mx : 1;
        worst = fmax(worst, e);
        CHECK_MSG(e <= 1e-5, "case %d (%dx%d box %d,%d %dx%d flip %d train %d S %d resize %d): rel error %.3g", k,
                  im.h, im.w, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], e);
    }
    printf("    %d transforms vs torchvision: worst max|d|/max|ref| %.2g\n", n, worst);
    gold_free(g);
}

TEST(same_batches_whatever_the_threads) {
    ct_context *ctx = test_ctx(-1, 1);
    char root[512];
    snprintf(root, sizeof root, "%s/det", tmp_root());
    make_folder(root, 0);
    ct_image_opts o;
    ct_image_opts_default(&o);
    o.size = 10;
    o.train = 1;
    ct_image_set *set;
    ct_dataset ds;
    CHECK_OK(ctx, ct_image_set_open_folder(ctx, root, &o, &set));
    CHECK_OK(ctx, ct_dataset_from_image_set(set, &ds));
    const int64_t S = 3 * 10 * 10;
    float ref[2][6 * 300], img[6 * 300];
    int32_t rlab[2][6], lab[6];
    int threads[] = {0, 1, 3, 2}, bufs[] = {1, 1, 2, 5};
    for (int t = 0; t < 4; t++) {
        ct_prefetch_opts po;
        ct_prefetch_opts_default(&po);
        po.threads = threads[t], po.buffer_size = bufs[t];
        ct_prefetcher *pf;
        CHECK_OK(ctx, ct_prefetcher_create(ctx, &ds, 2, 1, 0, 99, &po, &pf));
        for (int e = 1; e >= 0; e--) { /* epoch 1 first: the order of epochs does not matter */
            CHECK_OK(ctx, ct_prefetcher_start_epoch(pf, (uint64_t)e));
            ct_status st;
            CHECK(epoch_of(pf, S, t ? img : ref[e], t ? lab : rlab[e], &st) == 6);
            if (t) CHECK_MSG(!memcmp(img, ref[e], sizeof img) && !memcmp(lab, rlab[e], sizeof lab),
                             "threads %d buffer %d epoch %d differs from the synchronous run", threads[t], bufs[t], e);
        }
        ct_prefetcher_free(pf);
    }
    CHECK(memcmp(ref[0], ref[1], sizeof ref[0]) != 0); /* another epoch: other crops */
    ct_image_set_free(set);
    ct_context_free(ctx);
}

TEST_MAIN({"png_color_kinds", png_color_kinds}, {"jpeg_color_kinds", jpeg_color_kinds},
          {"bad_files_are_corrupt_and_named", bad_files_are_corrupt_and_named},
          {"folder_classes_and_labels", folder_classes_and_labels}, {"bad_image_policy", bad_image_policy},
          {"cifar_records", cifar_records}, {"rrc_params", rrc_params}, {"padded_random_crop", padded_random_crop},
          {"extreme_aspect_ratio_eval", extreme_aspect_ratio_eval},
          {"transforms_match_torchvision", transforms_match_torchvision},
          {"same_batches_whatever_the_threads", same_batches_whatever_the_threads})
