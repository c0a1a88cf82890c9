/* tools/cli.h - subcommands of the ctrain CLI. Each returns the exit code:
 * 0 success, 1 runtime error (message printed), 2 usage error. */
#ifndef CT_CLI_H
#define CT_CLI_H
int ct_cli_train(int argc, char **argv);
int ct_cli_info(int argc, char **argv);
#endif
