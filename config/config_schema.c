/* config/config_schema.c — every configuration key in one table, and
 * the walk that fills struct zt_config from a yaml_tree.
 *
 * The table is flat: one row per dotted key path ("optimizer.params.lr"),
 * sections included, parents before their children and each section's keys
 * together. A row says the type, where the value lives in struct zt_config
 * (NO_STORE for sections), the default as YAML text, the allowed range, what
 * makes the key "not supported yet", whether DeepSpeed has the key (F_DS),
 * and a one-line doc. Everything that needs to know the keys reads this
 * table: the defaults, the walk, the did-you-mean suggestions, the list of a
 * scheduler's valid parameters, the YAML writer and the Markdown reference
 * (docs/reference/config.md), so adding a key is adding a row. DeepSpeed's keys that
 * zerotrain does not act on have no row here but one in config_deepspeed.c,
 * which the walk asks about any key this table lacks.
 *
 * A fill is: defaults for every stored row; a walk over the tree that
 * rejects unknown keys, parses each given value into its field and
 * remembers its node (for positions in later messages), and collects the
 * DeepSpeed settings it does not act on into cfg->ignored; the defaults that
 * depend on other keys (data.seq_len, the scheduler's warmup_max_lr and
 * total_num_steps); then the rules that span several keys. The first
 * problem ends the fill with one message. A null value (`key:` or `~`)
 * counts as absent, so it gets the default.
 */
#include "config_impl.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../worker/fp8_scaling.h"
#include "../worker/model_family.h"
#include "../worker/quant4.h"
#include "../worker/optimizer.h"

enum ftype {
    T_SECTION,
    T_INT,            /* int */
    T_LONG,           /* long */
    T_U64,            /* uint64_t */
    T_DOUBLE,         /* double, finite */
    T_BOOL,           /* int 0/1 */
    T_STRING,         /* char *, non-empty */
    T_PATHS,          /* char ** at off, int count at off2: a string or a list of strings */
    T_BETAS,          /* [b1, b2]: doubles at off and off2 */
    T_EPS,            /* a number (off; off2 set to 0) or a pair [eps1, eps2] (off, off2) */
    T_BACKEND,        /* char *: auto | mpi | nccl */
    T_ALGO,           /* char *: auto | native | ring */
    T_DEVICE,         /* char *: auto | cpu | cuda */
    T_OPTIMIZER,      /* char *: AdamW | Adam, any case */
    T_SCHED,          /* enum zt_sched_type */
    T_WARMUP,         /* enum zt_warmup_type */
    T_FAMILY,         /* char *: a model family's name (worker/model_family.h) */
    T_PIPE_SCHEDULE,  /* enum pipeline_schedule */
    T_PIPE_PARTITION, /* enum pipeline_partition */
    T_FP8_FORMAT,     /* int, enum fp8_recipe_format */
    T_FP8_AMAX,       /* int, enum fp8_amax_algo */
    T_NONFINITE,      /* int, enum zt_nonfinite_action */
    T_OFFLOAD_DEVICE, /* enum zt_offload_device: none | cpu | nvme */
};

enum {
    F_UNSUPPORTED_TRUE = 1 << 0,    /* a boolean that may only be false for now */
    F_UNSUPPORTED_GIVEN = 1 << 1,   /* any value is not supported yet */
    F_UNSUPPORTED_NONZERO = 1 << 2, /* only 0 is implemented */
    F_ZERO_IS_ABSENT = 1 << 3,      /* 0 in the struct means "not given": written as null */
    F_WARMUP_LR = 1 << 4,           /* scheduler.params valid for WarmupLR, ... */
    F_WARMUP_DECAY = 1 << 5,
    F_WARMUP_COSINE = 1 << 6,
    F_LLAMA = 1 << 7, /* a key of model.family llama only */
    /* a string that may be "" (DeepSpeed's csv_monitor paths) */
    F_EMPTY_OK = 1 << 8,
    /* DeepSpeed's key, under this name and with its meaning (the reference's
     * "DeepSpeed name" column); a row without it is ours, PEFT's,
     * bitsandbytes', Hugging Face's or Transformer Engine's */
    F_DS = 1 << 9,
};
#define F_ALL_SCHED (F_WARMUP_LR | F_WARMUP_DECAY | F_WARMUP_COSINE)

/* A bound: kind 0 none, '[' or ']' inclusive, '(' or ')' exclusive. */
struct bound {
    char kind;
    double v;
};

struct field {
    const char *path;
    enum ftype type;
    size_t off, off2;
    const char *def; /* YAML text; NULL: zero/NULL, or resolved after the walk */
    struct bound lo, hi;
    unsigned flags;
    const char *what; /* for the "not supported yet: WHAT" message */
    const char *doc;
};

/* clang-format off */
#define OFF(m)   offsetof(struct zt_config, m)
#define NO_STORE ((size_t)-1)
#define NB       {0, 0}
#define GE(x)    {'[', x}
#define GT(x)    {'(', x}
#define LE(x)    {']', x}
#define LT(x)    {')', x}

static const struct field fields[] = {
    {"model", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL, "the model"},
    {"model.family", T_FAMILY, OFF(model.family), 0, "gpt2", NB, NB, 0, NULL,
     "gpt2 or llama (RMSNorm, rotary embedding, grouped-query attention, SwiGLU)"},
    {"model.hf_config", T_STRING, OFF(model.hf_config), 0, NULL, NB, NB, 0, NULL,
     "null, or a Hugging Face config.json (GPT2LMHeadModel, LlamaForCausalLM, "
     "MistralForCausalLM with a sliding_window of at least data.seq_len, Qwen2ForCausalLM): the "
     "family and every model key not set here"},
    {"model.vocab_size", T_INT, OFF(model.vocab_size), 0, "256", GE(1), LE(2147483647), 0, NULL,
     "vocabulary size (256: byte tokenizer; up to 2^31 - 1, token files of 4-byte ids past "
     "65536)"},
    {"model.pad_vocab_size_to_multiple_of", T_INT, OFF(model.pad_vocab_size_to_multiple_of), 0,
     "128", GE(1), LE(65536), 0, NULL,
     "the embedding and the output head get model.vocab_size rounded up to a multiple of this "
     "times tensor_parallel.size rows (Megatron's make-vocab-size-divisible-by), so that any "
     "tensor-parallel size cuts them evenly; the padding rows are zero, never a target and out "
     "of the softmax, and checkpoints and exports hold the true vocabulary; 1: no padding "
     "(tensor_parallel.size must divide model.vocab_size). LoRA and QLoRA runs are padded alike, "
     "their frozen padding rows zero"},
    {"model.block_size", T_INT, OFF(model.block_size), 0, "128", GE(1), LE(1 << 20), 0, NULL,
     "maximum sequence length"},
    {"model.n_layer", T_INT, OFF(model.n_layer), 0, "4", GE(1), LE(1024), 0, NULL,
     "transformer blocks"},
    {"model.n_head", T_INT, OFF(model.n_head), 0, "4", GE(1), LE(1024), 0, NULL,
     "attention heads per block"},
    {"model.n_embd", T_INT, OFF(model.n_embd), 0, "128", GE(1), LE(1 << 16), 0, NULL,
     "embedding width, a multiple of n_head"},
    {"model.n_kv_head", T_INT, OFF(model.n_kv_head), 0, NULL, GE(1), LE(1024), F_LLAMA, NULL,
     "key/value heads (grouped-query attention), n_head divisible by it (default: n_head)"},
    {"model.intermediate_size", T_INT, OFF(model.intermediate_size), 0, NULL, GE(1), LE(1 << 20),
     F_LLAMA, NULL,
     "MLP width (default: 2/3 of 4 n_embd rounded up to a multiple of 256, Llama's rule)"},
    {"model.rope_theta", T_DOUBLE, OFF(model.rope_theta), 0, "10000", GT(0), NB, F_LLAMA, NULL,
     "rotary embedding base"},
    {"model.rms_norm_eps", T_DOUBLE, OFF(model.rms_norm_eps), 0, "1e-5", GT(0), LT(1), F_LLAMA,
     NULL, "RMSNorm epsilon"},
    {"model.tie_word_embeddings", T_BOOL, OFF(model.tie_word_embeddings), 0, "false", NB, NB,
     F_LLAMA, NULL, "true: the output head is embed_tokens (GPT-2's head is always tied)"},
    {"model.attention_bias", T_BOOL, OFF(model.attention_bias), 0, "false", NB, NB, F_LLAMA, NULL,
     "true: q, k and v projections have biases, as Qwen2's (set by a Qwen2ForCausalLM "
     "model.hf_config)"},
    {"model.init_from", T_STRING, OFF(model.init_from), 0, NULL, NB, NB, 0, NULL,
     "null: random initialisation; Hugging Face weights of the family (a .safetensors file, a "
     "model.safetensors.index.json, or a folder holding either)"},

    {"lora", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL,
     "LoRA fine-tuning: the base model frozen, low-rank adapters trained (PEFT's LoraConfig)"},
    {"lora.enabled", T_BOOL, OFF(lora.enabled), 0, "false", NB, NB, 0, NULL,
     "true: freeze the model and train adapters on lora.target_modules"},
    {"lora.r", T_INT, OFF(lora.r), 0, "8", GE(1), LE(4096), 0, NULL, "adapter rank"},
    {"lora.lora_alpha", T_DOUBLE, OFF(lora.lora_alpha), 0, "8", GT(0), NB, 0, NULL,
     "the adapters' term is scaled by lora_alpha / r"},
    {"lora.lora_dropout", T_DOUBLE, OFF(lora.lora_dropout), 0, "0", GE(0), LT(1), 0, NULL,
     "dropout on the adapters' input in training forwards (a mask per sample, the same at any "
     "world size)"},
    {"lora.target_modules", T_PATHS, OFF(lora.target_modules), OFF(lora.n_target_modules), NULL,
     NB, NB, 0, NULL,
     "module names or their last components (gpt2: c_attn, c_proj, c_fc; llama: q_proj, k_proj, "
     "v_proj, o_proj, gate_proj, up_proj, down_proj), or all-linear (default: c_attn for gpt2, "
     "q_proj and v_proj for llama, as PEFT)"},
    {"lora.bias", T_STRING, OFF(lora.bias), 0, "none", NB, NB, 0, NULL,
     "none: biases stay frozen (the only choice)"},
    {"lora.init_from", T_STRING, OFF(lora.init_from), 0, NULL, NB, NB, 0, NULL,
     "null: the adapters start from their initial values; a PEFT adapter folder "
     "(adapter_config.json, adapter_model.safetensors) of the same r, lora_alpha and "
     "target_modules, as export --adapter or save_pretrained writes it"},

    {"quantization", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL,
     "QLoRA: the frozen base's linear layers stored in 4 bits (BitsAndBytesConfig's names)"},
    {"quantization.load_in_4bit", T_BOOL, OFF(quantization.load_in_4bit), 0, "false", NB, NB, 0,
     NULL, "true: store the frozen linear weights (not the head) as 4-bit codes; needs lora"},
    {"quantization.load_in_8bit", T_BOOL, OFF(quantization.load_in_8bit), 0, "false", NB, NB,
     F_UNSUPPORTED_TRUE, "8-bit base weights (load_in_4bit is)", "8-bit base weights"},
    {"quantization.bnb_4bit_quant_type", T_STRING, OFF(quantization.bnb_4bit_quant_type), 0,
     "nf4", NB, NB, 0, NULL, "nf4 (QLoRA's NormalFloat) or fp4"},
    {"quantization.bnb_4bit_use_double_quant", T_BOOL,
     OFF(quantization.bnb_4bit_use_double_quant), 0, "false", NB, NB, 0, NULL,
     "true: quantise the block scales too (8 bits in blocks of 256): about 0.37 bits a "
     "parameter less"},
    {"quantization.bnb_4bit_compute_dtype", T_STRING, OFF(quantization.bnb_4bit_compute_dtype), 0,
     "fp32", NB, NB, 0, NULL,
     "what the dequantised weights are rounded to before use: fp32, bf16 or fp16"},

    {"data", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL, "training and validation data"},
    {"data.train", T_PATHS, OFF(data.train), OFF(data.n_train), NULL, NB, NB, 0, NULL,
     "required: a token file, or text files or folders"},
    {"data.val", T_PATHS, OFF(data.val), OFF(data.n_val), NULL, NB, NB, 0, NULL,
     "optional, same forms as train"},
    {"data.val_fraction", T_DOUBLE, OFF(data.val_fraction), 0, "0.1", GE(0), LE(0.5), 0, NULL,
     "held-out tail of train when val is absent (0: no validation, no evaluation)"},
    {"data.seq_len", T_INT, OFF(data.seq_len), 0, NULL, GE(1), LE(1 << 20), 0, NULL,
     "tokens per sample, <= model.block_size (default: block_size)"},
    {"data.skip_binary", T_BOOL, OFF(data.skip_binary), 0, "false", NB, NB, 0, NULL,
     "binary files inside data folders: false: an error; true: skipped with a warning"},
    {"data.format", T_STRING, OFF(data.format), 0, "text", NB, NB, 0, NULL,
     "text: files (or a token file) as one stream, every token a target; jsonl: instruction "
     "examples, one JSON object a line, {\"prompt\", \"completion\"} (only the completion "
     "and end-of-text count in the loss), {\"text\"} (all count) or {\"messages\"} (a "
     "conversation, see data.chat_template); folders: their *.jsonl files"},
    {"data.tokenizer", T_STRING, OFF(data.tokenizer), 0, "bytes", NB, NB, 0, NULL,
     "bytes (vocabulary 256), gpt2 (GPT-2's BPE, 50257 ids), hf (a Hugging Face "
     "tokenizer.json: Llama 3, Qwen2, Llama 2, Mistral ...) or cl100k, o200k (tiktoken's "
     "rank files); all but bytes need data.tokenizer_dir and model.vocab_size at least their "
     "vocabulary; text and jsonl data are encoded with it"},
    {"data.tokenizer_dir", T_STRING, OFF(data.tokenizer_dir), 0, NULL, NB, NB, 0, NULL,
     "the tokenizer's folder (gpt2: encoder.json and vocab.bpe, fetched by "
     "scripts/gpt2_vocab.sh; hf: tokenizer.json and tokenizer_config.json, a model's own or "
     "fetched by scripts/tokenizers.sh; cl100k, o200k: NAME_base.tiktoken)"},
    {"data.chat_template", T_STRING, OFF(data.chat_template), 0, NULL, NB, NB, 0, NULL,
     "jsonl {\"messages\": [...]} lines: llama3, chatml (Qwen2), llama2 or mistral, rendered as "
     "Hugging Face's apply_chat_template does, the loss on the assistant's turns only; unset: "
     "the family the tokenizer_config.json's chat_template is"},
    {"data.packing", T_BOOL, OFF(data.packing), 0, "false", NB, NB, 0, NULL,
     "jsonl: true: examples concatenated into one stream cut into windows (TRL's packing); "
     "false: each example one window, cut to seq_len and padded (padding not counted)"},

    {"run", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL, "the run"},
    {"run.steps", T_LONG, OFF(run.steps), 0, "100", GE(1), NB, 0, NULL, "optimizer steps"},
    {"run.epochs", T_DOUBLE, OFF(run.epochs), 0, "0", GE(0), NB, 0, NULL,
     "passes over data.train instead of run.steps (the HF Trainer's num_train_epochs): the "
     "steps are ceil(epochs x training windows / global batch), the schedule's total too; "
     "each epoch a new order drawn from (run.seed, epoch); 0: run.steps counts"},
    {"run.seed", T_U64, OFF(run.seed), 0, "1234", NB, NB, 0, NULL, "random seed"},
    {"run.neftune_noise_alpha", T_DOUBLE, OFF(run.neftune_noise_alpha), 0, "0", GE(0), NB, 0,
     NULL,
     "NEFTune: uniform noise of alpha / sqrt(seq_len * n_embd) on the token embeddings in "
     "training forwards (Hugging Face's neftune_noise_alpha; 0: off)"},
    {"run.eval_interval", T_LONG, OFF(run.eval_interval), 0, "0", GE(0), NB, 0, NULL,
     "steps between evaluations, 0: only at the end (none without validation data)"},
    {"run.eval_batches", T_LONG, OFF(run.eval_batches), 0, "0", GE(0), NB, 0, NULL,
     "micro batches per evaluation, 0: the whole validation set"},
    {"run.output_dir", T_STRING, OFF(run.output_dir), 0, "runs/latest", NB, NB, 0, NULL,
     "where metrics and checkpoints go"},
    {"run.save_final", T_BOOL, OFF(run.save_final), 0, "true", NB, NB, 0, NULL,
     "a run without checkpoint.dir writes its trained weights to <output_dir>/final as "
     "`zerotrain export` does (as the HF Trainer's output_dir): the LoRA adapters as PEFT's "
     "folder when the base is model.init_from's, else the whole model, in fp32, with "
     "config.json, generation_config.json and the tokenizer files; false: nothing is saved"},

    {"run.resume", T_STRING, OFF(run.resume), 0, "auto", NB, NB, 0, NULL,
     "auto: the latest checkpoint in checkpoint.dir if any; never; or a checkpoint path"},
    {"run.on_nonfinite", T_NONFINITE, OFF(run.on_nonfinite), 0, "stop", NB, NB, 0, NULL,
     "a step whose loss or gradient norm is not finite (fp16's overflows aside): stop: report "
     "its first non-finite value and end the run (exit 1); skip: report it, skip the step on "
     "every rank and go on"},
    {"run.nonfinite_skip_limit", T_INT, OFF(run.nonfinite_skip_limit), 0, "10", GE(1), NB, 0,
     NULL, "on_nonfinite skip: this many non-finite steps in a row end the run as diverged"},

    {"checkpoint", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL, "training checkpoints"},
    {"checkpoint.dir", T_STRING, OFF(checkpoint.dir), 0, NULL, NB, NB, 0, NULL,
     "null: no checkpoints (none saved, none resumed); else where step-NNNNNNNN folders and "
     "`latest` go"},
    {"checkpoint.every", T_LONG, OFF(checkpoint.every), 0, "0", GE(0), NB, 0, NULL,
     "save every N optimizer steps (0: only at the end and on preemption); needs checkpoint.dir"},
    {"checkpoint.keep", T_INT, OFF(checkpoint.keep), 0, "2", GE(1), NB, 0, NULL,
     "complete checkpoints kept; older ones are removed after a new one is complete"},

    {"csv_monitor", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL,
     "DeepSpeed's CSV monitor: rank 0 writes each metric to a CSV file of its own"},
    {"csv_monitor.enabled", T_BOOL, OFF(csv_monitor.enabled), 0, "false", NB, NB, F_DS, NULL,
     "true: Train_Samples_train_loss.csv, ..._lr.csv, ... in output_path/job_name"},
    {"csv_monitor.output_path", T_STRING, OFF(csv_monitor.output_path), 0, "", NB, NB,
     F_EMPTY_OK | F_DS, NULL,
     "the job folder's parent (\"\": the current directory, as DeepSpeed's)"},
    {"csv_monitor.job_name", T_STRING, OFF(csv_monitor.job_name), 0, "DeepSpeedJobName", NB, NB,
     F_EMPTY_OK | F_DS, NULL, "the folder in output_path the files go to"},

    {"comm", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL, "communication"},
    {"comm.backend", T_BACKEND, OFF(comm.backend), 0, "auto", NB, NB, 0, NULL,
     "auto, mpi or nccl"},
    {"comm.reduce_scatter", T_ALGO, OFF(comm.reduce_scatter), 0, "auto", NB, NB, 0, NULL,
     "MPI reduce-scatter: auto, native or ring"},
    {"comm.allgather", T_ALGO, OFF(comm.allgather), 0, "auto", NB, NB, 0, NULL,
     "MPI allgather: auto, native or ring"},
    {"comm.allreduce", T_ALGO, OFF(comm.allreduce), 0, "auto", NB, NB, 0, NULL,
     "MPI allreduce: auto, native or ring"},
    {"comm.timeout_s", T_DOUBLE, OFF(comm.timeout_s), 0, "600", GE(0), NB, 0, NULL,
     "seconds one rank may wait in a call for peers that do not move (stopped, dead, "
     "unreachable, or stuck in one phase) before every rank writes its flight log and the job "
     "ends with exit 1, naming them; a peer still computing gets a warning (0: no flight "
     "recorder or watchdog)"},

    {"tensor_parallel", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL,
     "tensor parallelism (Megatron-LM's): each block's layers split across ranks"},
    {"tensor_parallel.size", T_INT, OFF(tensor_parallel.size), 0, "1", GE(1), NB, 0, NULL,
     "ranks each layer is split across (T); it divides model.n_head and the MLP width (llama: "
     "model.n_kv_head too); the vocabulary is padded for it (model.pad_vocab_size_to_multiple_of)"},
    {"tensor_parallel.sequence_parallel", T_BOOL, OFF(tensor_parallel.sequence_parallel), 0,
     "false", NB, NB, 0, NULL,
     "Megatron's sequence parallelism: outside the split layers each tensor-parallel rank holds "
     "1/T of the sequence (data.seq_len divisible by T); no effect at size 1"},

    {"context_parallel", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL,
     "context parallelism (Megatron-LM's --context-parallel-size, torchtitan's "
     "context_parallel_degree): each sequence split across ranks"},
    {"context_parallel.size", T_INT, OFF(context_parallel.size), 0, "1", GE(1), NB, 0, NULL,
     "ranks each sequence is split across (C): rank r of a context group keeps chunks r and "
     "2C-1-r of 2C (every rank the same share of the causal mask) and computes attention "
     "ring-wise over the group's keys and values; activations per rank fall by C; ZeRO shards "
     "over data x context ranks; composes with tensor (and sequence) and pipeline parallelism; "
     "data.seq_len divisible by 2C; fp32 on the CPU backend"},

    {"pipeline", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL,
     "pipeline parallelism: the blocks cut into stages that micro batches flow through"},
    {"pipeline.stages", T_INT, OFF(pipeline.stages), 0, "1", GE(1), NB, F_DS, NULL,
     "pipeline stages (P), at most model.n_layer; the data-parallel size is world / (T * P * C)"},
    {"pipeline.schedule", T_PIPE_SCHEDULE, OFF(pipeline.schedule), 0, "1f1b", NB, NB, 0, NULL,
     "1f1b (one forward, one backward: at most P micro batches' activations held) or gpipe "
     "(every forward, then every backward)"},
    {"pipeline.partition_method", T_PIPE_PARTITION, OFF(pipeline.partition_method), 0,
     "parameters", NB, NB, 0, NULL,
     "how blocks are cut into stages: parameters (balanced by parameter count) or uniform (the "
     "same number of blocks each)"},
    {"pipeline.virtual_stages", T_INT, OFF(pipeline.virtual_stages), 0, "1", GE(1), NB, 0, NULL,
     "chunks per stage, Megatron's virtual pipeline size (virtual_pipeline_model_parallel_size): "
     "at v > 1 the blocks are cut into P x v equal chunks, rank r holds chunks r, r + P, ..., and "
     "the schedule is Megatron's interleaved 1F1B (bubble (P - 1) / (v m)); needs model.n_layer "
     "divisible by P x v, gradient_accumulation_steps a multiple of P, schedule 1f1b and "
     "zero_optimization.stage below 3"},

    {"train_micro_batch_size_per_gpu", T_INT, OFF(train_micro_batch_size_per_gpu), 0, "1",
     GE(1), NB, F_DS, NULL, "sequences per rank per micro step"},
    {"gradient_accumulation_steps", T_INT, OFF(gradient_accumulation_steps), 0, "1", GE(1), NB,
     F_DS, NULL, "micro steps per optimizer step"},
    {"train_batch_size", T_LONG, OFF(train_batch_size), 0, NULL, GE(1), NB,
     F_ZERO_IS_ABSENT | F_DS, NULL,
     "null, or micro batch * accumulation * data-parallel size (world / (tensor_parallel.size "
     "* pipeline.stages))"},
    {"gradient_clipping", T_DOUBLE, OFF(gradient_clipping), 0, "1.0", GE(0), NB, F_DS, NULL,
     "global gradient norm limit, 0: off"},
    {"steps_per_print", T_LONG, OFF(steps_per_print), 0, "10", GE(1), NB, F_DS, NULL,
     "steps between progress lines"},
    {"device", T_DEVICE, OFF(device), 0, "auto", NB, NB, 0, NULL,
     "compute backend: auto (the GPU when usable), cpu or cuda"},

    {"optimizer", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL, "the optimizer"},
    {"optimizer.type", T_OPTIMIZER, OFF(optimizer.type), 0, "AdamW", NB, NB, F_DS, NULL,
     "AdamW, Adam, SGD, Lion, Adafactor, AdamW8bit or LOMO (any case)"},
    {"optimizer.params", T_SECTION, NO_STORE, 0, NULL, NB, NB, F_DS, NULL, "its parameters"},
    {"optimizer.params.lr", T_DOUBLE, OFF(optimizer.lr), 0, "1e-3", GT(0), NB, F_DS, NULL,
     "learning rate"},
    {"optimizer.params.betas", T_BETAS, OFF(optimizer.beta1), OFF(optimizer.beta2),
     "[0.9, 0.999]", GE(0), LT(1), F_DS, NULL, "[beta1, beta2]"},
    {"optimizer.params.beta1", T_DOUBLE, OFF(optimizer.beta1), 0, NULL, GE(0), LT(1),
     F_ZERO_IS_ABSENT, NULL, "Adafactor's first-moment decay (null: no first moment)"},
    {"optimizer.params.eps", T_EPS, OFF(optimizer.eps), OFF(optimizer.eps2), "1e-8", GT(0), NB,
     F_DS, NULL, "denominator term; Adafactor: [eps1, eps2], default [1e-30, 1e-3]"},
    {"optimizer.params.weight_decay", T_DOUBLE, OFF(optimizer.weight_decay), 0, "0.01", GE(0),
     NB, F_DS, NULL, "weight decay (decoupled for AdamW and Lion, L2 for Adam and SGD)"},
    {"optimizer.params.momentum", T_DOUBLE, OFF(optimizer.momentum), 0, "0", GE(0), NB, 0, NULL,
     "SGD momentum (0: none, and no state)"},
    {"optimizer.params.dampening", T_DOUBLE, OFF(optimizer.dampening), 0, "0", GE(0), LE(1), 0,
     NULL, "SGD dampening of the momentum"},
    {"optimizer.params.nesterov", T_BOOL, OFF(optimizer.nesterov), 0, "false", NB, NB, 0, NULL,
     "SGD Nesterov momentum (needs momentum > 0 and dampening 0)"},
    {"optimizer.params.min_8bit_size", T_LONG, OFF(optimizer.min_8bit_size), 0, "4096", GE(1), NB,
     0, NULL, "AdamW8bit: tensors with fewer elements keep fp32 states"},
    {"optimizer.params.clip_threshold", T_DOUBLE, OFF(optimizer.clip_threshold), 0, "1.0", GT(0),
     NB, 0, NULL, "Adafactor: largest RMS of an update"},
    {"optimizer.params.decay_rate", T_DOUBLE, OFF(optimizer.decay_rate), 0, "-0.8", NB, LT(0), 0,
     NULL, "Adafactor: second-moment decay 1 - t^decay_rate"},
    {"optimizer.params.scale_parameter", T_BOOL, OFF(optimizer.scale_parameter), 0, "true", NB,
     NB, 0, NULL, "Adafactor: lr relative to the parameters' RMS"},
    {"optimizer.params.relative_step", T_BOOL, OFF(optimizer.relative_step), 0, "false", NB, NB,
     0, NULL, "Adafactor: lr = min(1e-2, 1/sqrt(t)) instead of optimizer.params.lr"},
    {"optimizer.params.warmup_init", T_BOOL, OFF(optimizer.warmup_init), 0, "false", NB, NB, 0,
     NULL, "Adafactor: relative_step's lr starts at 1e-6 t"},

    {"scheduler", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL, "learning-rate schedule"},
    {"scheduler.type", T_SCHED, OFF(scheduler.type), 0, NULL, NB, NB, F_DS, NULL,
     "WarmupLR, WarmupDecayLR or WarmupCosineLR"},
    {"scheduler.params", T_SECTION, NO_STORE, 0, NULL, NB, NB, F_DS, NULL, "its parameters"},
    {"scheduler.params.warmup_min_lr", T_DOUBLE, OFF(scheduler.warmup_min_lr), 0, "0", GE(0),
     NB, F_WARMUP_LR | F_WARMUP_DECAY | F_DS, NULL, "lr at step 0"},
    {"scheduler.params.warmup_max_lr", T_DOUBLE, OFF(scheduler.warmup_max_lr), 0, NULL, GE(0),
     NB, F_WARMUP_LR | F_WARMUP_DECAY | F_DS, NULL, "lr after warmup (default: optimizer lr)"},
    {"scheduler.params.warmup_num_steps", T_LONG, OFF(scheduler.warmup_num_steps), 0, "1000",
     GE(0), NB, F_ALL_SCHED | F_DS, NULL, "warmup length in steps (at least 2 are used)"},
    {"scheduler.params.warmup_type", T_WARMUP, OFF(scheduler.warmup_type), 0, "log", NB, NB,
     F_ALL_SCHED | F_DS, NULL, "log or linear"},
    {"scheduler.params.total_num_steps", T_LONG, OFF(scheduler.total_num_steps), 0, NULL, GE(1),
     NB, F_WARMUP_DECAY | F_WARMUP_COSINE | F_DS, NULL, "end of the decay (default: run.steps)"},
    {"scheduler.params.warmup_min_ratio", T_DOUBLE, OFF(scheduler.warmup_min_ratio), 0, "0",
     GE(0), LE(1), F_WARMUP_COSINE | F_DS, NULL, "lr ratio at step 0"},
    {"scheduler.params.cos_min_ratio", T_DOUBLE, OFF(scheduler.cos_min_ratio), 0, "1e-4", GE(0),
     LE(1), F_WARMUP_COSINE | F_DS, NULL, "lr ratio at the end of the decay"},

    {"zero_optimization", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL, "ZeRO partitioning"},
    {"zero_optimization.stage", T_INT, OFF(zero.stage), 0, "0", GE(0), LE(3), F_DS, NULL,
     "0 data parallel, 1 optimizer state, 2 + gradients, 3 + parameters sharded"},
    {"zero_optimization.reduce_bucket_size", T_LONG, OFF(zero.reduce_bucket_size), 0, "5e8",
     GE(1), NB, F_DS, NULL, "elements per reduce bucket"},
    {"zero_optimization.overlap_comm", T_BOOL, OFF(zero.overlap_comm), 0, "true", NB, NB, F_DS,
     NULL,
     "stages 0-1 reduce gradient buckets during the last backward (false: at the step); stages "
     "2-3 always do"},
    {"zero_optimization.stage3_prefetch_depth", T_INT, OFF(zero.stage3_prefetch_depth), 0, "1",
     GE(0), LE(1024), 0, NULL, "blocks gathered ahead in stage 3"},
    {"zero_optimization.shard_group_size", T_INT, OFF(zero.shard_group_size), 0, "0", GE(0), NB, 0,
     NULL,
     "HSDP: shard within groups of this many consecutive data-parallel ranks, replicate across "
     "them (0: all data-parallel ranks; stages 1-3)"},
    {"zero_optimization.zero_hpz_partition_size", T_INT, OFF(zero.hpz_partition_size), 0, "1",
     GE(1), NB, F_DS, NULL,
     "ZeRO++ hpZ: a secondary copy of the stage-3 shards within groups of this many consecutive "
     "data-parallel ranks (one node's), which the backward gathers from (1: off)"},
    {"zero_optimization.offload_optimizer", T_SECTION, NO_STORE, 0, NULL, NB, NB, F_DS, NULL,
     "ZeRO-Offload (DeepSpeed's): the optimizer states and their update in host memory"},
    {"zero_optimization.offload_optimizer.device", T_OFFLOAD_DEVICE,
     OFF(zero.offload_optimizer.device), 0, "none", NB, NB, F_DS, NULL,
     "none; cpu: optimizer states in host memory (on device cpu they are there already: no "
     "effect); nvme: fp32 master and optimizer states in files under nvme_path, streamed through "
     "a window of host memory at each update (ZeRO-Infinity)"},
    {"zero_optimization.offload_optimizer.pin_memory", T_BOOL,
     OFF(zero.offload_optimizer.pin_memory), 0, "false", NB, NB, F_DS, NULL,
     "page-locked host buffers for the offloaded states (faster copies to and from the GPU)"},
    {"zero_optimization.offload_optimizer.nvme_path", T_STRING,
     OFF(zero.offload_optimizer.nvme_path), 0, NULL, NB, NB, F_DS, NULL,
     "device nvme: the folder of the state files (one per rank, removed at a clean end); "
     "required with nvme"},
    {"zero_optimization.offload_optimizer.buffer_count", T_INT,
     OFF(zero.offload_optimizer.buffer_count), 0, "4", GE(1), LE(64), F_DS, NULL,
     "device nvme: buffers in the window (reads run buffer_count - 1 ahead of the update)"},
    {"zero_optimization.offload_optimizer.buffer_size", T_LONG,
     OFF(zero.offload_optimizer.buffer_size), 0, "1e8", GE(1), NB, 0, NULL,
     "device nvme: elements of every state per window buffer (DeepSpeed's offload_param "
     "buffer_size, here for the optimizer's)"},

    {"fp16", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL, "fp16 mixed precision"},
    {"fp16.enabled", T_BOOL, OFF(fp16.enabled), 0, "false", NB, NB, F_DS, NULL,
     "fp16 working params and grads, fp32 master weights, loss scaling"},
    {"fp16.loss_scale", T_DOUBLE, OFF(fp16.loss_scale), 0, "0", GE(0), NB, F_DS, NULL,
     "0: dynamic loss scaling; > 0: this fixed scale"},
    {"fp16.initial_scale_power", T_INT, OFF(fp16.initial_scale_power), 0, "16", GE(0), LE(64), F_DS,
     NULL, "dynamic scaling starts at 2^this"},
    {"fp16.loss_scale_window", T_INT, OFF(fp16.loss_scale_window), 0, "1000", GE(1), NB, F_DS, NULL,
     "clean steps before the scale doubles"},
    {"fp16.hysteresis", T_INT, OFF(fp16.hysteresis), 0, "2", GE(1), NB, F_DS, NULL,
     "overflows tolerated before the scale halves"},
    {"fp16.min_loss_scale", T_DOUBLE, OFF(fp16.min_loss_scale), 0, "1", GT(0), NB, F_DS, NULL,
     "the scale never falls below this"},

    {"bf16", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL, "bf16 mixed precision"},
    {"bf16.enabled", T_BOOL, OFF(bf16.enabled), 0, "false", NB, NB, F_DS, NULL,
     "bf16 working params and grads, fp32 master weights"},

    {"data_types", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL, "the gradients' type"},
    {"data_types.grad_accum_dtype", T_STRING, OFF(data_types.grad_accum_dtype), 0, NULL, NB, NB,
     F_DS, NULL,
     "fp32: under bf16 or fp16, keep the gradients, their accumulation over micro steps and "
     "their reductions in fp32 (twice the bytes); unset or the working precision's name: in it"},

    {"activation_checkpointing", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL,
     "activation checkpointing"},
    {"activation_checkpointing.enabled", T_BOOL, OFF(activation_checkpointing.enabled), 0,
     "false", NB, NB, 0, NULL, "recompute checkpointed blocks in the backward"},
    {"activation_checkpointing.every_n_blocks", T_INT, OFF(activation_checkpointing.every_n_blocks),
     0, "1", GE(1), NB, 0, NULL, "checkpoint blocks 0, n, 2n, ... (1: every block)"},

    {"fp8", T_SECTION, NO_STORE, 0, NULL, NB, NB, 0, NULL,
     "fp8 GEMMs in the blocks' linear layers with delayed scaling (Transformer Engine's "
     "DelayedScaling), emulated exactly on the CPU"},
    {"fp8.enabled", T_BOOL, OFF(fp8.enabled), 0, "false", NB, NB, 0, NULL,
     "quantise the blocks' GEMM inputs: activations and weights to E4M3, output gradients as "
     "fp8.format says"},
    {"fp8.format", T_FP8_FORMAT, OFF(fp8.format), 0, "hybrid", NB, NB, 0, NULL,
     "hybrid (output gradients in E5M2) or e4m3 (everything in E4M3)"},
    {"fp8.amax_history_len", T_INT, OFF(fp8.amax_history_len), 0, "1024", GE(1), LE(1 << 20), 0,
     NULL, "steps of amax history per tensor"},
    {"fp8.amax_compute_algo", T_FP8_AMAX, OFF(fp8.amax_compute_algo), 0, "max", NB, NB, 0, NULL,
     "the amax a scale comes from: max (of the history) or most_recent (the last step's)"},
    {"fp8.margin", T_INT, OFF(fp8.margin), 0, "0", GE(0), LE(64), 0, NULL,
     "scales are (fp8 max / amax) / 2^margin"},
};
/* clang-format on */

enum { N_FIELDS = sizeof fields / sizeof fields[0], WHERE = 512 };

static const char *const backend_names[] = {"auto", "mpi", "nccl"};
static const char *const algorithm_names[] = {"auto", "native", "ring"};
static const char *const device_names[] = {"auto", "cpu", "cuda"};
static const char *const family_names[] = {"gpt2", "llama"};
static const char *const sched_names[] = {[ZT_SCHED_NONE] = NULL,
                                          [ZT_SCHED_WARMUP_LR] = "WarmupLR",
                                          [ZT_SCHED_WARMUP_DECAY_LR] = "WarmupDecayLR",
                                          [ZT_SCHED_WARMUP_COSINE_LR] = "WarmupCosineLR"};
static const unsigned sched_masks[] = {[ZT_SCHED_NONE] = 0,
                                       [ZT_SCHED_WARMUP_LR] = F_WARMUP_LR,
                                       [ZT_SCHED_WARMUP_DECAY_LR] = F_WARMUP_DECAY,
                                       [ZT_SCHED_WARMUP_COSINE_LR] = F_WARMUP_COSINE};
static const char *const warmup_names[] = {[ZT_WARMUP_LOG] = "log", [ZT_WARMUP_LINEAR] = "linear"};
static const char *const schedule_names[] = {[PIPELINE_1F1B] = "1f1b", [PIPELINE_GPIPE] = "gpipe"};
static const char *const partition_names[] = {
    [PIPELINE_PARTITION_PARAMETERS] = "parameters", [PIPELINE_PARTITION_UNIFORM] = "uniform"};
/* Choices stored as an int enum, by name (any case): the fp8 section's,
 * by Transformer Engine's names, and run.on_nonfinite's. */
static const char *const fp8_format_names[] = {
    [FP8_RECIPE_HYBRID] = "hybrid", [FP8_RECIPE_E4M3] = "e4m3"};
static const char *const fp8_amax_names[] = {
    [FP8_AMAX_MAX] = "max", [FP8_AMAX_MOST_RECENT] = "most_recent"};
static const char *const offload_device_names[] = {
    [ZT_OFFLOAD_NONE] = "none", [ZT_OFFLOAD_CPU] = "cpu", [ZT_OFFLOAD_NVME] = "nvme"};
static const char *const nonfinite_names[] = {
    [ZT_NONFINITE_STOP] = "stop", [ZT_NONFINITE_SKIP] = "skip"};
static const struct fp8_choice {
    enum ftype type;
    const char *const *names;
    int n;
    const char *list; /* for the message */
} fp8_choices[] = {
    {T_FP8_FORMAT, fp8_format_names, 2, "hybrid, e4m3"},
    {T_FP8_AMAX, fp8_amax_names, 2, "max, most_recent"},
    {T_NONFINITE, nonfinite_names, 2, "stop, skip"},
};
#define N_SCHEDULES  ((int)(sizeof schedule_names / sizeof schedule_names[0]))
#define N_PARTITIONS ((int)(sizeof partition_names / sizeof partition_names[0]))

struct walk {
    struct zt_config *cfg;
    const struct yaml_tree_node *given[N_FIELDS]; /* value nodes, NULL when absent */
    struct config_notes ignored;                  /* DeepSpeed settings given and not acted on */
    struct config_notes no_effect;                /* settings given that the others make moot */
};

static zt_status nomem(void)
{
    return zt_error_set(ZT_ERR_NOMEM, "config: out of memory");
}

static void *field_ptr(struct zt_config *cfg, size_t off)
{
    return (char *)cfg + off;
}

static const void *field_cptr(const struct zt_config *cfg, size_t off)
{
    return (const char *)cfg + off;
}

static long field_find(const char *path)
{
    for (size_t i = 0; i < N_FIELDS; i++)
        if (strcmp(fields[i].path, path) == 0)
            return (long)i;
    return -1;
}

static const struct yaml_tree_node *given(const struct walk *w, const char *path)
{
    long i = field_find(path);
    ZT_ASSERT(i >= 0);
    return w->given[i];
}

/* Where to point a message about several keys: a node given by an override
 * if there is one (that is what the user just changed), else the first
 * given node among the paths, else the file. */
static void where_of_keys(const struct walk *w, char *buf, const char *a, const char *b,
                          const char *c)
{
    const char *paths[] = {a, b, c};
    const struct yaml_tree_node *pick = NULL;
    for (size_t i = 0; i < 3; i++) {
        const struct yaml_tree_node *n = paths[i] ? given(w, paths[i]) : NULL;
        if (n && (!pick || (n->line == 0 && pick->line != 0)))
            pick = n;
    }
    if (pick)
        yaml_tree_where(pick, buf, WHERE);
    else
        snprintf(buf, WHERE, "%s", w->cfg->source);
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* ---- scalar syntax ------------------------------------------------------ */

static int is_digits(const char *s, size_t *n)
{
    *n = 0;
    while (isdigit((unsigned char)s[*n]))
        ++*n;
    return *n > 0;
}

/* [+-]?digits */
static int is_integer_syntax(const char *s)
{
    size_t n;
    if (*s == '+' || *s == '-')
        s++;
    return is_digits(s, &n) && s[n] == '\0';
}

/* [+-]? (digits [. digits?] | . digits) ([eE] [+-]? digits)?  — strtod also
 * takes "inf", "nan" and hex floats, which a config should not. */
static int is_number_syntax(const char *s)
{
    size_t a = 0, b = 0, e;
    if (*s == '+' || *s == '-')
        s++;
    is_digits(s, &a);
    s += a;
    if (*s == '.')
        is_digits(++s, &b);
    s += b;
    if (a + b == 0)
        return 0;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-')
            s++;
        if (!is_digits(s, &e))
            return 0;
        s += e;
    }
    return *s == '\0';
}

enum parsed { P_OK, P_SYNTAX, P_RANGE };

/* Integers are plain decimals, or numbers like 5e8 whose value is an exact
 * integer (DeepSpeed configs write bucket sizes that way). */
static enum parsed parse_integer(const struct yaml_tree_node *v, long long *out)
{
    if (v->kind != YAML_TREE_SCALAR || v->quoted)
        return P_SYNTAX;
    errno = 0;
    if (is_integer_syntax(v->text)) {
        *out = strtoll(v->text, NULL, 10);
        return errno == ERANGE ? P_RANGE : P_OK;
    }
    if (!is_number_syntax(v->text))
        return P_SYNTAX;
    double d = strtod(v->text, NULL);
    if (d != floor(d))
        return P_SYNTAX;
    if (!(fabs(d) <= 9007199254740992.0)) /* 2^53: beyond it doubles skip integers */
        return P_RANGE;
    *out = (long long)d;
    return P_OK;
}

static enum parsed parse_number(const struct yaml_tree_node *v, double *out)
{
    if (v->kind != YAML_TREE_SCALAR || v->quoted || !is_number_syntax(v->text))
        return P_SYNTAX;
    *out = strtod(v->text, NULL);
    return isfinite(*out) ? P_OK : P_RANGE;
}

/* Defined here, beside the data keys' rows, as it is what they mean. */
int config_has_validation(const struct zt_config *cfg)
{
    return cfg->data.n_val > 0 || cfg->data.val_fraction > 0.0;
}

/* Here too, beside the names the pipeline keys take. */
const char *config_pipeline_schedule_name(enum pipeline_schedule s)
{
    ZT_ASSERT((int)s >= 0 && (int)s < N_SCHEDULES);
    return schedule_names[s];
}

const char *config_pipeline_partition_name(enum pipeline_partition p)
{
    ZT_ASSERT((int)p >= 0 && (int)p < N_PARTITIONS);
    return partition_names[p];
}

/* ---- leaf values -------------------------------------------------------- */

static zt_status type_error(const char *where, const char *path, const char *expected,
                            const struct yaml_tree_node *v)
{
    char got[128];
    yaml_tree_describe(v, got, sizeof got);
    return zt_error_set(ZT_ERR_CONFIG, "%s: %s: expected %s, got %s", where, path, expected, got);
}

static zt_status parsed_error(enum parsed p, const char *where, const char *path,
                              const char *expected, const struct yaml_tree_node *v)
{
    if (p == P_RANGE)
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s: %s is out of range", where, path, v->text);
    return type_error(where, path, expected, v);
}

static int bound_ok(struct bound b, double x)
{
    switch (b.kind) {
    case '[':
        return x >= b.v;
    case '(':
        return x > b.v;
    case ']':
        return x <= b.v;
    case ')':
        return x < b.v;
    default:
        return 1;
    }
}

static zt_status check_range(const char *where, const char *path, const struct field *f,
                             const struct yaml_tree_node *v, double x)
{
    if (bound_ok(f->lo, x) && bound_ok(f->hi, x))
        return ZT_OK;
    const char *got = v->text;
    if (f->lo.kind && f->hi.kind && f->type != T_DOUBLE && f->type != T_BETAS && f->type != T_EPS)
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s: must be between %.15g and %.15g, got %s", where,
                            path, f->lo.v, f->hi.v, got);
    if (f->lo.kind && f->hi.kind)
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s: must be in %c%.15g, %.15g%c, got %s", where,
                            path, f->lo.kind, f->lo.v, f->hi.v, f->hi.kind, got);
    struct bound b = f->lo.kind ? f->lo : f->hi;
    const char *op = b.kind == '[' ? ">=" : b.kind == '(' ? ">" : b.kind == ']' ? "<=" : "<";
    return zt_error_set(ZT_ERR_CONFIG, "%s: %s: must be %s %.15g, got %s", where, path, op, b.v,
                        got);
}

static zt_status leaf_integer(struct walk *w, const struct field *f, const struct yaml_tree_node *v,
                              const char *where)
{
    long long x = 0;
    enum parsed p = parse_integer(v, &x);
    if (p == P_OK && f->type == T_INT && (x < INT_MIN || x > INT_MAX))
        p = P_RANGE;
    if (p == P_OK && (x < LONG_MIN || x > LONG_MAX))
        p = P_RANGE;
    if (p != P_OK)
        return parsed_error(p, where, f->path, "an integer", v);
    ZT_TRY(check_range(where, f->path, f, v, (double)x));
    if (x != 0 && (f->flags & F_UNSUPPORTED_NONZERO))
        return zt_error_set(ZT_ERR_UNSUPPORTED, "%s: %s: not supported yet: %s %lld", where,
                            f->path, f->what, x);
    if (f->off == NO_STORE)
        return ZT_OK;
    if (f->type == T_INT)
        *(int *)field_ptr(w->cfg, f->off) = (int)x;
    else
        *(long *)field_ptr(w->cfg, f->off) = (long)x;
    return ZT_OK;
}

static zt_status leaf_u64(struct walk *w, const struct field *f, const struct yaml_tree_node *v,
                          const char *where)
{
    long long x = 0;
    enum parsed p = P_OK;
    uint64_t u = 0;
    if (v->kind == YAML_TREE_SCALAR && !v->quoted && is_integer_syntax(v->text) &&
        v->text[0] != '-') {
        errno = 0;
        unsigned long long ull = strtoull(v->text, NULL, 10);
        p = errno == ERANGE ? P_RANGE : P_OK;
        u = (uint64_t)ull;
    } else {
        p = parse_integer(v, &x);
        if (p == P_OK && x < 0)
            p = P_RANGE;
        u = (uint64_t)x;
    }
    if (p != P_OK)
        return parsed_error(p, where, f->path, "a non-negative integer", v);
    *(uint64_t *)field_ptr(w->cfg, f->off) = u;
    return ZT_OK;
}

static zt_status leaf_double(struct walk *w, const struct field *f, const struct yaml_tree_node *v,
                             const char *where)
{
    double x = 0;
    enum parsed p = parse_number(v, &x);
    if (p != P_OK)
        return parsed_error(p, where, f->path, "a number", v);
    ZT_TRY(check_range(where, f->path, f, v, x));
    if (x != 0 && (f->flags & F_UNSUPPORTED_NONZERO))
        return zt_error_set(ZT_ERR_UNSUPPORTED, "%s: %s: not supported yet: %s (got %g)", where,
                            f->path, f->what, x);
    if (f->off != NO_STORE)
        *(double *)field_ptr(w->cfg, f->off) = x;
    return ZT_OK;
}

static zt_status leaf_bool(struct walk *w, const struct field *f, const struct yaml_tree_node *v,
                           const char *where)
{
    int b = 0;
    if (!yaml_tree_bool(v, &b))
        return type_error(where, f->path, "a boolean (true or false)", v);
    if (b && (f->flags & F_UNSUPPORTED_TRUE))
        return zt_error_set(ZT_ERR_UNSUPPORTED, "%s: %s: not supported yet: %s", where, f->path,
                            f->what);
    if (f->off != NO_STORE)
        *(int *)field_ptr(w->cfg, f->off) = b;
    return ZT_OK;
}

/* The text of a non-empty scalar, for string-valued keys. */
static zt_status scalar_text(const char *where, const char *path, const struct yaml_tree_node *v,
                             const char *expected, const char **out)
{
    if (v->kind != YAML_TREE_SCALAR || yaml_tree_is_null(v))
        return type_error(where, path, expected, v);
    if (v->text[0] == '\0')
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s: must not be empty", where, path);
    *out = v->text;
    return ZT_OK;
}

static zt_status store_string(struct walk *w, const struct field *f, const char *s)
{
    char **slot = field_ptr(w->cfg, f->off);
    char *copy = dup_str(s);
    if (!copy)
        return nomem();
    free(*slot);
    *slot = copy;
    return ZT_OK;
}

static zt_status leaf_string(struct walk *w, const struct field *f, const struct yaml_tree_node *v,
                             const char *where)
{
    const char *s;
    if ((f->flags & F_EMPTY_OK) && v->kind == YAML_TREE_SCALAR && v->text[0] == '\0' &&
        !yaml_tree_is_null(v))
        return store_string(w, f, "");
    ZT_TRY(scalar_text(where, f->path, v, "a string", &s));
    if (f->flags & F_UNSUPPORTED_GIVEN)
        return zt_error_set(ZT_ERR_UNSUPPORTED, "%s: %s: not supported yet: %s", where, f->path,
                            f->what);
    return store_string(w, f, s);
}

static void free_paths(char **paths, int n)
{
    for (int i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
}

static zt_status leaf_paths(struct walk *w, const struct field *f, const struct yaml_tree_node *v,
                            const char *where)
{
    const struct yaml_tree_node *const *items = (const struct yaml_tree_node *const *)&v;
    size_t n = 1;
    if (v->kind == YAML_TREE_SEQUENCE) {
        items = (const struct yaml_tree_node *const *)v->items;
        n = v->n;
    }
    if (n == 0)
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s: must name at least one path", where, f->path);
    if (n > INT_MAX / 2)
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s: too many paths", where, f->path);
    char **paths = calloc(n, sizeof *paths);
    if (!paths)
        return nomem();
    for (size_t i = 0; i < n; i++) {
        char item_where[WHERE];
        const char *s;
        yaml_tree_where(items[i], item_where, sizeof item_where);
        zt_status st = scalar_text(item_where, f->path, items[i], "a path or a list of paths", &s);
        if (st == ZT_OK && !(paths[i] = dup_str(s)))
            st = nomem();
        if (st != ZT_OK) {
            free_paths(paths, (int)n);
            return st;
        }
    }
    char ***slot = field_ptr(w->cfg, f->off);
    int *count = field_ptr(w->cfg, f->off2);
    free_paths(*slot, *count);
    *slot = paths;
    *count = (int)n;
    return ZT_OK;
}

static zt_status leaf_betas(struct walk *w, const struct field *f, const struct yaml_tree_node *v,
                            const char *where)
{
    if (v->kind != YAML_TREE_SEQUENCE || v->n != 2)
        return type_error(where, f->path, "a list of two numbers [beta1, beta2]", v);
    double b[2];
    for (int i = 0; i < 2; i++) {
        char item_where[WHERE], item_path[128];
        yaml_tree_where(v->items[i], item_where, sizeof item_where);
        snprintf(item_path, sizeof item_path, "%s[%d]", f->path, i);
        enum parsed p = parse_number(v->items[i], &b[i]);
        if (p != P_OK)
            return parsed_error(p, item_where, item_path, "a number", v->items[i]);
        ZT_TRY(check_range(item_where, item_path, f, v->items[i], b[i]));
    }
    *(double *)field_ptr(w->cfg, f->off) = b[0];
    *(double *)field_ptr(w->cfg, f->off2) = b[1];
    return ZT_OK;
}

static zt_status leaf_eps(struct walk *w, const struct field *f, const struct yaml_tree_node *v,
                          const char *where)
{
    if (v->kind == YAML_TREE_SCALAR) {
        ZT_TRY(leaf_double(w, f, v, where));
        *(double *)field_ptr(w->cfg, f->off2) = 0.0;
        return ZT_OK;
    }
    if (v->kind != YAML_TREE_SEQUENCE || v->n != 2)
        return type_error(where, f->path, "a number, or Adafactor's pair [eps1, eps2]", v);
    return leaf_betas(w, f, v, where);
}

/* Index of `s` among names[0..n) (NULL entries skipped), or -1. */
static int name_index(const char *const *names, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(names[i], s) == 0)
            return i;
    return -1;
}

static int same_ignoring_case(const char *a, const char *b)
{
    for (; *a && tolower((unsigned char)*a) == tolower((unsigned char)*b); a++, b++)
        ;
    return *a == '\0' && *b == '\0';
}

static const struct fp8_choice *fp8_choice_of(enum ftype t)
{
    for (size_t i = 0; i < sizeof fp8_choices / sizeof fp8_choices[0]; i++)
        if (fp8_choices[i].type == t)
            return &fp8_choices[i];
    ZT_ASSERT(0 && "not an fp8 choice");
    return NULL;
}

/* An fp8 choice's name into its enum's value (an int field). */
static zt_status leaf_fp8_choice(struct walk *w, const struct field *f,
                                 const struct yaml_tree_node *v, const char *where)
{
    const struct fp8_choice *c = fp8_choice_of(f->type);
    const char *s;
    ZT_TRY(scalar_text(where, f->path, v, "a name", &s));
    for (int i = 0; i < c->n; i++) {
        if (same_ignoring_case(s, c->names[i])) {
            *(int *)field_ptr(w->cfg, f->off) = i;
            return ZT_OK;
        }
    }
    return zt_error_set(ZT_ERR_CONFIG, "%s: %s: \"%s\" is not one of %s", where, f->path, s,
                        c->list);
}

static zt_status leaf_choice(struct walk *w, const struct field *f, const struct yaml_tree_node *v,
                             const char *where)
{
    const char *s;
    ZT_TRY(scalar_text(where, f->path, v, "a name", &s));
    if (f->type == T_ALGO) {
        if (name_index(algorithm_names, 3, s) < 0)
            return zt_error_set(ZT_ERR_CONFIG, "%s: %s: expected auto, native or ring, got '%s'",
                                where, f->path, s);
        return store_string(w, f, s);
    }
    if (f->type == T_DEVICE) {
        if (name_index(device_names, 3, s) < 0)
            return zt_error_set(ZT_ERR_CONFIG, "%s: %s: expected auto, cpu or cuda, got '%s'",
                                where, f->path, s);
        return store_string(w, f, s);
    }
    if (f->type == T_BACKEND) {
        if (name_index(backend_names, 3, s) < 0)
            return zt_error_set(ZT_ERR_CONFIG, "%s: %s: expected auto, mpi or nccl, got '%s'",
                                where, f->path, s);
        return store_string(w, f, s);
    }
    if (f->type == T_OPTIMIZER) {
        /* DeepSpeed compares optimizer names in lower case. */
        const struct optimizer_ops *opt = optimizer_find(s);
        if (!opt) {
            char known[256];
            optimizer_list_names(known, sizeof known);
            return zt_error_set(ZT_ERR_UNSUPPORTED,
                                "%s: %s: not supported yet: optimizer '%s' (supported: %s)", where,
                                f->path, s, known);
        }
        return store_string(w, f, same_ignoring_case(s, opt->name) ? opt->name : opt->alias);
    }
    if (f->type == T_PIPE_SCHEDULE || f->type == T_PIPE_PARTITION) {
        /* DeepSpeed lower-cases partition_method; both keys take any case. */
        const int schedule = f->type == T_PIPE_SCHEDULE;
        const char *const *names = schedule ? schedule_names : partition_names;
        const int n = schedule ? N_SCHEDULES : N_PARTITIONS;
        int i = 0;
        while (i < n && !same_ignoring_case(s, names[i]))
            i++;
        if (i == n)
            return zt_error_set(ZT_ERR_CONFIG, "%s: %s: expected %s or %s, got '%s'", where,
                                f->path, names[0], names[1], s);
        if (schedule)
            *(enum pipeline_schedule *)field_ptr(w->cfg, f->off) = (enum pipeline_schedule)i;
        else
            *(enum pipeline_partition *)field_ptr(w->cfg, f->off) = (enum pipeline_partition)i;
        return ZT_OK;
    }
    if (f->type == T_WARMUP) {
        int i = name_index(warmup_names, 2, s);
        if (i < 0)
            return zt_error_set(ZT_ERR_CONFIG, "%s: %s: expected log or linear, got '%s'", where,
                                f->path, s);
        *(enum zt_warmup_type *)field_ptr(w->cfg, f->off) = (enum zt_warmup_type)i;
        return ZT_OK;
    }
    int i = name_index(sched_names, 4, s);
    if (i < 0 && (strcmp(s, "OneCycle") == 0 || strcmp(s, "LRRangeTest") == 0))
        return zt_error_set(ZT_ERR_UNSUPPORTED, "%s: %s: not supported yet: scheduler '%s'", where,
                            f->path, s);
    if (i < 0)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: %s: expected WarmupLR, WarmupDecayLR or WarmupCosineLR, got '%s'",
                            where, f->path, s);
    *(enum zt_sched_type *)field_ptr(w->cfg, f->off) = (enum zt_sched_type)i;
    return ZT_OK;
}

/* DeepSpeed's offload devices. */
static zt_status leaf_offload_device(struct walk *w, const struct field *f,
                                     const struct yaml_tree_node *v, const char *where)
{
    const char *s;
    ZT_TRY(scalar_text(where, f->path, v, "none, cpu or nvme", &s));
    int i = name_index(offload_device_names, 3, s);
    if (i < 0)
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s: expected none, cpu or nvme, got '%s'", where,
                            f->path, s);
    *(enum zt_offload_device *)field_ptr(w->cfg, f->off) = (enum zt_offload_device)i;
    return ZT_OK;
}

static zt_status leaf_family(struct walk *w, const struct field *f, const struct yaml_tree_node *v,
                             const char *where)
{
    const char *s;
    ZT_TRY(scalar_text(where, f->path, v, "a model family's name", &s));
    if (!model_family_find(s))
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s: expected gpt2 or llama, got '%s'", where,
                            f->path, s);
    return store_string(w, f, s);
}

/* DeepSpeed's own keys (everything outside our sections). The pipeline
 * section's name is DeepSpeed's, but the keys with rows here are ours, and
 * the HF Trainer fills none of them with "auto". */
static int is_deepspeed_key(const char *path)
{
    static const char *const ours[] = {
        "model.", "data.", "run.", "comm.", "checkpoint.", "tensor_parallel.", "pipeline."};
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
        if (strncmp(path, ours[i], strlen(ours[i])) == 0)
            return 0;
    return 1;
}

/* The keys the HF Trainer's DeepSpeed integration may write as "auto". */
static int may_be_auto(enum ftype t)
{
    return t == T_INT || t == T_LONG || t == T_U64 || t == T_DOUBLE || t == T_BETAS || t == T_EPS ||
           t == T_BOOL;
}

static zt_status parse_leaf(struct walk *w, const struct field *f, const struct yaml_tree_node *v)
{
    char where[WHERE];
    yaml_tree_where(v, where, sizeof where);
    if (may_be_auto(f->type) && is_deepspeed_key(f->path) && v->kind == YAML_TREE_SCALAR &&
        strcmp(v->text, "auto") == 0)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: %s: \"auto\" is resolved by the HF Trainer and must be given a "
                            "value here",
                            where, f->path);
    switch (f->type) {
    case T_INT:
    case T_LONG:
        return leaf_integer(w, f, v, where);
    case T_U64:
        return leaf_u64(w, f, v, where);
    case T_DOUBLE:
        return leaf_double(w, f, v, where);
    case T_BOOL:
        return leaf_bool(w, f, v, where);
    case T_STRING:
        return leaf_string(w, f, v, where);
    case T_PATHS:
        return leaf_paths(w, f, v, where);
    case T_BETAS:
        return leaf_betas(w, f, v, where);
    case T_EPS:
        return leaf_eps(w, f, v, where);
    case T_BACKEND:
    case T_ALGO:
    case T_DEVICE:
    case T_OPTIMIZER:
    case T_SCHED:
    case T_WARMUP:
    case T_PIPE_SCHEDULE:
    case T_PIPE_PARTITION:
        return leaf_choice(w, f, v, where);
    case T_FP8_FORMAT:
    case T_FP8_AMAX:
    case T_NONFINITE:
        return leaf_fp8_choice(w, f, v, where);
    case T_FAMILY:
        return leaf_family(w, f, v, where);
    case T_OFFLOAD_DEVICE:
        return leaf_offload_device(w, f, v, where);
    case T_SECTION:
        break;
    }
    ZT_ASSERT(0 && "sections are walked, not parsed");
    return ZT_ERR_INTERNAL;
}

/* ---- defaults ------------------------------------------------------------ */

/* Defaults go through the same parser as given values, so a default that
 * broke its own row's rules would show up here, not in a run. */
static zt_status apply_default(struct walk *w, const struct field *f)
{
    struct yaml_tree_node scalar = {.kind = YAML_TREE_SCALAR, .origin = "schema default"};
    struct yaml_tree *t = NULL;
    const struct yaml_tree_node *v = &scalar;
    if (f->def[0] == '[') {
        ZT_TRY(yaml_tree_load_string("schema default", f->def, strlen(f->def), &t));
        v = t->root;
    } else {
        scalar.text = (char *)f->def;
        scalar.quoted = f->def[0] == '\0'; /* a default "" is the empty string, not null */
    }
    zt_status s = parse_leaf(w, f, v);
    yaml_tree_free(t);
    ZT_ASSERT(s == ZT_OK || s == ZT_ERR_NOMEM);
    return s;
}

static zt_status apply_defaults(struct walk *w)
{
    for (size_t i = 0; i < N_FIELDS; i++)
        if (fields[i].def && fields[i].off != NO_STORE)
            ZT_TRY(apply_default(w, &fields[i]));
    return ZT_OK;
}

/* ---- the walk ------------------------------------------------------------ */

/* Levenshtein distance, capped: keys longer than 63 bytes are "far". */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64], prev;
    if (la > 63 || lb > 63)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        prev = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev + (a[i - 1] != b[j - 1]);
            size_t del = row[j] + 1, ins = row[j - 1] + 1;
            prev = row[j];
            row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    }
    return row[lb];
}

/* Whether `a` can be had from `b` by deleting characters. */
static int is_subsequence(const char *a, const char *b)
{
    for (; *a && *b; b++)
        if (*a == *b)
            a++;
    return *a == '\0';
}

/* The last component of `path` if it is a direct child of `prefix` (""
 * for the top level), else NULL. */
static const char *child_of(const char *path, const char *prefix)
{
    size_t lp = strlen(prefix);
    if (lp) {
        if (strncmp(path, prefix, lp) != 0 || path[lp] != '.')
            return NULL;
        path += lp + 1;
    }
    return strchr(path, '.') ? NULL : path;
}

static const char *child_name(size_t i, const char *prefix)
{
    return child_of(fields[i].path, prefix);
}

/* Comma-separated names of the children of `prefix` whose flags contain
 * `mask` (0: all), into buf. */
static void child_list(const char *prefix, unsigned mask, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_FIELDS && used < size; i++) {
        const char *name = child_name(i, prefix);
        if (name && (!mask || (fields[i].flags & mask)))
            used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", name);
    }
}

static int close_enough(size_t d, const char *name)
{
    size_t limit = strlen(name) / 3 > 2 ? strlen(name) / 3 : 2;
    return d <= limit;
}

/* The i-th key path that may be given: the schema's rows, then DeepSpeed's
 * keys that are accepted without a row; NULL past the last. */
static const char *known_path(size_t i)
{
    return i < N_FIELDS ? fields[i].path : config_deepspeed_path(i - N_FIELDS);
}

/* The child of `prefix` nearest to `key` by edit distance, if near enough,
 * among every key that may be given. A name the key abbreviates
 * ("warmup_steps" for "warmup_num_steps") wins over a nearer one, as the
 * likelier intent. */
static const char *suggestion(const char *key, const char *prefix)
{
    const char *best = NULL, *abbreviated = NULL, *path;
    size_t best_d = SIZE_MAX, abbreviated_d = SIZE_MAX;
    for (size_t i = 0; (path = known_path(i)); i++) {
        const char *name = child_of(path, prefix);
        size_t d = name ? edit_distance(key, name) : SIZE_MAX;
        if (d == SIZE_MAX || !close_enough(d, name))
            continue;
        if (d < best_d) {
            best_d = d;
            best = name;
        }
        if (d < abbreviated_d && is_subsequence(key, name)) {
            abbreviated_d = d;
            abbreviated = name;
        }
    }
    return abbreviated ? abbreviated : best;
}

static zt_status unknown_key(const struct yaml_tree_node *key, const char *prefix)
{
    char where[WHERE], in[160] = "";
    yaml_tree_where(key, where, sizeof where);
    if (prefix[0])
        snprintf(in, sizeof in, " in %s", prefix);
    const char *best = suggestion(key->text, prefix);
    if (best)
        return zt_error_set(ZT_ERR_CONFIG, "%s: unknown key '%s'%s (did you mean '%s'?)", where,
                            key->text, in, best);
    char valid[1024];
    child_list(prefix, 0, valid, sizeof valid);
    return zt_error_set(ZT_ERR_CONFIG, "%s: unknown key '%s'%s (valid keys: %s)", where, key->text,
                        in, valid);
}

static zt_status walk_map(struct walk *w, const struct yaml_tree_node *map, const char *prefix)
{
    for (size_t i = 0; i < map->n; i++) {
        const struct yaml_tree_node *key = map->keys[i], *value = map->items[i];
        char path[256];
        int len = snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", key->text);
        long idx = len > 0 && (size_t)len < sizeof path ? field_find(path) : -1;
        if (idx < 0) {
            int known = 0;
            ZT_TRY(config_deepspeed_accept(path, value, &w->ignored, &known));
            if (!known)
                return unknown_key(key, prefix);
            continue;
        }
        if (yaml_tree_is_null(value))
            continue;
        w->given[idx] = value;
        if (fields[idx].type != T_SECTION) {
            ZT_TRY(parse_leaf(w, &fields[idx], value));
        } else if (value->kind != YAML_TREE_MAP) {
            char where[WHERE];
            yaml_tree_where(value, where, sizeof where);
            return type_error(where, path, "a mapping", value);
        } else {
            ZT_TRY(walk_map(w, value, path));
        }
    }
    return ZT_OK;
}

/* ---- rules across keys ----------------------------------------------------- */

/* One model key from model.hf_config, checked against its row's type and
 * range as a given value would be. */
static zt_status set_from_hf(struct walk *w, const char *file, const struct config_hf_value *v)
{
    const long i = field_find(v->path);
    ZT_ASSERT(i >= 0);
    const struct field *f = &fields[i];
    const int integral = f->type == T_INT || f->type == T_BOOL;
    if ((integral && v->value != floor(v->value)) || (f->type == T_BOOL && v->value > 1) ||
        !bound_ok(f->lo, v->value) || !bound_ok(f->hi, v->value) || v->value > INT_MAX)
        return zt_error_set(ZT_ERR_CONFIG, "model.hf_config %s: %s %.17g is not a valid %s (%s)",
                            file, v->hf_key, v->value, f->path, f->doc);
    if (f->type == T_DOUBLE)
        *(double *)field_ptr(w->cfg, f->off) = v->value;
    else
        *(int *)field_ptr(w->cfg, f->off) = (int)v->value;
    return ZT_OK;
}

/* model.hf_config: the family and every model key the file gives that the
 * config does not set itself (keys in `model` win: they are how a user
 * adjusts a downloaded shape, e.g. a shorter block_size). */
static zt_status apply_hf_config(struct walk *w)
{
    struct zt_config *c = w->cfg;
    struct config_hf hf;
    char where[WHERE];
    if (!c->model.hf_config)
        return ZT_OK;
    ZT_TRY(config_hf_read(c->model.hf_config, &hf));
    if (given(w, "model.family") && strcmp(c->model.family, hf.family) != 0) {
        where_of_keys(w, where, "model.family", "model.hf_config", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: model.family: %s, but model.hf_config %s describes a %s model",
                            where, c->model.family, c->model.hf_config, hf.family);
    }
    if (!given(w, "model.family"))
        ZT_TRY(store_string(w, &fields[field_find("model.family")], hf.family));
    for (int k = 0; k < hf.n; k++)
        if (!given(w, hf.items[k].path))
            ZT_TRY(set_from_hf(w, c->model.hf_config, &hf.items[k]));
    /* A window at least the sequence is full attention, which is what the
     * family computes; a shorter one would be another model. */
    const int seq_len = given(w, "data.seq_len") ? c->data.seq_len : c->model.block_size;
    if (hf.sliding_window > 0 && hf.sliding_window < (uint64_t)seq_len) {
        where_of_keys(w, where, "model.hf_config", "data.seq_len", NULL);
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "%s: model.hf_config %s: sliding_window %llu is shorter than "
                            "data.seq_len %d: sliding-window attention is not implemented; set "
                            "data.seq_len (and model.block_size) to at most %llu, where the "
                            "window is full attention",
                            where, c->model.hf_config, (unsigned long long)hf.sliding_window,
                            seq_len, (unsigned long long)hf.sliding_window);
    }
    return ZT_OK;
}

/* Keys of another family than the configured one would be ignored: name
 * them instead. */
static zt_status check_family_keys(const struct walk *w)
{
    const char *family = w->cfg->model.family;
    for (size_t i = 0; i < N_FIELDS; i++) {
        if (!w->given[i] || !(fields[i].flags & F_LLAMA) || strcmp(family, "llama") == 0)
            continue;
        char where[WHERE];
        yaml_tree_where(w->given[i], where, sizeof where);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: %s: a key of model.family llama, but the model is %s (set "
                            "model.family: llama, or remove the key)",
                            where, fields[i].path, family);
    }
    return ZT_OK;
}

/* Llama's MLP width when not given: Meta's rule, 2/3 of 4 n_embd rounded
 * up to a multiple of 256 (11008 for n_embd 4096). */
static int llama_default_intermediate(int n_embd)
{
    const long hidden = 2L * 4L * n_embd / 3L;
    return (int)((hidden + 255) / 256 * 256);
}

static void resolve_dependent_defaults(struct walk *w)
{
    struct zt_config *c = w->cfg;
    if (c->model.n_kv_head == 0)
        c->model.n_kv_head = c->model.n_head;
    if (c->model.intermediate_size == 0)
        c->model.intermediate_size = llama_default_intermediate(c->model.n_embd);
    if (!given(w, "data.seq_len"))
        c->data.seq_len = c->model.block_size;
    if (!given(w, "scheduler.params.warmup_max_lr"))
        c->scheduler.warmup_max_lr = c->optimizer.lr;
    if (!given(w, "scheduler.params.total_num_steps")) {
        c->scheduler.total_num_steps = c->run.steps;
        c->scheduler.total_from_steps = 1;
    }
    /* The betas default to the optimizer's own ([0.9, 0.99] for Lion, no
     * first moment for Adafactor), and so does a pair eps. */
    const struct optimizer_ops *opt = optimizer_find(c->optimizer.type);
    if (!opt)
        return;
    if (!given(w, "optimizer.params.betas") && !given(w, "optimizer.params.beta1")) {
        c->optimizer.beta1 = opt->default_beta1;
        c->optimizer.beta2 = opt->default_beta2;
    }
    if (!given(w, "optimizer.params.eps") && optimizer_reads(opt, OPT_HP_EPS2)) {
        c->optimizer.eps = opt->default_eps;
        c->optimizer.eps2 = opt->default_eps2;
    }
}

/* Whether optimizer `o` reads the key at `path` under optimizer.params:
 * the learning rate always; `betas` when it has both betas, `beta1` when
 * it has only the first (Adafactor); the rest by their hyperparameter's
 * name. Both the check of given keys and the YAML writer ask this. */
static int optimizer_reads_key(const struct optimizer_ops *o, const char *path)
{
    static const char prefix[] = "optimizer.params.";
    const char *key = path + sizeof prefix - 1;
    if (strncmp(path, prefix, sizeof prefix - 1) != 0 || strcmp(key, "lr") == 0)
        return 1;
    if (strcmp(key, "betas") == 0)
        return optimizer_reads(o, OPT_HP_BETA1) && optimizer_reads(o, OPT_HP_BETA2);
    if (strcmp(key, "beta1") == 0)
        return optimizer_reads(o, OPT_HP_BETA1) && !optimizer_reads(o, OPT_HP_BETA2);
    for (int h = 0; h < OPT_HP_COUNT; h++)
        if (strcmp(key, optimizer_hparam_name((enum optimizer_hparam)h)) == 0)
            return optimizer_reads(o, (enum optimizer_hparam)h);
    return 1;
}

/* The keys under optimizer.params that `o` reads, for messages. */
static void optimizer_key_list(const struct optimizer_ops *o, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_FIELDS && at < n; i++) {
        const char *path = fields[i].path;
        if (child_name(i, "optimizer.params") && optimizer_reads_key(o, path)) {
            int wrote = snprintf(buf + at, n - at, "%s%s", at ? ", " : "",
                                 path + sizeof "optimizer.params." - 1);
            at += wrote > 0 ? (size_t)wrote : 0;
        }
    }
}

/* Every key given under optimizer.params is one the optimizer reads (as
 * PyTorch refuses an unexpected keyword): a momentum given to AdamW would
 * otherwise be silently ignored. One message names all of them. */
static zt_status check_optimizer_keys(const struct walk *w, const struct optimizer_ops *o)
{
    char unused[512] = "", where[WHERE] = "";
    size_t at = 0;
    for (size_t i = 0; i < N_FIELDS && at < sizeof unused; i++) {
        if (!w->given[i] || !child_name(i, "optimizer.params") ||
            optimizer_reads_key(o, fields[i].path))
            continue;
        if (!where[0])
            yaml_tree_where(w->given[i], where, sizeof where);
        int wrote = snprintf(unused + at, sizeof unused - at, "%s%s", at ? ", " : "",
                             fields[i].path + sizeof "optimizer.params." - 1);
        at += wrote > 0 ? (size_t)wrote : 0;
    }
    if (!unused[0])
        return ZT_OK;
    char keys[512];
    optimizer_key_list(o, keys, sizeof keys);
    return zt_error_set(ZT_ERR_CONFIG,
                        "%s: optimizer.params: %s does not use %s (its parameters: %s); remove "
                        "them, or give them null (--set optimizer.params.KEY=null)",
                        where, o->name, unused, keys);
}

/* Adafactor's rules, as Hugging Face's implementation states them: eps is
 * a pair, and the relative step computes its own learning rate. */
static zt_status check_adafactor(const struct walk *w, const struct optimizer_ops *o)
{
    const struct zt_config *c = w->cfg;
    char where[WHERE];
    if (!optimizer_reads(o, OPT_HP_EPS2))
        return ZT_OK;
    if (c->optimizer.eps2 == 0.0) {
        where_of_keys(w, where, "optimizer.params.eps", NULL, NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: optimizer.params.eps: %s takes a pair [eps1, eps2] (added to the "
                            "squared gradient; floor of the parameter scale), got %g",
                            where, o->name, c->optimizer.eps);
    }
    if (c->optimizer.relative_step && given(w, "optimizer.params.lr")) {
        where_of_keys(w, where, "optimizer.params.relative_step", "optimizer.params.lr", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: optimizer.params.relative_step: computes the learning rate; "
                            "remove optimizer.params.lr or set relative_step: false",
                            where);
    }
    if (c->optimizer.relative_step && c->scheduler.type != ZT_SCHED_NONE) {
        where_of_keys(w, where, "optimizer.params.relative_step", "scheduler.type", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: optimizer.params.relative_step: computes the learning rate, so "
                            "a scheduler would be ignored; remove one of them",
                            where);
    }
    if (c->optimizer.warmup_init && !c->optimizer.relative_step) {
        where_of_keys(w, where, "optimizer.params.warmup_init", "optimizer.params.relative_step",
                      NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: optimizer.params.warmup_init: needs relative_step: true", where);
    }
    return ZT_OK;
}

/* PyTorch's rule: Nesterov momentum needs a momentum and no dampening. */
static zt_status check_optimizer(const struct walk *w)
{
    const struct zt_config *c = w->cfg;
    const struct optimizer_ops *o = optimizer_find(c->optimizer.type);
    char where[WHERE];
    ZT_ASSERT(o); /* the type was checked when parsed */
    ZT_TRY(check_optimizer_keys(w, o));
    if (!optimizer_reads(o, OPT_HP_EPS2) && c->optimizer.eps2 != 0.0) {
        where_of_keys(w, where, "optimizer.params.eps", NULL, NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: optimizer.params.eps: %s takes one number, got a pair", where,
                            o->name);
    }
    ZT_TRY(check_adafactor(w, o));
    if (o->fused_backward && c->gradient_accumulation_steps > 1) {
        where_of_keys(w, where, "gradient_accumulation_steps", "optimizer.type", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: gradient_accumulation_steps: %s updates each unit during the "
                            "backward and keeps no gradient to accumulate into: it must be 1, "
                            "got %d (raise train_micro_batch_size_per_gpu instead)",
                            where, o->name, c->gradient_accumulation_steps);
    }
    if (c->optimizer.nesterov && (c->optimizer.momentum <= 0 || c->optimizer.dampening != 0)) {
        where_of_keys(w, where, "optimizer.params.nesterov", "optimizer.params.momentum",
                      "optimizer.params.dampening");
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: optimizer.params.nesterov: needs momentum > 0 and dampening 0, "
                            "got momentum %g, dampening %g",
                            where, c->optimizer.momentum, c->optimizer.dampening);
    }
    return ZT_OK;
}

static zt_status check_model_and_data(const struct walk *w)
{
    const struct zt_config *c = w->cfg;
    char where[WHERE];
    if (c->data.n_train == 0) {
        where_of_keys(w, where, "data", NULL, NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: data.train: required (a token file, or text files or folders)",
                            where);
    }
    if (c->model.n_embd % c->model.n_head != 0) {
        where_of_keys(w, where, "model.n_embd", "model.n_head", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: model.n_embd: n_embd (%d) must be divisible by "
                            "n_head (%d)",
                            where, c->model.n_embd, c->model.n_head);
    }
    if (strcmp(c->model.family, "llama") == 0 && c->model.n_head % c->model.n_kv_head != 0) {
        where_of_keys(w, where, "model.n_kv_head", "model.n_head", "model.hf_config");
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: model.n_kv_head: n_head (%d) must be divisible by n_kv_head (%d)",
                            where, c->model.n_head, c->model.n_kv_head);
    }
    if (strcmp(c->model.family, "llama") == 0 && (c->model.n_embd / c->model.n_head) % 2 != 0) {
        where_of_keys(w, where, "model.n_embd", "model.n_head", "model.hf_config");
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: model.n_embd: the head size n_embd / n_head (%d / %d) must be "
                            "even: the rotary embedding rotates pairs",
                            where, c->model.n_embd, c->model.n_head);
    }
    if (c->run.eval_interval > 0 && !config_has_validation(c)) {
        where_of_keys(w, where, "run.eval_interval", "data.val_fraction", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: run.eval_interval: %ld asks for evaluations, but there is no "
                            "validation data (data.val_fraction is 0 and data.val is not given): "
                            "give data.val or a data.val_fraction > 0, or set run.eval_interval "
                            "to 0",
                            where, c->run.eval_interval);
    }
    if (c->data.seq_len > c->model.block_size) {
        where_of_keys(w, where, "data.seq_len", "model.block_size", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: data.seq_len: must be <= model.block_size (%d), got %d", where,
                            c->model.block_size, c->data.seq_len);
    }
    return ZT_OK;
}

/* What tensor parallelism splits must split evenly, in the order a model
 * is read: attention heads (query, then llama's key/value heads), llama's
 * MLP width, and the vocabulary (the embedding and the output head are
 * split by rows, Megatron's vocabulary-parallel embedding). The first that
 * does not is named. GPT-2's MLP width 4 n_embd needs no row: T divides
 * n_head, which divides n_embd. */
static zt_status check_tensor_split(const struct walk *w)
{
    const struct zt_config *c = w->cfg;
    const int t = c->tensor_parallel.size, llama = strcmp(c->model.family, "llama") == 0;
    const struct {
        int applies;
        const char *key;
        int value;
        const char *why;
    } splits[] = {
        {1, "model.n_head", c->model.n_head,
         "each tensor-parallel rank computes whole attention heads"},
        {llama, "model.n_kv_head", c->model.n_kv_head,
         "each tensor-parallel rank holds whole key/value heads"},
        {llama, "model.intermediate_size", c->model.intermediate_size,
         "the MLP's columns are split evenly"},
        {c->model.pad_vocab_size_to_multiple_of == 1, "model.vocab_size", c->model.vocab_size,
         "the embedding and the output head are split by vocabulary rows (set "
         "model.pad_vocab_size_to_multiple_of above 1 to pad them)"},
    };
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        if (!splits[i].applies || splits[i].value % t == 0)
            continue;
        char where[WHERE];
        where_of_keys(w, where, "tensor_parallel.size", splits[i].key, "model.hf_config");
        return zt_error_set(ZT_ERR_CONFIG, "%s: tensor_parallel.size: %d must divide %s (%d): %s",
                            where, t, splits[i].key, splits[i].value, splits[i].why);
    }
    return ZT_OK;
}

/* Where a key was set, for rules checked once the world size is known. */
static void remember_where(const struct walk *w, const char *path, char *buf, size_t n)
{
    char where[WHERE];
    where_of_keys(w, where, path, NULL, NULL);
    snprintf(buf, n, "%s", where);
}

/* The hierarchy's keys against the stage and each other (their sizes
 * against the data-parallel size: config_check_world). */
/* NCCL reduces GPU memory: with the CPU named as the device it could never
 * run, so say so here, at the keys, rather than when the communicator is
 * made. (device auto is resolved at run time; comm_create says it then.) */
static zt_status check_comm_device(const struct walk *w)
{
    const struct zt_config *c = w->cfg;
    char where[WHERE];
    if (strcmp(c->comm.backend, "nccl") != 0 || strcmp(c->device, "cpu") != 0)
        return ZT_OK;
    where_of_keys(w, where, "comm.backend", "device", NULL);
    return zt_error_set(ZT_ERR_CONFIG,
                        "%s: comm.backend: nccl reduces GPU memory, but device is cpu (use "
                        "comm.backend: mpi or auto, or device: cuda)",
                        where);
}

static zt_status check_zero_groups(const struct walk *w)
{
    struct zt_config *c = w->cfg;
    char where[WHERE];
    remember_where(w, "zero_optimization.shard_group_size", c->zero.shard_group_where,
                   sizeof c->zero.shard_group_where);
    remember_where(w, "zero_optimization.zero_hpz_partition_size", c->zero.hpz_where,
                   sizeof c->zero.hpz_where);
    if (c->zero.shard_group_size > 0 && c->zero.stage == 0) {
        where_of_keys(w, where, "zero_optimization.shard_group_size", "zero_optimization.stage",
                      NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: zero_optimization.shard_group_size: %d, but stage 0 shards "
                            "nothing (every rank keeps everything): set zero_optimization.stage "
                            "1, 2 or 3, or remove the key",
                            where, c->zero.shard_group_size);
    }
    if (c->zero.hpz_partition_size > 1 && c->zero.stage != 3) {
        where_of_keys(w, where, "zero_optimization.zero_hpz_partition_size",
                      "zero_optimization.stage", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: zero_optimization.zero_hpz_partition_size: %d needs stage 3 "
                            "(the secondary copy is of the parameter shards, which only stage 3 "
                            "keeps), but zero_optimization.stage is %d",
                            where, c->zero.hpz_partition_size, c->zero.stage);
    }
    if (c->zero.hpz_partition_size > 1 && c->zero.shard_group_size > 0) {
        where_of_keys(w, where, "zero_optimization.zero_hpz_partition_size",
                      "zero_optimization.shard_group_size", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: zero_optimization.zero_hpz_partition_size and shard_group_size "
                            "are both set: hpZ keeps a secondary copy of shards over all "
                            "data-parallel ranks, HSDP shards within groups; choose one",
                            where);
    }
    return ZT_OK;
}

/* Interleaved 1F1B's rules (pipeline.virtual_stages > 1 with a pipeline):
 * equal chunks, whole rounds of P micro batches (Megatron's rule), the
 * 1f1b order, and whole units on every pass (ZeRO-3's gather schedule
 * follows one pass per stage). */
static zt_status check_interleaved(const struct walk *w)
{
    const struct zt_config *c = w->cfg;
    const int P = c->pipeline.stages, v = c->pipeline.virtual_stages;
    char where[WHERE];
    if (P == 1 || v == 1)
        return ZT_OK;
    if (c->model.n_layer % (P * v) != 0) {
        where_of_keys(w, where, "pipeline.virtual_stages", "model.n_layer", "pipeline.stages");
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: pipeline.virtual_stages: model.n_layer (%d) must be divisible "
                            "by pipeline.stages x pipeline.virtual_stages (%d x %d): every chunk "
                            "gets the same number of blocks",
                            where, c->model.n_layer, P, v);
    }
    const struct optimizer_ops *o = optimizer_find(c->optimizer.type);
    if (o && o->fused_backward) {
        where_of_keys(w, where, "pipeline.virtual_stages", "optimizer.type", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: pipeline.virtual_stages: %s runs one micro batch a step, and "
                            "the interleaved schedule needs whole rounds of pipeline.stages (%d) "
                            "micro batches: set pipeline.virtual_stages 1",
                            where, o->name, P);
    }
    if (c->gradient_accumulation_steps % P != 0) {
        where_of_keys(w, where, "pipeline.virtual_stages", "gradient_accumulation_steps",
                      "pipeline.stages");
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: pipeline.virtual_stages: gradient_accumulation_steps (%d micro "
                            "batches) must be a multiple of pipeline.stages (%d) for the "
                            "interleaved schedule",
                            where, c->gradient_accumulation_steps, P);
    }
    if (c->pipeline.schedule != PIPELINE_1F1B) {
        where_of_keys(w, where, "pipeline.virtual_stages", "pipeline.schedule", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: pipeline.virtual_stages: %d needs pipeline.schedule 1f1b (the "
                            "interleaved schedule is a 1F1B)",
                            where, v);
    }
    if (c->zero.stage == 3) {
        where_of_keys(w, where, "pipeline.virtual_stages", "zero_optimization.stage", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: pipeline.virtual_stages: %d is not supported with "
                            "zero_optimization.stage 3 yet; use stage 0, 1 or 2, or "
                            "virtual_stages 1",
                            where, v);
    }
    return ZT_OK;
}

/* The grid's rules that do not need the world size (config_check_world
 * has those): the tensor split, a block for every stage, and a sequence
 * that cuts evenly. */
static zt_status check_parallel(const struct walk *w)
{
    const struct zt_config *c = w->cfg;
    char where[WHERE];
    ZT_TRY(check_tensor_split(w));
    if (c->pipeline.stages > c->model.n_layer) {
        where_of_keys(w, where, "pipeline.stages", "model.n_layer", "model.hf_config");
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: pipeline.stages: %d is more than model.n_layer (%d blocks): "
                            "every stage needs a block",
                            where, c->pipeline.stages, c->model.n_layer);
    }
    ZT_TRY(check_interleaved(w));
    /* sequence_parallel at size 1 is accepted and changes nothing (a group
     * of one holds the whole sequence), so that one config serves every
     * size; at size > 1 each rank holds an equal slice of the sequence. */
    if (c->tensor_parallel.sequence_parallel && c->data.seq_len % c->tensor_parallel.size != 0) {
        where_of_keys(w, where, "tensor_parallel.sequence_parallel", "data.seq_len",
                      "tensor_parallel.size");
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: tensor_parallel.sequence_parallel: data.seq_len (%d) must be "
                            "divisible by tensor_parallel.size (%d): each tensor-parallel rank "
                            "holds an equal slice of the sequence",
                            where, c->data.seq_len, c->tensor_parallel.size);
    }
    return ZT_OK;
}

/* context_parallel.size > 1: a sequence of 2C equal chunks, and none of
 * what it does not compose with yet. */
static zt_status check_context(const struct walk *w)
{
    const struct zt_config *c = w->cfg;
    const int C = c->context_parallel.size;
    char where[WHERE];
    if (C <= 1)
        return ZT_OK;
    const struct {
        const char *key, *what;
        int set;
    } refusals[] = {
        {"bf16.enabled", "bf16 (ring attention runs in fp32)", c->bf16.enabled},
        {"fp16.enabled", "fp16 (ring attention runs in fp32)", c->fp16.enabled},
        {"fp8.enabled", "fp8 GEMMs", c->fp8.enabled},
        {"lora.enabled", "LoRA adapters", c->lora.enabled},
        {"run.neftune_noise_alpha", "NEFTune's noise", c->run.neftune_noise_alpha > 0.0},
        {"zero_optimization.shard_group_size", "HSDP shard groups", c->zero.shard_group_size > 0},
        {"zero_optimization.zero_hpz_partition_size", "hpZ secondary groups",
         c->zero.hpz_partition_size > 1},
    };
    const int sp = c->tensor_parallel.sequence_parallel ? c->tensor_parallel.size : 1;
    if (c->data.seq_len % (2 * C) != 0 || (c->data.seq_len / C) % sp != 0) {
        where_of_keys(w, where, "context_parallel.size", "data.seq_len", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: context_parallel.size: data.seq_len (%d) must be divisible by "
                            "2 x context_parallel.size (%d)%s: the sequence is cut into 2C equal "
                            "chunks",
                            where, c->data.seq_len, 2 * C,
                            sp > 1 ? " and by context_parallel.size x tensor_parallel.size "
                                     "(sequence parallelism)"
                                   : "");
    }
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        if (!refusals[i].set)
            continue;
        where_of_keys(w, where, "context_parallel.size", refusals[i].key, NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: context_parallel.size: %d with %s (%s) is not built yet: set "
                            "context_parallel.size to 1, or %s to its default",
                            where, C, refusals[i].what, refusals[i].key, refusals[i].key);
    }
    return ZT_OK;
}

/* The dtype bnb_4bit_compute_dtype names (PyTorch's names too), or -1. */
static int compute_dtype_of(const char *name)
{
    static const struct {
        const char *name;
        enum zt_dtype t;
    } names[] = {{"fp32", ZT_F32},      {"float32", ZT_F32}, {"bf16", ZT_BF16},
                 {"bfloat16", ZT_BF16}, {"fp16", ZT_F16},    {"float16", ZT_F16}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0)
            return (int)names[i].t;
    return -1;
}

static zt_status check_data(const struct walk *w)
{
    static const char *const formats[] = {"text", "jsonl"};
    const struct zt_config *c = w->cfg;
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (strcmp(c->data.format, formats[i]) == 0)
            return ZT_OK;
    char where[WHERE];
    where_of_keys(w, where, "data.format", NULL, NULL);
    return zt_error_set(ZT_ERR_CONFIG, "%s: data.format: must be text or jsonl, got '%s'", where,
                        c->data.format);
}

static zt_status check_quantization(const struct walk *w)
{
    const struct zt_config *c = w->cfg;
    char where[WHERE];
    enum quant4_type type;
    if (!quant4_type_find(c->quantization.bnb_4bit_quant_type, &type)) {
        where_of_keys(w, where, "quantization.bnb_4bit_quant_type", NULL, NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: quantization.bnb_4bit_quant_type: must be nf4 or fp4, got '%s'",
                            where, c->quantization.bnb_4bit_quant_type);
    }
    if (compute_dtype_of(c->quantization.bnb_4bit_compute_dtype) < 0) {
        where_of_keys(w, where, "quantization.bnb_4bit_compute_dtype", NULL, NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: quantization.bnb_4bit_compute_dtype: must be fp32, bf16 or fp16 "
                            "(or float32, bfloat16, float16), got '%s'",
                            where, c->quantization.bnb_4bit_compute_dtype);
    }
    if (c->quantization.load_in_4bit && !c->lora.enabled) {
        where_of_keys(w, where, "quantization.load_in_4bit", "lora.enabled", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: quantization.load_in_4bit stores the frozen base in 4 bits, but "
                            "nothing is frozen: set lora.enabled: true (QLoRA)",
                            where);
    }
    return ZT_OK;
}

int config_grad_accum_fp32(const struct zt_config *c)
{
    const char *name = c->data_types.grad_accum_dtype;
    return (c->bf16.enabled || c->fp16.enabled) && name && compute_dtype_of(name) == (int)ZT_F32;
}

enum zt_dtype config_compute_dtype(const struct zt_config *c)
{
    const int t = compute_dtype_of(c->quantization.bnb_4bit_compute_dtype);
    ZT_ASSERT(t >= 0);
    return (enum zt_dtype)t;
}

/* lora.bias takes PEFT's values, of which zerotrain computes none only;
 * adapters read from a folder need adapters to read into. */
static zt_status check_lora(const struct walk *w)
{
    char where[WHERE];
    const char *bias = w->cfg->lora.bias;
    if (w->cfg->lora.init_from && !w->cfg->lora.enabled) {
        where_of_keys(w, where, "lora.init_from", "lora.enabled", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: lora.init_from: names adapters, but lora.enabled is false: set "
                            "lora.enabled: true (and lora.r, lora.lora_alpha and "
                            "lora.target_modules as the adapters have them)",
                            where);
    }
    if (strcmp(bias, "none") == 0)
        return ZT_OK;
    where_of_keys(w, where, "lora.bias", NULL, NULL);
    if (strcmp(bias, "all") == 0 || strcmp(bias, "lora_only") == 0)
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "%s: lora.bias: '%s' is not supported yet: biases stay frozen (none)",
                            where, bias);
    return zt_error_set(ZT_ERR_CONFIG, "%s: lora.bias: must be none, all or lora_only, got '%s'",
                        where, bias);
}

/* NVMe offload needs its folder, and streams the element-wise update only:
 * a whole-tensor optimizer reduces statistics over its states in rounds,
 * and a fused-backward one updates inside the backward, on the device. */
static zt_status check_offload(const struct walk *w)
{
    const struct zt_config *c = w->cfg;
    const struct optimizer_ops *o = optimizer_find(c->optimizer.type);
    char where[WHERE];
    if (c->zero.offload_optimizer.device != ZT_OFFLOAD_NVME)
        return ZT_OK;
    if (!c->zero.offload_optimizer.nvme_path) {
        where_of_keys(w, where, "zero_optimization.offload_optimizer.device", NULL, NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: zero_optimization.offload_optimizer.nvme_path: required with "
                            "device nvme (the folder of the state files)",
                            where);
    }
    if (!o->whole_tensors && !o->fused_backward)
        return ZT_OK;
    where_of_keys(w, where, "zero_optimization.offload_optimizer.device", "optimizer.type", NULL);
    return zt_error_set(ZT_ERR_CONFIG,
                        "%s: zero_optimization.offload_optimizer.device: nvme streams the states "
                        "of element-wise optimizers, and %s %s: use device cpu or none",
                        where, o->name,
                        o->whole_tensors ? "reduces whole-tensor statistics over its states"
                                         : "updates inside the backward, on the device");
}

/* DeepSpeed's aio section tunes libaio for NVMe offload: silent without it
 * (config_deepspeed.c), listed with it, since zerotrain streams the files
 * its own way. */
static zt_status note_nvme_aio(struct walk *w, const struct yaml_tree *t)
{
    const struct yaml_tree_node *aio = yaml_tree_get(t->root, "aio");
    if (w->cfg->zero.offload_optimizer.device != ZT_OFFLOAD_NVME || !aio || yaml_tree_is_null(aio))
        return ZT_OK;
    char where[WHERE], line[WHERE + 200];
    yaml_tree_where(aio, where, sizeof where);
    snprintf(line, sizeof line,
             "  %s: aio: one I/O thread per rank streams the NVMe state file with pread and "
             "pwrite, zero_optimization.offload_optimizer.buffer_count deep\n",
             where);
    return config_notes_append(&w->ignored, line);
}

/* checkpoint.dir null means no checkpoints (DeepSpeed saves nothing
 * without a save_dir): asking for periodic ones without a folder is a
 * mistake to name now, not a request to drop silently. */
static zt_status check_checkpoint(const struct walk *w)
{
    char where[WHERE];
    if (w->cfg->run.epochs > 0 && given(w, "run.steps")) {
        where_of_keys(w, where, "run.epochs", "run.steps", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: run.epochs: %g and run.steps: %ld both say how long to train: "
                            "give one of them",
                            where, w->cfg->run.epochs, w->cfg->run.steps);
    }
    if (w->cfg->checkpoint.every > 0 && !w->cfg->checkpoint.dir) {
        where_of_keys(w, where, "checkpoint.every", "checkpoint.dir", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: checkpoint.every: %ld asks for checkpoints, but checkpoint.dir "
                            "is not set (null: no checkpoints): set checkpoint.dir",
                            where, w->cfg->checkpoint.every);
    }
    return ZT_OK;
}

/* Each scheduler type takes only its own parameters, as DeepSpeed's
 * constructors do; a stray one is almost always meant for another type. */
static int compute_dtype_of(const char *name);

/* grad_accum_dtype names fp32 or the working precision itself: DeepSpeed
 * takes no other pairing either. */
static zt_status check_grad_accum(const struct walk *w)
{
    const struct zt_config *c = w->cfg;
    const char *name = c->data_types.grad_accum_dtype;
    const enum zt_dtype working = c->bf16.enabled ? ZT_BF16 : c->fp16.enabled ? ZT_F16 : ZT_F32;
    const int t = name ? compute_dtype_of(name) : (int)working;
    if (t == (int)ZT_F32 || t == (int)working)
        return ZT_OK;
    char where[WHERE];
    where_of_keys(w, where, "data_types.grad_accum_dtype", NULL, NULL);
    return zt_error_set(ZT_ERR_CONFIG,
                        "%s: data_types.grad_accum_dtype: must be fp32 or the working precision "
                        "(%s), got '%s'",
                        where, zt_precision_name(working), name);
}

static zt_status check_precision(const struct walk *w)
{
    char where[WHERE];
    if (w->cfg->fp16.enabled && w->cfg->bf16.enabled) {
        where_of_keys(w, where, "fp16.enabled", "bf16.enabled", NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: fp16.enabled and bf16.enabled are both true: choose one", where);
    }
    return check_grad_accum(w);
}

/* fp8 GEMMs refuse what they would compute wrongly or not at all: LoRA's
 * adapter terms (and so QLoRA's 4-bit base) run beside the block GEMMs
 * on the unquantised input, and fp16's loss scale multiplies every output
 * gradient, moving its amax with each change of the scale so that the
 * delayed scales lag behind it; Transformer Engine's recipes train in bf16. */
static zt_status check_fp8(const struct walk *w)
{
    static const struct {
        const char *key;
        size_t off;
        const char *why;
    } refused[] = {
        {"fp16.enabled", OFF(fp16.enabled),
         "the fp16 loss scale moves the output gradients' amax at every change: use bf16 or fp32"},
        {"lora.enabled", OFF(lora.enabled),
         "LoRA's adapters would run beside the fp8 GEMMs on the unquantised input"},
        {"quantization.load_in_4bit", OFF(quantization.load_in_4bit),
         "a 4-bit base's weights are not fp8 GEMM operands"},
    };
    char where[WHERE];
    if (!w->cfg->fp8.enabled)
        return ZT_OK;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        if (!*(const int *)field_cptr(w->cfg, refused[i].off))
            continue;
        where_of_keys(w, where, "fp8.enabled", refused[i].key, NULL);
        return zt_error_set(ZT_ERR_CONFIG, "%s: fp8.enabled: not with %s: %s", where,
                            refused[i].key, refused[i].why);
    }
    return ZT_OK;
}

static zt_status check_scheduler(const struct walk *w)
{
    const struct zt_config *c = w->cfg;
    char where[WHERE], valid[512];
    if (c->scheduler.type == ZT_SCHED_NONE) {
        if (!given(w, "scheduler"))
            return ZT_OK;
        where_of_keys(w, where, "scheduler", NULL, NULL);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: scheduler.type: required when scheduler is given "
                            "(WarmupLR, WarmupDecayLR or WarmupCosineLR)",
                            where);
    }
    unsigned mask = sched_masks[c->scheduler.type];
    const char *name = sched_names[c->scheduler.type];
    for (size_t i = 0; i < N_FIELDS; i++) {
        if (!w->given[i] || !child_name(i, "scheduler.params") || (fields[i].flags & mask))
            continue;
        yaml_tree_where(w->given[i], where, sizeof where);
        child_list("scheduler.params", mask, valid, sizeof valid);
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s: not a parameter of %s (valid: %s)", where,
                            fields[i].path, name, valid);
    }
    long warmup = c->scheduler.warmup_num_steps < 2 ? 2 : c->scheduler.warmup_num_steps;
    if (c->scheduler.type == ZT_SCHED_WARMUP_COSINE_LR && c->scheduler.total_num_steps <= warmup) {
        where_of_keys(w, where, "scheduler.params.total_num_steps",
                      "scheduler.params.warmup_num_steps", "scheduler.type");
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: scheduler.params.total_num_steps: must be greater than "
                            "warmup_num_steps (%ld) for WarmupCosineLR, got %ld%s",
                            where, warmup, c->scheduler.total_num_steps,
                            given(w, "scheduler.params.total_num_steps") ? ""
                                                                         : " (from run.steps)");
    }
    return ZT_OK;
}

/* Settings that do nothing beside the others given. They are accepted, so
 * that one config serves every layout (and `zerotrain plan` reads them for
 * layouts where they act), and said once at start-up, as Megatron warns of
 * sequence parallelism at tensor size 1. A rule fires only for a key the
 * file or --set gives a value other than its default (any value, for a
 * key without one): a resolved config (which writes every key) says
 * nothing new when it is run again. */
static int tensor_size_one(const struct zt_config *c)
{
    return c->tensor_parallel.size == 1;
}
static int checkpointing_off(const struct zt_config *c)
{
    return !c->activation_checkpointing.enabled;
}
static int nothing_offloaded(const struct zt_config *c)
{
    return c->zero.offload_optimizer.device == ZT_OFFLOAD_NONE;
}
static int not_on_nvme(const struct zt_config *c)
{
    return c->zero.offload_optimizer.device != ZT_OFFLOAD_NVME;
}
static int params_not_sharded(const struct zt_config *c)
{
    return c->zero.stage < 3;
}
static int one_stage(const struct zt_config *c)
{
    return c->pipeline.stages == 1;
}
static int interleaved(const struct zt_config *c)
{
    return c->pipeline.stages > 1 && c->pipeline.virtual_stages > 1;
}
static int stop_on_nonfinite(const struct zt_config *c)
{
    return c->run.on_nonfinite == ZT_NONFINITE_STOP;
}
static int text_data(const struct zt_config *c)
{
    return strcmp(c->data.format, "text") == 0;
}

static const struct {
    const char *key;
    int (*moot)(const struct zt_config *c);
    const char *why;
} no_effect_rules[] = {
    {"tensor_parallel.sequence_parallel", tensor_size_one,
     "tensor_parallel.size is 1, so the one rank holds the whole sequence anyway"},
    {"activation_checkpointing.every_n_blocks", checkpointing_off,
     "activation_checkpointing.enabled is false, so no block is checkpointed"},
    {"zero_optimization.offload_optimizer.pin_memory", nothing_offloaded,
     "zero_optimization.offload_optimizer.device is none, so nothing is offloaded"},
    {"zero_optimization.offload_optimizer.buffer_count", not_on_nvme,
     "zero_optimization.offload_optimizer.device is not nvme, so no state is streamed"},
    {"zero_optimization.stage3_prefetch_depth", params_not_sharded,
     "zero_optimization.stage is below 3, so no parameters are gathered"},
    {"pipeline.schedule", one_stage, "pipeline.stages is 1, so there is no pipeline"},
    {"pipeline.partition_method", one_stage, "pipeline.stages is 1, so every block is on it"},
    {"pipeline.partition_method", interleaved,
     "pipeline.virtual_stages is above 1, so the blocks are cut into equal chunks"},
    {"pipeline.virtual_stages", one_stage,
     "pipeline.stages is 1, so there is nothing to interleave"},
    {"run.nonfinite_skip_limit", stop_on_nonfinite,
     "run.on_nonfinite is stop, so the first non-finite step ends the run"},
    {"data.packing", text_data, "data.format is text, which is always one stream"},
    {"data.chat_template", text_data,
     "data.format is text, so the files are one stream and no {\"messages\"} line is "
     "rendered (set data.format: jsonl)"},
};

/* Whether the int-stored key at `path` (a number, boolean or name of an
 * enum) holds its default: the default is parsed as a given value is, into
 * a scratch config. */
static int holds_default(const struct walk *w, const char *path)
{
    const struct field *f = &fields[field_find(path)];
    ZT_ASSERT(f->def && (f->type == T_INT || f->type == T_BOOL || f->type == T_PIPE_SCHEDULE ||
                         f->type == T_PIPE_PARTITION || f->type == T_NONFINITE));
    struct zt_config defaults = {0};
    struct walk scratch = {.cfg = &defaults};
    const zt_status parsed = apply_default(&scratch, f); /* nothing is allocated for an int */
    ZT_ASSERT(parsed == ZT_OK);
    int value, def;
    memcpy(&value, (const char *)w->cfg + f->off, sizeof value);
    memcpy(&def, (const char *)&defaults + f->off, sizeof def);
    return value == def;
}

/* One line "  WHERE: KEY (VALUE): no effect: WHY" per rule that fires. */
static zt_status note_no_effect(struct walk *w)
{
    for (size_t i = 0; i < sizeof no_effect_rules / sizeof no_effect_rules[0]; i++) {
        const struct yaml_tree_node *n = given(w, no_effect_rules[i].key);
        const int has_default = fields[field_find(no_effect_rules[i].key)].def != NULL;
        if (!n || (has_default && holds_default(w, no_effect_rules[i].key)) ||
            !no_effect_rules[i].moot(w->cfg))
            continue;
        char where[WHERE], value[128], line[1024];
        yaml_tree_where(n, where, sizeof where);
        yaml_tree_describe(n, value, sizeof value);
        snprintf(line, sizeof line, "  %s: %s (%s): no effect: %s\n", where, no_effect_rules[i].key,
                 value, no_effect_rules[i].why);
        ZT_TRY(config_notes_append(&w->no_effect, line));
    }
    return ZT_OK;
}

/* A start-up warning's text: `heading`, then the lines the walk collected
 * in n; *out (left NULL when there are none) is then cfg's. */
static zt_status take_notes(const struct config_notes *n, const char *heading, char **out)
{
    if (n->count == 0)
        return ZT_OK;
    const size_t h = strlen(heading);
    char *text = malloc(h + n->len + 1);
    if (!text)
        return nomem();
    memcpy(text, heading, h);
    memcpy(text + h, n->text, n->len + 1);
    *out = text;
    return ZT_OK;
}

/* The two start-up warnings: DeepSpeed settings zerotrain does not act on,
 * and settings the others make moot. */
static zt_status take_warnings(struct walk *w)
{
    char heading[WHERE + 128];
    const int ds = w->ignored.count, moot = w->no_effect.count;
    snprintf(heading, sizeof heading,
             "%s: zerotrain does not act on %d DeepSpeed setting%s and trains without %s:\n",
             w->cfg->source, ds, ds == 1 ? "" : "s", ds == 1 ? "it" : "them");
    ZT_TRY(take_notes(&w->ignored, heading, &w->cfg->ignored));
    snprintf(heading, sizeof heading, "%s: %d setting%s given with no effect in this run:\n",
             w->cfg->source, moot, moot == 1 ? "" : "s");
    ZT_TRY(take_notes(&w->no_effect, heading, &w->cfg->no_effect));
    return ZT_OK;
}

zt_status config_schema_fill(const struct yaml_tree *t, struct zt_config *cfg)
{
    struct walk *w = calloc(1, sizeof *w);
    if (!w)
        return nomem();
    w->cfg = cfg;
    ZT_ASSERT(t->root && t->root->kind == YAML_TREE_MAP);
    zt_status s = apply_defaults(w);
    if (s == ZT_OK)
        s = walk_map(w, t->root, "");
    if (s == ZT_OK)
        s = check_family_keys(w);
    if (s == ZT_OK)
        s = apply_hf_config(w);
    if (s == ZT_OK) {
        resolve_dependent_defaults(w);
        s = check_model_and_data(w);
        if (s == ZT_OK)
            s = check_parallel(w);
        if (s == ZT_OK)
            s = check_context(w);
        if (s == ZT_OK)
            s = check_comm_device(w);
        if (s == ZT_OK)
            s = check_zero_groups(w);
        if (s == ZT_OK)
            s = check_data(w);
        if (s == ZT_OK)
            s = check_precision(w);
        if (s == ZT_OK)
            s = check_fp8(w);
        if (s == ZT_OK)
            s = check_optimizer(w);
        if (s == ZT_OK)
            s = check_offload(w);
        if (s == ZT_OK)
            s = note_nvme_aio(w, t);
        if (s == ZT_OK)
            s = check_checkpoint(w);
        if (s == ZT_OK)
            s = check_lora(w);
        if (s == ZT_OK)
            s = check_quantization(w);
    }
    if (s == ZT_OK)
        s = check_scheduler(w);
    if (s == ZT_OK)
        s = note_no_effect(w);
    if (s == ZT_OK)
        s = take_warnings(w);
    free(w->ignored.text);
    free(w->no_effect.text);
    free(w);
    return s;
}

/* ---- writing ------------------------------------------------------------- */

void config_write_quoted(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f)
            fprintf(f, "\\x%02x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

void config_write_double(FILE *f, double x)
{
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    fputs(buf, f);
}

static void write_pair(FILE *f, double a, double b)
{
    fputc('[', f);
    config_write_double(f, a);
    fputs(", ", f);
    config_write_double(f, b);
    fputc(']', f);
}

static void write_value(FILE *f, const struct field *fd, const struct zt_config *c)
{
    const void *p = field_cptr(c, fd->off);
    switch (fd->type) {
    case T_INT:
        fprintf(f, "%d", *(const int *)p);
        break;
    case T_LONG:
        if ((fd->flags & F_ZERO_IS_ABSENT) && *(const long *)p == 0)
            fputs("null", f);
        else
            fprintf(f, "%ld", *(const long *)p);
        break;
    case T_U64:
        fprintf(f, "%" PRIu64, *(const uint64_t *)p);
        break;
    case T_DOUBLE:
        if ((fd->flags & F_ZERO_IS_ABSENT) && *(const double *)p == 0.0)
            fputs("null", f);
        else
            config_write_double(f, *(const double *)p);
        break;
    case T_BOOL:
        fputs(*(const int *)p ? "true" : "false", f);
        break;
    case T_STRING:
    case T_BACKEND:
    case T_ALGO:
    case T_DEVICE:
    case T_OPTIMIZER:
    case T_FAMILY:
        if (*(char *const *)p)
            config_write_quoted(f, *(char *const *)p);
        else
            fputs("null", f);
        break;
    case T_PATHS: {
        char *const *paths = *(char **const *)p;
        int n = *(const int *)field_cptr(c, fd->off2);
        fputs(n ? "[" : "null", f);
        for (int i = 0; i < n; i++) {
            fputs(i ? ", " : "", f);
            config_write_quoted(f, paths[i]);
        }
        fputs(n ? "]" : "", f);
        break;
    }
    case T_EPS:
        if (*(const double *)field_cptr(c, fd->off2) == 0.0)
            config_write_double(f, *(const double *)p);
        else
            write_pair(f, *(const double *)p, *(const double *)field_cptr(c, fd->off2));
        break;
    case T_BETAS:
        write_pair(f, *(const double *)p, *(const double *)field_cptr(c, fd->off2));
        break;
    case T_SCHED:
        fputs(sched_names[*(const enum zt_sched_type *)p], f);
        break;
    case T_WARMUP:
        fputs(warmup_names[*(const enum zt_warmup_type *)p], f);
        break;
    case T_PIPE_SCHEDULE:
        fputs(config_pipeline_schedule_name(*(const enum pipeline_schedule *)p), f);
        break;
    case T_PIPE_PARTITION:
        fputs(config_pipeline_partition_name(*(const enum pipeline_partition *)p), f);
        break;
    case T_FP8_FORMAT:
    case T_FP8_AMAX:
    case T_NONFINITE:
        fputs(fp8_choice_of(fd->type)->names[*(const int *)p], f);
        break;
    case T_OFFLOAD_DEVICE:
        fputs(offload_device_names[*(const enum zt_offload_device *)p], f);
        break;
    case T_SECTION:
        break;
    }
}

static int row_written(const struct field *fd, const struct zt_config *c)
{
    if ((fd->flags & F_LLAMA) && strcmp(c->model.family, "llama") != 0)
        return 0;
    if (c->scheduler.type == ZT_SCHED_NONE && strncmp(fd->path, "scheduler", 9) == 0)
        return 0;
    if (child_name((size_t)(fd - fields), "scheduler.params") &&
        !(fd->flags & sched_masks[c->scheduler.type]))
        return 0;
    const struct optimizer_ops *o = optimizer_find(c->optimizer.type);
    if (o && child_name((size_t)(fd - fields), "optimizer.params") &&
        !optimizer_reads_key(o, fd->path))
        return 0;
    /* the relative step computes the learning rate (check_adafactor) */
    if (c->optimizer.relative_step && strcmp(fd->path, "optimizer.params.lr") == 0)
        return 0;
    return fd->type == T_SECTION || fd->off != NO_STORE;
}

zt_status config_schema_write(const struct zt_config *cfg, FILE *f)
{
    fprintf(f, "# zerotrain configuration, every key resolved%s%s\n", cfg->source ? " from " : "",
            cfg->source ? cfg->source : "");
    if (cfg->scheduler.type == ZT_SCHED_NONE)
        fputs("# scheduler: none, the learning rate stays at optimizer.params.lr\n", f);
    for (size_t i = 0; i < N_FIELDS; i++) {
        const struct field *fd = &fields[i];
        if (!row_written(fd, cfg))
            continue;
        int depth = 0;
        const char *name = fd->path;
        for (const char *dot; (dot = strchr(name, '.')); name = dot + 1)
            depth++;
        fprintf(f, "%*s%s:", 2 * depth, "", name);
        if (fd->type != T_SECTION) {
            fputc(' ', f);
            write_value(f, fd, cfg);
        }
        fprintf(f, "  # %s\n", fd->doc);
    }
    if (fflush(f) != 0 || ferror(f))
        return zt_error_set(ZT_ERR_IO, "cannot write the configuration: %s", strerror(errno));
    return ZT_OK;
}

/* ---- the Markdown reference (docs/reference/config.md) -------------------- */

static const char *type_name(enum ftype t)
{
    switch (t) {
    case T_SECTION:
        return "section";
    case T_INT:
    case T_LONG:
    case T_U64:
        return "integer";
    case T_DOUBLE:
        return "number";
    case T_BOOL:
        return "boolean";
    case T_STRING:
        return "string";
    case T_PATHS:
        return "string or list of strings";
    case T_BETAS:
        return "[number, number]";
    case T_EPS:
        return "number or [number, number]";
    default:
        return "name";
    }
}

/* The names a choice row takes, or NULL (the optimizers are listed by
 * optimizer_list_names). */
static const char *const *choice_names(enum ftype t, int *n)
{
    static const struct {
        enum ftype type;
        const char *const *names;
        int n;
    } choices[] = {
        {T_BACKEND, backend_names, 3},
        {T_ALGO, algorithm_names, 3},
        {T_DEVICE, device_names, 3},
        {T_FAMILY, family_names, 2},
        {T_SCHED, sched_names + 1, 3},
        {T_WARMUP, warmup_names, 2},
        {T_PIPE_SCHEDULE, schedule_names, N_SCHEDULES},
        {T_PIPE_PARTITION, partition_names, N_PARTITIONS},
        {T_OFFLOAD_DEVICE, offload_device_names, 2},
    };
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++)
        if (choices[i].type == t) {
            *n = choices[i].n;
            return choices[i].names;
        }
    if (t == T_FP8_FORMAT || t == T_FP8_AMAX || t == T_NONFINITE) {
        *n = fp8_choice_of(t)->n;
        return fp8_choice_of(t)->names;
    }
    *n = 0;
    return NULL;
}

static void write_bound(FILE *f, struct bound b)
{
    const char *op = b.kind == '[' ? ">=" : b.kind == '(' ? ">" : b.kind == ']' ? "<=" : "<";
    fprintf(f, "%s %.15g", op, b.v);
}

/* The "allowed" cell: the range or the names, then what limits the key. */
static void write_allowed(FILE *f, const struct field *fd)
{
    const char *sep = "";
    int n = 0;
    const char *const *names = choice_names(fd->type, &n);
    if (fd->type == T_OPTIMIZER) {
        char known[256];
        optimizer_list_names(known, sizeof known);
        fprintf(f, "%s (any case)", known);
        sep = "; ";
    } else if (names) {
        for (int i = 0; i < n; i++)
            fprintf(f, "%s`%s`", i ? ", " : "", names[i]);
        sep = "; ";
    } else if (fd->lo.kind && fd->hi.kind) {
        fprintf(f, "%s%c%.15g, %.15g%c", fd->type == T_BETAS ? "each in " : "", fd->lo.kind,
                fd->lo.v, fd->hi.v, fd->hi.kind);
        sep = "; ";
    } else if (fd->lo.kind || fd->hi.kind) {
        fputs(fd->type == T_BETAS || fd->type == T_EPS ? "each " : "", f);
        write_bound(f, fd->lo.kind ? fd->lo : fd->hi);
        sep = "; ";
    }
    if (fd->flags & F_EMPTY_OK) {
        fprintf(f, "%smay be `\"\"`", sep);
        sep = "; ";
    }
    if (fd->flags & F_UNSUPPORTED_TRUE) {
        fprintf(f, "%sonly `false` (true: not supported yet)", sep);
        sep = "; ";
    }
    if (fd->flags & F_UNSUPPORTED_NONZERO) {
        fprintf(f, "%sonly `0` (others: not supported yet)", sep);
        sep = "; ";
    }
    if (fd->flags & F_UNSUPPORTED_GIVEN) {
        fprintf(f, "%snot supported yet", sep);
        sep = "; ";
    }
    if (fd->flags & F_LLAMA) {
        fprintf(f, "%smodel.family llama only", sep);
        sep = "; ";
    }
    if ((fd->flags & F_ALL_SCHED) && (fd->flags & F_ALL_SCHED) != F_ALL_SCHED) {
        fprintf(f, "%sscheduler.type", sep);
        for (int s = ZT_SCHED_WARMUP_LR, k = 0; s <= ZT_SCHED_WARMUP_COSINE_LR; s++)
            if (fd->flags & sched_masks[s])
                fprintf(f, "%s %s", k++ ? "," : "", sched_names[s]);
        fputs(" only", f);
    }
}

/* The "default" cell: the YAML text; null when absent means absent; derived
 * (the doc says from what) when it is resolved after the walk. */
static void write_default(FILE *f, const struct field *fd)
{
    if (fd->type == T_SECTION)
        return;
    if (fd->def && fd->def[0])
        fprintf(f, "`%s`", fd->def);
    else if (fd->def)
        fputs("`\"\"`", f);
    else if ((fd->type == T_INT || fd->type == T_LONG || fd->type == T_DOUBLE) &&
             !(fd->flags & F_ZERO_IS_ABSENT))
        fputs("derived", f);
    else
        fputs("`null`", f);
}

static void write_row(FILE *f, const struct field *fd)
{
    fprintf(f, "| `%s` | %s | ", fd->path, type_name(fd->type));
    write_default(f, fd);
    fputs(" | ", f);
    write_allowed(f, fd);
    fputs(" | ", f);
    config_write_md_cell(f, fd->doc);
    fputs(" | ", f);
    if (fd->flags & F_DS)
        fprintf(f, "`%s`", fd->path);
    fputs(" |\n", f);
}

static void write_table_head(FILE *f)
{
    fputs("| Key | Type | Default | Allowed | Description | DeepSpeed name |\n"
          "|---|---|---|---|---|---|\n",
          f);
}

/* The top-level section at fields[i] with every row under it, or, for the
 * first top-level key that is not a section, every such key. */
static void write_section(FILE *f, size_t i)
{
    const struct field *top = &fields[i];
    if (top->type == T_SECTION) {
        fprintf(f, "\n## `%s`\n\n", top->path);
        config_write_md_cell(f, top->doc);
        fputs(".\n\n", f);
    } else {
        fputs("\n## Top-level keys\n\n", f);
    }
    write_table_head(f);
    size_t len = strlen(top->path);
    for (size_t j = i; j < N_FIELDS; j++) {
        const char *p = fields[j].path;
        int under = top->type == T_SECTION ? strncmp(p, top->path, len) == 0 && p[len] == '.'
                                           : !strchr(p, '.') && fields[j].type != T_SECTION;
        if (under)
            write_row(f, &fields[j]);
    }
}

zt_status config_write_reference(FILE *f)
{
    for (size_t i = 0; i < sizeof family_names / sizeof family_names[0]; i++)
        ZT_ASSERT(model_family_find(family_names[i]));
    fputs("<!-- Generated by `zerotrain help --reference config` from config/config_schema.c\n"
          "     and config/config_deepspeed.c: do not edit, run scripts/docs.sh. -->\n"
          "# Configuration reference\n"
          "\n"
          "Every key a configuration file (YAML, or DeepSpeed's JSON) may give, by section,\n"
          "in the order `zerotrain train` prints the resolved configuration. A key is a dotted\n"
          "path: `optimizer.params.lr` is `lr` under `params` under `optimizer`, as `--set`\n"
          "takes it. A key given as `null` takes its default; a *derived* default is computed\n"
          "from other keys, as the description says. The last column names the key in\n"
          "DeepSpeed's configuration where DeepSpeed has it with the same meaning. The last\n"
          "section lists DeepSpeed's keys that are accepted without effect.\n",
          f);
    int top_keys = 0;
    for (size_t i = 0; i < N_FIELDS; i++) {
        if (strchr(fields[i].path, '.'))
            continue;
        if (fields[i].type == T_SECTION)
            write_section(f, i);
        else if (!top_keys++)
            write_section(f, i);
    }
    config_deepspeed_write_reference(f);
    if (fflush(f) != 0 || ferror(f))
        return zt_error_set(ZT_ERR_IO, "cannot write the configuration reference: %s",
                            strerror(errno));
    return ZT_OK;
}
