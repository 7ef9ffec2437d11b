#!/usr/bin/python3
"""chat_jinja.py — renders a model folder's chat template as Hugging Face's
apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
does: the Jinja text of tokenizer_config.json's "chat_template" in a
sandboxed jinja2 environment with trim_blocks and lstrip_blocks and a
raise_exception that fails, as transformers sets it up (no transformers
package needed). The tests compare the text with zerotrain's own rendering.

Prints the rendered text, nothing after it. Exits 77 without jinja2.

Usage: python3 scripts/reference/chat_jinja.py TOKENIZER_CONFIG_JSON MESSAGES_JSON
"""
import json
import sys

try:
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("chat_jinja.py: no jinja2", file=sys.stderr)
    sys.exit(77)


def raise_exception(message):
    raise TemplateError(message)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        config = json.load(f)
    with open(sys.argv[2], encoding="utf-8") as f:
        messages = json.load(f)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(config["chat_template"])
    sys.stdout.write(template.render(messages=messages, add_generation_prompt=True))


if __name__ == "__main__":
    main()
