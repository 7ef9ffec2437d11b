/* tests/keep_modules.c — a dlclose that keeps every shared object mapped.
 *
 * Preloaded into MPI ranks of the sanitizer build only: Open MPI unloads
 * its components at MPI_Finalize while they still hold allocations, and
 * LeakSanitizer, running after that, can then name neither the leak's
 * module nor match a suppression. Keeping the components mapped lets the
 * suppressions in lsan.supp work and leak checking stay on for our code. */
#include <stddef.h>

int dlclose(void *handle);

int dlclose(void *handle)
{
    (void)handle;
    return 0;
}
