/* Placeholder for 'mk bench' until its implementation lands; replaced by tools/cmd_bench.c proper. */
#include <stdio.h>

#include "tools/cmds.h"

int mk_cmd_bench(int argc, char **argv) {
    fprintf(stderr, "mk bench: not built yet\n");
    return 2;
}
