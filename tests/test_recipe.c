/* tests/test_recipe.c - recipe parsing: defaults, every key type, and clear
 * CT_E_CONFIG errors for malformed JSON, unknown keys, wrong types and
 * out-of-range values. */
#include "test.h"

static int contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

TEST(parses_a_full_recipe) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_recipe r;
    ct_recipe_default(&r);
    const char *js = "{\"model\": \"cnn\", \"channels\": [16, 32, 64], \"dataset\": \"fashion-mnist\",\n"
                     " \"epochs\": 3, \"batch_size\": 64, \"seed\": 7, \"dropout\": 0.25,\n"
                     " \"optimizer\": {\"name\": \"sgd\", \"lr\": 0.05, \"momentum\": 0.9, \"nesterov\": true},\n"
                     " \"schedule\": \"constant\", \"label_smoothing\": 0.1}";
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, js, &r));
    CHECK(!strcmp(r.model, "cnn") && r.n_channels == 3 && r.channels[2] == 64);
    CHECK(!strcmp(r.dataset, "fashion-mnist") && r.epochs == 3 && r.batch_size == 64 && r.seed == 7);
    CHECK(r.optim.kind == CT_OPTIM_SGD && fabsf(r.optim.lr - 0.05f) < 1e-9f && r.optim.nesterov);
    CHECK(fabsf(r.optim.momentum - 0.9f) < 1e-7f && fabsf(r.dropout - 0.25f) < 1e-7f);
    CHECK_OK(ctx, ct_recipe_validate(ctx, &r));
    /* the same keys through the flag path */
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "hidden", "512,256"));
    CHECK(r.n_hidden == 2 && r.hidden[1] == 256);
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "optimizer.name", "adamw"));
    CHECK(r.optim.kind == CT_OPTIM_ADAMW && fabsf(r.optim.beta2 - 0.999f) < 1e-7f);
    char buf[2048];
    CHECK(ct_recipe_to_json(&r, buf, sizeof buf) > 0);
    ct_recipe r2;
    ct_recipe_default(&r2);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, buf, &r2)); /* the dump parses back */
    CHECK(r2.n_channels == 3 && r2.optim.kind == CT_OPTIM_ADAMW);
    /* every optimizer kind by name, with its own keys */
    const char *kinds[] = {"sgd", "adamw", "adam", "rmsprop", "adagrad", "lamb"};
    for (int i = 0; i < 6; i++) {
        char js2[256];
        snprintf(js2, sizeof js2, "{\"optimizer\": {\"name\": \"%s\", \"lr\": 0.02}}", kinds[i]);
        CHECK_OK(ctx, ct_recipe_parse_json(ctx, js2, &r));
        CHECK(!strcmp(ct_optim_kind_name(r.optim.kind), kinds[i]) && fabsf(r.optim.lr - 0.02f) < 1e-9f);
    }
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, "{\"optimizer\": {\"name\": \"rmsprop\", \"alpha\": 0.9, \"centered\": true}}", &r));
    CHECK(r.optim.kind == CT_OPTIM_RMSPROP && r.optim.centered && fabsf(r.optim.alpha - 0.9f) < 1e-7f);
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "optimizer.name", "adam"));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "optimizer.amsgrad", "true"));
    CHECK(r.optim.kind == CT_OPTIM_ADAM && r.optim.amsgrad);
    ct_context_free(ctx);
}

TEST(malformed_json_names_line_and_column) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_recipe r;
    ct_recipe_default(&r);
    CHECK(ct_recipe_parse_json(ctx, "{\"epochs\": 3,\n \"batch_size\": }", &r) == CT_E_CONFIG);
    CHECK_MSG(contains(ct_context_last_error(ctx), "line 2"), "%s", ct_context_last_error(ctx));
    CHECK(ct_recipe_parse_json(ctx, "[1, 2]", &r) == CT_E_CONFIG);
    CHECK(ct_recipe_parse_json(ctx, "", &r) == CT_E_CONFIG);
    CHECK(ct_recipe_parse_json(ctx, "{\"epochs\": 3} trailing", &r) == CT_E_CONFIG);
    ct_context_free(ctx);
}

TEST(unknown_keys_and_bad_values_are_named) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_recipe r;
    ct_recipe_default(&r);
    CHECK(ct_recipe_parse_json(ctx, "{\"epoch\": 3}", &r) == CT_E_CONFIG);
    CHECK_MSG(contains(ct_context_last_error(ctx), "'epoch'") && contains(ct_context_last_error(ctx), "epochs"), "%s",
              ct_context_last_error(ctx));
    CHECK(ct_recipe_parse_json(ctx, "{\"optimizer\": {\"learning_rate\": 0.1}}", &r) == CT_E_CONFIG);
    CHECK(contains(ct_context_last_error(ctx), "optimizer.learning_rate"));
    CHECK(ct_recipe_parse_json(ctx, "{\"optimizer\": {\"lr\": -0.1}}", &r) == CT_E_CONFIG);
    CHECK(contains(ct_context_last_error(ctx), "optimizer.lr") && contains(ct_context_last_error(ctx), "range"));
    CHECK(ct_recipe_parse_json(ctx, "{\"optimizer\": {\"beta1\": 1.0}}", &r) == CT_E_CONFIG);
    CHECK(contains(ct_context_last_error(ctx), "beta1"));
    CHECK(ct_recipe_parse_json(ctx, "{\"epochs\": \"ten\"}", &r) == CT_E_CONFIG);
    CHECK(contains(ct_context_last_error(ctx), "must be a number"));
    CHECK(ct_recipe_parse_json(ctx, "{\"epochs\": 2.5}", &r) == CT_E_CONFIG);
    CHECK(ct_recipe_parse_json(ctx, "{\"model\": \"resnet\"}", &r) == CT_E_CONFIG);
    CHECK(contains(ct_context_last_error(ctx), "mlp|cnn"));
    CHECK(ct_recipe_parse_json(ctx, "{\"optimizer\": {\"name\": \"adafactor\"}}", &r) == CT_E_CONFIG);
    CHECK(contains(ct_context_last_error(ctx), "lamb")); /* the message lists the valid names */
    CHECK(ct_recipe_parse_json(ctx, "{\"hidden\": []}", &r) == CT_E_CONFIG);
    CHECK(ct_recipe_parse_json(ctx, "{\"hidden\": [10, -3]}", &r) == CT_E_CONFIG);
    CHECK(ct_recipe_set(ctx, &r, "batch_size", "12x") == CT_E_CONFIG);
    CHECK(ct_recipe_set(ctx, &r, "optimizer.nesterov", "maybe") == CT_E_CONFIG);
    CHECK(ct_recipe_load_file(ctx, "/nonexistent/recipe.json", &r) == CT_E_IO);
    CHECK(contains(ct_context_last_error(ctx), "/nonexistent/recipe.json"));
    ct_context_free(ctx);
}

TEST(shipped_recipes_parse) {
    ct_context *ctx = test_ctx(-1, 1);
    const char *files[] = {"recipes/mnist_mlp.json", "recipes/fashion_cnn.json", "recipes/fashion_cnn_rmsprop.json",
                           "recipes/mnist_mlp_warmup_clip.json", "recipes/mnist_deep_mlp_accum_recompute.json"};
    for (int i = 0; i < 5; i++) {
        ct_recipe r;
        ct_recipe_default(&r);
        CHECK_OK(ctx, ct_recipe_load_file(ctx, files[i], &r));
        CHECK_OK(ctx, ct_recipe_validate(ctx, &r));
    }
    ct_context_free(ctx);
}

TEST_MAIN(T(parses_a_full_recipe), T(malformed_json_names_line_and_column), T(unknown_keys_and_bad_values_are_named),
          T(shipped_recipes_parse))
