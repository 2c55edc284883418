/* SPDX-License-Identifier: MIT */
/*
 * prefix-run's text: --prompt, --prompt-file and --chat encoded with the
 * model folder's tokenizer, generate's streamed text with its stop strings,
 * and the tokenize and detokenize commands.
 */
#include "run_text.h"

#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "prefix_run.h"

#define MAX_TEXT_FILE (64u << 20)
#define MAX_MESSAGES 4096

int text_has_input(const struct text_opts *t)
{
	return t->prompt || t->prompt_file || t->chat || t->system || t->user || t->messages ||
	       t->chat_kwargs;
}

int text_check_usage(const struct text_opts *t, int have_tokens, const char *cmd)
{
	int sources = !!have_tokens + !!t->prompt + !!t->prompt_file + !!t->chat;
	if (sources > 1) {
		fprintf(stderr, "prefix-run %s: give one of --tokens, --prompt, --prompt-file and --chat, not %d of them\n",
			cmd, sources);
		return -1;
	}
	if ((t->system || t->user || t->messages || t->chat_kwargs) && !t->chat) {
		fprintf(stderr, "prefix-run %s: --system, --user, --messages and --chat-kwargs are parts of a chat: give --chat too\n",
			cmd);
		return -1;
	}
	if (t->chat && t->messages && (t->system || t->user)) {
		fprintf(stderr, "prefix-run %s: --chat takes --messages FILE or --system/--user, not both\n",
			cmd);
		return -1;
	}
	if (t->chat && !t->messages && !t->user) {
		fprintf(stderr, "prefix-run %s: --chat needs --user TEXT (and optionally --system TEXT) or --messages FILE\n",
			cmd);
		return -1;
	}
	return 0;
}

int text_load(const char *dir, int required, struct pfx_tokenizer **tok)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
	*tok = NULL;
	if (access(path, F_OK)) {
		if (!required)
			return 0;
		fprintf(stderr, "prefix-run: %s has no tokenizer.json, so text cannot be encoded; copy the checkpoint's tokenizer.json (and tokenizer_config.json) there, or give --tokens IDS\n",
			dir);
		return -1;
	}
	struct pfx_error err = { "" };
	if (pfx_tokenizer_load(dir, tok, &err)) {
		*tok = NULL;
		/* Where text is only a nicety (generate's output), ids still
		 * serve: a tokenizer this one cannot read does not stop them. */
		fprintf(stderr, "prefix-run: %s the tokenizer: %s%s\n",
			required ? "cannot load" : "not using", err.msg,
			required ? "" : "; printing token ids");
		return required ? -1 : 0;
	}
	return 0;
}

int text_check_vocab(const struct pfx_tokenizer *tok, int model_vocab, const char *dir)
{
	size_t v = pfx_tokenizer_vocab_size(tok);
	if (v > (size_t)model_vocab) {
		fprintf(stderr, "prefix-run: %s/tokenizer.json has %zu tokens but the model's embedding only %d rows (vocab_size in config.json): this tokenizer is not the model's\n",
			dir, v, model_vocab);
		return -1;
	}
	return 0;
}

/* The whole of path ("-": standard input), exactly as read, in *buf
 * (malloc'd, NUL-terminated) of *len bytes. 0, or -1 after saying why. */
static int read_all(const char *flag, const char *path, char **buf, size_t *len)
{
	int in = !strcmp(path, "-");
	FILE *fp = in ? stdin : fopen(path, "rb");
	if (!fp) {
		fprintf(stderr, "prefix-run: %s %s: %s\n", flag, path, strerror(errno));
		return -1;
	}
	char *b = malloc(MAX_TEXT_FILE + 1);
	size_t n = b ? fread(b, 1, MAX_TEXT_FILE + 1, fp) : 0;
	int bad = ferror(fp);
	if (!in)
		fclose(fp);
	if (!b || bad || n > MAX_TEXT_FILE) {
		fprintf(stderr, "prefix-run: %s %s: %s\n", flag, in ? "(standard input)" : path,
			!b ? "out of memory" : bad ? "read error" : "over 64 MiB");
		free(b);
		return -1;
	}
	b[n] = 0;
	*buf = b;
	*len = n;
	return 0;
}

/* --messages FILE: a JSON list of {"role": ..., "content": ...} into m
 * (pointing into *root, which the caller json_object_puts). */
static int read_messages(const char *path, json_object **root, struct pfx_chat_message **m,
			 size_t *n)
{
	char *buf;
	size_t len;
	if (read_all("--messages", path, &buf, &len))
		return -1;
	struct json_tokener *tk = json_tokener_new();
	json_object *o = tk ? json_tokener_parse_ex(tk, buf, (int)len) : NULL;
	int ok = o && json_tokener_get_error(tk) == json_tokener_success &&
		 (size_t)json_tokener_get_parse_end(tk) == len;
	enum json_tokener_error je = tk ? json_tokener_get_error(tk) : json_tokener_success;
	const char *why = !tk				 ? "out of memory"
			  : je == json_tokener_continue ? "it ends before the value does"
							 : json_tokener_error_desc(je);
	free(buf);
	if (!ok) {
		fprintf(stderr, "prefix-run: --messages %s: not JSON (%s)\n", path,
			o ? "text after the value" : why);
		json_tokener_free(tk);
		json_object_put(o);
		return -1;
	}
	json_tokener_free(tk);
	size_t k = json_object_is_type(o, json_type_array) ? json_object_array_length(o) : 0;
	if (!k || k > MAX_MESSAGES) {
		fprintf(stderr, "prefix-run: --messages %s: give a JSON list of 1 to %d messages like [{\"role\": \"user\", \"content\": \"Hi\"}]\n",
			path, MAX_MESSAGES);
		json_object_put(o);
		return -1;
	}
	*m = calloc(k, sizeof(**m));
	for (size_t i = 0; *m && i < k; i++) {
		json_object *e = json_object_array_get_idx(o, i), *r, *c;
		if (!json_object_is_type(e, json_type_object) ||
		    !json_object_object_get_ex(e, "role", &r) || !json_object_is_type(r, json_type_string) ||
		    !json_object_object_get_ex(e, "content", &c) || !json_object_is_type(c, json_type_string)) {
			fprintf(stderr, "prefix-run: --messages %s: message %zu (counting from 0) is not an object with string \"role\" and \"content\"\n",
				path, i);
			free(*m);
			json_object_put(o);
			return -1;
		}
		if (strlen(json_object_get_string(c)) != (size_t)json_object_get_string_len(c)) {
			fprintf(stderr, "prefix-run: --messages %s: message %zu's content holds a NUL character\n",
				path, i);
			free(*m);
			json_object_put(o);
			return -1;
		}
		(*m)[i].role = json_object_get_string(r);
		(*m)[i].content = json_object_get_string(c);
	}
	if (!*m) {
		fprintf(stderr, "prefix-run: out of memory\n");
		json_object_put(o);
		return -1;
	}
	*root = o;
	*n = k;
	return 0;
}

int text_encode(const struct pfx_tokenizer *tok, const struct text_opts *t, int32_t **ids,
		size_t *n)
{
	struct pfx_error err = { "" };
	unsigned flags = t->parse_special ? PFX_TEXT_PARSE_SPECIAL : 0;
	int rc;
	if (t->chat) {
		if (!pfx_tokenizer_has_chat_template(tok)) {
			fprintf(stderr, "prefix-run: --chat: the tokenizer has no chat template (chat_template in tokenizer_config.json); give --prompt TEXT instead\n");
			return -1;
		}
		struct pfx_chat_message two[2], *m = two;
		size_t k = 0;
		json_object *root = NULL;
		if (t->messages) {
			if (read_messages(t->messages, &root, &m, &k))
				return -1;
		} else {
			if (t->system)
				two[k++] = (struct pfx_chat_message){ "system", t->system };
			two[k++] = (struct pfx_chat_message){ "user", t->user };
		}
		/* What the post-processor adds, transformers does not add to a
		 * rendered chat: --no-special changes nothing here. */
		struct pfx_chat_opts o = { .add_generation_prompt = true, .vars_json = t->chat_kwargs };
		rc = pfx_chat_encode_opts(tok, m, k, &o, flags, ids, n, &err);
		if (m != two)
			free(m);
		json_object_put(root);
	} else {
		char *buf = NULL;
		size_t len;
		if (t->prompt_file) {
			if (read_all("--prompt-file", t->prompt_file, &buf, &len))
				return -1;
		}
		if (!t->no_special)
			flags |= PFX_TEXT_ADD_SPECIAL;
		rc = pfx_tokenize(tok, buf ? buf : t->prompt, buf ? len : strlen(t->prompt), flags,
				  ids, n, &err);
		free(buf);
	}
	if (rc) {
		fprintf(stderr, "prefix-run: cannot encode the %s: %s\n", t->chat ? "chat" : "prompt",
			err.msg[0] ? err.msg : "out of memory");
		return -1;
	}
	if (!*n) {
		fprintf(stderr, "prefix-run: the prompt encodes to no tokens: give some text\n");
		free(*ids);
		*ids = NULL;
		return -1;
	}
	return 0;
}

/* ==== generate's text ==== */

struct text_out {
	struct pfx_detok_stream *s;
	const struct text_opts *t;
	char *held; /* final text not printed: it could begin a stop string */
	size_t len, cap;
};

int text_out_new(const struct pfx_tokenizer *tok, const struct text_opts *t, struct text_out **out)
{
	struct pfx_error err = { "" };
	struct text_out *o = calloc(1, sizeof(*o));
	if (!o || pfx_detok_stream_new(tok, PFX_TEXT_SKIP_SPECIAL, &o->s, &err)) {
		fprintf(stderr, "prefix-run: %s\n", err.msg[0] ? err.msg : "out of memory");
		free(o);
		return -1;
	}
	o->t = t;
	*out = o;
	return 0;
}

/* Appends piece to the held text, prints what can no longer be part of a
 * stop string, and says whether one is complete (1: printed up to it). */
static int emit(struct text_out *o, const char *piece, size_t n, int last)
{
	if (o->len + n + 1 > o->cap) {
		size_t cap = (o->len + n + 1) * 2;
		char *g = realloc(o->held, cap);
		if (!g) {
			fprintf(stderr, "prefix-run: out of memory\n");
			return -1;
		}
		o->held = g;
		o->cap = cap;
	}
	memcpy(o->held + o->len, piece, n);
	o->len += n;
	o->held[o->len] = 0;
	/* The earliest stop string wins: none can end before what was printed,
	 * since the held text keeps every possible start of one. */
	size_t cut = o->len;
	int stopped = 0;
	for (size_t i = 0; i < o->t->nstop; i++) {
		const char *s = o->t->stop[i];
		size_t sl = strlen(s);
		for (size_t p = 0; sl <= o->len && p + sl <= o->len && p < cut; p++)
			if (!memcmp(o->held + p, s, sl)) {
				cut = p;
				stopped = 1;
				break;
			}
	}
	size_t keep = 0;
	if (!stopped && !last) {
		/* The longest tail that begins some stop string stays held. */
		for (size_t i = 0; i < o->t->nstop; i++) {
			size_t sl = strlen(o->t->stop[i]);
			for (size_t k = sl - 1 < o->len ? sl - 1 : o->len; k > keep; k--)
				if (!memcmp(o->held + o->len - k, o->t->stop[i], k)) {
					keep = k;
					break;
				}
		}
		cut = o->len - keep;
	}
	fwrite(o->held, 1, cut, stdout);
	fflush(stdout);
	memmove(o->held, o->held + o->len - keep, keep);
	o->len = keep;
	return stopped;
}

int text_out_push(struct text_out *o, int32_t id)
{
	struct pfx_error err = { "" };
	const char *piece;
	size_t n;
	if (pfx_detok_stream_push(o->s, id, &piece, &n, &err)) {
		fprintf(stderr, "\nprefix-run: cannot decode token %d: %s\n", id, err.msg);
		return -1;
	}
	return emit(o, piece, n, 0);
}

int text_out_finish(struct text_out *o)
{
	struct pfx_error err = { "" };
	const char *piece;
	size_t n;
	if (pfx_detok_stream_finish(o->s, &piece, &n, &err)) {
		fprintf(stderr, "\nprefix-run: cannot decode: %s\n", err.msg);
		return -1;
	}
	return emit(o, piece, n, 1);
}

void text_out_free(struct text_out *o)
{
	if (!o)
		return;
	pfx_detok_stream_free(o->s);
	free(o->held);
	free(o);
}

/* ==== tokenize, detokenize ==== */

int cmd_tokenize(struct run_args *a)
{
	int32_t *ids = NULL;
	size_t n = 0;
	if (text_encode(a->tok, &a->text, &ids, &n))
		return 1;
	for (size_t i = 0; i < n; i++) {
		if (a->text.pieces) {
			/* JSON strings: a piece may hold a space, a comma or a
			 * control character. */
			json_object *s = json_object_new_string(pfx_tokenizer_piece(a->tok, ids[i]));
			printf("%s%s", i ? " " : "",
			       json_object_to_json_string_ext(s, JSON_C_TO_STRING_NOSLASHESCAPE));
			json_object_put(s);
		} else {
			printf("%s%d", i ? "," : "", ids[i]);
		}
	}
	printf("\n");
	free(ids);
	return fflush(stdout) ? 1 : 0;
}

int cmd_detokenize(struct run_args *a)
{
	struct pfx_error err = { "" };
	char *text;
	size_t len;
	if (pfx_detokenize(a->tok, a->tokens, a->ntokens,
			   a->text.skip_special ? PFX_TEXT_SKIP_SPECIAL : 0, &text, &len, &err)) {
		fprintf(stderr, "prefix-run detokenize: %s\n", err.msg[0] ? err.msg : "out of memory");
		return 1;
	}
	fwrite(text, 1, len, stdout);
	free(text);
	return fflush(stdout) ? 1 : 0;
}
