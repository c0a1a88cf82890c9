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
int ct_cli_graph(int argc, char **argv); /* tools/graph.c */
int ct_cli_eval(int argc, char **argv);    /* tools/eval.c */
int ct_cli_predict(int argc, char **argv); /* tools/eval.c */

#include "ctrain/ctrain.h"

/* tools/train.c helpers shared with the other subcommands */
/* a library message without its "E40001 CT_E_...: " prefix */
const char *cli_msg(const char *e);
int cli_fail(ct_context *ctx, ct_status s, const char *what);
int cli_error(ct_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* ct_context_create failed with s: says why (a bad CT_* environment variable, or s). Returns 1. */
int cli_context_fail(ct_status s);
/* the same with its own hint instead of the status's generic advice */
int cli_error_hint(ct_status s, const char *hint, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* --set's "KEY=VALUE": KEY into key (cap bytes) and *val past the '='; 0 when
 * there is no '=' or the key does not fit (a usage error: exit 2) */
int cli_split_set(const char *arg, char *key, size_t cap, const char **val);
#endif
