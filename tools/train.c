/* tools/train.c - `ctrain train`: argument handling around the library's
 * one training loop (ct_train, include/ctrain/train.h):
 *   world -> recipe <- [checkpoint's recipe] <- --recipe FILE <- flags
 *   validate -> context -> ct_train -> [report] -> world freed
 * The flags and the key list of --help come from the recipe key table.
 * Started by mpirun / srun, every process runs this with its rank of the
 * world (include/ctrain/dist.h) and ct_train trains data parallel; a rank
 * that fails ends the whole job (ct_comm_abort) so no rank waits forever. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "ctrain/ctrain.h"

#define CT_CLI_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Prints the recipe keys: "text" for --help, "markdown" for the table in docs/recipes.md. */
static void print_keys(FILE *f, int markdown) {
    if (markdown) fprintf(f, "| key | type | default | range / values | models | flag | what it does |\n|---|---|---|---|---|---|---|\n");
    ct_recipe def;
    ct_recipe_default(&def);
    static const char *const tn[] = {"int", "uint", "float", "bool", "string", "enum", "list", "bytes"};
    for (int i = 0; i < ct_recipe_num_keys(); i++) {
        const ct_recipe_key_info *k = ct_recipe_key_at(i);
        char dv[128], bounds[64] = "", models[1024];
        ct_recipe_get(&def, k->key, dv, sizeof dv);
        const char *range = k->choices ? k->choices : bounds; /* choices grow with the model table: not copied */
        if (!k->choices && (k->type == CT_KEY_INT || k->type == CT_KEY_UINT || k->type == CT_KEY_FLOAT ||
                            k->type == CT_KEY_LIST || k->type == CT_KEY_BYTES))
            snprintf(bounds, sizeof bounds, "[%g, %g]", k->lo, k->hi);
        ct_recipe_models_text(k->models, models, sizeof models);
        if (k->models == CT_KEY_MODELS_ALL) snprintf(models, sizeof models, "all");
        if (markdown)
            fprintf(f, "| `%s` | %s | %s | %s | %s | %s | %s |\n", k->key, tn[k->type], dv[0] ? dv : "\"\"", range, models,
                    k->flag ? k->flag : "", k->help);
        else
            fprintf(f, "  %-34s  %s%s%s%s\n", k->key, k->help, k->flag ? " [" : "", k->flag ? k->flag : "", k->flag ? "]" : "");
    }
}

static void train_usage(FILE *f) {
    fprintf(f,
            "usage: ctrain train [--recipe FILE] [options]\n"
            "\n"
            "Trains the recipe's model: mlp / cnn on an image dataset, evaluated on the test split every\n"
            "epoch; gpt / bert on a text corpus, validated every eval_every steps. The recipe file (JSON)\n"
            "is applied first, then the flags. Defaults: MLP 784-1024-1024-10 on MNIST, AdamW, cosine LR.\n"
            "\n"
            "options:\n"
            "  --recipe FILE          JSON recipe (e.g. recipes/mnist_mlp.json)\n"
            "  --set KEY=VALUE        any recipe key (below)\n"
            "  --resume DIR           continue a run from DIR (a save dir or a step dir) bit for bit, with the\n"
            "                         recipe stored in the checkpoint; the recipe file and flags override its keys.\n"
            "                         Checkpoints continue in DIR (a step dir: its parent); the stored save_dir,\n"
            "                         metrics_file and profile_dir are not followed\n"
            "  --report DIR           write DIR/metrics.jsonl and, at the end, DIR/report.html (docs/report.md)\n"
            "  --quiet                only the evaluation lines and the summary\n"
            "  --verbose              the header also prints the recipe keys that do not apply to the model\n"
            "  --help-keys markdown   the key table of docs/recipes.md\n"
            "  -h, --help             this message\n"
            "\n"
            "recipe keys (docs/recipes.md; [--flag] where a key has its own flag):\n");
    print_keys(f, 0);
}

const char *cli_msg(const char *e) {
    const char *c = e[0] == 'E' ? strstr(e, ": ") : NULL;
    return c && c - e < 40 ? c + 2 : e;
}

int cli_fail(ct_context *ctx, ct_status s, const char *what) {
    fprintf(stderr, "ctrain: error: %s\n", ctx ? ct_context_last_error(ctx) : what);
    if (ctx && !ct_context_last_error(ctx)[0]) fprintf(stderr, "ctrain: error: %s (%s)\n", what, ct_status_name(s));
    fprintf(stderr, "ctrain: hint: %s\n", ct_status_advice(s));
    return 1;
}

/* An error found by the CLI itself, printed like the library's. Returns 1. */
int cli_split_set(const char *arg, char *key, size_t cap, const char **val) {
    const char *eq = arg ? strchr(arg, '=') : NULL;
    if (!eq || (size_t)(eq - arg) >= cap) return 0;
    memcpy(key, arg, (size_t)(eq - arg));
    key[eq - arg] = 0;
    *val = eq + 1;
    return 1;
}

static int cli_verror(ct_status s, const char *hint, const char *fmt, va_list ap) {
    fprintf(stderr, "ctrain: error: %s %s: ", ct_status_code(s), ct_status_name(s));
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nctrain: hint: %s\n", hint ? hint : ct_status_advice(s));
    return 1;
}

int cli_context_fail(ct_status s) {
    char msg[256];
    if (ct_context_env_check(msg, sizeof msg) != CT_OK) {
        fprintf(stderr, "ctrain: error: %s %s: %s\nctrain: hint: `ctrain --help` lists the CT_* variables\n",
                ct_status_code(CT_E_CONFIG), ct_status_name(CT_E_CONFIG), msg);
        return 1;
    }
    return cli_error(s, "cannot create a context");
}

int cli_error(ct_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cli_verror(s, NULL, fmt, ap);
    va_end(ap);
    return 1;
}

int cli_error_hint(ct_status s, const char *hint, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cli_verror(s, hint, fmt, ap);
    va_end(ap);
    return 1;
}

/* CTRAIN_TEST_CRASH=PHASE:STEP kills the process with SIGKILL at one point
 * (tests/resume_test.sh): PHASE "step" right after that optimizer step, or a
 * phase of the save of that step's checkpoint ("written": the temporary
 * directory is complete, "renamed": in place but `latest` not updated,
 * "latest": before old checkpoints are deleted). */
static void crash_point(void *user, const char *phase, int64_t step) {
    (void)user;
    const char *e = getenv("CTRAIN_TEST_CRASH");
    const char *colon = e ? strchr(e, ':') : NULL;
    if (!colon || (size_t)(colon - e) != strlen(phase) || strncmp(e, phase, strlen(phase))) return;
    if (strtoll(colon + 1, NULL, 10) != step) return;
    fflush(stdout);
    raise(SIGKILL);
}
/* CTRAIN_TEST_CRASH=stop:STEP stops the process (SIGSTOP) after that step: a rank that hangs (tests/dist_zero_test.sh) */
static void crash_at_step(void *user, int64_t step) {
    crash_point(user, "step", step);
    const char *e = getenv("CTRAIN_TEST_CRASH");
    if (e && !strncmp(e, "stop:", 5) && strtoll(e + 5, NULL, 10) == step) {
        fflush(stdout);
        raise(SIGSTOP);
    }
}

/* comm_timeout: a thread that ends this process when it has been inside one call of the communicator for
 * longer (another rank hangs: stopped, deadlocked, its host unreachable); mpirun / srun then end the job. The
 * library never exits; the CLI may. */
typedef struct {
    ct_comm *c;
    double timeout;
    atomic_int stop;
    pthread_t th;
    int running;
} watchdog;

static void *watchdog_main(void *arg) {
    watchdog *w = arg;
    while (!atomic_load(&w->stop)) {
        struct timespec ts = {0, 200000000};
        nanosleep(&ts, NULL);
        double sec = 0;
        const char *what = NULL;
        if (ct_comm_busy(w->c, &sec, &what) && sec > w->timeout) {
            fprintf(stderr,
                    "\nctrain: error: E80001 CT_E_DIST: rank %d of %d has waited %.0f s in %s of %s for the other "
                    "ranks (comm_timeout %g s): another rank hangs (stopped, deadlocked, or its host unreachable); "
                    "ending the job. Raise comm_timeout if a rank is legitimately that slow (a checkpoint on a slow "
                    "disk)\n",
                    ct_comm_rank(w->c), ct_comm_size(w->c), sec, what ? what : "a collective",
                    ct_comm_busy_group(w->c), w->timeout);
            fflush(stderr);
            fflush(stdout);
            _exit(3);
        }
    }
    return NULL;
}

/* The keys that define a model's weights: a resumed run must keep them. */
static void model_text(const ct_recipe *r, char *buf, size_t len) {
    static const char *const keys[] = {"model", "hidden", "activation", "channels", "dataset", "preset", "n_layer", "n_head",
                                       "d_model", "context", "tokenizer", "cifar_stem", "num_classes", "width_div",
                                       "max_blocks"};
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] && o < len; i++) {
        const ct_recipe_key_info *k = ct_recipe_key_find(keys[i]);
        if (!k || !(k->models & (1u << r->model))) continue;
        char v[128];
        ct_recipe_get(r, keys[i], v, sizeof v);
        o += (size_t)snprintf(buf + o, len - o, "%s%s %s", o ? ", " : "", keys[i], v);
    }
}

/* The flags the first pass reads. */
typedef struct {
    const char *recipe_path, *resume;
    const char *report_dir; /* --report DIR: DIR/metrics.jsonl and DIR/report.html */
    int quiet, verbose;
} train_args;

/* Pass 1: --help, --help-keys, --recipe, --resume, --report, --quiet and --verbose.
 * -1 to go on, else the exit code (0 after a help text, 2 after an error). */
static int parse_pass1(int argc, char **argv, train_args *ta) {
    *ta = (train_args){0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            train_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--help-keys")) {
            print_keys(stdout, i + 1 < argc && !strcmp(argv[i + 1], "markdown"));
            return 0;
        }
        if (!strcmp(a, "--quiet")) {
            ta->quiet = 1;
        } else if (!strcmp(a, "--verbose")) {
            ta->verbose = 1;
        } else if (!strcmp(a, "--recipe") || !strcmp(a, "--resume") || !strcmp(a, "--report")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ctrain: error: %s needs a %s\n", a,
                        !strcmp(a, "--recipe") ? "file name" : !strcmp(a, "--resume") ? "checkpoint directory" : "directory");
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--recipe")) ta->recipe_path = v;
            else if (!strcmp(a, "--resume")) ta->resume = v;
            else ta->report_dir = v;
        }
    }
    return -1;
}

/* The recipe key a flag sets: its key, "" for --set, NULL if unknown. */
static const char *flag_key(const char *a) {
    for (int k = 0; k < ct_recipe_num_keys(); k++) {
        const ct_recipe_key_info *ki = ct_recipe_key_at(k);
        if (ki->flag && !strcmp(a, ki->flag)) return ki->key;
    }
    return !strcmp(a, "--set") ? "" : NULL;
}

/* Pass 2: the flags onto r, --optimizer first (it resets that optimizer's
 * defaults), then the rest in order. 0, 2 after a usage error, or -1 with
 * the library's status in *s. */
static int apply_flags(ct_context *ctx, int argc, char **argv, ct_recipe *r, ct_status *s) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 1; i < argc; i++) {
            const char *a = argv[i];
            if (!a || !strcmp(a, "--quiet") || !strcmp(a, "--verbose")) continue; /* argv[i < argc] is never NULL; the analyzer cannot know */
            if (!strcmp(a, "--recipe") || !strcmp(a, "--resume") || !strcmp(a, "--report")) {
                if (i + 1 < argc) i++; /* pass 1 checked the value is there */
                continue;
            }
            const char *key = flag_key(a);
            if (!key) {
                fprintf(stderr, "ctrain: error: unknown option '%s' (see ctrain train --help)\n", a);
                return 2;
            }
            if (i + 1 >= argc) {
                fprintf(stderr, "ctrain: error: %s needs a value\n", a);
                return 2;
            }
            const char *val = argv[++i];
            char kv[512];
            const char *k = key, *v = val;
            if (!*key) { /* --set key=value */
                if (!cli_split_set(val, kv, sizeof kv, &v)) {
                    fprintf(stderr, "ctrain: error: --set needs KEY=VALUE, got '%s'\n", val);
                    return 2;
                }
                k = kv;
            }
            if ((pass == 0) != !strcmp(k, "optimizer.name")) continue;
            if ((*s = ct_recipe_set(ctx, r, k, v)) != CT_OK) return -1;
        }
    return 0;
}

/* --resume: this run's model must be the checkpoint's (else 1, the error
 * printed); rank 0 notes the paths stored in the checkpoint that are not
 * followed. */
static int check_resume(const ct_recipe *ck, const ct_recipe *r, const train_args *ta, int rank) {
    char was[512], now[512];
    model_text(ck, was, sizeof was);
    model_text(r, now, sizeof now);
    if (strcmp(was, now))
        return cli_error(CT_E_CONFIG,
                         "--resume: this run's model (%s) differs from the checkpoint's (%s); drop the model flags "
                         "to resume with the recipe stored in %s",
                         now, was, ta->resume);
    if (rank != 0) return 0;
    /* paths stored in a checkpoint are informational: say which ones this run does not follow (rank 0 says it) */
    if (strcmp(ck->save_dir, r->save_dir))
        fprintf(stderr, "ctrain: note: checkpoints go to '%s'; the checkpoint names save_dir '%s', which is not "
                "used (paths stored in a checkpoint are never followed)\n", r->save_dir, ck->save_dir);
    if (ck->metrics_file[0] && !r->metrics_file[0] && !ta->report_dir)
        fprintf(stderr, "ctrain: note: the checkpoint names metrics_file '%s', which is not used; pass --metrics "
                "FILE to continue a metrics log\n", ck->metrics_file);
    if (ck->profile_dir[0] && !r->profile_dir[0])
        fprintf(stderr, "ctrain: note: the checkpoint names profile_dir '%s', which is not used; pass --profile "
                "DIR to profile this run\n", ck->profile_dir);
    return 0;
}

/* The recipe the run's context is made from: the recipe's seed, threads and memory budget. Data parallel:
 * threads 0 (all cores) shares this host's cores among its ranks. Every rank keeps the recipe's seed: dropout's
 * masks are keyed by global sample (ct_plan_set_sample_offset), not by rank, so they do not depend on the
 * world size, and with tensor parallelism the ranks of a tensor group draw the same masks */
static ct_recipe context_recipe(const ct_recipe *r, ct_comm *world) {
    ct_recipe cr = *r;
    if (ct_comm_size(world) > 1) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        if (cr.threads == 0) cr.threads = (int)CT_CLI_MAX(1, cores / ct_comm_local_size(world));
    }
    return cr;
}

/* --report DIR: creates DIR and names DIR/metrics.jsonl in mpath. 0, or 1
 * with the error printed. */
static int report_start(const char *dir, char *mpath, size_t cap) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return cli_error(CT_E_IO, "--report: cannot create directory '%s': %s", dir, strerror(errno));
    snprintf(mpath, cap, "%s/metrics.jsonl", dir);
    return 0;
}

/* ct_train, under the comm_timeout watchdog when data parallel. */
static ct_status train_watched(ct_context *ctx, const ct_recipe *r, ct_comm *world, const train_args *ta,
                               const char *mpath) {
    ct_train_opts to;
    ct_train_opts_default(&to);
    to.comm = world;
    to.out = stdout;
    to.quiet = ta->quiet;
    to.verbose = ta->verbose;
    to.resume = ta->resume;
    to.metrics_path = ta->report_dir ? mpath : NULL;
    to.step_hook = crash_at_step;
    to.checkpoint_hook = crash_point;
    ct_train_result res;
    watchdog wd = {.c = world, .timeout = r->comm_timeout};
    atomic_init(&wd.stop, 0);
    if (ct_comm_size(world) > 1 && r->comm_timeout > 0)
        wd.running = pthread_create(&wd.th, NULL, watchdog_main, &wd) == 0;
    ct_status s = ct_train(ctx, r, &to, &res);
    if (wd.running) {
        atomic_store(&wd.stop, 1);
        pthread_join(wd.th, NULL);
    }
    return s;
}

int ct_cli_train(int argc, char **argv) {
    ct_recipe r;
    ct_recipe_default(&r);
    train_args ta;
    int rc = parse_pass1(argc, argv, &ta);
    if (rc >= 0) return rc;
    ct_context *ctx = NULL;
    ct_context_opts co;
    ct_context_opts_default(&co);
    ct_status s = ct_context_create(&co, &ctx);
    if (s != CT_OK) {
        cli_context_fail(s);
        return 1;
    }
    rc = 1;
    /* the processes of the job: one without a launcher (no MPI call), else every rank mpirun / srun started */
    ct_comm *world = NULL;
    if ((s = ct_comm_world_create(ctx, &world)) != CT_OK) goto out_err;
    ct_recipe ck_recipe; /* the recipe the checkpoint stores (its paths are not used) */
    /* the checkpoint's recipe first, without the paths it names; the recipe file and flags apply on top */
    if (ta.resume && (s = ct_train_resume_recipe(ctx, ta.resume, &r, &ck_recipe)) != CT_OK) goto out_err;
    if (ta.recipe_path && (s = ct_recipe_load_file(ctx, ta.recipe_path, &r)) != CT_OK) goto out_err;
    int bad = apply_flags(ctx, argc, argv, &r, &s);
    if (bad < 0) goto out_err;
    if (bad) {
        rc = bad;
        goto out;
    }
    if ((s = ct_recipe_validate(ctx, &r)) != CT_OK) goto out_err;
    if (ta.resume && check_resume(&ck_recipe, &r, &ta, ct_comm_rank(world))) goto out;
    ct_recipe cr = context_recipe(&r, world);
    ct_context_free(ctx);
    ctx = NULL;
    if ((s = ct_train_context_create(&cr, &ctx)) != CT_OK) {
        fprintf(stderr, "ctrain: error: cannot create a context (%s)\n", ct_status_name(s));
        goto out;
    }
    ct_comm_set_context(world, ctx);
    char mpath[600] = "";
    if (ta.report_dir && report_start(ta.report_dir, mpath, sizeof mpath)) goto out;
    if ((s = train_watched(ctx, &r, world, &ta, mpath)) != CT_OK) {
        fflush(stdout);
        fprintf(stderr, "\n");
        goto out_err;
    }
    if (ta.report_dir && ct_comm_rank(world) == 0) {
        char hpath[700];
        snprintf(hpath, sizeof hpath, "%s/report.html", ta.report_dir);
        if (ct_report_html(mpath, hpath) != 0) goto out;
        printf("report: %s\n", hpath);
    }
    rc = 0;
    goto out;
out_err:
    if (ct_comm_size(world) > 1)
        fprintf(stderr, "ctrain: rank %d of %d failed:\n", ct_comm_rank(world), ct_comm_size(world));
    rc = cli_fail(ctx, s, "training failed");
out:
    /* a failed rank ends the job: the others may wait for it in a collective */
    if (rc != 0 && ct_comm_size(world) > 1) ct_comm_abort(world, rc);
    ct_comm_free(world);
    ct_context_free(ctx);
    return rc;
}
