/* tests/test_checkpoint.c — checkpoint storage (being written). */
#include "testutil.h"

int main(void)
{
    return 0;
}
