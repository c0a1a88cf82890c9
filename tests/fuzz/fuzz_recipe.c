/* tests/fuzz/fuzz_recipe.c - recipes (src/io/recipe.c): a JSON recipe
 * (ct_recipe_parse_json, as --recipe FILE reads it), or, when the input
 * does not start with '{', lines KEY=VALUE through ct_recipe_set (as
 * --set KEY=VALUE). Invariants: a failure is CT_E_CONFIG with a message; a
 * recipe that parsed round-trips: its JSON (ct_recipe_to_json_full) parsed
 * on top of the default recipe gives the same JSON and the same verdict of
 * ct_recipe_validate. */
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* The recipe as JSON in a new buffer (free). */
static char *to_json(const ct_recipe *r) {
    int n = ct_recipe_to_json_full(r, NULL, 0);
    FUZZ_CHECK(n > 0, "a recipe has a JSON form");
    char *buf = malloc((size_t)n + 1);
    if (!buf) return NULL;
    FUZZ_CHECK(ct_recipe_to_json_full(r, buf, (size_t)n + 1) == n, "the same length twice");
    return buf;
}

static void round_trip(const ct_recipe *r) {
    ct_context *ctx = fuzz_ctx();
    ct_status v1 = ct_recipe_validate(ctx, r);
    if (v1 != CT_OK) fuzz_check_error(v1);
    else fuzz_note("recipe: valid");
    char *j1 = to_json(r);
    if (!j1) return;
    ct_recipe r2;
    ct_recipe_default(&r2);
    ct_status s = ct_recipe_parse_json(fuzz_ctx(), j1, &r2);
    if (s != CT_OK) fprintf(stderr, "fuzz: %s\n  %s\n", j1, ct_context_last_error(ctx));
    FUZZ_CHECK(s == CT_OK, "the JSON of a recipe parses");
    char *j2 = to_json(&r2);
    if (j2 && strcmp(j1, j2)) fprintf(stderr, "fuzz: first  %s\nfuzz: second %s\n", j1, j2);
    FUZZ_CHECK(!j2 || !strcmp(j1, j2), "the JSON of a recipe reads back as the same recipe");
    FUZZ_CHECK(ct_recipe_validate(fuzz_ctx(), &r2) == v1, "the same recipe validates the same");
    free(j1);
    free(j2);
}

/* KEY=VALUE lines; returns the first failure. */
static ct_status set_lines(ct_recipe *r, char *text) {
    for (char *line = text; line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl++ = 0;
        char *eq = strchr(line, '=');
        if (eq) {
            *eq = 0;
            ct_status s = ct_recipe_set(fuzz_ctx(), r, line, eq + 1);
            if (s != CT_OK) return s;
        }
        line = nl;
    }
    return CT_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    ct_recipe r;
    ct_recipe_default(&r);
    size_t k = 0;
    while (k < size && (text[k] == ' ' || text[k] == '\n' || text[k] == '\t' || text[k] == '\r')) k++;
    int json = k < size && text[k] == '{';
    ct_status s = json ? ct_recipe_parse_json(fuzz_ctx(), text, &r) : set_lines(&r, text);
    if (s != CT_OK) {
        fuzz_check_error(s);
        FUZZ_CHECK(s == CT_E_CONFIG, "a bad recipe is CT_E_CONFIG");
    } else {
        fuzz_note("recipe: parsed");
        round_trip(&r);
    }
    free(text);
    return 0;
}
