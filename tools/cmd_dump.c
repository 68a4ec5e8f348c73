/* Placeholder for 'mk dump' until its implementation lands; replaced by tools/cmd_dump.c proper. */
#include <stdio.h>

#include "tools/cmds.h"

int mk_cmd_dump(int argc, char **argv) {
    fprintf(stderr, "mk dump: not built yet\n");
    return 2;
}
