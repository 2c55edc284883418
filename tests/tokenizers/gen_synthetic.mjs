// Small tokenizer.json files, one per group of components the five real ones
// do not use, and what Rust tokenizers (npm @anush008/tokenizers 0.6.0 =
// tokenizers 0.22.2) encodes and decodes with them: synthetic.json, read by
// tests/test_tokenizer.c.
//   npm i @anush008/tokenizers@0.6.0 (in a directory outside the repo)
//   TOKREF_DIR=<that directory> node gen_synthetic.mjs > synthetic.json
import path from 'path';
import { createRequire } from 'module';
const require = createRequire(path.join(path.resolve(process.env.TOKREF_DIR || '.'), 'x.js'));
const { Tokenizer } = require('@anush008/tokenizers');

// A character vocabulary (+ prefixed / suffixed forms) and a few merges.
function model(extra = {}) {
  const chars = [];
  for (let c = 32; c < 127; c++) chars.push(String.fromCharCode(c));
  for (const c of 'éèçÅåΩωßñü\u0301\u030a½²ⅫfiΣσς▁') chars.push(c);
  const vocab = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  const add = (t) => { if (!(t in vocab)) vocab[t] = Object.keys(vocab).length; };
  const pre = extra.continuing_subword_prefix || '', suf = extra.end_of_word_suffix || '';
  for (const c of chars) { add(c); if (pre) add(pre + c); if (suf) { add(c + suf); if (pre) add(pre + c + suf); } }
  const merges = [];
  const words = ['he', 'll', 'hel', 'hell', 'hello', 'wo', 'wor', 'world', 'ca', 'caf', 'th', 'the', '12', '123',
    ...(extra.words || [])];
  for (const w of words) {
    // left = w minus last char, right = last char (prefixed when there is a prefix)
    const l = w.slice(0, -1), r = (pre ? pre : '') + w.slice(-1);
    if (!(l in vocab)) continue;
    add(w);
    merges.push([l, r]);
  }
  if (suf) { add('hello' + suf); merges.push(['hell', (pre || '') + 'o' + suf]); }
  for (const b of [0xc3, 0xa9, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x99, 0x82]) add('<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>');
  delete extra.words;
  return { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null,
           fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges, ...extra };
}
function tok(all) {
  const { added, ...parts } = all;
  return { version: '1.0', truncation: null, padding: null, added_tokens: [
      { id: 0, content: '<unk>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
      { id: 1, content: '<s>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
      { id: 2, content: '</s>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
      ...(added || [])],
    normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null, ...parts, model: parts.model || model() };
}
const split = (behavior, invert, pattern) => ({ type: 'Split', pattern, behavior, invert });
const tokenizers = {
  norm_nfkc_lower_strip: tok({ normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKC' }, { type: 'Lowercase' }, { type: 'Strip', strip_left: true, strip_right: true }] },
    pre_tokenizer: { type: 'Whitespace' }, model: model({ fuse_unk: true }) }),
  norm_nfd_replace_regex: tok({ normalizer: { type: 'Sequence', normalizers: [{ type: 'NFD' }, { type: 'Replace', pattern: { Regex: '\\s+' }, content: ' ' }] },
    pre_tokenizer: { type: 'WhitespaceSplit' }, decoder: { type: 'Fuse' } }),
  // Whitespace's \\w is the regex crate's (Alphabetic, marks, Nd, Pc, joiners), not \\p{L}\\p{N}.
  whitespace_plain: tok({ pre_tokenizer: { type: 'Whitespace' }, model: model({ words: ['e\u0301', '²a', 'x½'] }) }),
  punct_digits: tok({ pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Punctuation', behavior: 'Isolated' }, { type: 'Digits', individual_digits: false }] } }),
  // 'the' is in the vocabulary: Rust gives it the vocabulary's id, not 999.
  split_removed: tok({ pre_tokenizer: split('Removed', false, { Regex: '\\s+' }),
    added: [{ id: 999, content: 'the', single_word: false, lstrip: false, rstrip: false, normalized: false, special: false }] }),
  split_prev: tok({ pre_tokenizer: split('MergedWithPrevious', false, { String: ',' }) }),
  split_next: tok({ pre_tokenizer: split('MergedWithNext', false, { Regex: '[,!]' }) }),
  split_contiguous: tok({ pre_tokenizer: split('Contiguous', false, { Regex: '\\d' }) }),
  split_invert: tok({ pre_tokenizer: split('Removed', true, { Regex: '\\p{L}+' }) }),
  metaspace_first: tok({ pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: true },
    decoder: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: true },
    // Ids after the vocabulary's: Rust numbers added tokens so whatever the file says.
    added: [{ id: 138, content: '[X]', single_word: false, lstrip: true, rstrip: true, normalized: false, special: false },
            { id: 139, content: 'ab', single_word: true, lstrip: false, rstrip: false, normalized: false, special: false }] }),
  metaspace_always_nosplit: tok({ pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: false },
    decoder: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: false } }),
  subword_prefix_suffix: tok({ pre_tokenizer: { type: 'WhitespaceSplit' }, model: model({ continuing_subword_prefix: '##', end_of_word_suffix: '</w>' }) }),
  unk_nofuse_bytefallback: tok({ model: model({ byte_fallback: true }), decoder: { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: 'h', start: 1, stop: 1 }] },
    post_processor: { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }],
      pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] }, '</s>': { id: '</s>', ids: [2], tokens: ['</s>'] } } } }),
  bytelevel_prefix_space: tok({ pre_tokenizer: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }, model: null }),
};
// A byte-level model: the 256 byte characters and a few merges.
{
  const bs = []; for (let b = 33; b <= 126; b++) bs.push(b); for (let b = 161; b <= 172; b++) bs.push(b); for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice(); let n = 0; for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  const vocab = {}; bs.forEach((b, i) => { vocab[String.fromCodePoint(cs[i])] = i + 3; });
  vocab['<unk>'] = 0; vocab['<s>'] = 1; vocab['</s>'] = 2;
  const merges = [['Ġ', 'h'], ['Ġh', 'e'], ['l', 'l'], ['Ġhe', 'll'], ['Ġhell', 'o']];
  let id = 300; for (const [a, b] of merges) vocab[a + b] = id++;
  tokenizers.bytelevel_prefix_space.model = { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges };
}
const texts = ['Hello, World! 123 ½², Ⅻ', '  hello   world  ', 'Café ÅΩ ﬁ ΣΑΣ', 'hello[X]  world [X] hell hello', 'x€😂y hello',
  'a,b,,c!d', 'the 12345 the', '<s>hello</s>', 'ab xaby ab,ab', 'İstanbul', 'oh hah h', 'e\u0301x ½a a\u203fb 2²', ''];
const out = { generator: 'gen_synthetic.mjs', library: '@anush008/tokenizers@0.6.0 (tokenizers 0.22.2)', tokenizers: [] };
for (const [name, j] of Object.entries(tokenizers)) {
  const t = Tokenizer.fromString(JSON.stringify(j));
  const cases = [];
  // Rust's Strip decoder panics on an empty string when stop > 0.
  for (const text of texts.filter((x) => x || name !== 'unk_nofuse_bytefallback')) for (const add of [false, true]) {
    const e = await t.encode(text, null, { addSpecialTokens: add });
    const ids = Array.from(e.getIds());
    cases.push({ text, add_special: add, ids, decoded: await t.decode(ids, false), decoded_skip: await t.decode(ids, true) });
  }
  out.tokenizers.push({ name, tokenizer: j, cases });
}
process.stdout.write(JSON.stringify(out) + '\n');
