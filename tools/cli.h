/* tools/cli.h - subcommands of the ctrain CLI. Each returns the exit code:
 * 0 success, 1 runtime error (message printed), 2 usage error. */
#ifndef CT_CLI_H
#define CT_CLI_H
int ct_cli_train(int argc, char **argv);
int ct_cli_info(int argc, char **argv);
int ct_cli_doctor(int argc, char **argv);
int ct_cli_report(int argc, char **argv);
/* tools/report.c: metrics log -> HTML report; 0, or 1 with the error printed */
int ct_report_html(const char *metrics_path, const char *html_path);
int ct_cli_sample(int argc, char **argv);

/* tools/train_text.c: `ctrain train` for model gpt / bert (the recipe is validated) */
#include "ctrain/ctrain.h"
/* resume: a checkpoint (save dir or step dir) to continue from, or NULL. */
int ct_cli_train_text(const ct_recipe *r, int quiet, const char *report_dir, const char *resume);
/* GPT / BERT sizes from the recipe (preset + overrides, vocabulary of the
 * tokenizer, +1 for BERT's mask id); errors name the key. */
ct_status ct_cli_gpt_config(ct_context *ctx, const ct_recipe *r, int64_t tok_vocab, ct_gpt_config *c, char *err,
                             size_t errlen);
ct_status ct_cli_bert_config(ct_context *ctx, const ct_recipe *r, int64_t tok_vocab, ct_bert_config *c, char *err,
                             size_t errlen);
/* The recipe's tokenizer (char: fitted on text) */
ct_status ct_cli_tokenizer(ct_context *ctx, const ct_recipe *r, const char *text, size_t len, ct_tokenizer **out);
#define CT_CLI_VOCAB_FILE "tokenizer.vocab"

/* tools/train.c helpers shared with train_text.c */
double cli_now_s(void);
/* a library message without its "E40001 CT_E_...: " prefix */
const char *cli_msg(const char *e);
int cli_fail(ct_context *ctx, ct_status s, const char *what);
int cli_error(ct_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ct_status cli_sched_from_recipe(ct_context *ctx, const ct_recipe *r, int64_t total, ct_schedule **out);
void cli_fmt_time(double s, char *buf, size_t len);
const char *cli_scale_mode(const ct_recipe *r);
/* One optimizer step with what the recipe asks around it: with a loss scaler,
 * unscale + inf/NaN check, then (all finite) clipping and the step, else the
 * step is skipped; then the scaler's update, traced in prof's "amp" category
 * (prof may be NULL). *gnorm: the norm before clipping (0 when not clipping).
 * *stop is set to 1 (with a message) when the scaler asks to stop
 * (loss_scale.floor = stop). */
ct_status cli_optimizer_step(const ct_recipe *r, ct_plan *plan, ct_optimizer *opt, ct_scaler *scaler,
                             ct_profiler *prof, float lr, float *gnorm, int *stop);
/* The precision line of a run's header (nothing for fp32), with a note when the CPU
 * has no matrix unit for that dtype. */
void cli_print_precision(ct_context *ctx, const ct_recipe *r, const ct_plan *plan);
ct_status cli_scaler_from_recipe(ct_context *ctx, const ct_recipe *r, ct_scaler **out);
#endif
