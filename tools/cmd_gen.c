/* Placeholder for 'mk gen' until its implementation lands; replaced by tools/cmd_gen.c proper. */
#include <stdio.h>

#include "tools/cmds.h"

int mk_cmd_gen(int argc, char **argv) {
    fprintf(stderr, "mk gen: not built yet\n");
    return 2;
}
