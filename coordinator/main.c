/* coordinator/main.c — the zerotrain binary. */
#include "cli.h"

int main(int argc, char **argv)
{
    return cli_main(argc, argv);
}
