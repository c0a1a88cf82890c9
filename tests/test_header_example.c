/* tests/test_header_example.c - the usage example at the top of
 * include/ctrain/graph.h, compiled and run verbatim (between the markers
 * below), and a check that the header's text equals this copy line for line
 * (leading " *   " and surrounding blanks aside), so the two cannot drift. */
#include <unistd.h>

#include "test.h"

static float header_example(ct_context *ctx) {
    /* ---- BEGIN graph.h example ---- */
    ct_graph *g;  ct_graph_create(ctx, &g);
    ct_node x, y, w, b, logits, loss;
    ct_input(g, "x", CT_F32, 2, (int64_t[]){64, 784}, &x);
    ct_input(g, "y", CT_I32, 1, (int64_t[]){64}, &y);
    ct_param(g, "fc.weight", 2, (int64_t[]){10, 784}, CT_INIT_KAIMING_UNIFORM, 784, &w);
    ct_param(g, "fc.bias", 1, (int64_t[]){10}, CT_INIT_KAIMING_UNIFORM, 784, &b);
    ct_linear(g, x, w, b, &logits);
    ct_cross_entropy(g, logits, y, 0.0f, -100, &loss);
    ct_plan *p;  ct_compile(g, loss, 1, &logits, NULL, &p);
    ct_graph_free(g);                 // the plan holds its own snapshot
    ct_tensor tx, ty;                 // inputs: write here before forward
    ct_plan_tensor(p, x, &tx);  ct_plan_tensor(p, y, &ty);
    for (int i = 0; i < 64; i++) ((int32_t *)ty.data)[i] = i % 10;
    ct_plan_forward(p, 1);  ct_plan_backward(p);
    float l;  ct_plan_loss(p, &l);
    ct_plan_free(p);
    /* ---- END graph.h example ---- */
    (void)tx;
    return l;
}

TEST(header_example_runs) {
    ct_context *ctx = test_ctx(-1, 1);
    float l = header_example(ctx);
    /* x = 0: the logits are the bias, a finite loss near log(10) */
    CHECK_MSG(isfinite(l) && l > 1.5f && l < 3.5f, "loss %g (%s)", (double)l, ct_context_last_error(ctx));
    CHECK(ct_context_last_error(ctx)[0] == 0);
    ct_context_free(ctx);
}

/* Reads a whole file (NULL when it cannot be opened). */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

/* Next line of *cur trimmed of spaces (and, from the header, its leading
 * " *"), copied into buf; 0 at the end of the text. */
static int next_line(const char **cur, char *buf, size_t cap, int header) {
    const char *s = *cur;
    if (!*s) return 0;
    const char *e = strchr(s, '\n');
    if (!e) e = s + strlen(s);
    *cur = *e ? e + 1 : e;
    if (header && e - s >= 2 && s[0] == ' ' && s[1] == '*') s += 2;
    while (s < e && (*s == ' ' || *s == '\t')) s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
    size_t n = (size_t)(e - s) < cap - 1 ? (size_t)(e - s) : cap - 1;
    memcpy(buf, s, n);
    buf[n] = 0;
    return 1;
}

TEST(header_text_equals_this_copy) {
    /* __FILE__ is tests/test_header_example.c relative to the repository
     * root (make runs there, and so does tests/run_all.sh) */
    const char *me = __FILE__;
    const char *tail = strstr(me, "tests/test_header_example.c");
    CHECK(tail);
    char hpath[1024], spath[1024];
    snprintf(hpath, sizeof hpath, "%.*sinclude/ctrain/graph.h", (int)(tail - me), me);
    snprintf(spath, sizeof spath, "%s", me);
    char *src = slurp(spath), *hdr = slurp(hpath);
    if (!src || !hdr) { /* run from elsewhere: the root is two folders above the binary (build/tests/) */
        char exe[900] = {0};
        ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
        for (int up = 0; k > 0 && up < 3; up++) {
            char *sl = strrchr(exe, '/');
            if (sl) *sl = 0;
        }
        free(src);
        free(hdr);
        snprintf(hpath, sizeof hpath, "%s/include/ctrain/graph.h", exe);
        snprintf(spath, sizeof spath, "%s/tests/test_header_example.c", exe);
        src = slurp(spath);
        hdr = slurp(hpath);
    }
    CHECK_MSG(src && hdr, "cannot read %s and %s (run from the repository root)", spath, hpath);
    /* this copy: the lines between the markers */
    const char *a = strstr(src, "---- BEGIN graph.h example ----");
    const char *a_end = strstr(src, "/* ---- END graph.h example ----");
    while (a_end && a_end > src && a_end[-1] != '\n') a_end--; /* start of the marker's line */
    /* the header's: the indented lines after the blank line that follows the
     * mention of this test, up to the closing comment line */
    const char *h = strstr(hdr, "tests/test_header_example.c");
    CHECK(a && a_end && h);
    h = strstr(h, "\n *\n");
    CHECK(h);
    h += 4;
    const char *h_end = strstr(h, " */");
    CHECK(h_end);
    a = strchr(a, '\n') + 1;
    char la[512], lh[512];
    int n = 0;
    for (;;) {
        int more_a = a < a_end && next_line(&a, la, sizeof la, 0);
        int more_h = h < h_end && next_line(&h, lh, sizeof lh, 1);
        if (!more_a && !more_h) break;
        CHECK_MSG(more_a && more_h && !strcmp(la, lh), "line %d differs:\n    header: %s\n    test:   %s", n + 1,
                  more_h ? lh : "(end)", more_a ? la : "(end)");
        n++;
    }
    CHECK(n >= 10);
    printf("    %d lines of graph.h's example equal the test's copy\n", n);
    free(src);
    free(hdr);
}

TEST_MAIN(T(header_example_runs), T(header_text_equals_this_copy))
