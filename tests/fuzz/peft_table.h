/* tests/fuzz/peft_table.h — the model whose adapters fuzz_peft reads and
 * fuzz_seeds writes: a one-block GPT-2 with LoRA (r 2, alpha 4) on c_attn. */
#ifndef ZT_TESTS_FUZZ_PEFT_TABLE_H
#define ZT_TESTS_FUZZ_PEFT_TABLE_H

#include "../../worker/lora.h"

/* The adapters' spec (static). */
const struct lora_spec *fuzz_peft_spec(void);

/* Builds the table with its adapters into *t (free with
 * param_table_free); aborts on failure, which is no finding. */
void fuzz_peft_table(struct param_table *t);

#endif
