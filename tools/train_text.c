/* tools/train_text.c - `ctrain train` for language models (model "gpt" or
 * "bert"): corpus -> tokenizer -> train / validation split, GPT next-token
 * or BERT masked-LM loss, a step loop counted by max_steps with a live
 * progress line, validation loss / perplexity every eval_every steps and at
 * the end, and a final checkpoint whose step directory also holds the char
 * tokenizer's vocabulary (tokenizer.vocab) for `ctrain sample`. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "ctrain/metrics.h"

#define CFG_ERROR(...) (snprintf(err, errlen, __VA_ARGS__), CT_E_CONFIG)

ct_status ct_cli_gpt_config(ct_context *ctx, const ct_recipe *r, int64_t tok_vocab, ct_gpt_config *c, char *err,
                             size_t errlen) {
    const char *preset = r->preset[0] ? r->preset : "gpt-char-small";
    ct_status s = ct_gpt_preset(ctx, preset, c);
    if (s != CT_OK) return snprintf(err, errlen, "%s", ct_context_last_error(ctx)), s;
    if (r->context > c->context)
        return CFG_ERROR("recipe key 'context': %lld positions is longer than the model's context (%lld, preset %s)", (long long)r->context, (long long)c->context, preset);
    if (r->n_layer) c->n_layer = r->n_layer;
    if (r->n_head) c->n_head = r->n_head;
    if (r->d_model) c->d_model = r->d_model;
    if (r->context) c->context = r->context;
    if (c->d_model % c->n_head)
        return CFG_ERROR("recipe keys 'd_model' / 'n_head': d_model %lld is not divisible by n_head %d",
                         (long long)c->d_model, c->n_head);
    c->vocab = tok_vocab;
    c->dropout = r->dropout;
    return CT_OK;
}

ct_status ct_cli_bert_config(ct_context *ctx, const ct_recipe *r, int64_t tok_vocab, ct_bert_config *c, char *err,
                             size_t errlen) {
    const char *preset = r->preset[0] ? r->preset : "bert-base";
    ct_status s = ct_bert_preset(ctx, preset, c);
    if (s != CT_OK) return snprintf(err, errlen, "%s", ct_context_last_error(ctx)), s;
    if (r->context > c->context)
        return CFG_ERROR("recipe key 'context': %lld positions is longer than the model's context (%lld, preset %s)", (long long)r->context, (long long)c->context, preset);
    if (r->n_layer) c->n_layer = r->n_layer;
    if (r->n_head) c->n_head = r->n_head;
    if (r->d_model) {
        c->d_ff = c->d_ff / c->d_model * r->d_model; /* keep the preset's ratio (4x) */
        c->d_model = r->d_model;
    }
    if (r->context) c->context = r->context;
    if (c->d_model % c->n_head)
        return CFG_ERROR("recipe keys 'd_model' / 'n_head': d_model %lld is not divisible by n_head %d",
                         (long long)c->d_model, c->n_head);
    c->vocab = tok_vocab + 1; /* + the mask id */
    c->dropout = r->dropout;
    return CT_OK;
}

ct_status ct_cli_tokenizer(ct_context *ctx, const ct_recipe *r, const char *text, size_t len, ct_tokenizer **out) {
    if (!strcmp(r->tokenizer, "byte")) return ct_tokenizer_byte(ctx, out);
    if (!strcmp(r->tokenizer, "gpt2")) {
        char enc[300], bpe[300];
        const char *dir = r->bpe_dir[0] ? r->bpe_dir : "data/text/gpt2";
        snprintf(enc, sizeof enc, "%s/encoder.json", dir);
        snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
        return ct_tokenizer_gpt2_load(ctx, enc, bpe, out);
    }
    return ct_tokenizer_char_fit(ctx, text, len, out);
}

typedef struct {
    int bert;
    ct_plan *plan;
    ct_node ids, labels, kv, loss;
    int64_t B, T;
    int32_t mask_id;
} lm_t;

static ct_status build_lm(ct_context *ctx, const ct_recipe *r, const ct_gpt_config *gc, const ct_bert_config *bc,
                          lm_t *m) {
    ct_graph *g;
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    int64_t B = m->B, T = m->T, V = m->bert ? bc->vocab : gc->vocab;
    ct_node logits, flat, lab1;
    m->kv = CT_NONE;
    s = ct_input(g, "ids", CT_I32, 2, (int64_t[]){B, T}, &m->ids);
    if (s == CT_OK) s = ct_input(g, "labels", CT_I32, 2, (int64_t[]){B, T}, &m->labels);
    if (s == CT_OK && m->bert) s = ct_input(g, "key_valid", CT_I32, 2, (int64_t[]){B, T}, &m->kv);
    if (s == CT_OK) s = m->bert ? ct_model_bert(g, m->ids, m->kv, CT_NONE, CT_NONE, bc, &logits) : ct_model_gpt(g, m->ids, gc, &logits);
    if (s == CT_OK) s = ct_reshape(g, logits, 2, (int64_t[]){B * T, V}, &flat);
    if (s == CT_OK) s = ct_reshape(g, m->labels, 1, (int64_t[]){B * T}, &lab1);
    if (s == CT_OK) s = ct_cross_entropy(g, flat, lab1, r->label_smoothing, CT_TEXT_IGNORE_LABEL, &m->loss);
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    co.accumulate_grads = r->accumulate_steps > 1;
    co.recompute_every = r->recompute_every;
    co.recompute_ops = !strcmp(r->recompute_ops, "cheap") ? CT_RECOMPUTE_CHEAP
                       : !strcmp(r->recompute_ops, "all") ? CT_RECOMPUTE_ALL
                                                          : 0;
    if (s == CT_OK) s = ct_precision_parse(ctx, r->precision, &co.precision);
    co.keep_fp32 = r->keep_fp32;
    if (s == CT_OK) s = ct_compile(g, m->loss, 0, NULL, &co, &m->plan);
    if (s == CT_OK && r->accumulate_steps > 1) s = ct_plan_set_loss_scale(m->plan, 1.0f / (float)r->accumulate_steps);
    if (s == CT_OK && r->detect_anomaly) ct_plan_set_anomaly(m->plan, 1);
    ct_graph_free(g);
    return s;
}

/* Fills the batch of (seed, step) from a split. */
static ct_status fill_batch(const lm_t *m, const ct_text_dataset *ds, ct_text_split split, uint64_t seed,
                            uint64_t step) {
    ct_tensor ti, tl, tk;
    ct_plan_tensor(m->plan, m->ids, &ti);
    ct_plan_tensor(m->plan, m->labels, &tl);
    if (!m->bert) return ct_text_lm_batch(ds, split, m->B, m->T, seed, step, ti.data, tl.data);
    ct_plan_tensor(m->plan, m->kv, &tk);
    return ct_text_mlm_batch(ds, split, m->B, m->T, m->mask_id, seed, step, ti.data, tl.data, tk.data);
}

/* Validation loss (mean over predicted tokens). GPT: the sequential windows
 * of the validation split, the first eval_batches * B of them (0: all).
 * BERT: eval_batches (0: 20) masked batches of a fixed seed, the same at
 * every evaluation. */
static ct_status evaluate(const ct_recipe *r, const lm_t *m, const ct_text_dataset *ds, double *loss,
                          int64_t *windows) {
    double tot = 0, w = 0;
    ct_status s = CT_OK;
    *windows = 0;
    if (m->bert) {
        int64_t nb = r->eval_batches > 0 ? r->eval_batches : 20;
        for (int64_t b = 0; b < nb; b++) {
            if ((s = fill_batch(m, ds, CT_SPLIT_VAL, r->seed ^ 0x5eed5eedULL, (uint64_t)b)) != CT_OK) return s;
            ct_tensor tl;
            ct_plan_tensor(m->plan, m->labels, &tl);
            const int32_t *lab = tl.data;
            int64_t n = 0;
            for (int64_t i = 0; i < m->B * m->T; i++) n += lab[i] != CT_TEXT_IGNORE_LABEL;
            if (!n) continue;
            if ((s = ct_plan_forward(m->plan, 0)) != CT_OK) return s;
            float l;
            ct_plan_loss(m->plan, &l);
            tot += (double)l * (double)n;
            w += (double)n;
            *windows += m->B;
        }
    } else {
        int64_t nw = ct_text_eval_windows(ds, CT_SPLIT_VAL, m->T);
        if (r->eval_batches > 0 && r->eval_batches * m->B < nw) nw = r->eval_batches * m->B;
        ct_tensor ti, tl;
        ct_plan_tensor(m->plan, m->ids, &ti);
        ct_plan_tensor(m->plan, m->labels, &tl);
        for (int64_t first = 0; first < nw; first += m->B) {
            int64_t got = 0, want = nw - first < m->B ? nw - first : m->B;
            if ((s = ct_text_eval_batch(ds, CT_SPLIT_VAL, m->T, first, want, ti.data, tl.data, &got)) != CT_OK)
                return s;
            if (got <= 0) break;
            int32_t *lab = tl.data, *ids = ti.data;
            for (int64_t i = got * m->T; i < m->B * m->T; i++) lab[i] = CT_TEXT_IGNORE_LABEL, ids[i] = 0;
            if ((s = ct_plan_forward(m->plan, 0)) != CT_OK) return s;
            float l;
            ct_plan_loss(m->plan, &l);
            tot += (double)l * (double)(got * m->T);
            w += (double)(got * m->T);
            *windows += got;
        }
    }
    *loss = w > 0 ? tot / w : 0;
    return CT_OK;
}

/* 0, or 1 with the error printed */
static int write_vocab(ct_context *ctx, const char *save_dir, const ct_tokenizer *tok) {
    if (ct_tokenizer_kind_of(tok) != CT_TOK_CHAR) return 0;
    char dir[4096], path[4200];
    ct_status s = ct_checkpoint_resolve(ctx, save_dir, dir, sizeof dir);
    uint8_t v[256];
    size_t n = 0;
    if (s == CT_OK) s = ct_tokenizer_char_vocab(tok, v, sizeof v, &n);
    if (s != CT_OK) return cli_fail(ctx, s, "saving the tokenizer vocabulary failed");
    snprintf(path, sizeof path, "%s/%s", dir, CT_CLI_VOCAB_FILE);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(v, 1, n, f) != n || fclose(f) != 0) {
        if (f) fclose(f);
        return cli_error(CT_E_IO, "cannot write the tokenizer vocabulary '%s': %s", path, strerror(errno));
    }
    return 0;
}

static int save(ct_context *ctx, const ct_recipe *r, const lm_t *m, ct_optimizer *opt, const ct_schedule *sched,
                const ct_scaler *scaler, const ct_tokenizer *tok, int64_t step, double val_loss, int finished) {
    ct_train_state *st = calloc(1, sizeof *st);
    if (!st) return cli_error(CT_E_OOM, "out of memory saving a checkpoint");
    ct_train_state_init(st);
    st->step = step;
    st->test_loss = val_loss;
    st->finished = finished;
    st->has_schedule = 1;
    ct_schedule_get_state(sched, &st->schedule);
    st->has_scaler = scaler != NULL;
    if (scaler) ct_scaler_get_state(scaler, &st->scaler);
    int n = ct_recipe_to_json_full(r, st->recipe_json, sizeof st->recipe_json);
    int rc = 0;
    if (n < 0 || (size_t)n >= sizeof st->recipe_json) {
        rc = cli_error(CT_E_CONFIG, "checkpoint: the recipe does not fit in %zu bytes of JSON", sizeof st->recipe_json);
    } else {
        ct_status s = ct_checkpoint_save(ctx, r->save_dir, m->plan, opt, st, r->keep_last);
        if (s != CT_OK) rc = cli_fail(ctx, s, "saving a checkpoint failed");
        else if ((rc = write_vocab(ctx, r->save_dir, tok)) == 0) {
            size_t dl = strlen(r->save_dir);
            printf("  checkpoint: step %lld -> %s%sstep-%06lld%s\n", (long long)step, r->save_dir,
                   dl && r->save_dir[dl - 1] == '/' ? "" : "/", (long long)step, finished ? " (end of run)" : "");
            fflush(stdout);
        }
    }
    free(st);
    return rc;
}

int ct_cli_train_text(const ct_recipe *rin, int quiet, const char *report_dir, const char *resume) {
    ct_recipe r = *rin;
    ct_context_opts co;
    ct_context_opts_default(&co);
    co.seed = r.seed;
    co.num_threads = r.threads;
    ct_context *ctx = NULL;
    ct_status s = ct_context_create(&co, &ctx);
    if (s != CT_OK) {
        fprintf(stderr, "ctrain: error: cannot create a context (%s)\n", ct_status_name(s));
        return 1;
    }
    int rc = 1;
    char *text = NULL;
    size_t len = 0;
    ct_tokenizer *tok = NULL;
    ct_text_dataset ds = {0};
    lm_t m = {0};
    ct_optimizer *opt = NULL;
    ct_scaler *scaler = NULL;
    ct_schedule *sched = NULL;
    ct_metrics *mx = NULL;
    ct_gpt_config gc;
    ct_bert_config bc;
    char path[300], mpath[600] = "";
    m.bert = !strcmp(r.model, "bert");
    if (r.text_file[0]) snprintf(path, sizeof path, "%s", r.text_file);
    else snprintf(path, sizeof path, "data/text/%s.txt", r.dataset);
    double t0 = cli_now_s();
    if ((s = ct_text_read_file(ctx, path, &text, &len)) != CT_OK) goto out_err;
    if (len == 0) {
        rc = cli_error(CT_E_INVALID_ARG, "corpus '%s' is empty", path);
        goto out;
    }
    if ((s = ct_cli_tokenizer(ctx, &r, text, len, &tok)) != CT_OK) goto out_err;
    int64_t tv = ct_tokenizer_vocab_size(tok);
    char err[512];
    if (m.bert) s = ct_cli_bert_config(ctx, &r, tv, &bc, err, sizeof err);
    else s = ct_cli_gpt_config(ctx, &r, tv, &gc, err, sizeof err);
    if (s != CT_OK) {
        rc = cli_error(s, "%s", err);
        goto out;
    }
    m.B = r.batch_size;
    m.T = m.bert ? bc.context : gc.context;
    m.mask_id = (int32_t)tv;
    if ((s = ct_text_dataset_from_text(ctx, tok, text, len, r.val_fraction, m.T, &ds)) != CT_OK) {
        rc = cli_error(s, "%s: %s", path, cli_msg(ct_context_last_error(ctx)));
        goto out;
    }
    ct_free(ctx, text);
    text = NULL;
    if ((s = build_lm(ctx, &r, &gc, &bc, &m)) != CT_OK) goto out_err;
    if ((s = ct_optimizer_create(m.plan, &r.optim, &opt)) != CT_OK) goto out_err;
    if ((s = cli_scaler_from_recipe(ctx, &r, &scaler)) != CT_OK) goto out_err;
    /* text has no epochs: max_steps steps; without max_steps, epochs x eval_every ("epoch" = one eval interval) */
    int64_t total = r.max_steps > 0 ? r.max_steps : (int64_t)r.epochs * (r.eval_every > 0 ? r.eval_every : 100);
    if ((s = cli_sched_from_recipe(ctx, &r, total, &sched)) != CT_OK) goto out_err;
    const int accum = r.accumulate_steps;
    /* resume: weights, optimizer (and its step, which keys dropout), schedule and
     * scaler state; batches are keyed by (seed, step), so the run continues exactly */
    int64_t step0 = 0;
    double val0 = NAN;
    if (resume) {
        ct_train_state *ck = calloc(1, sizeof *ck);
        if (!ck) {
            rc = cli_error(CT_E_OOM, "out of memory reading a checkpoint");
            goto out;
        }
        s = ct_checkpoint_load(ctx, resume, m.plan, opt, ck);
        if (s == CT_OK && ck->has_schedule) s = ct_schedule_set_state(sched, &ck->schedule);
        if (s == CT_OK && ck->has_scaler && scaler) s = ct_scaler_set_state(scaler, &ck->scaler);
        step0 = ck->step;
        val0 = ck->test_loss;
        if (s == CT_OK) printf("  resumed from %s: step %lld%s\n", ck->path, (long long)step0,
                               ck->finished ? " (the run had ended)" : "");
        free(ck);
        if (s != CT_OK) goto out_err;
    }
    ct_plan_stats ps;
    ct_plan_get_stats(m.plan, &ps);
    int64_t nparams = m.bert ? ct_bert_num_params(&bc) : ct_gpt_num_params(&gc);
    printf("ctrain train: %s (%d layers, %d heads, d_model %lld, context %lld, vocab %lld) on %s: %lld train / %lld "
           "val tokens (%s tokenizer), %.2fM params, %.1f MiB activations\n",
           r.model, m.bert ? bc.n_layer : gc.n_layer, m.bert ? bc.n_head : gc.n_head,
           (long long)(m.bert ? bc.d_model : gc.d_model), (long long)m.T, (long long)(m.bert ? bc.vocab : gc.vocab),
           path, (long long)ds.n_train, (long long)ds.n_val, r.tokenizer, (double)nparams / 1e6,
           (double)ps.activation_bytes / 1048576.0);
    printf("  threads %d, kernels: %s%s, data tokenized in %.2f s, %lld steps of %lld x %lld tokens\n",
           ct_context_num_threads(ctx), ct_isa_name(ct_context_isa(ctx)), ct_context_use_onednn(ctx) ? " + oneDNN" : "",
           cli_now_s() - t0, (long long)total, (long long)(m.B * accum), (long long)m.T);
    cli_print_precision(ctx, &r, m.plan);
    char rj[8192];
    if (ct_recipe_to_json(&r, rj, sizeof rj) < 0) snprintf(rj, sizeof rj, "(out of memory)");
    printf("  recipe: %s\n", rj);
    fflush(stdout);
    if (report_dir && mkdir(report_dir, 0777) != 0 && errno != EEXIST) {
        rc = cli_error(CT_E_IO, "--report: cannot create directory '%s': %s", report_dir, strerror(errno));
        goto out;
    }
    snprintf(mpath, sizeof mpath, report_dir ? "%s/metrics.jsonl" : "%s", report_dir ? report_dir : r.metrics_file);
    if (mpath[0] && (s = ct_metrics_open(ctx, mpath, resume != NULL, rj, &mx)) != CT_OK) goto out_err;

    int tty = isatty(STDOUT_FILENO);
    double start = cli_now_s(), val_loss = val0, run_loss = 0;
    int64_t step = step0, since = 0, tokens_per_step = m.B * m.T * accum, windows = 0;
    int stopped = 0; /* the loss scaler's floor policy "stop" */
    while (!stopped && step < total) {
        float lr = ct_schedule_lr(sched, step);
        double step_loss = 0;
        float gnorm = 0.0f;
        if (accum > 1 && (s = ct_plan_zero_grads(m.plan)) != CT_OK) goto out_err;
        if (scaler && (s = ct_plan_set_loss_scale(m.plan, ct_scaler_scale(scaler) / (float)accum)) != CT_OK)
            goto out_err;
        for (int micro = 0; micro < accum; micro++) {
            if ((s = fill_batch(&m, &ds, CT_SPLIT_TRAIN, r.seed, (uint64_t)(step * accum + micro))) != CT_OK)
                goto out_err;
            float loss;
            if ((s = ct_plan_forward(m.plan, 1)) != CT_OK) goto out_err;
            ct_plan_loss(m.plan, &loss);
            if (!isfinite(loss) && !scaler) {
                fprintf(stderr, "\nctrain: error: E40020 the loss became %g at step %lld (lr %g); lower optimizer.lr\n",
                        (double)loss, (long long)step, (double)lr);
                goto out;
            }
            if ((s = ct_plan_backward(m.plan)) != CT_OK) goto out_err;
            step_loss += isfinite(loss) ? loss : 0.0f;
        }
        step_loss /= accum;
        if ((s = cli_optimizer_step(&r, m.plan, opt, scaler, NULL, lr, &gnorm, &stopped)) != CT_OK) goto out_err;
        step++;
        since++;
        run_loss += step_loss;
        double el = cli_now_s() - start;
        if (mx) {
            ct_metrics_step ml = {step, (int)((step - 1) / (r.eval_every > 0 ? r.eval_every : total) + 1), step_loss,
                                  0.0, lr, (double)(m.B * accum), r.clip_grad_norm > 0.0f ? gnorm : -1.0,
                                  scaler ? (double)ct_scaler_scale(scaler) : -1.0, el};
            if ((s = ct_metrics_log_step(mx, &ml)) != CT_OK) goto out_err;
        }
        if (!quiet && (tty ? 1 : step % r.log_every == 0 || step == total)) {
            char eta[32];
            cli_fmt_time(el / (double)(step - step0) * (double)(total - step), eta, sizeof eta);
            char normbuf[32] = "";
            if (r.clip_grad_norm > 0.0f) snprintf(normbuf, sizeof normbuf, "  grad norm %.3g", (double)gnorm);
            printf("%sstep %lld/%lld  loss %.4f  lr %.2e%s  %.0f tok/s  %.0f ms/step  ETA %s%s", tty ? "\r" : "  ",
                   (long long)step, (long long)total, run_loss / (double)since, (double)lr, normbuf,
                   (double)((step - step0) * tokens_per_step) / el, 1e3 * el / (double)(step - step0), eta,
                   tty ? "\033[K" : "\n");
            fflush(stdout);
        }
        if ((r.eval_every > 0 && step % r.eval_every == 0) || step == total || stopped) {
            double te = cli_now_s();
            if ((s = evaluate(&r, &m, &ds, &val_loss, &windows)) != CT_OK) goto out_err;
            printf("%sstep %lld/%lld  train loss %.4f  val loss %.4f  val ppl %.2f  (%lld windows, %.1f s)\n",
                   tty && !quiet ? "\r\033[K" : "", (long long)step, (long long)total, run_loss / (double)since,
                   val_loss, exp(val_loss), (long long)windows, cli_now_s() - te);
            fflush(stdout);
            run_loss = 0;
            since = 0;
            if (mx && (s = ct_metrics_log_eval(mx, (int)(r.eval_every > 0 ? (step + r.eval_every - 1) / r.eval_every : 1),
                                               step, val_loss, 0.0, cli_now_s() - start)) != CT_OK)
                goto out_err;
        }
        if (r.save_dir[0] && r.save_every > 0 && step % r.save_every == 0 && step < total &&
            (rc = save(ctx, &r, &m, opt, sched, scaler, tok, step, val_loss, 0)) != 0)
            goto out;
    }
    if (r.save_dir[0] && step > step0 && (rc = save(ctx, &r, &m, opt, sched, scaler, tok, step, val_loss, 1)) != 0)
        goto out;
    double tt = cli_now_s() - start;
    ct_mem_stats ms;
    ct_context_mem_stats(ctx, &ms);
    printf("done: %lld steps in %.1f s (%.0f ms/step, %.0f tok/s), val loss %.4f (perplexity %.2f), peak memory %.1f "
           "MiB\n",
           (long long)step, tt, 1e3 * tt / (double)(step > step0 ? step - step0 : 1),
           (double)((step - step0) * tokens_per_step) / tt, val_loss,
           exp(val_loss), (double)ms.peak_bytes / 1048576.0);
    if (mx) {
        ct_metrics_log_done(mx, step, tt, val_loss, 0.0, (double)ms.peak_bytes / 1048576.0);
        s = ct_metrics_close(mx);
        mx = NULL;
        if (s != CT_OK) goto out_err;
    }
    if (report_dir) {
        char hpath[600];
        snprintf(hpath, sizeof hpath, "%s/report.html", report_dir);
        if (ct_report_html(mpath, hpath) != 0) goto out;
        printf("report: %s\n", hpath);
    }
    rc = 0;
    goto out;
out_err:
    rc = cli_fail(ctx, s, "training failed");
out:
    ct_metrics_close(mx);
    ct_schedule_free(sched);
    ct_scaler_free(scaler);
    ct_optimizer_free(opt);
    ct_plan_free(m.plan);
    ct_text_dataset_free(&ds);
    ct_tokenizer_free(tok);
    if (text) ct_free(ctx, text);
    ct_context_free(ctx);
    return rc;
}
