/* SPDX-License-Identifier: MIT */
/* tokenizer.json's pipeline stages, JSON to the structs of tokenizer.h:
 * normalizers, pre-tokenizers, the post-processor and decoders. A type or
 * option not implemented is refused by its name (-ENOTSUP). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "load_json.h"

/* Onig (Rust tokenizers' engine) and PCRE2 differ in one way real patterns
 * notice: onig's (?i:'s|'t|...) matches ASCII letters only, PCRE2 with UCP
 * case-folds ſ (U+017F) to s and K (U+212A) to k. So a (?i: group made of
 * plain characters is spelled out with ASCII classes. */
static char *onig_to_pcre(const char *p, size_t n, size_t *outn)
{
	struct tbuf b = { 0 };
	for (size_t i = 0; i < n;) {
		if (n - i >= 4 && !memcmp(p + i, "(?i:", 4)) {
			size_t j = i + 4;
			bool plain = true;
			while (j < n && p[j] != ')') {
				if (p[j] == '\\' || p[j] == '[' || p[j] == '(')
					plain = false;
				j++;
			}
			if (plain && j < n) {
				tbuf_put(&b, "(?:", 3);
				for (size_t k = i + 4; k < j; k++) {
					char c = p[k];
					if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
						char cls[4] = { '[', (char)(c | 0x20), (char)(c & ~0x20), ']' };
						tbuf_put(&b, cls, 4);
					} else {
						tbuf_putc(&b, c);
					}
				}
				tbuf_putc(&b, ')');
				i = j + 1;
				continue;
			}
		}
		tbuf_putc(&b, p[i++]);
	}
	if (!b.p)
		tbuf_put(&b, "", 0);
	*outn = b.n;
	return b.p;
}

/* A {"String": s} or {"Regex": r} pattern. */
static pcre2_code *pattern(json_object *pat, const char *what, char **literal, struct pfx_error *err)
{
	const char *s;
	if ((s = jstr(pat, "String"))) {
		if (literal)
			*literal = strdup(s);
		return regex_compile(s, strlen(s), true, err);
	}
	if ((s = jstr(pat, "Regex"))) {
		size_t n;
		char *p = onig_to_pcre(s, strlen(s), &n);
		if (!p) {
			pfx_errorf(err, -ENOMEM, "out of memory");
			return NULL;
		}
		pcre2_code *re = regex_compile(p, n, false, err);
		free(p);
		return re;
	}
	pfx_errorf(err, -EINVAL, "%s: pattern is neither {\"String\"} nor {\"Regex\"}", what);
	return NULL;
}

#define GROW(arr, n)                                                              \
	({                                                                        \
		void *_p = realloc((arr), ((n) + 1) * sizeof(*(arr)));            \
		if (_p) {                                                         \
			(arr) = _p;                                               \
			memset(&(arr)[(n)], 0, sizeof(*(arr)));                   \
		}                                                                 \
		_p;                                                               \
	})

static int load_normalizer(struct pfx_tokenizer *t, json_object *o, struct pfx_error *err)
{
	if (!o || json_object_is_type(o, json_type_null))
		return 0;
	const char *type = jstr(o, "type");
	if (!type)
		return pfx_errorf(err, -EINVAL, "tokenizer.json: a normalizer without a type");
	if (!strcmp(type, "Sequence")) {
		json_object *list = jget(o, "normalizers");
		if (!json_object_is_type(list, json_type_array))
			return pfx_errorf(err, -EINVAL, "tokenizer.json: Sequence normalizer without a list");
		for (size_t i = 0; i < json_object_array_length(list); i++) {
			int r = load_normalizer(t, json_object_array_get_idx(list, i), err);
			if (r)
				return r;
		}
		return 0;
	}
	if (!GROW(t->norm, t->nnorm))
		return pfx_errorf(err, -ENOMEM, "out of memory");
	struct norm *n = &t->norm[t->nnorm];
	if (!strcmp(type, "NFC")) {
		n->kind = N_NFC;
	} else if (!strcmp(type, "NFD")) {
		n->kind = N_NFD;
	} else if (!strcmp(type, "NFKC")) {
		n->kind = N_NFKC;
	} else if (!strcmp(type, "NFKD")) {
		n->kind = N_NFKD;
	} else if (!strcmp(type, "Lowercase")) {
		n->kind = N_LOWERCASE;
	} else if (!strcmp(type, "Prepend")) {
		const char *p = jstr(o, "prepend");
		if (!p || !(n->a = strdup(p)))
			return pfx_errorf(err, -EINVAL, "tokenizer.json: Prepend normalizer without prepend");
		n->kind = N_PREPEND;
	} else if (!strcmp(type, "Replace")) {
		const char *c = jstr(o, "content");
		if (!c || !(n->b = strdup(c)))
			return pfx_errorf(err, -EINVAL, "tokenizer.json: Replace normalizer without content");
		n->kind = N_REPLACE;
		t->nnorm++; /* owned from here, freed with the tokenizer on failure */
		if (!(n->re = pattern(jget(o, "pattern"), "Replace normalizer", &n->a, err)))
			return -EINVAL;
		return 0;
	} else if (!strcmp(type, "Strip")) {
		n->kind = N_STRIP;
		n->left = jbool(o, "strip_left", false);
		n->right = jbool(o, "strip_right", false);
	} else {
		return pfx_errorf(err, -ENOTSUP, "tokenizer.json: normalizer %s is not implemented", type);
	}
	t->nnorm++;
	return 0;
}

/* GPT-2's split, as ByteLevel's use_regex applies it. */
static const char bytelevel_re[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int load_pretok(struct pfx_tokenizer *t, json_object *o, struct pfx_error *err)
{
	if (!o || json_object_is_type(o, json_type_null))
		return 0;
	const char *type = jstr(o, "type");
	if (!type)
		return pfx_errorf(err, -EINVAL, "tokenizer.json: a pre-tokenizer without a type");
	if (!strcmp(type, "Sequence")) {
		json_object *list = jget(o, "pretokenizers");
		if (!json_object_is_type(list, json_type_array))
			return pfx_errorf(err, -EINVAL, "tokenizer.json: Sequence pre-tokenizer without a list");
		for (size_t i = 0; i < json_object_array_length(list); i++) {
			int r = load_pretok(t, json_object_array_get_idx(list, i), err);
			if (r)
				return r;
		}
		return 0;
	}
	if (t->byte_level)
		return pfx_errorf(err, -ENOTSUP,
				  "tokenizer.json: pre-tokenizer %s after ByteLevel is not implemented", type);
	if (!GROW(t->pre, t->npre))
		return pfx_errorf(err, -ENOMEM, "out of memory");
	struct pretok *p = &t->pre[t->npre];
	if (!strcmp(type, "ByteLevel")) {
		p->kind = P_BYTELEVEL;
		p->flag = jbool(o, "add_prefix_space", true);
		if (jbool(o, "use_regex", true) &&
		    !(p->re = regex_compile(bytelevel_re, sizeof(bytelevel_re) - 1, false, err)))
			return -EINVAL;
		t->byte_level = true;
	} else if (!strcmp(type, "Split")) {
		static const char *const names[] = { "Removed", "Isolated", "MergedWithPrevious",
						     "MergedWithNext", "Contiguous" };
		const char *b = jstr(o, "behavior");
		p->kind = P_SPLIT;
		p->behavior = 5;
		for (int i = 0; b && i < 5; i++)
			if (!strcmp(b, names[i]))
				p->behavior = i;
		if (p->behavior == 5)
			return pfx_errorf(err, -ENOTSUP, "tokenizer.json: Split behavior %s is not implemented",
					  b ? b : "(none)");
		p->invert = jbool(o, "invert", false);
		t->npre++;
		if (!(p->re = pattern(jget(o, "pattern"), "Split pre-tokenizer", NULL, err)))
			return -EINVAL;
		return 0;
	} else if (!strcmp(type, "Digits")) {
		p->kind = P_DIGITS;
		p->flag = jbool(o, "individual_digits", false);
	} else if (!strcmp(type, "Metaspace")) {
		const char *r = jstr(o, "replacement"), *s = jstr(o, "prepend_scheme");
		p->kind = P_METASPACE;
		if (!r)
			r = "\xe2\x96\x81";
		if (strlen(r) >= sizeof(p->repl) || utf8_len((unsigned char)r[0]) != strlen(r))
			return pfx_errorf(err, -EINVAL, "tokenizer.json: Metaspace replacement is not one character");
		strcpy(p->repl, r);
		p->flag = jbool(o, "split", true);
		if (s)
			p->prepend = !strcmp(s, "never") ? 0 : !strcmp(s, "first") ? 1 : !strcmp(s, "always") ? 2 : -1;
		else
			p->prepend = jbool(o, "add_prefix_space", true) ? 2 : 0;
		if (p->prepend < 0)
			return pfx_errorf(err, -ENOTSUP, "tokenizer.json: Metaspace prepend_scheme %s", s);
	} else if (!strcmp(type, "Whitespace")) {
		p->kind = P_WHITESPACE;
		/* \w+|[^\w\s]+ in Rust's regex crate, whose \w (Alphabetic,
		 * marks, Nd, Pc, joiners) is not PCRE2's (L, N, _). */
		static const char ws_re[] =
			"[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]+"
			"|[^\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}\\s]+";
		if (!(p->re = regex_compile(ws_re, sizeof(ws_re) - 1, false, err)))
			return -EINVAL;
	} else if (!strcmp(type, "WhitespaceSplit")) {
		p->kind = P_WSSPLIT;
	} else if (!strcmp(type, "Punctuation")) {
		static const char *const names[] = { "Removed", "Isolated", "MergedWithPrevious",
						     "MergedWithNext", "Contiguous" };
		const char *b = jstr(o, "behavior");
		p->kind = P_PUNCT;
		p->behavior = b ? 5 : B_ISOLATED;
		for (int i = 0; b && i < 5; i++)
			if (!strcmp(b, names[i]))
				p->behavior = i;
		if (p->behavior == 5)
			return pfx_errorf(err, -ENOTSUP, "tokenizer.json: Punctuation behavior %s", b);
	} else {
		return pfx_errorf(err, -ENOTSUP, "tokenizer.json: pre-tokenizer %s is not implemented", type);
	}
	t->npre++;
	return 0;
}

static int load_decoder(struct pfx_tokenizer *t, json_object *o, struct pfx_error *err)
{
	if (!o || json_object_is_type(o, json_type_null))
		return 0;
	t->has_decoder = true;
	const char *type = jstr(o, "type");
	if (!type)
		return pfx_errorf(err, -EINVAL, "tokenizer.json: a decoder without a type");
	if (!strcmp(type, "Sequence")) {
		json_object *list = jget(o, "decoders");
		if (!json_object_is_type(list, json_type_array))
			return pfx_errorf(err, -EINVAL, "tokenizer.json: Sequence decoder without a list");
		for (size_t i = 0; i < json_object_array_length(list); i++) {
			int r = load_decoder(t, json_object_array_get_idx(list, i), err);
			if (r)
				return r;
		}
		return 0;
	}
	if (!GROW(t->dec, t->ndec))
		return pfx_errorf(err, -ENOMEM, "out of memory");
	struct decoder *d = &t->dec[t->ndec];
	if (!strcmp(type, "ByteLevel")) {
		d->kind = D_BYTELEVEL;
	} else if (!strcmp(type, "ByteFallback")) {
		d->kind = D_BYTEFALLBACK;
	} else if (!strcmp(type, "Fuse")) {
		d->kind = D_FUSE;
	} else if (!strcmp(type, "Replace")) {
		const char *c = jstr(o, "content");
		if (!c || !(d->b = strdup(c)))
			return pfx_errorf(err, -EINVAL, "tokenizer.json: Replace decoder without content");
		d->kind = D_REPLACE;
		t->ndec++;
		if (!(d->re = pattern(jget(o, "pattern"), "Replace decoder", &d->a, err)))
			return -EINVAL;
		return 0;
	} else if (!strcmp(type, "Strip")) {
		const char *c = jstr(o, "content");
		json_object *s = jget(o, "start"), *e = jget(o, "stop");
		if (!c || utf8_len((unsigned char)c[0]) != strlen(c) || !s || !e ||
		    json_object_get_int(s) < 0 || json_object_get_int(e) < 0)
			return pfx_errorf(err, -EINVAL, "tokenizer.json: Strip decoder needs content (one character), start and stop");
		d->kind = D_STRIP;
		d->start = (unsigned)json_object_get_int(s);
		d->stop = (unsigned)json_object_get_int(e);
		if (!(d->a = strdup(c)))
			return pfx_errorf(err, -ENOMEM, "out of memory");
	} else if (!strcmp(type, "Metaspace")) {
		const char *r = jstr(o, "replacement"), *s = jstr(o, "prepend_scheme");
		d->kind = D_METASPACE;
		if (!r)
			r = "\xe2\x96\x81";
		if (strlen(r) >= sizeof(d->repl) || utf8_len((unsigned char)r[0]) != strlen(r))
			return pfx_errorf(err, -EINVAL, "tokenizer.json: Metaspace replacement is not one character");
		strcpy(d->repl, r);
		d->prepend = s ? strcmp(s, "never") != 0 : jbool(o, "add_prefix_space", true);
	} else {
		return pfx_errorf(err, -ENOTSUP, "tokenizer.json: decoder %s is not implemented", type);
	}
	t->ndec++;
	return 0;
}

static int load_post(struct pfx_tokenizer *t, json_object *o, struct pfx_error *err)
{
	if (!o || json_object_is_type(o, json_type_null))
		return 0;
	const char *type = jstr(o, "type");
	if (!type)
		return pfx_errorf(err, -EINVAL, "tokenizer.json: a post-processor without a type");
	if (!strcmp(type, "Sequence")) {
		json_object *list = jget(o, "processors");
		if (!json_object_is_type(list, json_type_array))
			return pfx_errorf(err, -EINVAL, "tokenizer.json: Sequence post-processor without a list");
		for (size_t i = 0; i < json_object_array_length(list); i++) {
			int r = load_post(t, json_object_array_get_idx(list, i), err);
			if (r)
				return r;
		}
		return 0;
	}
	if (!strcmp(type, "ByteLevel"))
		return 0; /* it only moves offsets, which this encoder does not give */
	if (!strcmp(type, "TemplateProcessing")) {
		if (t->post.npre || t->post.nsuf)
			return pfx_errorf(err, -ENOTSUP, "tokenizer.json: two TemplateProcessing post-processors");
		json_object *single = jget(o, "single"), *sp = jget(o, "special_tokens");
		if (!json_object_is_type(single, json_type_array))
			return pfx_errorf(err, -EINVAL, "tokenizer.json: TemplateProcessing without single");
		bool seen = false;
		for (size_t i = 0; i < json_object_array_length(single); i++) {
			json_object *it = json_object_array_get_idx(single, i), *x;
			if ((x = jget(it, "Sequence"))) {
				if (seen || strcmp(jstr(x, "id") ? jstr(x, "id") : "", "A"))
					return pfx_errorf(err, -EINVAL, "tokenizer.json: TemplateProcessing single must hold $A once");
				seen = true;
				continue;
			}
			const char *name = jstr(jget(it, "SpecialToken"), "id");
			json_object *ids = jget(jget(sp, name ? name : ""), "ids");
			if (!name || !json_object_is_type(ids, json_type_array))
				return pfx_errorf(err, -EINVAL, "tokenizer.json: TemplateProcessing names special token %s without ids",
						  name ? name : "(none)");
			for (size_t k = 0; k < json_object_array_length(ids); k++) {
				int64_t id = json_object_get_int64(json_object_array_get_idx(ids, k));
				if (id < 0 || id > INT32_MAX)
					return pfx_errorf(err, -EINVAL, "tokenizer.json: TemplateProcessing id %lld", (long long)id);
				if (ids_append(seen ? &t->post.suf : &t->post.pre, seen ? &t->post.nsuf : &t->post.npre,
					       (int32_t)id))
					return pfx_errorf(err, -ENOMEM, "out of memory");
			}
		}
		if (!seen)
			return pfx_errorf(err, -EINVAL, "tokenizer.json: TemplateProcessing single without $A");
		return 0;
	}
	if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
		json_object *cls = jget(o, "cls"), *sep = jget(o, "sep");
		if (json_object_array_length(cls) != 2 || json_object_array_length(sep) != 2)
			return pfx_errorf(err, -EINVAL, "tokenizer.json: %s needs cls and sep", type);
		if (ids_append(&t->post.pre, &t->post.npre,
			       json_object_get_int(json_object_array_get_idx(cls, 1))) ||
		    ids_append(&t->post.suf, &t->post.nsuf,
			       json_object_get_int(json_object_array_get_idx(sep, 1))))
			return pfx_errorf(err, -ENOMEM, "out of memory");
		return 0;
	}
	return pfx_errorf(err, -ENOTSUP, "tokenizer.json: post-processor %s is not implemented", type);
}

int load_components(struct pfx_tokenizer *t, json_object *root, struct pfx_error *err)
{
	int r = load_normalizer(t, jget(root, "normalizer"), err);
	if (!r)
		r = load_pretok(t, jget(root, "pre_tokenizer"), err);
	if (!r)
		r = load_post(t, jget(root, "post_processor"), err);
	if (!r)
		r = load_decoder(t, jget(root, "decoder"), err);
	return r;
}
