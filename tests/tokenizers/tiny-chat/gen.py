#!/usr/bin/env python3
# Writes tokenizer.json and tokenizer_config.json here: a byte-level BPE of
# 256 byte tokens and a few merges, ChatML's markers, a BOS the
# post-processor adds, and SmolLM2's ChatML template; 280 ids, small enough
# for the 512-row fixture models (tests/test_prefix_run_text.c).
import json, os

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))

here = os.path.dirname(os.path.abspath(__file__))
added = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>"]
vocab = {t: i for i, t in enumerate(added)}
b2u = bytes_to_unicode()
for b in range(256):
    vocab[b2u[b]] = len(vocab)
merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("l", "l"), ("e", "ll"), ("H", "ell"),
          ("Hell", "o"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or"), ("Ġwor", "l"), ("Ġworl", "d"),
          ("u", "s"), ("Ġ", "us"), ("Ġus", "e"), ("e", "r"), ("Ġ", "a"), ("i", "s"),
          ("Ġ", "is"), ("o", "n")]
for a, b in merges:
    vocab[a + b] = len(vocab)
tok = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True}
                     for i, t in enumerate(added)],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                      "use_regex": True},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                  {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                {"Sequence": {"id": "A", "type_id": 0}},
                                {"Sequence": {"id": "B", "type_id": 1}}],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [3], "tokens": ["<s>"]}}},
    "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None,
              "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
              "byte_fallback": False, "ignore_merges": False, "vocab": vocab,
              "merges": [a + " " + b for a, b in merges]},
}
with open(os.path.join(here, "tokenizer.json"), "w") as f:
    json.dump(tok, f, ensure_ascii=False)
with open(os.path.join(here, "..", "chat", "smollm2_chatml.jinja")) as f:
    template = f.read()
cfg = {"bos_token": "<s>", "eos_token": "<|im_end|>", "clean_up_tokenization_spaces": False,
       "chat_template": template}
with open(os.path.join(here, "tokenizer_config.json"), "w") as f:
    json.dump(cfg, f, ensure_ascii=False, indent=1)
print(len(vocab), "ids")
