/* Placeholder for 'mk quantize' until its implementation lands; replaced by tools/cmd_quantize.c proper. */
#include <stdio.h>

#include "tools/cmds.h"

int mk_cmd_quantize(int argc, char **argv) {
    fprintf(stderr, "mk quantize: not built yet\n");
    return 2;
}
