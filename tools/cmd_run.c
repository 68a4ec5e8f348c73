/* Placeholder for 'mk run' until its implementation lands; replaced by tools/cmd_run.c proper. */
#include <stdio.h>

#include "tools/cmds.h"

int mk_cmd_run(int argc, char **argv) {
    fprintf(stderr, "mk run: not built yet\n");
    return 2;
}
