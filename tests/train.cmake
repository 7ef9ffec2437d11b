zt_test(test_dist SOURCES test_dist.c LIBS zt_coordinator RANKS 1 2 3 4 TIMEOUT 300)
zt_test(test_cli SOURCES test_cli.c LIBS zt_common TIMEOUT 600 LAUNCHES_MPI)
# docs/reference/config.md and cli.md against what the binary generates
# (zerotrain help --reference config|cli); scripts/docs.sh rewrites them.
zt_test(test_docs SOURCES test_docs.c LIBS zt_common TIMEOUT 60)
zt_test(test_resume SOURCES test_resume.c LIBS zt_common TIMEOUT 600 LAUNCHES_MPI)
zt_test(test_watchdog SOURCES test_watchdog.c LIBS zt_common TIMEOUT 300 LAUNCHES_MPI)
# zerotrain with checkpoint fault injection, for test_resume's crash test.
add_executable(zerotrain_faulty zerotrain_faulty.c)
target_link_libraries(zerotrain_faulty PRIVATE zt_cli)
zt_test(test_frozen SOURCES test_frozen.c LIBS zt_coordinator RANKS 1 2 3 TIMEOUT 300)
# ZeRO-Offload on the CPU (the engine's offload_force): bit-identical to
# the non-offloaded run in every stage, precision and optimizer kind;
# checkpoints crossing both ways; the host bytes against the ledger.
zt_test(test_offload SOURCES test_offload.c micro_session.c LIBS zt_coordinator RANKS 1 2 3 TIMEOUT 600)
# ZeRO-Infinity (offload_optimizer device nvme): bit-identical to no offload
# in every stage with a window far smaller than a unit; checkpoints both
# ways; the window in the ledger, the file apart; bad folders and full disks.
zt_test(test_nvme SOURCES test_nvme.c micro_session.c LIBS zt_coordinator RANKS 1 2 TIMEOUT 900)
zt_test(test_trajectory SOURCES test_trajectory.c LIBS zt_coordinator RANKS 2 TIMEOUT 600)
# OpenBLAS's Haswell kernels on every x86-64 CPU with AVX2: the recorded
# losses are bit-exact, and oneDNN's kernels (the default) follow the CPU's
# ISA and cache sizes, as OpenBLAS's own choice would.
set_property(TEST test_trajectory_np2 APPEND PROPERTY ENVIRONMENT
             "OPENBLAS_CORETYPE=Haswell;ZT_CPU_GEMM=openblas")
# The instrumented binary differs in the last bits (see the suite's comment).
if(ZT_SANITIZE)
  target_compile_definitions(test_trajectory PRIVATE ZT_TRAJECTORY_TOLERANCE=1e-3)
endif()
zt_test(test_optim_reference SOURCES test_optim_reference.c LIBS zt_coordinator RANKS 1 2 TIMEOUT 300)
zt_test(test_optim_layouts SOURCES test_optim_layouts.c LIBS zt_common TIMEOUT 900 LAUNCHES_MPI)
# What eval, export and training take as their weights, and what they say about it.
zt_test(test_eval_cmd SOURCES test_eval_cmd.c LIBS zt_common TIMEOUT 600 LAUNCHES_MPI)
# zerotrain generate: a trained model continues its text; refusals.
zt_test(test_generate SOURCES test_generate.c LIBS zt_common TIMEOUT 900 LAUNCHES_MPI)
# Greedy generate of a GPT-2 and a Llama (GQA) from their final folders
# against scripts/reference/hf_greedy.py (PyTorch), 64 tokens; 77 without torch.
# A Qwen2 config.json (q, k, v biases; tied and untied) trained 8 SGD steps
# by zerotrain and by PyTorch (scripts/reference/qwen2_train.py) from the same
# folder: per-step losses and the export's loss within 1e-4; skipped without torch.
zt_test(test_qwen2_torch SOURCES test_qwen2_torch.c LIBS zt_common TIMEOUT 900 LAUNCHES_MPI)
# A Llama-3-shaped model (vocabulary 128,256, GQA, rope_theta 500000) fine-tuned
# with LoRA on chat JSONL under ZeRO 3 at 2 ranks: the llama3 template's mask
# token by token against scripts/reference/llama3_chat.py's rendering, and the
# merged export's loss against PyTorch's within 1e-3; skipped without torch.
zt_test(test_chat_torch SOURCES test_chat_torch.c LIBS zt_data TIMEOUT 900 LAUNCHES_MPI)
zt_test(test_generate_torch SOURCES test_generate_torch.c LIBS zt_common TIMEOUT 600 LAUNCHES_MPI)
zt_test(test_outputs SOURCES test_outputs.c LIBS zt_common TIMEOUT 600 LAUNCHES_MPI)
# The memory timeline and summary against the ledger and the memory report.
zt_test(test_memtimeline SOURCES test_memtimeline.c LIBS zt_common TIMEOUT 600 LAUNCHES_MPI)
# The Llama family across stages, world sizes, precisions and checkpointing.
zt_test(test_llama_layouts SOURCES test_llama_layouts.c LIBS zt_common TIMEOUT 900 LAUNCHES_MPI)
# LoRA on both families across stages, world sizes, precisions and resume.
zt_test(test_lora_layouts SOURCES test_lora_layouts.c LIBS zt_common TIMEOUT 900 LAUNCHES_MPI)
# Fine-tuning checkpoints in PEFT's format: export --adapter and --merge,
# lora.init_from, checkpoints that keep only what trains, a changed base.
zt_test(test_peft SOURCES test_peft.c LIBS zt_formats TIMEOUT 900 LAUNCHES_MPI)
# JSONL instruction data through the binary: training, stages and world
# sizes, the loss mask, GPT-2's tokenizer, a bad line on every rank.
zt_test(test_jsonl_train SOURCES test_jsonl_train.c LIBS zt_common TIMEOUT 900 LAUNCHES_MPI)
# Pipeline parallelism with ZeRO data parallelism: layouts' losses, reports.
# Two tests that run side by side: the cases tagged "layouts", the rest.
zt_test(test_pipeline SOURCES test_pipeline.c LIBS zt_coordinator TIMEOUT 900 LAUNCHES_MPI
        SPLIT layouts)
# GPT-2's vocabulary of 50,257 padded for tensor parallelism: T=1, 2, 4
# against an unpadded rank, checkpoints resharded across the padding,
# the export's true vocabulary loaded in PyTorch.
zt_test(test_vocab_padding SOURCES test_vocab_padding.c LIBS zt_common TIMEOUT 900 LAUNCHES_MPI)
# zerotrain plan: each role's ledger peaks and each axis's bytes equal a
# measured run's at 1-4 ranks across layouts; the ZeRO paper's model states
# and Korthikanti et al.'s activations per layer from planned roles.
zt_test(test_plan SOURCES test_plan.c LIBS zt_plan TIMEOUT 900 LAUNCHES_MPI)
# Node-aware ZeRO at 4 ranks as 2 simulated nodes x 2: hpZ and HSDP against
# flat ZeRO (losses, each link class's bytes by formula, the secondary copy
# in the report and the dry run), refusals, checkpoints resumed and resharded.
zt_test(test_hier SOURCES test_hier.c LIBS zt_coordinator TIMEOUT 600 LAUNCHES_MPI)
# zerotrain calibrate: the link fit, and the binary under mpirun (--quick).
zt_test(test_calibrate SOURCES test_calibrate.c LIBS zt_plan TIMEOUT 300 LAUNCHES_MPI)
# fp8 training through the binary: layouts against one rank, checkpointing,
# configs/tiny.yaml against bf16 (300 steps; 40 in the sanitizer build), the
# dry run's fp8 buffers, refusals.
zt_test(test_fp8_train SOURCES test_fp8_train.c LIBS zt_common TIMEOUT 600 LAUNCHES_MPI
        SPLIT curve)
if(ZT_SANITIZE)
  target_compile_definitions(test_fp8_train PRIVATE ZT_FP8_TRAIN_SANITIZED=1)
endif()
# Non-finite steps through the binary (and zerotrain_faulty's poisoned
# forwards): run.on_nonfinite stop and skip, the first non-finite value and
# its report, the skip limit, the key's refusals, fp16's overflows.
zt_test(test_nonfinite SOURCES test_nonfinite.c LIBS zt_common TIMEOUT 600 LAUNCHES_MPI)
# model.init_from on a sharded folder written by scripts/bench/make_weights.py
# (numpy; skipped without it): one file's losses at one rank bit for bit,
# at 2 and 4 ranks under every stage, fp32, bf16 and QLoRA; the loader's
# staging below an fp32 copy of the model; a truncated shard refused.
zt_test(test_load SOURCES test_load.c LIBS zt_common TIMEOUT 1800 LAUNCHES_MPI SPLIT qlora)
# Context parallelism: its layouts' losses against one rank's, activations
# per rank, refusals.
zt_test(test_context_parallel SOURCES test_context_parallel.c LIBS zt_common TIMEOUT 900 LAUNCHES_MPI)
