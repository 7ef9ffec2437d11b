/* cli/main.c — the zerotrain binary: signal handling and the CLI.
 *
 * The only global mutable state of the program is the stop request the
 * signal handlers write (a handler can reach nothing else). SIGTERM and
 * SIGUSR1 ask the run to checkpoint at the next step boundary and exit 0
 * (SLURM's --signal, Open MPI's forwarding of SIGUSR1); a repeated signal
 * changes nothing while the checkpoint is written. SIGINT asks it to stop
 * without saving; a second SIGINT kills the process as usual.
 *
 * The heap keeps what training frees. A step frees and allocates the same
 * large buffers again and again (stage 3's gathered units, transient
 * gradients, reduced shards, activations); by default glibc maps each
 * block above its threshold anew, unmaps it on free and trims the heap's
 * top, so every step faults every such page in and the kernel zeroes it
 * once more: about 98,000 page faults per step (385 MB per rank) at GPT-2
 * 124M's shape under stage 3, none once the blocks are reused in place,
 * as PyTorch's caching allocator reuses device blocks. The resident size
 * then stays at its peak instead of shrinking between steps. */
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <string.h>

#include "cli.h"

static volatile sig_atomic_t stop_request;

static void on_checkpoint_signal(int sig)
{
    (void)sig;
    if (stop_request == 0)
        stop_request = 1;
}

static void on_interrupt(int sig)
{
    if (stop_request == 2) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
    stop_request = 2;
}

static void install(int sig, void (*handler)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, NULL);
}

/* Every block from the heap, and the heap never trimmed (see above). */
static void keep_freed_memory(void)
{
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
}

int main(int argc, char **argv)
{
    keep_freed_memory();
    install(SIGTERM, on_checkpoint_signal);
    install(SIGUSR1, on_checkpoint_signal);
    install(SIGINT, on_interrupt);
    return cli_main(argc, argv, &stop_request, NULL);
}
