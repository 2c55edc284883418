/* SPDX-License-Identifier: MIT */
/* prefix-run's text (text.c): prompts and chats in, generated text out, and the
 * tokenize and detokenize commands (text.c, over text.h of the runtime). */
#ifndef PFX_PREFIX_RUN_TEXT_H
#define PFX_PREFIX_RUN_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "prefixd-runtime/text.h"

#define TEXT_MAX_STOPS 16

/* What the command line said about text. */
struct text_opts {
	const char *prompt, *prompt_file;
	int chat;
	const char *system, *user, *messages;
	const char *chat_kwargs; /* --chat-kwargs: a JSON object of template variables */
	int parse_special; /* --parse-special: special-token text in user text is special */
	int no_special;    /* --no-special: nothing the post-processor adds */
	int pieces;        /* tokenize --pieces */
	int ids;           /* generate --ids */
	int skip_special;  /* detokenize --skip-special */
	const char *stop[TEXT_MAX_STOPS];
	size_t nstop;
};

/* Whether any of --prompt, --prompt-file, --chat ... was given. */
int text_has_input(const struct text_opts *t);
/* The usage rules: exactly one prompt source (have_tokens: --tokens was
 * given), --chat's parts only with --chat. 0, or -1 after saying why. */
int text_check_usage(const struct text_opts *t, int have_tokens, const char *cmd);
/* Loads dir's tokenizer into *tok. Unless required, a folder without
 * tokenizer.json, or with one that cannot be loaded (said on stderr),
 * leaves *tok NULL and returns 0. 0, or -1 after saying why. */
int text_load(const char *dir, int required, struct pfx_tokenizer **tok);
/* The prompt's ids (malloc'd) from the text options. 0, or -1 after saying why. */
int text_encode(const struct pfx_tokenizer *tok, const struct text_opts *t, int32_t **ids,
		size_t *n);
/* Refuses a tokenizer with ids the model has no embedding rows for:
 * 0, or -1 after saying why. */
int text_check_vocab(const struct pfx_tokenizer *tok, int model_vocab, const char *dir);

/* generate's output: text as it is final, held back where it could be the
 * start of a stop string. */
struct text_out;
int text_out_new(const struct pfx_tokenizer *tok, const struct text_opts *t, struct text_out **out);
/* Adds a generated id and prints what is final: 1 when a stop string ended
 * the text (nothing of it printed), 0 to go on, -1 after saying why. */
int text_out_push(struct text_out *o, int32_t id);
/* Prints the rest (up to a stop string in it): 1 when one was there, 0, -1. */
int text_out_finish(struct text_out *o);
void text_out_free(struct text_out *o);

struct run_args;
int cmd_tokenize(struct run_args *a);
int cmd_detokenize(struct run_args *a);

#endif
