/* Subcommands of the mk tool, one file each (tools/cmd_<name>.c). */
#ifndef MK_TOOLS_CMDS_H
#define MK_TOOLS_CMDS_H

/* Each takes argv after the subcommand name (argv[0] is the subcommand) and returns the exit code. */
int mk_cmd_info(int argc, char **argv);
int mk_cmd_gen(int argc, char **argv);
int mk_cmd_quantize(int argc, char **argv);
int mk_cmd_run(int argc, char **argv);
int mk_cmd_chat(int argc, char **argv);
int mk_cmd_dump(int argc, char **argv);
int mk_cmd_trace(int argc, char **argv);
int mk_cmd_bench(int argc, char **argv);
int mk_cmd_tokenize(int argc, char **argv);

#endif
