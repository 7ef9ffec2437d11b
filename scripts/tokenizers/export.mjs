// Writes the vocabulary an npm tokenizer package carries in the files
// zerotrain reads: a Hugging Face tokenizer.json and tokenizer_config.json
// (llama3, llama2, mistral), or a tiktoken rank file (cl100k, o200k).
//
//   node scripts/tokenizers/export.mjs NAME NODE_MODULES OUT_DIR
//
// scripts/tokenizers.sh runs it on packages it has verified. The packages
// keep their vocabularies in compact forms of their own (base64 token lists,
// merges packed as bit fields, ranks in runs); each is read through the
// package's own decoder, so the tokens, ids and merge order written are the
// ones its encoder uses. The output is deterministic: the script checks its
// sha256 against a pinned value.
import fs from "node:fs";
import path from "node:path";

const [name, modules, outDir] = process.argv.slice(2);
if (!name || !modules || !outDir) {
  console.error("usage: export.mjs NAME NODE_MODULES OUT_DIR");
  process.exit(2);
}
const pkg = (p) => path.join(modules, p);

function writeJson(file, value) {
  fs.writeFileSync(path.join(outDir, file), JSON.stringify(value, null, 2) + "\n");
}

function added(id, content) {
  return {id, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
          special: true};
}

// Merges of a package's Map ("A B" -> priority) as tokenizer.json lists them,
// lowest priority first.
function mergeList(map) {
  return [...map.entries()].sort((a, b) => a[1] - b[1]).map(([pair]) => pair.split(" "));
}

function vocabObject(byId, count) {
  const vocab = {};
  for (let id = 0; id < count; id++) vocab[byId[id]] = id;
  return vocab;
}

// Llama 3: byte-level BPE over a Split pre-tokenizer, ignore_merges, and 256
// special tokens after the 128,000 of the model.
async function llama3() {
  const mod = await import(pkg("llama3-tokenizer-js/bundle/llama3-tokenizer-with-baked-data.js"));
  const t = mod.default;
  const nModel = 128000;
  const pattern = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  writeJson("tokenizer.json", {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: t.vocabById.slice(nModel).map((s, i) => added(nModel + i, s)),
    normalizer: null,
    pre_tokenizer: {type: "Sequence", pretokenizers: [
      {type: "Split", pattern: {Regex: pattern}, behavior: "Isolated", invert: false},
      {type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false}]},
    post_processor: null,
    decoder: {type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true},
    model: {type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
            end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: true,
            vocab: vocabObject(t.vocabById, nModel), merges: mergeList(t.merges)},
  });
  writeJson("tokenizer_config.json", {bos_token: "<|begin_of_text|>", eos_token: "<|end_of_text|>",
                                      model_max_length: 131072,
                                      tokenizer_class: "PreTrainedTokenizerFast"});
}

// Llama 2 and Mistral 7B: SentencePiece's BPE as tokenizer.json writes it,
// "▁" for spaces prepended to the text, byte fallback, <unk> <s> </s> at 0-2.
function sentencepiece(t) {
  const n = t.vocabById.length;
  writeJson("tokenizer.json", {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")],
    normalizer: {type: "Sequence", normalizers: [{type: "Prepend", prepend: "\u2581"},
                                                 {type: "Replace", pattern: {String: " "},
                                                  content: "\u2581"}]},
    pre_tokenizer: null,
    post_processor: null,
    decoder: {type: "Sequence", decoders: [
      {type: "Replace", pattern: {String: "\u2581"}, content: " "}, {type: "ByteFallback"},
      {type: "Fuse"}, {type: "Strip", content: " ", start: 1, stop: 0}]},
    model: {type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null,
            end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, ignore_merges: false,
            vocab: vocabObject(t.vocabById, n), merges: mergeList(t.merges)},
  });
  writeJson("tokenizer_config.json", {add_bos_token: true, add_eos_token: false, bos_token: "<s>",
                                      eos_token: "</s>", unk_token: "<unk>",
                                      tokenizer_class: "LlamaTokenizer"});
}

async function llama2() {
  const mod = await import(pkg("llama-tokenizer-js/llama-tokenizer.js"));
  sentencepiece(mod.default);
}

async function mistral() {
  const mod = await import(pkg("mistral-tokenizer-js/mistral-tokenizer.js"));
  sentencepiece(mod.default);
}

// tiktoken's rank file: one "BASE64 RANK" line per token, by rank. js-tiktoken
// stores runs "PREFIX OFFSET TOKEN..." whose tokens have ranks OFFSET, +1, ...
async function tiktoken(file, module) {
  const ranks = (await import(pkg("js-tiktoken/dist/ranks/" + module))).default;
  const lines = [];
  for (const run of ranks.bpe_ranks.split("\n").filter(Boolean)) {
    const [, offset, ...tokens] = run.split(" ");
    tokens.forEach((tok, i) => lines.push([Number.parseInt(offset, 10) + i, tok]));
  }
  lines.sort((a, b) => a[0] - b[0]);
  fs.writeFileSync(path.join(outDir, file), lines.map(([r, tok]) => `${tok} ${r}\n`).join(""));
}

const writers = {
  llama3,
  llama2,
  mistral,
  cl100k: () => tiktoken("cl100k_base.tiktoken", "cl100k_base.js"),
  o200k: () => tiktoken("o200k_base.tiktoken", "o200k_base.js"),
};
if (!writers[name]) {
  console.error(`export.mjs: no tokenizer ${name} (${Object.keys(writers).join(", ")})`);
  process.exit(2);
}
fs.mkdirSync(outDir, {recursive: true});
await writers[name]();
