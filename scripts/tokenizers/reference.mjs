// Encodes each text of a corpus with an npm package's own encoder and prints
// the ids, one JSON array a line: what the tokenizer tests compare
// zerotrain's ids with.
//
//   node scripts/tokenizers/reference.mjs NAME NODE_MODULES CORPUS.json
//
// CORPUS.json is an array of strings. NODE_MODULES is where
// scripts/tokenizers.sh unpacked the packages. Special tokens written in a
// text are those tokens, as Hugging Face's tokenizers and tiktoken's
// allowed_special="all" take them. llama-tokenizer-js and
// mistral-tokenizer-js do not look for them: the text is cut at them here
// and each part encoded on its own, with its own leading "▁" (the legacy
// normalizer of Llama 2's and Mistral's tokenizer.json does the same).
import fs from "node:fs";
import path from "node:path";

const [name, modules, corpusPath] = process.argv.slice(2);
const corpus = JSON.parse(fs.readFileSync(corpusPath, "utf8"));
const pkg = (p) => path.join(modules, p);

function sentencepiece(tok, specials) {
  const re = new RegExp(Object.keys(specials).map((s) => s.replace(/[|<>/]/g, "\\$&")).join("|"),
                        "g");
  return (text) => {
    const ids = [];
    let at = 0;
    for (const m of text.matchAll(re)) {
      if (m.index > at) ids.push(...tok.encode(text.slice(at, m.index), false, true));
      ids.push(specials[m[0]]);
      at = m.index + m[0].length;
    }
    if (at < text.length) ids.push(...tok.encode(text.slice(at), false, true));
    return ids;
  };
}

async function tiktoken(module) {
  const {Tiktoken} = await import(pkg("js-tiktoken/dist/lite.js"));
  const ranks = (await import(pkg("js-tiktoken/dist/ranks/" + module))).default;
  const enc = new Tiktoken(ranks);
  return (text) => enc.encode(text, "all");
}

const encoders = {
  llama3: async () => {
    const tok = (await import(pkg("llama3-tokenizer-js/bundle/llama3-tokenizer-with-baked-data.js")))
                    .default;
    return (text) => tok.encode(text, {bos: false, eos: false});
  },
  llama2: async () => sentencepiece((await import(pkg("llama-tokenizer-js/llama-tokenizer.js")))
                                        .default, {"<unk>": 0, "<s>": 1, "</s>": 2}),
  mistral: async () => sentencepiece((await import(pkg("mistral-tokenizer-js/mistral-tokenizer.js")))
                                         .default, {"<unk>": 0, "<s>": 1, "</s>": 2}),
  cl100k: () => tiktoken("cl100k_base.js"),
  o200k: () => tiktoken("o200k_base.js"),
};
if (!encoders[name]) {
  console.error(`reference.mjs: no tokenizer ${name} (${Object.keys(encoders).join(", ")})`);
  process.exit(2);
}
const encode = await encoders[name]();
for (const text of corpus) process.stdout.write(JSON.stringify(encode(text)) + "\n");
