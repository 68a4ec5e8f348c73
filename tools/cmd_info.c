/* Placeholder for 'mk info' until its implementation lands; replaced by tools/cmd_info.c proper. */
#include <stdio.h>

#include "tools/cmds.h"

int mk_cmd_info(int argc, char **argv) {
    fprintf(stderr, "mk info: not built yet\n");
    return 2;
}
