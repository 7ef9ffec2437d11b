/* tests/fuzz/peft_table.c — see peft_table.h. */
#include "peft_table.h"

#include <stdio.h>
#include <stdlib.h>

#include "../../formats/hf_weights.h"
#include "../../worker/model.h"

static const char *const targets[] = {"c_attn"};
static const struct lora_spec spec = {.r = 2, .alpha = 4, .targets = targets, .n_targets = 1};

const struct lora_spec *fuzz_peft_spec(void)
{
    return &spec;
}

void fuzz_peft_table(struct param_table *t)
{
    const struct gpt2_config micro = {16, 8, 1, 2, 8};
    char **modules = NULL;
    if (gpt2_table_build(&micro, t) != ZT_OK || hf_weights_module_names(t, &modules) != ZT_OK ||
        lora_attach(t, &spec, (const char *const *)modules) != ZT_OK) {
        fprintf(stderr, "fuzz_peft_table: %s\n", zt_error_message());
        abort();
    }
    free(modules);
}
