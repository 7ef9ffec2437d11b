/* tests/fuzz/fuzz_chat.c — JSONL conversations ({"messages": [...]}) as
 * data.format chat reads them: rendered by a chat template, encoded, and
 * masked to the assistant's turns. The first byte picks how, the rest is
 * the file:
 *   bits 0-2  the template: llama3, chatml, llama2, mistral, or (4-7) the
 *             one the tokenizer's chat_template names;
 *   bit 3     the tokenizer: byte-level (its Jinja is ChatML's) or
 *             SentencePiece-style with byte fallback (its Jinja Llama 2's);
 *   bit 4     packing;
 *   bits 5-7  seq_len, 1 + 9 * value.
 * Both tokenizers are small tokenizer.json files written here once, with
 * every special token the templates write, so that each template's
 * rendering is reached rather than refused for a missing token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "../../common/json.h"
#include "../../data/data.h"

static const char *const specials[] = {"<|begin_of_text|>",
                                       "<|eot_id|>",
                                       "<|start_header_id|>",
                                       "<|end_header_id|>",
                                       "<|im_start|>",
                                       "<|im_end|>",
                                       "<s>",
                                       "</s>"};
#define N_SPECIALS (sizeof specials / sizeof specials[0])

/* added_tokens: the specials from id `first`, but <s> and </s> where the
 * vocabulary has them (ids 1 and 2 of a SentencePiece-style one). */
static void put_added(struct json_text *j, unsigned first, int sentencepiece)
{
    json_text_puts(j, "\"added_tokens\": [");
    for (size_t i = 0; i < N_SPECIALS; i++) {
        const int model = sentencepiece && i >= N_SPECIALS - 2;
        json_text_printf(j, "%s{\"id\": %u, \"content\": \"%s\", \"special\": true}", i ? ", " : "",
                         model ? (unsigned)(i - (N_SPECIALS - 2) + 1) : first++, specials[i]);
    }
    json_text_puts(j, "]");
}

/* The 256 bytes in GPT-2's alphabet, "he", " t", " the" and their merges;
 * the ByteLevel pre-tokenizer. */
static void byte_level_json(struct json_text *j)
{
    json_text_puts(j, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
    unsigned next = 0x100;
    for (unsigned b = 0; b < 256; b++) {
        const int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        json_text_printf(j, "%s\"\\u%04X\": %u", b ? ", " : "", printable ? b : next++, b);
    }
    json_text_puts(j, ", \"he\": 256, \"\\u0120t\": 257, \"\\u0120the\": 258}, \"merges\": "
                      "[\"h e\", \"\\u0120 t\", \"\\u0120t he\"]}, \"pre_tokenizer\": {\"type\": "
                      "\"ByteLevel\", \"use_regex\": true}, ");
    put_added(j, 259, 0);
    json_text_puts(j, "}");
}

/* Llama 2's shape: <unk> <s> </s>, <0x00> .. <0xFF>, "▁", the printable
 * ASCII characters, "▁t", "he", "▁the"; byte fallback, "▁" prepended and
 * for spaces, a decoder that strips it. */
static void sentencepiece_json(struct json_text *j)
{
    json_text_puts(j, "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": "
                      "\"Prepend\", \"prepend\": \"\\u2581\"}, {\"type\": \"Replace\", "
                      "\"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}]}, "
                      "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Strip\", "
                      "\"content\": \" \", \"start\": 1, \"stop\": 0}]}, \"model\": {\"type\": "
                      "\"BPE\", \"unk_token\": \"<unk>\", \"byte_fallback\": true, \"fuse_unk\": "
                      "true, \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2");
    unsigned id = 3;
    for (unsigned b = 0; b < 256; b++)
        json_text_printf(j, ", \"<0x%02X>\": %u", b, id++);
    json_text_printf(j, ", \"\\u2581\": %u", id++);
    for (unsigned c = 0x21; c <= 0x7E; c++)
        json_text_printf(j, ", \"\\u%04X\": %u", c, id++);
    json_text_printf(j,
                     ", \"\\u2581t\": %u, \"he\": %u, \"\\u2581the\": %u}, \"merges\": "
                     "[\"\\u2581 t\", \"h e\", \"\\u2581t he\"]}, ",
                     id, id + 1, id + 2);
    put_added(j, id + 3, 1);
    json_text_puts(j, "}");
}

static const struct tokenizer *open_tokenizer(void (*json)(struct json_text *), const char *config)
{
    struct json_text j = {0};
    json(&j);
    if (j.oom)
        abort();
    fuzz_write("tokenizer.json", (const uint8_t *)j.p, j.len);
    free(j.p);
    fuzz_write("tokenizer_config.json", (const uint8_t *)config, strlen(config));
    struct tokenizer *t;
    if (tokenizer_open("hf", fuzz_dir(), &t) != ZT_OK) {
        fprintf(stderr, "fuzz_chat: the tokenizer does not load: %s\n", zt_error_message());
        abort(); /* the target's own file: no finding */
    }
    return t;
}

/* The two tokenizers, made on first use and kept for the process. */
static const struct tokenizer *tokenizer_of(int sentencepiece)
{
    static const struct tokenizer *made[2];
    if (made[sentencepiece])
        return made[sentencepiece];
    if (sentencepiece)
        made[1] = open_tokenizer(sentencepiece_json,
                                 "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", "
                                 "\"chat_template\": \"{{ bos_token + '[INST] <<SYS>>\\\\n' + "
                                 "system + '\\\\n<</SYS>>\\\\n\\\\n' }}\"}");
    else
        made[0] = open_tokenizer(byte_level_json,
                                 "{\"eos_token\": \"<|im_end|>\", \"chat_template\": \"{% for m in "
                                 "messages %}{{'<|im_start|>' + m['role'] + '\\\\n' + "
                                 "m['content'] + '<|im_end|>\\\\n'}}{% endfor %}\"}");
    return made[sentencepiece];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const templates[] = {"llama3", "chatml", "llama2", "mistral"};
    if (size < 1)
        return 0;
    const unsigned how = data[0];
    const struct jsonl_options opt = {tokenizer_of(how >> 3 & 1), how >> 4 & 1,
                                      1 + 9 * (int)(how >> 5),
                                      (how & 7) < 4 ? templates[how & 7] : NULL};
    const char *path = fuzz_write("train.jsonl", data + 1, size - 1);
    struct token_buffer b = {0};
    struct jsonl_report report;
    fuzz_begin();
    if (fuzz_check(jsonl_load(&path, 1, &opt, &b, &report)) == ZT_OK && b.n > 0 && !b.mask)
        abort(); /* conversations always carry a mask */
    token_buffer_free(&b);
    return 0;
}
