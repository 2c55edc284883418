/* SPDX-License-Identifier: MIT */
/*
 * Text in, text out: a model folder's tokenizer.json (and
 * tokenizer_config.json), encoding and decoding exactly as Hugging Face's
 * tokenizers does, a streaming decoder, and chat templates rendered as
 * transformers renders them.
 *
 * Prompt injection: text that comes from a user (a chat message's content,
 * an API prompt) is encoded with special-token text treated as plain text
 * unless the caller asks for Hugging Face's behaviour (PFX_TEXT_PARSE_SPECIAL);
 * a chat template's own markers are always special tokens.
 *
 * Calls return 0 or -errno, with a message in err (pfx_error.h). A loaded
 * tokenizer is immutable: any number of threads may use it at once.
 */
#ifndef PFX_TEXT_H
#define PFX_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pfx_error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct pfx_tokenizer;

/* Loads dir/tokenizer.json and, when there, dir/tokenizer_config.json (its
 * chat_template, bos/eos tokens, clean_up_tokenization_spaces) and the
 * folder's end-of-sequence ids (pfx_eos_read). A component the
 * tokenizer does not implement is refused by its name (-ENOTSUP), never
 * encoded wrongly; a malformed file is -EINVAL naming the file and what. */
int pfx_tokenizer_load(const char *dir, struct pfx_tokenizer **out, struct pfx_error *err);
/* NULL is fine. */
void pfx_tokenizer_free(struct pfx_tokenizer *t);

/* Ids 0 .. pfx_tokenizer_vocab_size() - 1 (added tokens included); a model
 * whose embedding has fewer rows cannot run this tokenizer. */
size_t pfx_tokenizer_vocab_size(const struct pfx_tokenizer *t);
/* The token's string as the vocabulary holds it (e.g. "Ġthe", "<0x0A>"),
 * NULL for an id out of range. */
const char *pfx_tokenizer_piece(const struct pfx_tokenizer *t, int32_t id);
/* End-of-sequence ids: pfx_eos_read's of the folder, else
 * tokenizer_config.json's eos_token. *n may be 0. */
const int32_t *pfx_tokenizer_eos(const struct pfx_tokenizer *t, size_t *n);

/* A model folder's end-of-sequence ids, as transformers' generate takes
 * them: generation_config.json's eos_token_id (an id or a list), else
 * config.json's; n = 0 (from NULL) when neither file names one or neither
 * is there. Needs no tokenizer (pfx_tokenizer_load reads them here too).
 * Each id must be below vocab; a malformed file, a bad id or a list
 * longer than PFX_EOS_MAX is -EINVAL naming the file, an unreadable one
 * -errno. */
#define PFX_EOS_MAX 64
struct pfx_eos_ids {
	size_t n;
	int32_t id[PFX_EOS_MAX];
	const char *from; /* "generation_config.json" or "config.json" (static) */
};
int pfx_eos_read(const char *dir, size_t vocab, struct pfx_eos_ids *out, struct pfx_error *err);
/* Whether id is a special added token (skipped by PFX_TEXT_SKIP_SPECIAL). */
bool pfx_tokenizer_is_special(const struct pfx_tokenizer *t, int32_t id);

enum pfx_text_flags {
	/* Encode: add what the post-processor adds (BOS/EOS), as
	 * add_special_tokens=True does. */
	PFX_TEXT_ADD_SPECIAL = 1u << 0,
	/* Encode: match special-token text in the input as special tokens
	 * (Hugging Face's default). Without it, only non-special added tokens
	 * are matched in input text. */
	PFX_TEXT_PARSE_SPECIAL = 1u << 1,
	/* Decode: leave special tokens out (skip_special_tokens=True). */
	PFX_TEXT_SKIP_SPECIAL = 1u << 2,
};

/* A byte range of a text that came from a user: special-token text in it
 * is plain text, whatever the flags say (the chat template's content). */
struct pfx_text_span {
	size_t start, len;
};

/* Encodes text[0, len) (UTF-8: invalid input is -EILSEQ naming the byte
 * offset) into *ids (malloc'd, free() it) of *n ids. All of text is a
 * user's: special tokens are matched in it only with
 * PFX_TEXT_PARSE_SPECIAL (as pfx_tokenize_spans with one span of all). */
int pfx_tokenize(const struct pfx_tokenizer *t, const char *text, size_t len, unsigned flags,
		 int32_t **ids, size_t *n, struct pfx_error *err);
/* Encodes text of which only the plain spans (sorted, not overlapping) are
 * a user's: special-token text is a special token outside them, and in
 * them only with PFX_TEXT_PARSE_SPECIAL. */
int pfx_tokenize_spans(const struct pfx_tokenizer *t, const char *text, size_t len,
		       const struct pfx_text_span *plain, size_t nplain, unsigned flags,
		       int32_t **ids, size_t *n, struct pfx_error *err);

/* Decodes ids into *text (malloc'd, NUL-terminated, free() it) of *len
 * bytes, as tokenizers' decode with the flags' skip_special_tokens. -EINVAL
 * for an id out of range. */
int pfx_detokenize(const struct pfx_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
		   char **text, size_t *len, struct pfx_error *err);

/* Streaming decode: text as tokens arrive, never a partial UTF-8 sequence,
 * and at the end the same text as pfx_detokenize of all the ids. */
struct pfx_detok_stream;
int pfx_detok_stream_new(const struct pfx_tokenizer *t, unsigned flags,
			 struct pfx_detok_stream **out, struct pfx_error *err);
/* Adds one id; *piece (valid until the next call on s) and *len say the
 * text that is final now (often empty). */
int pfx_detok_stream_push(struct pfx_detok_stream *s, int32_t id, const char **piece, size_t *len,
			  struct pfx_error *err);
/* The rest of the text (all of it final), then s is spent. */
int pfx_detok_stream_finish(struct pfx_detok_stream *s, const char **piece, size_t *len,
			    struct pfx_error *err);
void pfx_detok_stream_free(struct pfx_detok_stream *s);

/* ==== Chat templates ==== */

struct pfx_chat_message {
	const char *role;    /* "system", "user", "assistant", ... */
	const char *content; /* UTF-8, NUL-terminated */
};

/* A chat template renders within bounds, so a hostile one cannot hang or
 * exhaust memory: past any of them the render fails with -E2BIG naming
 * the limit and the template line. Steps are statements and expressions
 * evaluated; depth is their nesting, macro calls included; memory is all
 * the render allocates (the messages' copies included). Containers nest
 * at most 64 deep. */
#define PFX_CHAT_MAX_OUTPUT (64u << 20)	 /* bytes of rendered text */
#define PFX_CHAT_MAX_MEMORY (256u << 20) /* bytes */
#define PFX_CHAT_MAX_STEPS 10000000u
#define PFX_CHAT_MAX_DEPTH 500

/* Whether the tokenizer folder has a chat template. */
bool pfx_tokenizer_has_chat_template(const struct pfx_tokenizer *t);

/* What a render takes besides the messages, as apply_chat_template's
 * arguments: zeroed, no generation prompt and no further variables. */
struct pfx_chat_opts {
	bool add_generation_prompt;
	/* NULL, or a JSON object (UTF-8 text) of further template variables,
	 * as apply_chat_template's **kwargs: {"enable_thinking": false}
	 * (Qwen3), {"tools": [...]} (function schemas), "documents", or a
	 * template's own. tools and documents are none when not given, as
	 * there; a variable may override bos_token and the like, not
	 * messages or add_generation_prompt (-EINVAL). Its strings but
	 * those special-token strings are a caller's text, as the contents:
	 * special-token text in them is plain text unless
	 * PFX_TEXT_PARSE_SPECIAL. */
	const char *vars_json;
};

/* Renders the tokenizer's chat template (tokenizer_config.json's
 * chat_template; a named list's "default") over messages, as transformers'
 * apply_chat_template(tokenize=False, add_generation_prompt=...) does:
 * *text (malloc'd, NUL-terminated) of *len bytes, and, when spans is not
 * NULL, *spans (malloc'd) of *nspans ranges of it that came from the
 * messages' contents. A template that uses what the interpreter lacks, or
 * raises an exception, is -ENOTSUP / -EINVAL naming it and the template
 * line. */
int pfx_chat_render_opts(const struct pfx_tokenizer *t, const struct pfx_chat_message *m,
			 size_t n, const struct pfx_chat_opts *o, char **text, size_t *len,
			 struct pfx_text_span **spans, size_t *nspans, struct pfx_error *err);
/* pfx_chat_render_opts with only add_generation_prompt. */
int pfx_chat_render(const struct pfx_tokenizer *t, const struct pfx_chat_message *m, size_t n,
		    bool add_generation_prompt, char **text, size_t *len,
		    struct pfx_text_span **spans, size_t *nspans, struct pfx_error *err);

/* Renders and encodes a chat: the template's markers as special tokens,
 * the contents as plain text unless PFX_TEXT_PARSE_SPECIAL (flags as
 * pfx_tokenize; transformers adds no BOS/EOS of its own to a rendered
 * chat, so neither does this without PFX_TEXT_ADD_SPECIAL). */
int pfx_chat_encode_opts(const struct pfx_tokenizer *t, const struct pfx_chat_message *m,
			 size_t n, const struct pfx_chat_opts *o, unsigned flags, int32_t **ids,
			 size_t *nids, struct pfx_error *err);
/* pfx_chat_encode_opts with only add_generation_prompt. */
int pfx_chat_encode(const struct pfx_tokenizer *t, const struct pfx_chat_message *m, size_t n,
		    bool add_generation_prompt, unsigned flags, int32_t **ids, size_t *nids,
		    struct pfx_error *err);

#ifdef __cplusplus
}
#endif

#endif
