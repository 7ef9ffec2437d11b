/* coordinator/run_export.h — a checkpoint written as a folder that loads
 * as users load one: save_pretrained's.
 *
 * A model folder holds the Hugging Face weights of the model's family (one
 * file or shards with their index, formats/hf_weights.h), config.json,
 * generation_config.json (the tokenizer's begin- and end-of-text ids) and
 * the tokenizer files the run used (data/data.h, tokenizer_save), so that
 * from_pretrained(folder) and `zerotrain generate folder` need nothing
 * else. An adapter folder holds PEFT's two files (formats/peft_adapter.h)
 * and the same generation config and tokenizer files.
 *
 * `zerotrain export` and the end of a run without checkpoint.dir
 * (run.save_final) write through here; both read the whole model back
 * from a checkpoint (run_checkpoint_read_model), so every layout, stage
 * and precision is exported by the same code.
 */
#ifndef ZT_COORDINATOR_RUN_EXPORT_H
#define ZT_COORDINATOR_RUN_EXPORT_H

#include <stdint.h>
#include <stdio.h>

#include "session.h"

/* What is written. */
enum run_export_what {
    RUN_EXPORT_MODEL,   /* the model; refused for a checkpoint with adapters */
    RUN_EXPORT_MERGED,  /* the model with its adapters merged in */
    RUN_EXPORT_ADAPTER, /* the adapters alone, as a PEFT folder */
};

struct run_export_request {
    const char *checkpoint; /* a step folder, or a checkpoint.dir whose `latest` names one */
    /* The model folder (created if missing; the weights are
     * model.safetensors in it), or for a model a path NAME.safetensors,
     * whose folder is the model folder. */
    const char *out;
    enum zt_dtype dtype; /* ZT_F32, ZT_BF16 or ZT_F16 */
    uint64_t max_shard;  /* bytes of one weights file; 0: no limit */
    enum run_export_what what;
    int force; /* replace a model folder's config (see run_export_write) */
};

/* Reads the checkpoint (its base too, when kept outside it) and writes
 * what `rq` asks for: the model, merged (each adapted weight W + (lora_alpha
 * / r) B A, worker/lora.h) or not, as the family's Hugging Face weights and
 * config.json; or the adapters as PEFT's folder, base_model_name_or_path
 * the base's file. Then generation_config.json and the tokenizer files of
 * the run (its data.tokenizer and data.tokenizer_dir; a tokenizer folder
 * that is gone since is a warning on stderr, the weights are still
 * written). Without force, a folder named by --out that already holds a
 * config.json (adapter_config.json for adapters) is refused, and so is a
 * NAME.safetensors path beside a config.json that describes another model:
 * a folder's config must describe its weights. One line to `report` (NULL:
 * none). Errors: ZT_ERR_USAGE (EXPORT_MODEL of a checkpoint with adapters,
 * ADAPTER of one without, a folder refused as above, saying what to ask
 * for), ZT_ERR_CHECKPOINT, ZT_ERR_UNSUPPORTED (a family without a
 * mapping), ZT_ERR_IO. */
zt_status run_export_write(const struct run_export_request *rq, FILE *report);

/* A finished run's weights as a folder, written when checkpoint.dir is not
 * set and run.save_final is true: <run.output_dir>/final, replaced if
 * there. The adapters as PEFT's folder for a run with adapters on a base
 * read from a file (model.init_from), the whole model otherwise (a base
 * drawn from run.seed is nowhere else: the adapters are merged into it),
 * in fp32. The session's weights are saved as a checkpoint of weights
 * alone into <run.output_dir>/final.checkpoint, which rank 0 exports and
 * removes. `where` receives the folder and *kind "adapters" or "model".
 * Collective and agreed. Errors: run_checkpoint_save_weights's,
 * run_export_write's. */
zt_status run_export_final(struct run_session *s, long step, char *where, size_t n,
                           const char **kind);

/* The tokenizer of a run's resolved configuration `yaml` (a checkpoint's
 * meta.json keeps it; `where` names it in errors): data.tokenizer ("bytes"
 * when unset), data.tokenizer_dir and data.chat_template ("" when unset). */
struct run_tokenizer_ref {
    char name[64], dir[4096], chat_template[32];
};
zt_status run_export_tokenizer_of(const char *where, const char *yaml,
                                  struct run_tokenizer_ref *out);

#endif
