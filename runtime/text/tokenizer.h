/* SPDX-License-Identifier: MIT */
/*
 * The tokenizer's insides (text.h is its face): a tokenizer.json loaded into
 * flat tables, and the stages of an encode (added tokens, normalizer,
 * pre-tokenizer, BPE, post-processor) and a decode (the decoder chain), each
 * in its own file. Everything here is immutable after load.
 */
#ifndef PFX_TEXT_TOKENIZER_H
#define PFX_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text.h"

/* ---- growable byte string and id list (util.c) ---- */
struct tbuf {
	char *p;
	size_t n, cap;
};
int tbuf_put(struct tbuf *b, const void *s, size_t n);
int tbuf_putc(struct tbuf *b, char c);
void tbuf_free(struct tbuf *b);

struct tids {
	int32_t *p;
	size_t n, cap;
};
int tids_put(struct tids *v, int32_t id);

/* The byte length of the UTF-8 sequence starting with c (1 for a stray byte). */
size_t utf8_len(unsigned char c);
/* Decodes the code point at s (valid UTF-8 assumed). */
int32_t utf8_get(const char *s, size_t *len);
size_t utf8_put(char *out, int32_t cp);
/* Offset of the first invalid byte of s[0, n), or n. */
size_t utf8_invalid_at(const char *s, size_t n);

/* ---- strings that live as long as the tokenizer, without a malloc each ---- */
struct arena_block {
	struct arena_block *next;
	size_t used, cap;
	char data[];
};
/* A NUL-terminated copy of s[0, n) in *a; NULL out of memory. */
char *arena_dup(struct arena_block **a, const char *s, size_t n);
/* Room for n bytes and a NUL at the end of *a (NULL out of memory), which
 * arena_commit(*a, m) keeps the first m <= n of. */
char *arena_room(struct arena_block **a, size_t n);
void arena_commit(struct arena_block *a, size_t m);
void arena_free(struct arena_block *a);

/* ---- string -> id hash (util.c) ---- */
struct strmap {
	uint64_t *slot; /* hash's high 32 bits << 32 | entry + 1; 0 empty */
	size_t mask;
	struct strmap_ent {
		const char *key;
		uint32_t klen;
		int32_t val;
	} *ent;
	size_t n, cap;
};
int strmap_put(struct strmap *m, const char *k, size_t klen, int32_t v);
/* Room for n entries without rehashing. */
int strmap_reserve(struct strmap *m, size_t n);
/* -1 when absent. */
int32_t strmap_get(const struct strmap *m, const char *k, size_t klen);
void strmap_free(struct strmap *m);

/* ---- (left id, right id) -> (rank, new id) ---- */
struct merge_map {
	/* One slot a probe: its key, rank and id in one cache line, so an
	 * insert or a hit costs one miss. */
	struct merge_slot {
		uint64_t key; /* (a << 32 | b) + 1, 0 empty */
		uint32_t rank;
		int32_t id;
	} *slot;
	size_t mask, n;
};

/* ---- normalizers (normalize.c) ---- */
enum norm_kind { N_NFC, N_NFD, N_NFKC, N_NFKD, N_PREPEND, N_REPLACE, N_STRIP, N_LOWERCASE };
struct norm {
	enum norm_kind kind;
	char *a; /* Prepend text, Replace's literal pattern */
	char *b; /* Replace's content */
	pcre2_code *re; /* Replace's regex pattern */
	bool left, right; /* Strip */
};

/* ---- pre-tokenizers (pretokenize.c) ---- */
enum pre_kind { P_BYTELEVEL, P_SPLIT, P_DIGITS, P_METASPACE, P_WHITESPACE, P_WSSPLIT, P_PUNCT };
enum split_behavior { B_REMOVED, B_ISOLATED, B_PREV, B_NEXT, B_CONTIGUOUS };
struct pretok {
	enum pre_kind kind;
	pcre2_code *re; /* Split (regex or escaped string), ByteLevel with use_regex */
	enum split_behavior behavior;
	bool invert, flag; /* flag: ByteLevel add_prefix_space, Digits individual, Metaspace split */
	int prepend; /* Metaspace: 0 never, 1 first, 2 always */
	char repl[8]; /* Metaspace replacement (UTF-8) */
};

/* ---- decoders (decode.c) ---- */
enum dec_kind { D_BYTELEVEL, D_BYTEFALLBACK, D_FUSE, D_REPLACE, D_STRIP, D_METASPACE };
struct decoder {
	enum dec_kind kind;
	char *a, *b; /* Replace pattern (literal) and content; Strip content */
	pcre2_code *re;
	unsigned start, stop; /* Strip */
	char repl[8]; /* Metaspace */
	bool prepend; /* Metaspace: prepend_scheme != never */
};

/* ---- added tokens (added.c) ---- */
struct added {
	char *content;
	size_t len;
	int32_t id;
	bool special, lstrip, rstrip, single_word, normalized;
};
/* Those matched on one kind of text, by first byte, longest first. */
struct added_set {
	uint32_t *idx; /* into t->added */
	size_t n;
	uint32_t first[257]; /* idx[first[c] .. first[c+1]) start with byte c */
};

/* ---- post-processor: the single-sequence template ---- */
struct post {
	int32_t *pre, *suf; /* ids around the sequence when add_special */
	size_t npre, nsuf;
};

struct pfx_tokenizer {
	/* the model */
	struct strmap vocab; /* the model's vocabulary */
	struct merge_map merges;
	char **piece; /* id -> string (model and added), in the arena */
	struct arena_block *arena; /* the pieces' bytes, in blocks that never move */
	size_t nid, piece_cap;
	bool *special; /* id -> special added token */
	int32_t unk_id; /* -1 none */
	bool fuse_unk, byte_fallback, ignore_merges;
	char *prefix, *suffix; /* continuing_subword_prefix, end_of_word_suffix */
	int32_t byte_id[256]; /* byte_fallback's <0xHH>, or ByteLevel's symbol of a byte; -1 */
	bool byte_level; /* words are bytes mapped by ByteLevel */

	struct norm *norm;
	size_t nnorm;
	struct pretok *pre;
	size_t npre;
	struct decoder *dec;
	size_t ndec;
	bool has_decoder;
	struct post post;

	struct added *added;
	size_t nadded;
	struct added_set raw, normed; /* normalized: false / true */

	/* tokenizer_config.json */
	char *bos, *eos, *unk, *pad;
	char **tmpl_name, **tmpl; /* chat templates: "default" for a plain string */
	size_t ntmpl;
	bool cleanup; /* clean_up_tokenization_spaces */
	int32_t *eos_ids;
	size_t neos;
};

/* Per-call scratch, so the tokenizer itself stays read-only. */
struct tok_scratch {
	pcre2_match_data *md;
	struct tbuf b, c; /* scratch strings: a mapped word, a rewritten piece */
	void *bpe; /* bpe.c's symbol and heap arrays */
	size_t bpecap;
	/* bpe.c's cache of short words' ids for the length of a call: text
	 * repeats its words, and a lookup costs less than the merges. */
	uint32_t *cslot; /* entry + 1, 0 empty */
	struct cache_ent {
		uint64_t hash;
		uint32_t key, klen, ids, nids; /* offsets into ckeys / cids */
	} *cent;
	size_t ncent;
	struct tbuf ckeys;
	struct tids cids;
	size_t words; /* words seen, the cache starts after a few */
};
void scratch_free(struct tok_scratch *s);

/* normalize.c: in -> out (replaced). */
int normalize(const struct pfx_tokenizer *t, struct tok_scratch *s, const char *in, size_t n,
	      struct tbuf *out);
/* pretokenize.c: cuts text into pieces, calls bpe on each. */
int pretokenize_encode(const struct pfx_tokenizer *t, struct tok_scratch *s, const char *text,
		       size_t n, bool at_start, struct tids *out);
/* bpe.c: one word. */
int bpe_word(const struct pfx_tokenizer *t, struct tok_scratch *s, const char *w, size_t n,
	     struct tids *out);
int merges_put(struct merge_map *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
int merges_reserve(struct merge_map *m, size_t n);
void merges_free(struct merge_map *m);
/* ByteLevel's byte -> code point table. */
int32_t bytelevel_char(unsigned char b);
/* -1 when cp is not one of ByteLevel's. */
int bytelevel_byte(int32_t cp);
/* added.c */
int added_index(struct pfx_tokenizer *t, struct pfx_error *err);
struct added_match {
	size_t start, end;
	int32_t id;
};
/* The next added token of set at or after from in s[0, n), honouring
 * lstrip/rstrip/single_word; special ones only when allow(pos) says. */
bool added_next(const struct pfx_tokenizer *t, const struct added_set *set, const char *s,
		size_t n, size_t from, size_t prev_end, const struct pfx_text_span *plain,
		size_t nplain, size_t base, bool parse_special, struct added_match *m);
/* decode.c: ids [0, n) -> text, skipping special when asked; at_start and
 * at_end say whether ids begin and end the sequence (a streaming window may
 * do neither: Strip and Metaspace treat the ends apart). */
int decode_ids(const struct pfx_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
	       bool at_start, bool at_end, struct tbuf *out);
/* transformers' clean_up_tokenization (in place): replacing each
 * cleanup_from[k] by cleanup_to[k], k in order. */
size_t cleanup_spaces(char *s, size_t n);
#define CLEANUP_N 10
extern const char *const cleanup_from[CLEANUP_N], *const cleanup_to[CLEANUP_N];
/* Whether id is a <0xHH> byte token of ByteFallback. */
bool is_byte_token(const struct pfx_tokenizer *t, int32_t id);
/* pcre2 helpers (util.c) */
pcre2_code *regex_compile(const char *pat, size_t len, bool literal, struct pfx_error *err);

/* For the chat templates (text-chat): tokenizer_config.json's chat_template,
 * a plain string or the entry called name of a named list (NULL: "default");
 * NULL when there is none. */
const char *tok_chat_template(const struct pfx_tokenizer *t, const char *name);
/* The config's "bos_token", "eos_token", "unk_token" or "pad_token" (a string
 * or an object's "content"); NULL when unset. */
const char *tok_special_string(const struct pfx_tokenizer *t, const char *which);

#endif
