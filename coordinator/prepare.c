/* coordinator/prepare.c — see prepare.h.
 *
 * The checks here are the ones that only make sense for prepare: a token
 * file given as input (it is already prepared; reading it as text would
 * make a file of its header bytes) and an output that would overwrite one
 * of its own inputs. Everything else is dataset_load's and tokfile_write's
 * job, and their messages already name the file.
 */
#include "prepare.h"

#include <sys/stat.h>

#include "../data/data.h"

#define PREPARE_WIDTH 1u
#define PREPARE_VOCAB 256u

static zt_status check_inputs(const char *out_path, const char *const *paths, int n_paths)
{
    if (n_paths < 1)
        return zt_error_set(ZT_ERR_USAGE, "prepare: no input paths given");
    struct stat out_sb;
    int out_exists = stat(out_path, &out_sb) == 0;
    for (int i = 0; i < n_paths; i++) {
        if (tokfile_is_tokfile(paths[i]))
            return zt_error_set(ZT_ERR_USAGE,
                                "%s: is already a token file; prepare takes text files and "
                                "folders",
                                paths[i]);
        struct stat sb;
        if (out_exists && stat(paths[i], &sb) == 0 && sb.st_dev == out_sb.st_dev &&
            sb.st_ino == out_sb.st_ino)
            return zt_error_set(ZT_ERR_USAGE, "%s: the output is also an input (%s)", out_path,
                                paths[i]);
    }
    return ZT_OK;
}

zt_status prepare_run(const char *out_path, const char *const *paths, int n_paths, FILE *report)
{
    ZT_TRY(check_inputs(out_path, paths, n_paths));
    struct token_buffer tokens = {0};
    /* Its inputs are text whatever their names (tokenised text is often
     * called *.tok); a binary one is still refused. */
    const struct dataset_options opt = {.text_only = 1};
    struct dataset_report rep = {0};
    zt_status st = dataset_load_with(paths, n_paths, &opt, &tokens, &rep);
    size_t n_files = rep.n_files;
    dataset_report_free(&rep);
    ZT_TRY(st);
    st = tokfile_write(out_path, tokens.tokens, tokens.n, PREPARE_WIDTH, PREPARE_VOCAB);
    size_t n = tokens.n;
    token_buffer_free(&tokens);
    ZT_TRY(st);
    if (report)
        fprintf(report, "wrote %zu tokens (%u vocab, %u-byte ids) from %zu files to %s\n", n,
                PREPARE_VOCAB, PREPARE_WIDTH, n_files, out_path);
    return ZT_OK;
}
