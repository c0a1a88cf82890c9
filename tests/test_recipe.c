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
    CHECK(r.model == CT_MODEL_CNN && r.n_channels == 3 && r.channels[2] == 64);
    CHECK(r.dataset == CT_DATASET_FASHION_MNIST && r.epochs == 3 && r.batch_size == 64 && r.seed == 7);
    CHECK(r.optim.kind == CT_OPTIM_SGD && fabsf(r.optim.lr - 0.05f) < 1e-9f && r.optim.nesterov);
    CHECK(fabsf(r.optim.momentum - 0.9f) < 1e-7f && fabsf(r.dropout - 0.25f) < 1e-7f);
    CHECK(r.schedule == CT_SCHED_CONSTANT);
    /* the CNN builder has no dropout: the key is rejected by name, not ignored */
    CHECK(ct_recipe_validate(ctx, &r) == CT_E_CONFIG);
    CHECK(contains(ct_context_last_error(ctx), "'dropout' does not apply to model 'cnn'"));
    r.dropout = 0;
    CHECK_OK(ctx, ct_recipe_validate(ctx, &r));
    /* the same keys through the flag path */
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "hidden", "512,256"));
    CHECK(r.n_hidden == 2 && r.hidden[1] == 256);
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "optimizer.name", "adamw"));
    CHECK(r.optim.kind == CT_OPTIM_ADAMW && fabsf(r.optim.beta2 - 0.999f) < 1e-7f);
    char buf[CT_CHECKPOINT_RECIPE_MAX]; /* what a checkpoint holds */
    int nj = ct_recipe_to_json(&r, buf, sizeof buf);
    CHECK(nj > 0 && (size_t)nj < sizeof buf);
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


/* Enum keys are parsed once; the choices of keys backed by a library enum
 * follow that enum's order. */
TEST(enum_keys_match_library_enums) {
    for (int k = 0; k < CT_SCHED_COUNT; k++)
        CHECK_MSG(!strcmp(ct_recipe_enum_name("schedule", k), ct_schedule_kind_name((ct_schedule_kind)k)),
                  "schedule %d: recipe '%s' vs library '%s'", k, ct_recipe_enum_name("schedule", k),
                  ct_schedule_kind_name((ct_schedule_kind)k));
    for (int p = 0; p < CT_PRECISION_COUNT; p++)
        CHECK(!strcmp(ct_recipe_enum_name("precision", p), ct_precision_name((ct_precision)p)));
    for (int a = 0; a < CT_ACT_COUNT; a++)
        CHECK(!strcmp(ct_recipe_enum_name("activation", a), ct_activation_name((ct_activation)a)));
    CHECK(!strcmp(ct_recipe_enum_name("model", CT_MODEL_BERT), "bert"));
    CHECK(!strcmp(ct_recipe_enum_name("dataset", CT_DATASET_MOBY_DICK), "moby-dick"));
    CHECK(!strcmp(ct_recipe_enum_name("loss_scale.mode", CT_SCALE_STATIC), "static"));
    CHECK(!strcmp(ct_recipe_enum_name("model", 99), "?") && !strcmp(ct_recipe_enum_name("nope", 0), "?"));
    ct_context *ctx = test_ctx(-1, 1);
    ct_recipe r, r2;
    ct_recipe_default(&r);
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "schedule", "inverse_sqrt"));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "precision", "fp16-pure"));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "recompute_ops", "cheap"));
    CHECK(r.schedule == CT_SCHED_INV_SQRT && r.precision == CT_PRECISION_FP16_PURE && r.recompute_ops == CT_RECOMPUTE_OPS_CHEAP);
    char buf[8192];
    CHECK(ct_recipe_to_json_full(&r, buf, sizeof buf) > 0);
    CHECK(contains(buf, "\"schedule\":\"inverse_sqrt\"") && contains(buf, "\"precision\":\"fp16-pure\""));
    ct_recipe_default(&r2);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, buf, &r2));
    CHECK(r2.schedule == r.schedule && r2.precision == r.precision && r2.recompute_ops == r.recompute_ops);
    CHECK(ct_recipe_set(ctx, &r, "schedule", "cosin") == CT_E_CONFIG && contains(ct_context_last_error(ctx), "'cosin' is not one of"));
    ct_context_free(ctx);
}

/* Every key's bounds and metadata can be queried (as ZSTD_cParam_getBounds). */
TEST(key_table_is_queryable) {
    double lo = -1, hi = -1;
    CHECK(ct_recipe_key_bounds("optimizer.lr", &lo, &hi) == CT_OK && lo == 0 && hi == 1e3);
    CHECK(ct_recipe_key_bounds("batch_size", &lo, &hi) == CT_OK && lo == 1 && hi == (double)(1 << 20));
    CHECK(ct_recipe_key_bounds("schedule", &lo, &hi) == CT_E_INVALID_ARG);
    CHECK(ct_recipe_key_bounds("no_such_key", &lo, &hi) == CT_E_INVALID_ARG);
    int n = ct_recipe_num_keys();
    CHECK(n > 80 && ct_recipe_key_at(n) == NULL && ct_recipe_key_at(-1) == NULL);
    for (int i = 0; i < n; i++) { /* every key has a help line and its info finds itself */
        const ct_recipe_key_info *k = ct_recipe_key_at(i);
        CHECK_MSG(k && k->help && k->help[0] && ct_recipe_key_find(k->key) == k, "key %d", i);
        CHECK_MSG(k->models != 0, "key '%s' applies to no model", k->key);
    }
    const ct_recipe_key_info *k = ct_recipe_key_find("tokenizer");
    CHECK(k && k->type == CT_KEY_ENUM && !strcmp(k->choices, "char|byte|gpt2"));
    CHECK(k->models == ((1u << CT_MODEL_GPT) | (1u << CT_MODEL_BERT)));
    CHECK(!strcmp(ct_recipe_key_find("optimizer.lr")->flag, "--lr"));
    ct_recipe r;
    ct_recipe_default(&r);
    char v[64];
    CHECK(ct_recipe_get(&r, "hidden", v, sizeof v) > 0 && !strcmp(v, "1024,1024"));
    CHECK(ct_recipe_get(&r, "schedule", v, sizeof v) > 0 && !strcmp(v, "cosine"));
    CHECK(ct_recipe_is_set(&r, "schedule") == 0 && ct_recipe_is_set(&r, "nope") == -1);
    r.schedule = CT_SCHED_STEP;
    CHECK(ct_recipe_is_set(&r, "schedule") == 1);
}

/* A key that cannot apply to the chosen model is an error naming it. */
TEST(keys_that_do_not_apply_are_rejected) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_recipe r;
    ct_recipe_default(&r);
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "tokenizer", "byte"));
    CHECK(ct_recipe_validate(ctx, &r) == CT_E_CONFIG);
    CHECK(contains(ct_context_last_error(ctx), "'tokenizer' does not apply to model 'mlp' (it applies to gpt, bert)"));
    ct_recipe_default(&r);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, "{\"model\": \"gpt\", \"dataset\": \"moby-dick\", \"augment\": true}", &r));
    CHECK(ct_recipe_validate(ctx, &r) == CT_E_CONFIG && contains(ct_context_last_error(ctx), "'augment'"));
    ct_recipe_default(&r);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, "{\"model\": \"gpt\", \"dataset\": \"moby-dick\", \"prefetch\": 8}", &r));
    CHECK(ct_recipe_validate(ctx, &r) == CT_E_CONFIG && contains(ct_context_last_error(ctx), "'prefetch'"));
    ct_recipe_default(&r);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, "{\"model\": \"gpt\", \"dataset\": \"moby-dick\", \"early_stop_mode\": \"max\"}", &r));
    CHECK(ct_recipe_validate(ctx, &r) == CT_E_CONFIG && contains(ct_context_last_error(ctx), "early_stop_mode"));
    /* the same key at its default value changes nothing and is accepted */
    ct_recipe_default(&r);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, "{\"model\": \"gpt\", \"dataset\": \"moby-dick\", \"prefetch\": 4, "
                                            "\"early_stop_patience\": 2, \"schedule\": \"plateau\"}", &r));
    CHECK_OK(ctx, ct_recipe_validate(ctx, &r));
    /* a checkpoint's full recipe (every key written) validates for its model */
    char buf[8192];
    CHECK(ct_recipe_to_json_full(&r, buf, sizeof buf) > 0);
    ct_recipe r2;
    ct_recipe_default(&r2);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, buf, &r2));
    CHECK_OK(ctx, ct_recipe_validate(ctx, &r2));
    ct_context_free(ctx);
}

/* memory_budget takes bytes or a size with a unit; lr_scaling follows its formulas. */
TEST(memory_budget_and_lr_scaling) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_recipe r;
    ct_recipe_default(&r);
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "memory_budget", "8G"));
    CHECK(r.memory_budget == 8LL << 30);
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "memory_budget", "1.5M"));
    CHECK(r.memory_budget == 1572864);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, "{\"memory_budget\": \"512MiB\"}", &r));
    CHECK(r.memory_budget == 512LL << 20);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, "{\"memory_budget\": 1000000}", &r));
    CHECK(r.memory_budget == 1000000);
    CHECK(ct_recipe_set(ctx, &r, "memory_budget", "8X") == CT_E_CONFIG && contains(ct_context_last_error(ctx), "not a size"));
    CHECK(ct_recipe_set(ctx, &r, "memory_budget", "-1G") == CT_E_CONFIG);
    ct_recipe_default(&r);
    r.optim.lr = 0.1f;
    r.batch_size = 512;
    r.lr_base_batch = 256;
    CHECK(fabs(ct_train_scaled_lr(&r) - 0.1f) < 1e-9); /* none */
    r.lr_scaling = CT_LR_SCALING_LINEAR;
    CHECK(fabs(ct_train_scaled_lr(&r) - 0.2 * (double)0.1f / 0.1) < 1e-7);
    r.lr_scaling = CT_LR_SCALING_SQRT;
    CHECK(fabs(ct_train_scaled_lr(&r) - (double)0.1f * sqrt(2.0)) < 1e-7);
    r.lr_scaling = CT_LR_SCALING_LINEAR_THEN_SQRT; /* Bs = 8 x 256: 512 is linear */
    CHECK(fabs(ct_train_scaled_lr(&r) - (double)0.1f * 2) < 1e-7);
    r.batch_size = 256;
    r.accumulate_steps = 32; /* global 8192 = 4 x Bs: 8 x sqrt(4) */
    CHECK(fabs(ct_train_scaled_lr(&r) - (double)0.1f * 16) < 1e-6);
    r.lr_sqrt_from_batch = 128;
    CHECK(ct_recipe_validate(ctx, &r) == CT_E_CONFIG && contains(ct_context_last_error(ctx), "lr_sqrt_from_batch"));
    ct_context_free(ctx);
}

/* {"model": {"type": ..., ...}} is the model plus flat keys; written back flat, it parses the same */
TEST(model_section) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_recipe r, back;
    ct_recipe_default(&r);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, "{\"model\": {\"type\": \"resnet18\", \"cifar_stem\": true, "
                                            "\"num_classes\": 100, \"width_div\": 8, \"max_blocks\": 1}, "
                                            "\"warmup_epochs\": 2.5}", &r));
    CHECK(r.model == CT_MODEL_RESNET18 && ct_model_is_vision(r.model) && r.cifar_stem && r.num_classes == 100);
    CHECK(r.width_div == 8 && r.max_blocks == 1 && r.warmup_epochs == 2.5f);
    CHECK_OK(ctx, ct_recipe_validate(ctx, &r));
    CHECK(!strcmp(ct_recipe_enum_name("model", CT_MODEL_EFFICIENTNET_B4), "efficientnet_b4"));
    char buf[8192];
    CHECK(ct_recipe_to_json_full(&r, buf, sizeof buf) < (int)sizeof buf);
    ct_recipe_default(&back);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, buf, &back));
    CHECK(back.model == r.model && back.cifar_stem && back.num_classes == 100 && back.width_div == 8);
    /* keys of other models, and both warm-up lengths, are named */
    r.drop_path = 0.2f;
    CHECK(ct_recipe_validate(ctx, &r) == CT_E_CONFIG && contains(ct_context_last_error(ctx), "'drop_path'"));
    r.drop_path = -1, r.warmup_steps = 10;
    CHECK(ct_recipe_validate(ctx, &r) == CT_E_CONFIG && contains(ct_context_last_error(ctx), "warmup_epochs"));
    CHECK(ct_recipe_parse_json(ctx, "{\"model\": {\"type\": \"swin_x\"}}", &r) == CT_E_CONFIG);
    CHECK(ct_recipe_parse_json(ctx, "{\"model\": {\"layers\": 3}}", &r) == CT_E_CONFIG);
    CHECK(contains(ct_context_last_error(ctx), "model.layers"));
    ct_context_free(ctx);
}


/* The recipe follows the model table (CT_MODEL_TABLE): the model choices are
 * its rows in order, a preset's name picks its model and preset, the presets
 * and the keys that apply come from the rows. */
TEST(model_table_drives_the_recipe) {
    ct_context *ctx = test_ctx(-1, 1);
    char want[512] = "";
    for (int m = 0; m < CT_MODEL_COUNT; m++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", m ? "|" : "", ct_model_name((ct_model_kind)m));
    const ct_recipe_key_info *k = ct_recipe_key_find("model");
    CHECK_MSG(!strcmp(k->choices, want), "model choices '%s', table '%s'", k->choices, want);
    for (int m = 0; m < CT_MODEL_COUNT; m++)
        CHECK(!strcmp(ct_recipe_enum_name("model", m), ct_model_name((ct_model_kind)m)));
    CHECK(!strcmp(ct_recipe_key_find("preset")->choices, "|gpt-char-small|gpt2-124m|gpt2-medium|gpt2-large|bert-base|bert-large"));
    CHECK(ct_recipe_key_find("window")->models == ((1u << CT_MODEL_SWIN_T) | (1u << CT_MODEL_SWIN_S) | (1u << CT_MODEL_SWIN_B)));
    CHECK(ct_recipe_key_find("hidden")->models == (1u << CT_MODEL_MLP));
    CHECK(ct_recipe_key_find("data_dir")->models & (1u << CT_MODEL_EFFICIENTNET_B4));
    CHECK(!(ct_recipe_key_find("data_dir")->models & (1u << CT_MODEL_BERT)));
    ct_recipe r;
    ct_recipe_default(&r);
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "model", "bert-large")); /* README, recipes/bert_large.json */
    CHECK(r.model == CT_MODEL_BERT && !strcmp(r.preset, "bert-large"));
    r.dataset = CT_DATASET_MOBY_DICK;
    CHECK_OK(ctx, ct_recipe_validate(ctx, &r));
    ct_recipe_default(&r);
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, "{\"model\": \"gpt2-124m\", \"dataset\": \"moby-dick\"}", &r));
    CHECK(r.model == CT_MODEL_GPT && !strcmp(r.preset, "gpt2-124m"));
    CHECK_OK(ctx, ct_recipe_validate(ctx, &r));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "preset", "bert-base"));
    CHECK(ct_recipe_validate(ctx, &r) == CT_E_CONFIG &&
          strstr(ct_context_last_error(ctx), "preset 'bert-base' is not a gpt preset (gpt-char-small, gpt2-124m, "
                                             "gpt2-medium, gpt2-large | "
                                             "bert-base, bert-large)"));
    /* one file naming a preset as its model and another preset: an error in either key order */
    static const char *const contradict[] = {
        "{\"model\": \"gpt2-124m\", \"preset\": \"gpt-char-small\", \"dataset\": \"moby-dick\"}",
        "{\"preset\": \"gpt-char-small\", \"model\": \"gpt2-124m\", \"dataset\": \"moby-dick\"}",
        "{\"model\": {\"type\": \"gpt2-124m\", \"preset\": \"gpt-char-small\"}, \"dataset\": \"moby-dick\"}"};
    for (int i = 0; i < 3; i++) {
        ct_recipe_default(&r);
        CHECK(ct_recipe_parse_json(ctx, contradict[i], &r) == CT_E_CONFIG &&
              strstr(ct_context_last_error(ctx), "recipe key 'model' is 'gpt2-124m', a preset's name (model gpt, preset "
                                                 "gpt2-124m), but 'preset' is 'gpt-char-small'; keep one of the two"));
    }
    ct_recipe_default(&r); /* the same preset twice agrees */
    CHECK_OK(ctx, ct_recipe_parse_json(ctx, "{\"model\": \"bert-large\", \"preset\": \"bert-large\"}", &r));
    CHECK(r.model == CT_MODEL_BERT && !strcmp(r.preset, "bert-large"));
    ct_recipe_default(&r);
    CHECK(ct_recipe_set(ctx, &r, "model", "resnet-1000") == CT_E_CONFIG &&
          strstr(ct_context_last_error(ctx), "is not one of mlp|cnn|gpt|bert|resnet18"));
    r.dataset = CT_DATASET_MOBY_DICK;
    CHECK(ct_recipe_validate(ctx, &r) == CT_E_CONFIG &&
          strstr(ct_context_last_error(ctx), "it needs model 'gpt' or 'bert'"));
    ct_recipe_default(&r);
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "model", "swin_t"));
    CHECK_OK(ctx, ct_recipe_set(ctx, &r, "cifar_stem", "true"));
    CHECK(ct_recipe_validate(ctx, &r) == CT_E_CONFIG &&
          strstr(ct_context_last_error(ctx), "'cifar_stem' does not apply to model 'swin_t' (it applies to resnet18, "
                                             "resnet34, resnet50, resnet101)"));
    ct_context_free(ctx);
}

/* an unknown key: "did you mean" (spelling, or another framework's name for it), never a dump of every key;
 * a key given twice is an error; "optimizer": "sgd" is {"name": "sgd"} */
TEST(unknown_keys_suggest_duplicates_refused_optimizer_shorthand) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_recipe r;
    ct_recipe_default(&r);
    static const char *cases[][2] = {{"{\"n_laye\": 2}", "did you mean 'n_layer'"},
                                     {"{\"accumulation_steps\": 2}", "ctrain calls it 'accumulate_steps'"},
                                     {"{\"keep_fp32_modules\": \"x\"}", "'keep_fp32'"},
                                     {"{\"dynamic_scaling\": true}", "'loss_scale.mode'"},
                                     {"{\"max_batch_size\": 32}", "'batch_size"},
                                     {"{\"optimizer\": {\"betaa\": 0.9}}", "'optimizer.beta1' or 'optimizer.beta2'"},
                                     {"{\"warmup\": 10}", "'warmup_steps'"},
                                     {"{\"zzzzzzzz\": 1}", "--help-keys"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(ct_recipe_parse_json(ctx, cases[i][0], &r) == CT_E_CONFIG);
        const char *e = ct_context_last_error(ctx);
        CHECK_MSG(contains(e, cases[i][1]) && contains(e, "--help-keys") && !contains(e, "valid keys") &&
                      strlen(e) < 400, "%s: %s", cases[i][0], e);
    }
    CHECK(!contains(ct_context_last_error(ctx), "did you mean")); /* nothing close to zzzzzzzz */
    CHECK(ct_recipe_set(ctx, &r, "optimizer.lrr", "0.1") == CT_E_CONFIG);
    CHECK(contains(ct_context_last_error(ctx), "did you mean 'optimizer.lr'"));
    /* duplicates, at the top level and in a section */
    CHECK(ct_recipe_parse_json(ctx, "{\"epochs\": 1, \"batch_size\": 8, \"epochs\": 2}", &r) == CT_E_CONFIG);
    CHECK_MSG(contains(ct_context_last_error(ctx), "'epochs' is given twice"), "%s", ct_context_last_error(ctx));
    CHECK(ct_recipe_parse_json(ctx, "{\"optimizer\": {\"lr\": 0.1, \"lr\": 0.2}}", &r) == CT_E_CONFIG);
    CHECK(contains(ct_context_last_error(ctx), "'optimizer.lr' is given twice"));
    /* the shorthand, in JSON and with --set; a non-name, non-object is named */
    ct_recipe_default(&r);
    CHECK(ct_recipe_parse_json(ctx, "{\"optimizer\": \"sgd\", \"epochs\": 2}", &r) == CT_OK);
    CHECK(r.optim.kind == CT_OPTIM_SGD && r.epochs == 2);
    ct_recipe_default(&r);
    CHECK(ct_recipe_set(ctx, &r, "optimizer", "lamb") == CT_OK && r.optim.kind == CT_OPTIM_LAMB);
    CHECK(ct_recipe_parse_json(ctx, "{\"optimizer\": \"sgdx\"}", &r) == CT_E_CONFIG);
    CHECK(contains(ct_context_last_error(ctx), "sgd|adamw"));
    CHECK(ct_recipe_parse_json(ctx, "{\"optimizer\": 3}", &r) == CT_E_CONFIG);
    CHECK(contains(ct_context_last_error(ctx), "must be a name"));
    ct_context_free(ctx);
}

TEST_MAIN(T(model_table_drives_the_recipe), T(model_section), T(parses_a_full_recipe), T(malformed_json_names_line_and_column), T(unknown_keys_and_bad_values_are_named),
          T(shipped_recipes_parse), T(enum_keys_match_library_enums), T(key_table_is_queryable),
          T(keys_that_do_not_apply_are_rejected), T(memory_budget_and_lr_scaling),
          T(unknown_keys_suggest_duplicates_refused_optimizer_shorthand))
