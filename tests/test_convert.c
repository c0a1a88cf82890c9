/* tests/test_convert.c - bulk f32 <-> bf16 / f16 conversions (convert.h):
 * every implementation (reference loop, AVX2, AVX-512 where the CPU has it)
 * against the scalar functions of tensor.h, bit for bit: all 65536 bf16 and
 * f16 patterns both ways, f32 patterns at every rounding boundary (ties,
 * just above/below, subnormals, overflow, NaN payloads, -0, inf) plus random
 * bits, odd lengths, MXCSR DAZ/FTZ set, and ct_convert on tensors (all dtype
 * pairs, threads 1 vs 2, errors). */
#include <stdint.h>
#include <xmmintrin.h>

#include "test.h"
#include "kernels/kernels.h" /* ct_simd_bf16_cvt */

/* ---- helpers ------------------------------------------------------------------------------ */

static ct_isa g_isas[CT_ISA_COUNT];
static int g_nisas;

static void setup(void) {
    if (g_nisas) return;
    for (int i = 0; i < CT_ISA_COUNT; i++) {
        if (ct_convert_isa((ct_isa)i) == (ct_isa)i) g_isas[g_nisas++] = (ct_isa)i;
        else printf("  (%s conversions skipped: the CPU lacks it)\n", ct_isa_name((ct_isa)i));
    }
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void) { /* xorshift64* */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 0x2545f4914f6cdd1dull) >> 32);
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

typedef enum { D_F32_BF16, D_BF16_F32, D_F32_F16, D_F16_F32, D_COUNT } dir;
static const char *dir_name[D_COUNT] = {"f32->bf16", "bf16->f32", "f32->f16", "f16->f32"};

/* Runs direction d with the given isa; src/dst are float or uint16_t arrays. */
static void run_dir(dir d, const void *src, void *dst, size_t n, ct_isa isa) {
    switch (d) {
    case D_F32_BF16: ct_f32_to_bf16_n(src, dst, n, isa); break;
    case D_BF16_F32: ct_bf16_to_f32_n(src, dst, n, isa); break;
    case D_F32_F16: ct_f32_to_f16_n(src, dst, n, isa); break;
    default: ct_f16_to_f32_n(src, dst, n, isa); break;
    }
}

/* The scalar function of tensor.h for element i (the output's bits). */
static uint32_t scalar_ref(dir d, const void *src, size_t i) {
    switch (d) {
    case D_F32_BF16: return ct_f32_to_bf16(((const float *)src)[i]);
    case D_BF16_F32: return f2u(ct_bf16_to_f32(((const uint16_t *)src)[i]));
    case D_F32_F16: return ct_f32_to_f16(((const float *)src)[i]);
    default: return f2u(ct_f16_to_f32(((const uint16_t *)src)[i]));
    }
}

static int from_f32(dir d) { return d == D_F32_BF16 || d == D_F32_F16; }
static uint32_t out_bits(dir d, const void *dst, size_t i) {
    return from_f32(d) ? ((const uint16_t *)dst)[i] : f2u(((const float *)dst)[i]);
}
static uint32_t in_bits(dir d, const void *src, size_t i) {
    return from_f32(d) ? f2u(((const float *)src)[i]) : ((const uint16_t *)src)[i];
}

/* Converts src[0..n) with every isa and compares each output with the scalar
 * function. Returns the number of mismatches (the first few printed). */
static size_t check_all_isas(dir d, const void *src, size_t n) {
    void *dst = xmalloc(n * 4);
    size_t bad = 0;
    for (int k = 0; k < g_nisas; k++) {
        memset(dst, 0xa5, n * 4);
        run_dir(d, src, dst, n, g_isas[k]);
        for (size_t i = 0; i < n; i++) {
            uint32_t want = scalar_ref(d, src, i), got = out_bits(d, dst, i);
            if (want != got && bad++ < 8)
                fprintf(stderr, "  %s %s: input 0x%08x -> 0x%08x, scalar 0x%08x (index %zu of %zu)\n",
                        ct_isa_name(g_isas[k]), dir_name[d], in_bits(d, src, i), got, want, i, n);
        }
    }
    free(dst);
    return bad;
}

/* ---- all 16-bit patterns: 16 -> f32 -> 16 ------------------------------------------------- */

static void roundtrip_all(int f16) {
    setup();
    uint16_t *h = xmalloc(65536 * 2), *back = xmalloc(65536 * 2);
    float *f = xmalloc(65536 * 4);
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    for (int k = 0; k < g_nisas; k++) {
        ct_isa isa = g_isas[k];
        if (f16) ct_f16_to_f32_n(h, f, 65536, isa);
        else ct_bf16_to_f32_n(h, f, 65536, isa);
        if (f16) ct_f32_to_f16_n(f, back, 65536, isa);
        else ct_f32_to_bf16_n(f, back, 65536, isa);
        size_t bad = 0;
        for (uint32_t i = 0; i < 65536; i++) {
            uint32_t fw = f2u(f16 ? ct_f16_to_f32(h[i]) : ct_bf16_to_f32(h[i]));
            int nan = f16 ? (i & 0x7fff) > 0x7c00 : (i & 0x7fff) > 0x7f80;
            /* NaNs stay NaN with the sign kept; they come back quieted (scalar semantics) */
            uint16_t bw = nan ? (uint16_t)(i | (f16 ? 0x200 : 0x40)) : (uint16_t)i;
            int ok = f2u(f[i]) == fw && back[i] == bw && (!nan || isnan(f[i]));
            if (!ok && bad++ < 8)
                fprintf(stderr, "  %s %s 0x%04x -> f32 0x%08x (scalar 0x%08x) -> 0x%04x (want 0x%04x)\n",
                        ct_isa_name(isa), f16 ? "f16" : "bf16", i, f2u(f[i]), fw, back[i], bw);
        }
        CHECK_MSG(bad == 0, "%zu mismatches for %s", bad, ct_isa_name(isa));
        /* scalar round trip too: the reference the vectors are held to */
        for (uint32_t i = 0; i < 65536; i++) {
            int nan = f16 ? (i & 0x7fff) > 0x7c00 : (i & 0x7fff) > 0x7f80;
            uint16_t b2 = f16 ? ct_f32_to_f16(ct_f16_to_f32((uint16_t)i)) : ct_f32_to_bf16(ct_bf16_to_f32((uint16_t)i));
            CHECK_MSG(nan ? ((b2 & 0x7fff) > (f16 ? 0x7c00 : 0x7f80) && (b2 & 0x8000) == (i & 0x8000)) : b2 == i,
                      "scalar round trip of 0x%04x gave 0x%04x", i, b2);
        }
    }
    free(h);
    free(back);
    free(f);
}

TEST(bf16_all_patterns_roundtrip) { roundtrip_all(0); }
TEST(f16_all_patterns_roundtrip) { roundtrip_all(1); }

/* ---- f32 -> bf16 / f16 on boundary patterns --------------------------------------------------- */

/* Patterns around every rounding position of every exponent, both signs, the
 * named special values, then random bits; shuffled so they hit every lane. */
static size_t boundary_patterns(float **out) {
    size_t cap = 2u << 20, n = 0;
    uint32_t *u = xmalloc(cap * 4);
    static const uint32_t named[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000,             /* +-0, +-inf */
        0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x7f7f7fff, 0x7f7f8001, /* FLT_MAX, bf16 overflow ties */
        0x00000001, 0x807fffff, 0x00400000, 0x00800000, 0x00008000, 0x00018000, /* f32 denormals */
        0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001, 0x477fffff, 0x47800000, /* f16 65504 .. 65536 */
        0xc77fefff, 0xc77ff000, 0x4b800000, 0x7e000000,
        0x33000000, 0x33000001, 0x32ffffff, 0x33800000, 0x33c00000, 0x33a00000, /* f16 2^-25, 2^-24 ... */
        0x33400000, 0x333fffff, 0x33400001, 0xb3000000, 0xb3000001,
        0x387fc000, 0x387fe000, 0x387fdfff, 0x387fe001, 0x387fffff, 0x38800000, /* f16 max subnormal .. min normal */
        0x38801000, 0x38803000, 0x38802000, 0xb87fe000,
        0x7f800001, 0xff800001, 0x7fbfffff, 0xffbfffff, 0x7fc00000, 0xffc00000, /* NaN payloads */
        0x7fffffff, 0xffffffff, 0x7f80ffff, 0x7f810000, 0x7f802000, 0x7f801fff,
        0x7fa00000, 0x7fc00001, 0x7f8000ff, 0xff80e000, 0x7fdfe000, 0x7f9fffff,
        0x3f800000, 0xbf800000, 0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001, /* 1.0 and bf16 ties */
        0x3f801000, 0x3f803000, 0x3f800fff, 0x3f801001,                         /* f16 ties at 1.0 */
    };
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) u[n++] = named[i];
    /* every exponent and sign; mantissa patterns around bit k: the round bit of
     * bf16 is k = 15, of a normal f16 k = 12, of an f16 subnormal anywhere above */
    static const int32_t offs[] = {-1, 0, 1};
    for (uint32_t s = 0; s < 2; s++)
        for (uint32_t e = 0; e < 256; e++)
            for (int k = 0; k < 23; k++)
                for (uint32_t mul = 1; mul <= 3; mul += 2)
                    for (int o = 0; o < 3; o++) {
                        uint32_t m = ((mul << k) + (uint32_t)offs[o]) & 0x7fffffu;
                        u[n++] = (s << 31) | (e << 23) | m;
                        u[n++] = (s << 31) | (e << 23) | (m ^ 0x7fffffu); /* the complement too */
                    }
    for (uint32_t m = 0; m < 4096; m++) u[n++] = 0x7f800000u | (m << 11) | (m & 7); /* NaN payloads */
    while (n < cap) u[n++] = rnd32();
    for (size_t i = n - 1; i > 0; i--) { /* shuffle */
        size_t j = rnd32() % (i + 1);
        uint32_t t = u[i];
        u[i] = u[j];
        u[j] = t;
    }
    float *f = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) f[i] = u2f(u[i]);
    free(u);
    *out = f;
    return n;
}

TEST(f32_to_bf16_boundaries) {
    setup();
    float *f;
    size_t n = boundary_patterns(&f);
    size_t bad = check_all_isas(D_F32_BF16, f, n);
    free(f);
    CHECK_MSG(bad == 0, "%zu mismatches", bad);
}

TEST(f32_to_f16_boundaries) {
    setup();
    float *f;
    size_t n = boundary_patterns(&f);
    size_t bad = check_all_isas(D_F32_F16, f, n);
    free(f);
    CHECK_MSG(bad == 0, "%zu mismatches", bad);
}

/* A few values spelled out (the scalar semantics the vectors copy). */
TEST(scalar_semantics) {
    CHECK(ct_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(ct_f32_to_f16(u2f(0x477fefff)) == 0x7bff); /* just below the overflow tie */
    CHECK(ct_f32_to_f16(65520.0f) == 0x7c00);        /* tie to even -> inf */
    CHECK(ct_f32_to_f16(-1e9f) == 0xfc00);
    CHECK(ct_f32_to_f16(u2f(0x33000000)) == 0x0000); /* 2^-25: tie to even 0 */
    CHECK(ct_f32_to_f16(u2f(0x33000001)) == 0x0001);
    CHECK(ct_f32_to_f16(u2f(0x33c00000)) == 0x0002); /* 1.5 * 2^-24: tie to even 2 */
    CHECK(ct_f32_to_f16(u2f(0x387fe000)) == 0x0400); /* max subnormal + half: carries into min normal */
    CHECK(ct_f32_to_f16(-0.0f) == 0x8000);
    CHECK(ct_f32_to_f16(u2f(0xff800001)) == 0xfe00); /* signaling NaN -> quiet, sign kept */
    CHECK(ct_f32_to_bf16(u2f(0x3f808000)) == 0x3f80); /* tie to even (down) */
    CHECK(ct_f32_to_bf16(u2f(0x3f818000)) == 0x3f82); /* tie to even (up) */
    CHECK(ct_f32_to_bf16(u2f(0x7f7fffff)) == 0x7f80); /* FLT_MAX rounds to inf */
    CHECK(ct_f32_to_bf16(u2f(0xff800001)) == 0xffc0);
    CHECK(ct_f32_to_bf16(-0.0f) == 0x8000);
    CHECK(f2u(ct_f16_to_f32(0x0001)) == 0x33800000);
    CHECK(f2u(ct_f16_to_f32(0x8000)) == 0x80000000);
}

/* ---- lengths: tails, unaligned pointers, threads ------------------------------------------- */

static void fill_src(dir d, void *src, size_t n, size_t salt) {
    for (size_t i = 0; i < n; i++) {
        uint32_t r = rnd32();
        if (from_f32(d)) {
            /* mostly ordinary values, some random bits (NaN, inf, subnormals) */
            float v = (i + salt) % 5 == 0 ? u2f(r) : (float)((int32_t)r) * 1e-6f;
            ((float *)src)[i] = v;
        } else {
            ((uint16_t *)src)[i] = (uint16_t)r;
        }
    }
}

TEST(lengths_and_tails) {
    setup();
    static const size_t lens[] = {0, 1, 2, 7, 8, 9, 15, 16, 17, 23, 31, 32, 33, 1000, 1000003};
    for (int d = 0; d < D_COUNT; d++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            size_t n = lens[li];
            size_t ss = from_f32((dir)d) ? 4 : 2, ds = 6 - ss;
            /* exact-size buffers (the sanitizer build catches any over-read / over-write) */
            void *src = xmalloc(n * ss);
            fill_src((dir)d, src, n, li);
            size_t bad = check_all_isas((dir)d, src, n);
            free(src);
            CHECK_MSG(bad == 0, "%s n=%zu", dir_name[d], n);
            /* src and dst off 32-byte alignment; elements around dst must survive */
            if (n > 100) continue;
            float fs[136], fd[136];
            uint16_t hs[136], hd[136];
            for (size_t off = 1; off < 4; off++) {
                void *sp = from_f32((dir)d) ? (void *)(fs + off) : (void *)(hs + off);
                void *dp = from_f32((dir)d) ? (void *)(hd + off) : (void *)(fd + off);
                unsigned char *dbuf = from_f32((dir)d) ? (unsigned char *)hd : (unsigned char *)fd;
                size_t dbytes = from_f32((dir)d) ? sizeof hd : sizeof fd;
                fill_src((dir)d, sp, n, off);
                for (int k = 0; k < g_nisas; k++) {
                    memset(dbuf, 0x5a, dbytes);
                    run_dir((dir)d, sp, dp, n, g_isas[k]);
                    for (size_t i = 0; i < n; i++)
                        CHECK_MSG(out_bits((dir)d, dp, i) == scalar_ref((dir)d, sp, i), "%s %s n=%zu off=%zu i=%zu",
                                  ct_isa_name(g_isas[k]), dir_name[d], n, off, i);
                    for (size_t b = 0; b < dbytes; b++)
                        if (b < off * ds || b >= (off + n) * ds)
                            CHECK_MSG(dbuf[b] == 0x5a, "%s %s n=%zu off=%zu: byte %zu outside dst written",
                                      ct_isa_name(g_isas[k]), dir_name[d], n, off, b);
                }
            }
        }
}

/* MXCSR with DAZ/FTZ set or another rounding mode (as some libraries leave it):
 * results unchanged, i.e. equal to the scalar functions under the default MXCSR. */
TEST(mxcsr_daz_ftz_rounding) {
    setup();
    enum { N = 1 << 16 };
    float *f = xmalloc(N * 4), *wf = xmalloc(N * 4), *of = xmalloc(N * 4);
    uint16_t *h = xmalloc(N * 2), *wb = xmalloc(N * 2), *wh = xmalloc(N * 2), *o = xmalloc(N * 2);
    for (size_t i = 0; i < N; i++) {
        /* f32 denormals, tiny normals around the f16 subnormal range, values near ties, random bits */
        uint32_t r = rnd32();
        uint32_t u = i % 4 == 0   ? (r & 0x807fffffu)
                     : i % 4 == 1 ? ((r & 0x80ffffffu) | (100u << 23))
                     : i % 4 == 2 ? ((r & 0x83ffe000u) | 0x3c001000u | ((r & 1) ? 0x8000u : 0))
                                  : r;
        f[i] = u2f(u);
        h[i] = (uint16_t)(i % 2 ? i : (i & 0x83ff)); /* every f16 subnormal, bf16 denormals */
        wb[i] = ct_f32_to_bf16(f[i]);
        wh[i] = ct_f32_to_f16(f[i]);
        wf[i] = ct_f16_to_f32(h[i]);
    }
    static const struct { unsigned bits; const char *name; } modes[] = {
        {0x8040, "DAZ+FTZ"}, {0x6000, "round toward zero"}, {0x4000, "round up"}, {0x2000, "round down"},
        {0xe040, "DAZ+FTZ+toward zero"}};
    const unsigned csr = _mm_getcsr();
    for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++)
        for (int k = 0; k < g_nisas; k++) {
            size_t bad = 0;
            _mm_setcsr((csr & ~0xe040u) | modes[mi].bits);
            ct_f32_to_bf16_n(f, o, N, g_isas[k]);
            for (size_t i = 0; i < N; i++) bad += o[i] != wb[i];
            ct_f32_to_f16_n(f, o, N, g_isas[k]);
            for (size_t i = 0; i < N; i++) bad += o[i] != wh[i];
            ct_f16_to_f32_n(h, of, N, g_isas[k]);
            for (size_t i = 0; i < N; i++) bad += f2u(of[i]) != f2u(wf[i]);
            ct_bf16_to_f32_n(h, of, N, g_isas[k]);
            for (size_t i = 0; i < N; i++) bad += f2u(of[i]) != (uint32_t)h[i] << 16;
            _mm_setcsr(csr);
            CHECK_MSG(bad == 0, "%zu mismatches for %s under MXCSR %s", bad, ct_isa_name(g_isas[k]), modes[mi].name);
        }
    free(f);
    free(wf);
    free(of);
    free(h);
    free(wb);
    free(wh);
    free(o);
}

/* ---- ct_convert ------------------------------------------------------------------------------ */

static ct_context *ctx_threads(int isa, int nth) {
    ct_context_opts o;
    ct_context_opts_default(&o);
    o.isa = isa;
    o.num_threads = nth;
    o.use_onednn = 0;
    ct_context *ctx = NULL;
    if (ct_context_create(&o, &ctx) != CT_OK) {
        fprintf(stderr, "cannot create context\n");
        exit(2);
    }
    return ctx;
}

static uint32_t elem_bits(const void *p, ct_dtype dt, size_t i) {
    return dt == CT_F32 ? f2u(((const float *)p)[i]) : ((const uint16_t *)p)[i];
}

/* Scalar composition: src element -> f32 -> dst dtype. */
static uint32_t convert_ref(const void *p, ct_dtype sd, ct_dtype dd, size_t i) {
    float x = sd == CT_F32 ? ((const float *)p)[i]
              : sd == CT_BF16 ? ct_bf16_to_f32(((const uint16_t *)p)[i])
                              : ct_f16_to_f32(((const uint16_t *)p)[i]);
    if (sd == dd) return elem_bits(p, sd, i);
    return dd == CT_F32 ? f2u(x) : dd == CT_BF16 ? ct_f32_to_bf16(x) : ct_f32_to_f16(x);
}

TEST(convert_tensors_threads) {
    setup();
    static const ct_dtype dts[3] = {CT_F32, CT_BF16, CT_F16};
    const int64_t shape[3] = {3, 1001, 333}; /* 1000000 - 1 elements: not a multiple of 64 */
    const size_t n = 3 * 1001 * 333;
    ct_context *c1 = ctx_threads(-1, 1), *c2 = ctx_threads(-1, 2), *cr = ctx_threads(CT_ISA_REF, 2);
    void *src = xmalloc(n * 4), *d1 = xmalloc(n * 4), *d2 = xmalloc(n * 4), *dr = xmalloc(n * 4);
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            ct_dtype sd = dts[a], dd = dts[b];
            fill_src(sd == CT_F32 ? D_F32_BF16 : D_BF16_F32, src, n, (size_t)a);
            ct_tensor ts = ct_tensor_make(src, sd, 3, shape);
            ct_tensor t1 = ct_tensor_make(d1, dd, 3, shape), t2 = ct_tensor_make(d2, dd, 3, shape);
            ct_tensor tr = ct_tensor_make(dr, dd, 3, shape);
            memset(d1, 1, n * 4);
            memset(d2, 2, n * 4);
            memset(dr, 3, n * 4);
            CHECK_OK(c1, ct_convert(c1, &ts, &t1));
            CHECK_OK(c2, ct_convert(c2, &ts, &t2));
            CHECK_OK(cr, ct_convert(cr, &ts, &tr));
            size_t es = ct_dtype_size(dd);
            CHECK_MSG(memcmp(d1, d2, n * es) == 0, "%s->%s: 1 and 2 threads differ", ct_dtype_name(sd),
                      ct_dtype_name(dd));
            CHECK_MSG(memcmp(d1, dr, n * es) == 0, "%s->%s: %s and ref differ", ct_dtype_name(sd),
                      ct_dtype_name(dd), ct_isa_name(ct_context_isa(c1)));
            for (size_t i = 0; i < n; i++)
                CHECK_MSG(elem_bits(d1, dd, i) == convert_ref(src, sd, dd, i), "%s->%s element %zu: 0x%x vs 0x%x",
                          ct_dtype_name(sd), ct_dtype_name(dd), i, elem_bits(d1, dd, i), convert_ref(src, sd, dd, i));
        }
    /* small tensors (single-threaded path) and a 0-d scalar */
    float x = -2.5f;
    uint16_t hb = 0;
    ct_tensor s0 = ct_tensor_make(&x, CT_F32, 0, NULL), h0 = ct_tensor_make(&hb, CT_BF16, 0, NULL);
    CHECK_OK(c2, ct_convert(c2, &s0, &h0));
    CHECK(hb == ct_f32_to_bf16(x));
    /* empty tensor with NULL data */
    const int64_t zshape[2] = {4, 0};
    ct_tensor ze = ct_tensor_make(NULL, CT_F32, 2, zshape), zd = ct_tensor_make(NULL, CT_F16, 2, zshape);
    CHECK_OK(c2, ct_convert(c2, &ze, &zd));
    /* same dtype onto itself: allowed, nothing changes */
    ct_tensor self = ct_tensor_make(src, CT_F32, 3, shape);
    memcpy(d1, src, n * 4);
    CHECK_OK(c2, ct_convert(c2, &self, &self));
    CHECK(memcmp(d1, src, n * 4) == 0);
    free(src);
    free(d1);
    free(d2);
    free(dr);
    ct_context_free(c1);
    ct_context_free(c2);
    ct_context_free(cr);
}

TEST(convert_errors) {
    ct_context *ctx = ctx_threads(-1, 2);
    float f[12] = {0};
    uint16_t h[12] = {0};
    int32_t iv[12] = {0};
    const int64_t s34[2] = {3, 4}, s43[2] = {4, 3}, s12[1] = {12};
    ct_tensor a = ct_tensor_make(f, CT_F32, 2, s34), b = ct_tensor_make(h, CT_BF16, 2, s43);
    ct_status s = ct_convert(ctx, &a, &b);
    CHECK(s == CT_E_SHAPE);
    printf("    shape mismatch: %s\n", ct_context_last_error(ctx));
    CHECK(strstr(ct_context_last_error(ctx), "shape") && strstr(ct_context_last_error(ctx), "[3, 4]") &&
          strstr(ct_context_last_error(ctx), "[4, 3]"));
    ct_tensor c = ct_tensor_make(h, CT_F16, 1, s12); /* same numel, different rank */
    CHECK(ct_convert(ctx, &a, &c) == CT_E_SHAPE);
    ct_context_clear_error(ctx);
    ct_tensor ti = ct_tensor_make(iv, CT_I32, 2, s34), tb = ct_tensor_make(h, CT_BF16, 2, s34);
    CHECK(ct_convert(ctx, &ti, &tb) == CT_E_DTYPE);
    printf("    dtype: %s\n", ct_context_last_error(ctx));
    CHECK(strstr(ct_context_last_error(ctx), "i32") != NULL);
    ct_tensor tu = ct_tensor_make(iv, CT_U8, 2, s34);
    CHECK(ct_convert(ctx, &a, &tu) == CT_E_DTYPE);
    CHECK(strstr(ct_context_last_error(ctx), "u8") != NULL);
    ct_tensor ti2 = ct_tensor_make(iv, CT_I32, 2, s34);
    CHECK(ct_convert(ctx, &ti, &ti2) == CT_E_DTYPE); /* even the same dtype */
    /* non-contiguous */
    ct_tensor nc = ct_tensor_make(f, CT_F32, 2, s34);
    nc.strides[0] = 1;
    nc.strides[1] = 3;
    CHECK(ct_convert(ctx, &nc, &tb) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "contiguous") != NULL);
    /* overlap of different dtypes */
    ct_tensor ov = ct_tensor_make(f, CT_BF16, 2, s34);
    CHECK(ct_convert(ctx, &a, &ov) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "overlap") != NULL);
    /* NULLs */
    CHECK(ct_convert(ctx, NULL, &tb) == CT_E_INVALID_ARG);
    CHECK(ct_convert(NULL, &a, &tb) == CT_E_INVALID_ARG);
    ct_tensor nd = ct_tensor_make(NULL, CT_BF16, 2, s34);
    CHECK(ct_convert(ctx, &a, &nd) == CT_E_INVALID_ARG);
    /* the good call still works afterwards */
    f[5] = 1.00390625f; /* bf16 tie: 1 + 2^-8 -> 1.0 */
    CHECK_OK(ctx, ct_convert(ctx, &a, &tb));
    CHECK(h[5] == 0x3f80);
    ct_context_free(ctx);
}

/* Where the CPU has AVX512-BF16 the AVX-512 conversions round with vcvtneps2bf16 (simd_lowp.h) and only vectors
 * holding a denormal take the integer path: the same checks again with that path for every vector, as on an
 * AVX-512 CPU without BF16 (ct_simd_bf16_cvt: the library's switch, set by its CPU probe, kernels.h) */
TEST(bf16_integer_rounding_path) {
    setup();
    const int hw = ct_simd_bf16_cvt;
    printf("    the AVX-512 rounding here: %s; now the integer path\n", hw ? "vcvtneps2bf16" : "integer (no AVX512-BF16)");
    ct_simd_bf16_cvt = 0;
    roundtrip_all(0);
    f32_to_bf16_boundaries();
    lengths_and_tails();
    mxcsr_daz_ftz_rounding();
    ct_simd_bf16_cvt = hw;
}

TEST_MAIN(T(scalar_semantics), T(bf16_all_patterns_roundtrip), T(f16_all_patterns_roundtrip),
          T(f32_to_bf16_boundaries), T(f32_to_f16_boundaries), T(lengths_and_tails), T(mxcsr_daz_ftz_rounding),
          T(convert_tensors_threads), T(convert_errors), T(bf16_integer_rounding_path))
