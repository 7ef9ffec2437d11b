/* cli/cli.c — subcommands, options and the one place errors are
 * printed.
 *
 *   zerotrain train CONFIG [--set key.path=value]... [--metrics FILE]
 *                          [--memory-report FILE] [--memory-timeline FILE]
 *                          [--memory-timeline-steps FIRST[-LAST]] [--memory-summary]
 *                          [--dry-run] [--print-partition]
 *                          [--print-layout]
 *                          [--progress|--no-progress] [--profile] [--quiet]
 *   zerotrain eval CONFIG [--set key.path=value]... [--metrics FILE] [--checkpoint DIR]
 *   zerotrain export CKPT_DIR --out DIR|FILE.safetensors [--merge] [--dtype fp32|bf16|fp16]
 *                    [--max-shard-size SIZE] [--force]
 *   zerotrain export CKPT_DIR --adapter --out DIR [--dtype fp32|bf16|fp16] [--force]
 *   zerotrain generate CONFIG|CKPT_DIR [--prompt TEXT | --file JSONL] [options]
 *   zerotrain prepare [--tokenizer NAME] [--tokenizer-dir DIR] --out FILE PATH...
 *   zerotrain tokenize [--tokenizer NAME] [--tokenizer-dir DIR] [--file FILE] [--decode]
 *   zerotrain plan CONFIG --gpus N [--gpus-per-node G] [--gpu-memory SIZE]
 *                  [--machine NAME|FILE] [--global-batch B] [--top K] [--all]
 *                  [--json FILE] [--set key.path=value]... [--keep KEY]...
 *   zerotrain calibrate --out FILE [--name NAME] [--device-memory SIZE] [--nvme-path DIR]
 *                       [--quick]
 *   zerotrain plot RUN_DIR... [--out DIR] [--rank R]
 *   zerotrain version | help [COMMAND] | help --reference config|cli
 */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/comm.h"
#include "../common/size.h"
#include "../common/status.h"
#include "../config/config.h"
#include "../coordinator/train.h"
#include "../data/data.h"
#include "../data/tokenize_cmd.h"
#include "../plan/plan.h"
#include "../report/report.h"
#include "export.h"
#include "generate.h"
#include "prepare.h"

#define MAX_OVERRIDES 256

static const char usage_text[] =
    "usage: zerotrain <command> [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG [options]    train the model described by CONFIG (YAML or DeepSpeed JSON)\n"
    "  eval CONFIG [options]     print the validation loss of the configured model\n"
    "  generate CONFIG|CKPT_DIR  continue a prompt with the trained model (KV cache, greedy\n"
    "                            or sampled), decoded with the run's tokenizer\n"
    "  prepare --out FILE PATH...  tokenise text files and folders into a token file\n"
    "  tokenize                  print the ids of a text (stdin) as JSON, or --decode ids\n"
    "  export CKPT_DIR --out DIR   write a checkpoint as a Hugging Face model folder (weights,\n"
    "                            config.json, generation_config.json, tokenizer files);\n"
    "                            LoRA: --merge merges the adapters in, --adapter writes them\n"
    "                            as a PEFT adapter folder\n"
    "  plan CONFIG --gpus N      compare every tensor x pipeline x data x ZeRO layout of the\n"
    "                            model on N GPUs: memory per rank, traffic, predicted speed\n"
    "  calibrate --out FILE      measure this node into a machine file for plan --machine\n"
    "  plot RUN_DIR...           draw PNG plots of runs: loss, learning rate, gradient norm,\n"
    "                            throughput, memory per rank and over a step (gnuplot)\n"
    "  version                   print the version\n"
    "  help [COMMAND]            print this help or a command's help\n"
    "\n"
    "Run train and eval under MPI: mpirun -np N zerotrain train CONFIG\n";

static const char train_help[] =
    "usage: zerotrain train CONFIG [options]\n"
    "  --set key.path=value   override a configuration key (repeatable; value is YAML)\n"
    "  --metrics FILE         write one JSON object per step (default <output_dir>/metrics.jsonl)\n"
    "  --memory-report FILE   write the per-rank memory report as JSON (a run also keeps it\n"
    "                         as <output_dir>/memory_report.json)\n"
    "  --memory-timeline FILE write every allocation and free of every rank, with its phase\n"
    "                         (forward/backward of a unit, reduction, optimizer, ...), as\n"
    "                         JSON lines\n"
    "  --memory-timeline-steps FIRST[-LAST]\n"
    "                         the steps the timeline records (default 0-2; 0 is the setup)\n"
    "  --memory-summary       print each rank's memory summary: per category current, peak,\n"
    "                         allocated, freed, allocations, frees and the peak's phase\n"
    "  --dry-run              plan the memory without training (writes no file but\n"
    "                         --memory-report's)\n"
    "  --print-partition      print how the parameters are split among the ranks\n"
    "  --print-layout         print the rank grid (tensor x pipeline x data parallel) and\n"
    "                         each pipeline stage's blocks\n"
    "  --progress             draw a progress line (step/total, ETA); automatic on a terminal\n"
    "                         except under mpirun, which always looks like one\n"
    "  --no-progress          never draw it\n"
    "  --profile              time every op and print where the step time went\n"
    "  --quiet                do not echo the resolved configuration\n"
    "exit status: 0 success, 2 usage or configuration error, 1 run-time failure\n";

static const char eval_help[] =
    "usage: zerotrain eval CONFIG [options]\n"
    "  --set key.path=value   override a configuration key (repeatable)\n"
    "  --checkpoint DIR       evaluate the weights of this checkpoint (a step-NNNNNNNN folder,\n"
    "                         or a checkpoint.dir whose `latest` names one)\n"
    "  --metrics FILE         write {\"val_loss\": ..., \"tokens\": ...}\n"
    "Without --checkpoint the weights are the latest checkpoint of checkpoint.dir, else\n"
    "model.init_from's, else the initial ones (with a warning); the first line says which.\n"
    "The last line printed is: val_loss <value>\n";

static const char export_help[] =
    "usage: zerotrain export CKPT_DIR --out DIR|DIR/NAME.safetensors [--merge]\n"
    "                        [--dtype fp32|bf16|fp16] [--max-shard-size SIZE] [--force]\n"
    "       zerotrain export CKPT_DIR --adapter --out DIR [--dtype fp32|bf16|fp16] [--force]\n"
    "Writes the full model of a checkpoint (a step-NNNNNNNN folder, or a checkpoint.dir whose\n"
    "`latest` names one) as save_pretrained writes a model folder: Hugging Face weights of the\n"
    "model's family (GPT-2: GPT2Model's names and shapes; Llama: LlamaForCausalLM's), in fp32\n"
    "(default) or the given precision, config.json (the architecture, the shape, torch_dtype),\n"
    "generation_config.json (the tokenizer's bos and eos ids) and the tokenizer files the run\n"
    "used (tokenizer.json and tokenizer_config.json; GPT-2's as vocab.json and merges.txt), so\n"
    "that from_pretrained(DIR) and zerotrain generate DIR need nothing else. DIR is made if\n"
    "missing. Needs no MPI: it reads every rank's shard file, and the base model's file or\n"
    "seed when a fine-tuning checkpoint keeps it outside.\n"
    "  --out DIR              the folder; the weights are DIR/model.safetensors\n"
    "  --out DIR/NAME.safetensors\n"
    "                         the weights' file, config.json and the rest beside it\n"
    "  --max-shard-size SIZE  the most bytes of tensor data in one file, as save_pretrained's\n"
    "                         max_shard_size (default 5GB): 5GB, 500MB, 100KB (powers of 10),\n"
    "                         2GiB, 512MiB, 64KiB (powers of 2) or a number of bytes.\n"
    "  --force                write over a folder that holds an export already\n"
    "A model that fits is the one file NAME.safetensors; a larger one is cut as\n"
    "save_pretrained cuts it, into NAME-00001-of-0000N.safetensors ... and the index\n"
    "NAME.safetensors.index.json, written last. model.init_from takes the file, the index,\n"
    "or DIR when NAME is model. A folder's config.json describes its weights: without --force,\n"
    "--out DIR is refused when DIR/config.json exists, and --out DIR/NAME.safetensors when\n"
    "DIR/config.json describes another model.\n"
    "A checkpoint with LoRA adapters (lora.enabled) is exported one of two ways:\n"
    "  --merge    the model with W + (lora_alpha / r) B A in every adapted weight, as PEFT's\n"
    "             merge_and_unload() gives it\n"
    "  --adapter  the adapters alone: DIR/adapter_model.safetensors and\n"
    "             DIR/adapter_config.json, as PEFT's save_pretrained writes them (lora.init_from\n"
    "             and PeftModel.from_pretrained read them), with the generation config and the\n"
    "             tokenizer files; refused over an adapter_config.json without --force\n";

static const char prepare_help[] =
    "usage: zerotrain prepare [--tokenizer NAME] [--tokenizer-dir DIR] --out FILE PATH...\n"
    "Tokenises text files and folders (recursively, in name order) into a token file for\n"
    "data.train / data.val. Each file is one document.\n"
    "  --tokenizer bytes      one token per byte: vocabulary 256, 1-byte ids (the default)\n"
    "  --tokenizer gpt2       GPT-2's byte-level BPE: vocabulary 50257, 2-byte ids, and\n"
    "                         <|endoftext|> (50256) between documents; needs --tokenizer-dir\n"
    "  --tokenizer hf         a Hugging Face tokenizer.json (Llama 3, Qwen2, Llama 2, Mistral,\n"
    "                         ...): its eos_token between documents; ids over 65,536 take 4 bytes\n"
    "  --tokenizer cl100k|o200k  tiktoken's rank files, <|endoftext|> between documents\n"
    "  --tokenizer-dir DIR    the tokenizer's folder (GPT-2's encoder.json and vocab.bpe,\n"
    "                         tokenizer.json, or NAME_base.tiktoken); without --tokenizer,\n"
    "                         the one it holds (scripts/gpt2_vocab.sh, scripts/tokenizers.sh)\n";

static const char plan_help[] =
    "usage: zerotrain plan CONFIG --gpus N [options]\n"
    "Plans every layout of the configured model on N GPUs without running it (one process,\n"
    "no mpirun): tensor T x pipeline P x data D = N (T dividing the heads, P at most the\n"
    "layers), ZeRO stage 0-3 on D, micro batch x accumulation keeping the global batch,\n"
    "activation checkpointing off, every block or every 2 blocks, and sequence parallelism\n"
    "on and off at T > 1; precision, optimizer and LoRA/QLoRA as configured. Per rank role (first, "
    "middle, last pipeline stage) it builds\n"
    "the rank with training's own allocation code on a plan-only ledger (the peaks a run's\n"
    "memory report measures), counts the bytes each axis sends, and predicts the step time\n"
    "from the machine's rates. Layouts that fit are ranked by predicted tokens/s.\n"
    "  --gpus N               the GPUs (ranks) to plan for\n"
    "  --gpus-per-node G      GPUs (ranks) per node (default: the machine's devices; on a\n"
    "                         CPU machine, one device of several cores, a rank per core)\n"
    "  --gpu-memory SIZE      memory of one GPU, as 80GiB or 40GB (default: the machine's)\n"
    "  --machine NAME|FILE    a machine description: a name in configs/machines (h100-sxm,\n"
    "                         a100-80gb, a100-40gb, ...) or a YAML file (zerotrain calibrate\n"
    "                         writes one for the machine it runs on); default h100-sxm\n"
    "  --global-batch B       sequences per optimizer step (default: the config's micro batch\n"
    "                         x accumulation x N)\n"
    "  --top K                rows printed (default 10)\n"
    "  --all                  print every layout, also those that do not fit\n"
    "  --json FILE            write every layout planned, each role's memory by category,\n"
    "                         traffic and times, as JSON\n"
    "  --set key.path=value   override a configuration key (repeatable)\n"
    "  --keep KEY             hold one searched setting at the config's value (repeatable):\n"
    "                         zero_optimization.stage, activation_checkpointing,\n"
    "                         tensor_parallel.sequence_parallel, pipeline.virtual_stages,\n"
    "                         train_micro_batch_size_per_gpu\n";

static const char calibrate_help[] =
    "usage: mpirun -np R zerotrain calibrate --out FILE [--name NAME] [--device-memory SIZE]\n"
    "                                        [--nvme-path DIR] [--quick]\n"
    "Measures the node it runs on and writes a machine file for zerotrain plan --machine FILE.\n"
    "Run it with 2 to 4 ranks, all on this node. The node is one device (devices_per_node 1)\n"
    "whose cores run one rank's threads: rank 0 times the CPU ops' matmuls at transformer\n"
    "shapes and a memory triad on every core while the other ranks sleep; then all ranks time\n"
    "allreduce, reduce-scatter and allgather from 4 KiB to 64 MiB and fit the link's latency\n"
    "and bandwidth. The tables are printed and kept in the file's comment.\n"
    "  --out FILE             the machine file written\n"
    "  --name NAME            the machine's name, 1 to 63 characters (default cpu-<hostname>)\n"
    "  --device-memory SIZE   memory of the device, as 64GiB or 512GB (default: the node's\n"
    "                         physical memory)\n"
    "  --nvme-path DIR        also time every rank writing and reading a 4 GiB file of its own\n"
    "                         in DIR at once (the disk of offload_optimizer's nvme_path)\n"
    "  --quick                small sizes and few repetitions (seconds; for tests)\n";

static const char plot_help[] =
    "usage: zerotrain plot RUN_DIR... [--out DIR] [--rank R]\n"
    "Draws PNG plots of one or more runs (each RUN_DIR a run.output_dir of zerotrain train,\n"
    "holding config.yaml and metrics.jsonl) with gnuplot, which must be on PATH\n"
    "(gnuplot-nox: scripts/deps.sh installs it). Runs are overlaid, named by their folders.\n"
    "  loss.png             training loss, validation loss as points on dashes\n"
    "  lr.png               learning rate\n"
    "  grad_norm.png        gradient norm before clipping\n"
    "  loss_scale.png       the fp16 loss scale (only when some run trains in fp16)\n"
    "  throughput.png       tokens/s\n"
    "  memory.png           each rank's peak memory by category and the single-device\n"
    "                       baseline (runs with memory_report.json)\n"
    "  memory_timeline.png  one rank's memory by category during the last step recorded in\n"
    "                       the first run with memory_timeline.jsonl\n"
    "A plot no run has data for is skipped, with a line saying why.\n"
    "  --out DIR              where the PNGs go (default: the first RUN_DIR's plots/)\n"
    "  --rank R               memory_timeline.png's rank (default 0)\n";

static const char help_help[] =
    "usage: zerotrain help [COMMAND]\n"
    "Prints the list of commands, or COMMAND's options.\n"
    "  --reference config     print the configuration reference as Markdown: every key with\n"
    "                         its type, default, allowed values and DeepSpeed name, from the\n"
    "                         schema (docs/reference/config.md)\n"
    "  --reference cli        print this command line's reference as Markdown: the usage\n"
    "                         and every command's help (docs/reference/cli.md)\n"
    "scripts/docs.sh writes both files from a built zerotrain.\n";

/* Every command's help, in the order the usage lists them. */
static const struct {
    const char *command, *text;
} helps[] = {
    {"train", train_help},     {"eval", eval_help},           {"generate", generate_help},
    {"prepare", prepare_help}, {"tokenize", tokenize_help},   {"export", export_help},
    {"plan", plan_help},       {"calibrate", calibrate_help}, {"plot", plot_help},
    {"help", help_help},
};
enum { N_HELPS = sizeof helps / sizeof helps[0] };

zt_status cli_write_reference(FILE *f)
{
    fputs("<!-- Generated by `zerotrain help --reference cli` from cli/cli.c's help\n"
          "     texts: do not edit, run scripts/docs.sh. -->\n"
          "# Command-line reference\n"
          "\n"
          "What `zerotrain help` and `zerotrain help COMMAND` print.\n"
          "\n"
          "## Usage\n"
          "\n"
          "```text\n",
          f);
    fputs(usage_text, f);
    fputs("```\n", f);
    for (int i = 0; i < N_HELPS; i++)
        fprintf(f, "\n## zerotrain %s\n\n```text\n%s```\n", helps[i].command, helps[i].text);
    if (fflush(f) != 0 || ferror(f))
        return zt_error_set(ZT_ERR_IO, "cannot write the command-line reference: %s",
                            strerror(errno));
    return ZT_OK;
}

struct cli_args {
    struct run_options run;
    struct config_override overrides[MAX_OVERRIDES];
};

static zt_status usage_error(const char *fmt, const char *arg)
{
    zt_error_set(ZT_ERR_USAGE, fmt, arg);
    return ZT_ERR_USAGE;
}

/* Parses train/eval options after the command name. */
static zt_status parse_run_args(int argc, char **argv, int allow_train_opts, struct cli_args *a)
{
    memset(a, 0, sizeof *a);
    a->run.overrides = a->overrides;
    a->run.memory_timeline_last = 2; /* the setup and the first two steps */
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "--set") == 0 || strcmp(arg, "--metrics") == 0 ||
            (allow_train_opts && strcmp(arg, "--memory-report") == 0) ||
            (allow_train_opts && strcmp(arg, "--memory-timeline") == 0) ||
            (allow_train_opts && strcmp(arg, "--memory-timeline-steps") == 0) ||
            (!allow_train_opts && strcmp(arg, "--checkpoint") == 0)) {
            if (!value)
                return usage_error("%s needs a value", arg);
            i++;
            if (strcmp(arg, "--checkpoint") == 0) {
                a->run.checkpoint_path = value;
            } else if (strcmp(arg, "--metrics") == 0) {
                a->run.metrics_path = value;
            } else if (strcmp(arg, "--memory-report") == 0) {
                a->run.memory_report_path = value;
            } else if (strcmp(arg, "--memory-timeline") == 0) {
                a->run.memory_timeline_path = value;
            } else if (strcmp(arg, "--memory-timeline-steps") == 0) {
                ZT_TRY(memory_timeline_parse_steps(value, &a->run.memory_timeline_first,
                                                   &a->run.memory_timeline_last));
            } else {
                if (a->run.n_overrides == MAX_OVERRIDES)
                    return usage_error("too many --set options (at most %s)", "256");
                a->overrides[a->run.n_overrides++].assignment = value;
            }
        } else if (strncmp(arg, "--set=", 6) == 0) {
            if (a->run.n_overrides == MAX_OVERRIDES)
                return usage_error("too many --set options (at most %s)", "256");
            a->overrides[a->run.n_overrides++].assignment = arg + 6;
        } else if (allow_train_opts && strcmp(arg, "--dry-run") == 0) {
            a->run.dry_run = 1;
        } else if (allow_train_opts && strcmp(arg, "--progress") == 0) {
            a->run.progress = PROGRESS_ALWAYS;
        } else if (allow_train_opts && strcmp(arg, "--no-progress") == 0) {
            a->run.progress = PROGRESS_NEVER;
        } else if (allow_train_opts && strcmp(arg, "--memory-summary") == 0) {
            a->run.memory_summary = 1;
        } else if (allow_train_opts && strcmp(arg, "--profile") == 0) {
            a->run.profile = 1;
        } else if (allow_train_opts && strcmp(arg, "--print-partition") == 0) {
            a->run.print_partition = 1;
        } else if (allow_train_opts && strcmp(arg, "--print-layout") == 0) {
            a->run.print_layout = 1;
        } else if (strcmp(arg, "--quiet") == 0) {
            a->run.quiet = 1;
        } else if (arg[0] == '-' && arg[1] != '\0') {
            return usage_error("unknown option '%s' (see zerotrain help)", arg);
        } else if (!a->run.config_path) {
            a->run.config_path = arg;
        } else {
            return usage_error("unexpected argument '%s': one CONFIG file only", arg);
        }
    }
    if (!a->run.config_path)
        return usage_error("%s", "missing CONFIG file (see zerotrain help)");
    return ZT_OK;
}

/* Prints the error being returned; `rank` >= 0 names the rank that found
 * it. */
static void print_error_of(zt_status s, int rank)
{
    const char *msg = zt_error_message();
    char who[32] = "";
    if (rank >= 0)
        snprintf(who, sizeof who, "rank %d: ", rank);
    fprintf(stderr, "zerotrain: error: %s%s\n", who, msg[0] ? msg : zt_status_desc(s));
    if (getenv("ZT_TRACE") && zt_error_trace()[0])
        fprintf(stderr, "zerotrain: trace: %s\n", zt_error_trace());
    fflush(stderr);
}

static void print_error(zt_status s)
{
    print_error_of(s, -1);
}

/* A run's error, printed by one rank (the lowest that found it): a
 * run-time failure in a world of several ranks names that rank; a usage or
 * configuration error is every rank's alike. */
static void print_run_error(zt_status s)
{
    const int named = zt_status_exit_code(s) == 1 && comm_world_size() > 1;
    print_error_of(s, named ? comm_world_rank() : -1);
}

/* For the commands without MPI: prints a usage error; returns exit status 2. */
static int usage_exit(const char *fmt, const char *arg)
{
    usage_error(fmt, arg);
    print_error(ZT_ERR_USAGE);
    return 2;
}

/* train and eval: parse, run under MPI, print once, agree on the exit code. */
static int run_mpi_command(int is_train, int argc, char **argv, volatile sig_atomic_t *stop,
                           const struct ckpt_fault_hooks *faults)
{
    struct cli_args a;
    int print_here = 0;
    zt_status st = comm_runtime_init(NULL, NULL);
    if (st != ZT_OK) {
        print_error(st);
        return zt_status_exit_code(st);
    }
    st = parse_run_args(argc, argv, is_train, &a);
    a.run.stop_signal = stop;
    a.run.faults = faults;
    if (st != ZT_OK) {
        print_here = comm_world_rank() == 0;
    } else {
        st = is_train ? train_run(&a.run, &print_here) : eval_run(&a.run, &print_here);
    }
    if (st != ZT_OK && print_here)
        print_run_error(st);
    comm_runtime_finalize();
    return zt_status_exit_code(st);
}

/* prepare's tokenizer options against the table: a known name, and a
 * folder exactly when that tokenizer reads one. Returns 0 or exit status 2. */
static int check_tokenizer_args(const struct prepare_options *opt)
{
    char msg[256], names[128];
    if (!opt->tokenizer)
        return 0; /* the folder's own, or bytes: tokenizer_open says which */
    const int needs_dir = tokenizer_needs_dir(opt->tokenizer);
    tokenizer_names(names, sizeof names);
    if (needs_dir < 0)
        snprintf(msg, sizeof msg, "--tokenizer %s: unknown tokenizer (known: %s)", opt->tokenizer,
                 names);
    else if (needs_dir && !opt->tokenizer_dir)
        snprintf(msg, sizeof msg,
                 "--tokenizer %s needs --tokenizer-dir DIR, the folder of its vocabulary "
                 "(scripts/gpt2_vocab.sh fetches GPT-2's)",
                 opt->tokenizer);
    else if (!needs_dir && opt->tokenizer_dir)
        snprintf(msg, sizeof msg, "--tokenizer-dir: the %s tokenizer reads no vocabulary folder",
                 opt->tokenizer);
    else
        return 0;
    return usage_exit("%s", msg);
}

static int run_prepare(int argc, char **argv)
{
    const char *out = NULL;
    struct prepare_options opt = {NULL, NULL};
    const char *paths[4096];
    int n = 0;
    for (int i = 0; i < argc; i++) {
        const int takes_value = strcmp(argv[i], "--out") == 0 ||
                                strcmp(argv[i], "--tokenizer") == 0 ||
                                strcmp(argv[i], "--tokenizer-dir") == 0;
        if (takes_value && i + 1 >= argc) {
            return usage_exit("%s needs a value", argv[i]);
        } else if (strcmp(argv[i], "--out") == 0) {
            out = argv[++i];
        } else if (strcmp(argv[i], "--tokenizer") == 0) {
            opt.tokenizer = argv[++i];
        } else if (strcmp(argv[i], "--tokenizer-dir") == 0) {
            opt.tokenizer_dir = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return usage_exit("unknown option '%s' (see zerotrain help prepare)", argv[i]);
        } else if (n < (int)(sizeof paths / sizeof paths[0])) {
            paths[n++] = argv[i];
        }
    }
    if (!out || n == 0) {
        return usage_exit("%s", "prepare needs --out FILE and at least one PATH");
    }
    const int bad = check_tokenizer_args(&opt);
    if (bad)
        return bad;
    zt_status st = prepare_run(out, paths, n, &opt, stdout);
    if (st != ZT_OK)
        print_error(st);
    return zt_status_exit_code(st);
}

/* help [COMMAND], and help --reference config|cli. */
static int run_help(int argc, char **argv)
{
    const char *topic = argc > 0 ? argv[0] : NULL;
    if (!topic) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(topic, "--reference") == 0) {
        const char *which = argc > 1 ? argv[1] : NULL;
        zt_status st;
        if (!which)
            return usage_exit("%s", "--reference needs config or cli (see zerotrain help help)");
        if (strcmp(which, "config") == 0)
            st = config_write_reference(stdout);
        else if (strcmp(which, "cli") == 0)
            st = cli_write_reference(stdout);
        else
            return usage_exit("--reference takes config or cli, not '%s' (see zerotrain help help)",
                              which);
        if (st != ZT_OK)
            print_error(st);
        return zt_status_exit_code(st);
    }
    for (int i = 0; i < N_HELPS; i++)
        if (strcmp(topic, helps[i].command) == 0) {
            fputs(helps[i].text, stdout);
            return 0;
        }
    fprintf(stderr, "zerotrain: error: no help for '%s'\n%s", topic, usage_text);
    return 2;
}

/* export's flags that choose what is written. */
static const struct {
    const char *flag;
    enum run_export_what what;
} export_flags[] = {{"--merge", RUN_EXPORT_MERGED}, {"--adapter", RUN_EXPORT_ADAPTER}};

/* Whether argv[i] is one of export_flags; sets rq->what, or fails a second one. */
static int export_flag(const char *arg, struct export_request *rq, int *usage)
{
    for (size_t k = 0; k < sizeof export_flags / sizeof export_flags[0]; k++) {
        if (strcmp(arg, export_flags[k].flag) != 0)
            continue;
        if (rq->what != RUN_EXPORT_MODEL)
            *usage = usage_exit("%s: --merge and --adapter exclude each other", arg);
        rq->what = export_flags[k].what;
        return 1;
    }
    return 0;
}

static int run_export(int argc, char **argv)
{
    struct export_request rq = {.dtype = "fp32", .what = RUN_EXPORT_MODEL};
    int usage = 0;
    for (int i = 0; i < argc && !usage; i++) {
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            rq.out = argv[++i];
        } else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
            rq.dtype = argv[++i];
        } else if (strcmp(argv[i], "--max-shard-size") == 0 && i + 1 < argc) {
            rq.max_shard_size = argv[++i];
        } else if (strcmp(argv[i], "--force") == 0) {
            rq.force = 1;
        } else if (export_flag(argv[i], &rq, &usage)) {
            continue;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return usage_exit("'%s': unknown option or missing value (see zerotrain help export)",
                              argv[i]);
        } else if (!rq.checkpoint) {
            rq.checkpoint = argv[i];
        } else {
            return usage_exit("unexpected argument '%s': one CKPT_DIR only", argv[i]);
        }
    }
    if (usage)
        return usage;
    if (!rq.checkpoint || !rq.out) {
        return usage_exit("%s", "export needs CKPT_DIR and --out DIR (see zerotrain help export)");
    }
    zt_status st = export_run(&rq, stdout);
    if (st != ZT_OK)
        print_error(st);
    return zt_status_exit_code(st);
}

/* A positive integer option's value, or 0. */
static int positive_int(const char *text)
{
    char *end;
    const long v = strtol(text, &end, 10);
    return *end == '\0' && v > 0 && v <= 100000000 ? (int)v : 0;
}

/* Reads one plan option with a value at argv[*i]; returns 0 for a flag it
 * does not know, -1 (usage printed) for a bad value. */
static int plan_option(int argc, char **argv, int *i, struct plan_options *o,
                       struct config_override *ov)
{
    const char *arg = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    static const char *const takes_value[] = {"--gpus",    "--gpus-per-node", "--gpu-memory",
                                              "--machine", "--global-batch",  "--top",
                                              "--json",    "--set",           "--keep"};
    size_t k = 0;
    while (k < sizeof takes_value / sizeof takes_value[0] && strcmp(arg, takes_value[k]) != 0)
        k++;
    if (k == sizeof takes_value / sizeof takes_value[0])
        return 0;
    if (!v)
        return usage_exit("%s needs a value (see zerotrain help plan)", arg), -1;
    (*i)++;
    const int n = positive_int(v);
    if ((k == 0 || k == 1 || k == 4 || k == 5) && !n) {
        char fmt[64];
        snprintf(fmt, sizeof fmt, "%s: '%%s' is not a positive whole number", arg);
        return usage_exit(fmt, v), -1;
    }
    if (k == 0) {
        o->gpus = n;
    } else if (k == 1) {
        o->per_node = n;
    } else if (k == 4) {
        o->global_batch = n;
    } else if (k == 5) {
        o->top = n;
    } else if (k == 2 && !zt_size_parse(v, &o->gpu_memory)) {
        return usage_exit("--gpu-memory: '%s' is not a size (80GiB, 40GB, or bytes)", v), -1;
    } else if (k == 3) {
        o->machine = v;
    } else if (k == 6) {
        o->json_path = v;
    } else if (k == 7) {
        if (o->n_overrides == MAX_OVERRIDES)
            return usage_exit("too many --set options (at most %s)", "256"), -1;
        ov[o->n_overrides++].assignment = v;
    } else if (k == 8) {
        if (o->n_keep == PLAN_MAX_KEEP)
            return usage_exit("too many --keep options (at most %s)", "8"), -1;
        o->keep[o->n_keep++] = v;
    }
    return 1;
}

static int run_plan(int argc, char **argv)
{
    struct config_override overrides[MAX_OVERRIDES];
    struct plan_options o = {.overrides = overrides, .top = 10};
    for (int i = 0; i < argc; i++) {
        const int r = plan_option(argc, argv, &i, &o, overrides);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        if (strcmp(argv[i], "--all") == 0)
            o.all = 1;
        else if (argv[i][0] == '-' && argv[i][1] != '\0')
            return usage_exit("'%s': unknown option (see zerotrain help plan)", argv[i]);
        else if (!o.config_path)
            o.config_path = argv[i];
        else
            return usage_exit("unexpected argument '%s': one CONFIG file only", argv[i]);
    }
    if (!o.config_path || !o.gpus)
        return usage_exit("%s", "plan needs CONFIG and --gpus N (see zerotrain help plan)");
    zt_status st = plan_run(&o, stdout);
    if (st != ZT_OK)
        print_error(st);
    return zt_status_exit_code(st);
}

/* calibrate: parse, run under MPI like train, print once, agree on the
 * exit code. Every rank parses the same arguments alike. */
static int run_calibrate(int argc, char **argv)
{
    char command[2048] = "zerotrain calibrate";
    struct calibrate_options o = {.command_line = command};
    int print_here = 0;
    zt_status st = comm_runtime_init(NULL, NULL);
    if (st != ZT_OK) {
        print_error(st);
        return zt_status_exit_code(st);
    }
    for (int i = 0; i < argc; i++) {
        const size_t used = strlen(command);
        snprintf(command + used, sizeof command - used, " %s", argv[i]);
    }
    for (int i = 0; i < argc && st == ZT_OK; i++) {
        const char *arg = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const int takes_value = strcmp(arg, "--out") == 0 || strcmp(arg, "--name") == 0 ||
                                strcmp(arg, "--device-memory") == 0 ||
                                strcmp(arg, "--nvme-path") == 0;
        if (strcmp(arg, "--quick") == 0)
            o.quick = 1;
        else if (!takes_value)
            st =
                usage_error("'%s': unknown option or argument (see zerotrain help calibrate)", arg);
        else if (!v)
            st = usage_error("%s needs a value (see zerotrain help calibrate)", arg);
        else if (strcmp(arg, "--out") == 0)
            o.out_path = v;
        else if (strcmp(arg, "--name") == 0)
            o.name = v;
        else if (strcmp(arg, "--nvme-path") == 0)
            o.nvme_path = v;
        else if (!zt_size_parse(v, &o.device_memory))
            st = usage_error("--device-memory: '%s' is not a size (64GiB, 512GB, or bytes)", v);
        i += takes_value;
    }
    if (st == ZT_OK && !o.out_path)
        st = usage_error("%s", "calibrate needs --out FILE (see zerotrain help calibrate)");
    if (st != ZT_OK)
        print_here = comm_world_rank() == 0;
    else
        st = calibrate_run(&o, stdout, &print_here);
    if (st != ZT_OK && print_here)
        print_run_error(st);
    comm_runtime_finalize();
    return zt_status_exit_code(st);
}

/* plot's --rank value, or -1 for what is not a rank. */
static int rank_arg(const char *v)
{
    char *end;
    const long r = strtol(v, &end, 10);
    return end != v && *end == '\0' && r >= 0 && r <= 100000000 ? (int)r : -1;
}

/* plot: RUN_DIR... and its two options; no MPI. */
static int run_plot(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(plot_help, stdout);
            return 0;
        }
    struct plot_options o = {.rank = -1};
    const char **runs = calloc((size_t)argc + 1, sizeof *runs);
    int usage = runs ? 0 : usage_exit("%s", "out of memory");
    for (int i = 0; i < argc && !usage; i++) {
        const char *arg = argv[i];
        const int takes_value = strcmp(arg, "--out") == 0 || strcmp(arg, "--rank") == 0;
        if (takes_value && i + 1 == argc)
            usage = usage_exit("%s needs a value (see zerotrain help plot)", arg);
        else if (strcmp(arg, "--out") == 0)
            o.out_dir = argv[++i];
        else if (strcmp(arg, "--rank") == 0 && (o.rank = rank_arg(argv[++i])) < 0)
            usage = usage_exit("--rank: '%s' is not a rank (0, 1, ...)", argv[i]);
        else if (!takes_value && arg[0] == '-' && arg[1] != '\0')
            usage = usage_exit("'%s': unknown option (see zerotrain help plot)", arg);
        else if (!takes_value)
            runs[o.n_runs++] = arg;
    }
    if (!usage && o.n_runs == 0)
        usage = usage_exit("%s", "plot needs at least one RUN_DIR (see zerotrain help plot)");
    o.runs = runs;
    const zt_status st = usage ? ZT_ERR_USAGE : plot_run(&o, stdout);
    free(runs);
    if (st != ZT_OK && !usage)
        print_error(st);
    return usage ? usage : zt_status_exit_code(st);
}

int cli_main(int argc, char **argv, volatile sig_atomic_t *stop,
             const struct ckpt_fault_hooks *faults)
{
    if (argc < 2) {
        fputs(usage_text, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "train") == 0)
        return run_mpi_command(1, argc - 2, argv + 2, stop, faults);
    if (strcmp(cmd, "eval") == 0)
        return run_mpi_command(0, argc - 2, argv + 2, stop, faults);
    if (strcmp(cmd, "generate") == 0)
        return generate_command(argc - 2, argv + 2, stdout, stderr);
    if (strcmp(cmd, "prepare") == 0)
        return run_prepare(argc - 2, argv + 2);
    if (strcmp(cmd, "tokenize") == 0)
        return tokenize_command(argc - 2, argv + 2, stdin, stdout, stderr);
    if (strcmp(cmd, "export") == 0)
        return run_export(argc - 2, argv + 2);
    if (strcmp(cmd, "plan") == 0)
        return run_plan(argc - 2, argv + 2);
    if (strcmp(cmd, "calibrate") == 0)
        return run_calibrate(argc - 2, argv + 2);
    if (strcmp(cmd, "plot") == 0)
        return run_plot(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("zerotrain %s\n", ZT_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return run_help(argc - 2, argv + 2);
    fprintf(stderr, "zerotrain: error: unknown command '%s'\n%s", cmd, usage_text);
    return 2;
}
