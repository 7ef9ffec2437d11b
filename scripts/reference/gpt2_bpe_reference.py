#!/usr/bin/env python3
"""Expected GPT-2 token ids for tests/test_bpe.c, from a plain-Python
encoder written from the description of GPT-2's encoder.py:

    /usr/bin/python3 scripts/reference/gpt2_bpe_reference.py \\
        --vocab ~/.cache/zerotrain/gpt2 --out tests/data/gpt2_bpe_reference.txt

--vocab is the folder scripts/gpt2_vocab.sh fills (encoder.json and
vocab.bpe). Needs the `regex` module (Debian: python3-regex), the one
GPT-2's encoder uses: its \\p{L}, \\p{N} and \\s are what the pattern means.

The encoder:
  - bytes_to_unicode: the printable bytes ! .. ~, 0xA1 .. 0xAC and
    0xAE .. 0xFF are characters of their own value; the other 68 bytes, in
    increasing order, are U+0100, U+0101, ...;
  - the text is the input bytes decoded as UTF-8 with surrogateescape (a
    byte that is not part of valid UTF-8 becomes the lone surrogate
    U+DC00 + byte, which is no letter, number or white space);
  - regex.findall of the pattern below cuts it into pieces; each piece is
    encoded back to its bytes (surrogateescape again), each byte written as
    its character;
  - BPE on each piece: while two adjacent parts form a merge of vocab.bpe,
    take the pair of lowest rank (line number, first merge 0) and join every
    occurrence of it, scanning left to right without overlap;
  - each part's id from encoder.json.
Every case is also decoded back and compared with its input.

Output, one case a line after the '#' comments, tab-separated:
    name  source  ids
source is hex:<the input bytes in hex> or file:<a path under the
repository root> (read as bytes); ids are decimal, space-separated.
"""

import argparse
import json
import os
import random
import sys

try:
    import regex
except ImportError:
    sys.exit("gpt2_bpe_reference.py: needs the regex module (Debian package python3-regex)")

PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def byte_characters():
    """byte -> the character that stands for it in the vocabulary files."""
    printable = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(0x100 + extra)
            extra += 1
    return out


class Reference:
    def __init__(self, folder):
        with open(os.path.join(folder, "encoder.json"), encoding="utf-8") as f:
            self.ids = json.load(f)
        self.tokens = {i: t for t, i in self.ids.items()}
        with open(os.path.join(folder, "vocab.bpe"), encoding="utf-8") as f:
            lines = f.read().split("\n")
        assert lines[0].startswith("#") and lines[-1] == ""
        self.rank = {}
        for n, line in enumerate(lines[1:-1]):
            left, right = line.split(" ")
            self.rank[(left, right)] = n
        self.char = byte_characters()
        self.byte = {c: b for b, c in self.char.items()}

    def merge(self, parts):
        while len(parts) > 1:
            pairs = [(self.rank.get((parts[i], parts[i + 1])), i) for i in range(len(parts) - 1)]
            ranked = [p for p in pairs if p[0] is not None]
            if not ranked:
                return parts
            _, i = min(ranked)
            pair = (parts[i], parts[i + 1])
            joined, j = [], 0
            while j < len(parts):
                if j + 1 < len(parts) and (parts[j], parts[j + 1]) == pair:
                    joined.append(parts[j] + parts[j + 1])
                    j += 2
                else:
                    joined.append(parts[j])
                    j += 1
            parts = joined
        return parts

    def encode(self, data):
        text = data.decode("utf-8", errors="surrogateescape")
        out = []
        for piece in PATTERN.findall(text):
            raw = piece.encode("utf-8", errors="surrogateescape")
            out.extend(self.ids[p] for p in self.merge([self.char[b] for b in raw]))
        return out

    def decode(self, ids):
        return bytes(self.byte[c] for i in ids for c in self.tokens[i])


def named_cases():
    """Hand-picked texts: each is one behaviour of the pattern or the merges."""
    t = [
        ("hello_world", "Hello world"),
        ("empty", ""),
        ("contractions", "I'm sure you'll see they've said it's John's; we'd say they're "
                         "DON'T I'M IT'S JOHN'SON HE'LL WE'VE x'Re 'S 're 'd O'Reilly "
                         "'Sam 'Tom 'Mary 'Dave 'LLama 'Vera"),
        ("apostrophes", "rock'n'roll ''s '''ll x'y ' 's it\u2019s \u2018quoted\u2019 ?'s"),
        ("numbers", "In 2023, 3.14159 and 1,000,000 people; 007 +42 -7 1e10 0x1F"),
        ("number_classes", "\u00bd \u00b2 \u0663\u0664 \u0967\u0968 \u216b \uff11\uff12 "
                           "\u2460 x\u00b2y"),
        ("spaces", "a  b   c    d\t\te\n\n\nf \n g  \n"),
        ("space_runs_at_end", "end with spaces   "),
        ("only_spaces", "     "),
        ("leading_spaces", "   lead  \t x"),
        ("newlines", "line1\r\nline2\r\n\r\n\n\nline3\n"),
        ("tabs", "\tindented\n\t\tmore\t\t\n\t"),
        ("latin", "caf\u00e9 na\u00efve r\u00e9sum\u00e9 Z\u00fcrich \u00c6r\u00f8 \u00df "
                  "\u0141\u00f3d\u017a"),
        ("combining", "e\u0301t\u00e9 n\u0303 a\u0308\u0308"),
        ("cjk", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u4e2d\u6587\u6587\u672c"
                "\u3002"),
        ("scripts", "\ud55c\uad6d\uc5b4 \u0645\u0631\u062d\u0628\u0627 "
                    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0417\u0434\u0440\u0430\u0432\u0441"
                    "\u0442\u0432\u0443\u0439 \u03ba\u03cc\u03c3\u03bc\u03b5"),
        ("emoji", "emoji \U0001f44d\U0001f3fd \U0001f916\U0001f389 \u2764\ufe0f "
                  "\U0001f468\u200d\U0001f469\u200d\U0001f467!"),
        ("unicode_spaces", "nbsp\u00a0here\u3000ideographic\u2028sep \u2003em\u0085nel "
                           "\u00a0 x \u200bzwsp"),
        ("punctuation", "Hello!!! What?! (yes) [no] {maybe} --- ... \"quoted\" `code` "
                        "a.b,c;d:e"),
        ("code", "def f(x):\n    return x**2 + 1  # comment\n\n\nclass A:\n\tpass\n"),
        ("endoftext_is_text", "text <|endoftext|> more<|endoftext|>"),
        ("long_word", "Supercalifragilisticexpialidocious " + "a" * 300 + " " + "ab" * 150),
        ("control", "bell\x07 nul\x00 esc\x1b[0m \x1c\x1d\x1e\x1f us"),
        ("unicode15_letters", "\U00011f04\U00011f05\U00011f06 \U00031350"),
    ]
    cases = [(name, s.encode("utf-8")) for name, s in t]
    cases += [
        ("invalid_bytes", b"abc\xff\xfedef \xff\xfe x"),
        ("invalid_truncated", b"\xc3( \xe2\x82 x \xf0\x9f\x98 y \xe2\x82"),
        ("invalid_surrogate", b"\xed\xa0\x80 surrogate \xed\x9f\xbf ok"),
        ("invalid_overlong", b"\xc0\xaf \xe0\x80\xaf \xf0\x80\x80\xaf overlong"),
        ("invalid_too_large", b"\xf4\x90\x80\x80 \xf5\x80 \xf4\x8f\xbf\xbf too big"),
        ("invalid_continuations", b" \x80\x80 hello \xbf world\x80"),
        ("invalid_near_letters", b"ab\xffcd 12\xff34 \xff\xff \n\xff\n"),
    ]
    return cases


# Pieces for random texts: each class, the pattern's corners, bytes that are
# not UTF-8.
POOL = (["a", "b", "e", "s", "t", "the", "The", "ing", "re", "ll", "X", "Z", "0", "1", "42",
         "2024", " ", " ", " ", "  ", "\n", "\n\n", "\t", "\r\n", "'", "'s", "'ll", "'ve", "'T",
         ".", ",", "!", "?", "-", "(", ")", "\"", "#", "$", "@", "_", "/", "\\"]
        + ["\u00e9", "\u00df", "\u00c5", "\u65e5", "\u672c", "\u3002", "\U0001f600", "\u00a0",
           "\u3000", "\u00b2", "\u0663", "\u0301", "\u200d", "\u2028", "\u0416", "\u05d0"])
VALID = [s.encode("utf-8") for s in POOL]
INVALID = VALID + [b"\xff", b"\x80", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf0\x9f"]


def random_cases():
    rng = random.Random(20240611)
    cases = []
    for k in range(40):
        pool = VALID if k < 20 else INVALID
        cases.append(("mixed_%02d" % k, b"".join(rng.choice(pool)
                                                  for _ in range(rng.randint(20, 200)))))
    for k in range(8):
        cases.append(("bytes_%02d" % k, bytes(rng.randrange(256)
                                             for _ in range(rng.randint(64, 512)))))
    return cases


FILE_CASES = [("license", "LICENSE"), ("corpus", "tests/data/trajectory_corpus.txt")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", required=True, help="folder with encoder.json and vocab.bpe")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    ref = Reference(args.vocab)
    rows = []
    for name, data in named_cases() + random_cases():
        rows.append((name, "hex:" + data.hex(), data))
    for name, rel in FILE_CASES:
        with open(os.path.join(ROOT, rel), "rb") as f:
            rows.append((name, "file:" + rel, f.read()))
    with open(args.out, "w", encoding="ascii") as out:
        out.write("# GPT-2 token ids, written by scripts/reference/gpt2_bpe_reference.py; do not\n"
                  "# edit. name<TAB>source (hex:BYTES or file:PATH)<TAB>ids\n")
        for name, source, data in rows:
            ids = ref.encode(data)
            assert ref.decode(ids) == data, name
            out.write("%s\t%s\t%s\n" % (name, source, " ".join(map(str, ids))))
    assert ref.encode(b"Hello world") == [15496, 995]


if __name__ == "__main__":
    main()
