/* cli/prepare.c — see prepare.h.
 *
 * The checks here are the ones that only make sense for prepare: a token
 * file given as input (it is already prepared; reading it as text would
 * make a file of its header bytes) and an output that would overwrite one
 * of its own inputs. Everything else is the tokenizer's, dataset_load's
 * and tokfile_write's job, and their messages already name the file. The
 * tokenizer is opened before any input is read, so a missing or broken
 * vocabulary folder is reported at once.
 */
#include "prepare.h"

#include <sys/stat.h>

#include "../data/data.h"

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

/* The narrowest token width that holds the vocabulary's ids. */
static zt_status token_width(const struct tokenizer *tok, uint32_t *width)
{
    const uint32_t vocab = tokenizer_vocab_size(tok);
    *width = vocab <= 256 ? 1 : vocab <= 65536 ? 2 : 4;
    return ZT_OK;
}

/* Tokenises the inputs and writes the token file with ids of `width`
 * bytes; *n_tokens and *n_files say what was written. */
static zt_status tokenise_into(const char *out_path, const char *const *paths, int n_paths,
                               const struct tokenizer *tok, uint32_t width, size_t *n_tokens,
                               size_t *n_files)
{
    struct token_buffer tokens = {0};
    /* Its inputs are text whatever their names (tokenised text is often
     * called *.tok); a binary one is still refused. */
    const struct dataset_options opt = {.text_only = 1, .tokenizer = tok};
    struct dataset_report rep = {0};
    zt_status st = dataset_load_with(paths, n_paths, &opt, &tokens, &rep);
    *n_files = rep.n_files;
    dataset_report_free(&rep);
    ZT_TRY(st);
    st = tokfile_write(out_path, tokens.tokens, tokens.n, width, tokenizer_vocab_size(tok));
    *n_tokens = tokens.n;
    token_buffer_free(&tokens);
    return st;
}

zt_status prepare_run(const char *out_path, const char *const *paths, int n_paths,
                      const struct prepare_options *opt, FILE *report)
{
    static const struct prepare_options defaults = {0};
    if (!opt)
        opt = &defaults;
    ZT_TRY(check_inputs(out_path, paths, n_paths));
    struct tokenizer *tok;
    ZT_TRY(tokenizer_open(opt->tokenizer, opt->tokenizer_dir, &tok));
    size_t n = 0, n_files = 0;
    uint32_t width = 0;
    zt_status st = token_width(tok, &width);
    if (st == ZT_OK)
        st = tokenise_into(out_path, paths, n_paths, tok, width, &n, &n_files);
    const uint32_t vocab = tokenizer_vocab_size(tok);
    tokenizer_close(tok);
    ZT_TRY(st);
    if (report)
        fprintf(report, "wrote %zu tokens (%u vocab, %u-byte ids) from %zu files to %s\n", n,
                (unsigned)vocab, (unsigned)width, n_files, out_path);
    return ZT_OK;
}
