/* SPDX-License-Identifier: MIT */
/* Loading a model folder's tokenizer.json, tokenizer_config.json and
 * generation_config.json into the flat tables of tokenizer.h. Whatever the
 * files ask for that is not implemented here is refused by its name. */
#include "tokenizer.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "load/json_buf.h"

#define MAX_FILE (1u << 30)
/* Ids index flat tables: real vocabularies stay under 2^18, so 2^24 is
 * room enough and refuses a file whose one huge id would size them. */
#define MAX_ID (1 << 24)

/* Reads dir/name whole; -ENOENT quietly when it is not there. */
static int read_file(const char *dir, const char *name, char **buf, size_t *len,
		     struct pfx_error *err)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
		return pfx_errorf(err, -ENAMETOOLONG, "%s/%s: path too long", dir, name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return pfx_errorf(err, -errno, "%s: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_FILE) {
		close(fd);
		return pfx_errorf(err, -EINVAL, "%s: not a regular file under 1 GiB", path);
	}
	char *b = malloc((size_t)st.st_size + 1);
	if (!b) {
		close(fd);
		return pfx_errorf(err, -ENOMEM, "%s: out of memory", path);
	}
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
		if (r <= 0) {
			int e = r < 0 ? errno : EIO;
			free(b);
			close(fd);
			return pfx_errorf(err, -e, "%s: read: %s", path, strerror(e));
		}
		got += (size_t)r;
	}
	close(fd);
	b[got] = 0;
	*buf = b;
	*len = got;
	return 0;
}

static const char *jstr(json_object *o, const char *key)
{
	json_object *v;
	if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static json_object *jget(json_object *o, const char *key)
{
	json_object *v;
	if (!o || !json_object_object_get_ex(o, key, &v))
		return NULL;
	return v;
}

static bool jbool(json_object *o, const char *key, bool dflt)
{
	json_object *v = jget(o, key);
	if (!v || json_object_is_type(v, json_type_null))
		return dflt;
	return json_object_get_boolean(v);
}

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
		static const char ws_re[] = "\\w+|[^\\w\\s]+";
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

static int32_t added_or_vocab(const struct pfx_tokenizer *t, const char *s)
{
	for (size_t i = 0; i < t->nadded; i++)
		if (!strcmp(t->added[i].content, s))
			return t->added[i].id;
	return strmap_get(&t->vocab, s, strlen(s));
}

static int ids_append(int32_t **v, size_t *n, int32_t id)
{
	int32_t *p = realloc(*v, (*n + 1) * sizeof(*p));
	if (!p)
		return -ENOMEM;
	p[(*n)++] = id;
	*v = p;
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

static int set_piece(struct pfx_tokenizer *t, int64_t id, const char *s, size_t n)
{
	if ((size_t)id >= t->nid) {
		size_t nid = (size_t)id + 1, cap = t->piece_cap;
		if (nid > cap) {
			cap = cap ? cap : 1024;
			while (cap < nid)
				cap *= 2;
			char **p = realloc(t->piece, cap * sizeof(*p));
			if (!p)
				return -ENOMEM;
			memset(p + t->piece_cap, 0, (cap - t->piece_cap) * sizeof(*p));
			t->piece = p;
			t->piece_cap = cap;
		}
		t->nid = nid;
	}
	if (!t->piece[id] && !(t->piece[id] = arena_dup(&t->arena, s, n)))
		return -ENOMEM;
	return 0;
}

/* One merge: [a, b] or "a b", where a legacy string's halves may hold
 * spaces themselves: the split is the space where a, b and a+b are all in
 * the vocabulary (the repair ../shared/tokenizers/README.md describes). */
static int merge_halves(const struct pfx_tokenizer *t, json_object *m, const char **a, size_t *an,
			const char **b, size_t *bn)
{
	if (json_object_is_type(m, json_type_array) && json_object_array_length(m) == 2) {
		json_object *x = json_object_array_get_idx(m, 0), *y = json_object_array_get_idx(m, 1);
		if (!json_object_is_type(x, json_type_string) || !json_object_is_type(y, json_type_string))
			return -EINVAL;
		*a = json_object_get_string(x), *an = (size_t)json_object_get_string_len(x);
		*b = json_object_get_string(y), *bn = (size_t)json_object_get_string_len(y);
		return 0;
	}
	if (!json_object_is_type(m, json_type_string))
		return -EINVAL;
	const char *s = json_object_get_string(m);
	size_t n = (size_t)json_object_get_string_len(m);
	const char *first = memchr(s, ' ', n), *sp = NULL;
	if (!first)
		return -EINVAL;
	if (!memchr(first + 1, ' ', n - (size_t)(first + 1 - s))) {
		sp = first;
	} else {
		char tmp[1024];
		if (n >= sizeof(tmp))
			return -EINVAL;
		for (const char *c = first; c; c = memchr(c + 1, ' ', n - (size_t)(c + 1 - s))) {
			size_t l = (size_t)(c - s), r = n - l - 1;
			memcpy(tmp, s, l);
			memcpy(tmp + l, c + 1, r);
			if (strmap_get(&t->vocab, s, l) >= 0 && strmap_get(&t->vocab, c + 1, r) >= 0 &&
			    strmap_get(&t->vocab, tmp, l + r) >= 0) {
				if (sp)
					return -EINVAL; /* ambiguous */
				sp = c;
			}
		}
		if (!sp)
			return -EINVAL;
	}
	*a = s, *an = (size_t)(sp - s);
	*b = sp + 1, *bn = n - *an - 1;
	return 0;
}

static int load_model(struct pfx_tokenizer *t, json_object *m, struct pfx_error *err)
{
	const char *type = jstr(m, "type");
	if (!m)
		return pfx_errorf(err, -EINVAL, "tokenizer.json: no model");
	json_object *vocab = jget(m, "vocab"), *merges = jget(m, "merges");
	if (!type && vocab && merges)
		type = "BPE";
	if (!type || strcmp(type, "BPE"))
		return pfx_errorf(err, -ENOTSUP, "tokenizer.json: model %s is not implemented (BPE is)",
				  type ? type : "(untyped)");
	json_object *dropout = jget(m, "dropout");
	if (dropout && !json_object_is_type(dropout, json_type_null) && json_object_get_double(dropout) != 0)
		return pfx_errorf(err, -ENOTSUP, "tokenizer.json: BPE dropout is not implemented");
	if (!json_object_is_type(vocab, json_type_object) || !json_object_is_type(merges, json_type_array))
		return pfx_errorf(err, -EINVAL, "tokenizer.json: BPE model without vocab or merges");
	if (strmap_reserve(&t->vocab, (size_t)json_object_object_length(vocab)) ||
	    merges_reserve(&t->merges, json_object_array_length(merges)))
		return pfx_errorf(err, -ENOMEM, "out of memory");
	json_object_object_foreach(vocab, key, val) {
		int64_t id = json_object_get_int64(val);
		if (!json_object_is_type(val, json_type_int) || id < 0 || id >= MAX_ID)
			return pfx_errorf(err, -EINVAL, "tokenizer.json: vocab entry \"%.80s\" has id %lld (0 to 2^24 - 1)", key,
					  (long long)id);
		int r = set_piece(t, id, key, strlen(key));
		if (!r)
			r = strmap_put(&t->vocab, t->piece[id], strlen(t->piece[id]), (int32_t)id);
		if (r)
			return pfx_errorf(err, r, "out of memory");
	}
	const char *s;
	t->unk_id = -1;
	if ((s = jstr(m, "unk_token")) && (t->unk_id = strmap_get(&t->vocab, s, strlen(s))) < 0)
		return pfx_errorf(err, -EINVAL, "tokenizer.json: unk_token %.80s is not in the vocabulary", s);
	t->fuse_unk = jbool(m, "fuse_unk", false);
	t->byte_fallback = jbool(m, "byte_fallback", false);
	t->ignore_merges = jbool(m, "ignore_merges", false);
	if ((s = jstr(m, "continuing_subword_prefix")) && *s && !(t->prefix = strdup(s)))
		return pfx_errorf(err, -ENOMEM, "out of memory");
	if ((s = jstr(m, "end_of_word_suffix")) && *s && !(t->suffix = strdup(s)))
		return pfx_errorf(err, -ENOMEM, "out of memory");
	size_t plen = t->prefix ? strlen(t->prefix) : 0;
	struct tbuf nb = { 0 };
	for (size_t i = 0; i < json_object_array_length(merges); i++) {
		const char *a, *b;
		size_t an, bn;
		if (merge_halves(t, json_object_array_get_idx(merges, i), &a, &an, &b, &bn)) {
			tbuf_free(&nb);
			return pfx_errorf(err, -EINVAL, "tokenizer.json: merge %zu is not a pair of vocabulary tokens", i);
		}
		int32_t ia = strmap_get(&t->vocab, a, an), ib = strmap_get(&t->vocab, b, bn);
		nb.n = 0;
		if (bn < plen || tbuf_put(&nb, a, an) || tbuf_put(&nb, b + plen, bn - plen)) {
			tbuf_free(&nb);
			return pfx_errorf(err, -EINVAL, "tokenizer.json: merge %zu: bad halves", i);
		}
		int32_t in = strmap_get(&t->vocab, nb.p, nb.n);
		if (ia < 0 || ib < 0 || in < 0) {
			tbuf_free(&nb);
			return pfx_errorf(err, -EINVAL, "tokenizer.json: merge %zu names a token not in the vocabulary", i);
		}
		if (merges_put(&t->merges, ia, ib, (uint32_t)i, in)) {
			tbuf_free(&nb);
			return pfx_errorf(err, -ENOMEM, "out of memory");
		}
	}
	tbuf_free(&nb);
	return 0;
}

static int load_added(struct pfx_tokenizer *t, json_object *list, struct pfx_error *err)
{
	if (!list || json_object_is_type(list, json_type_null))
		return 0;
	if (!json_object_is_type(list, json_type_array))
		return pfx_errorf(err, -EINVAL, "tokenizer.json: added_tokens is not a list");
	size_t n = json_object_array_length(list);
	if (!(t->added = calloc(n + 1, sizeof(*t->added))))
		return pfx_errorf(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		json_object *o = json_object_array_get_idx(list, i), *idv = jget(o, "id");
		const char *c = jstr(o, "content");
		int64_t id = json_object_get_int64(idv);
		if (!c || !*c || !json_object_is_type(idv, json_type_int) || id < 0 || id >= MAX_ID)
			return pfx_errorf(err, -EINVAL, "tokenizer.json: added token %zu needs content and an id", i);
		struct added *a = &t->added[t->nadded++];
		a->len = strlen(c);
		/* As tokenizers: a token the vocabulary has keeps the vocabulary's id. */
		int32_t vid = strmap_get(&t->vocab, c, a->len);
		if (vid >= 0)
			id = vid;
		a->id = (int32_t)id;
		a->special = jbool(o, "special", false);
		a->lstrip = jbool(o, "lstrip", false);
		a->rstrip = jbool(o, "rstrip", false);
		a->single_word = jbool(o, "single_word", false);
		a->normalized = jbool(o, "normalized", !a->special);
		if (!(a->content = strdup(c)) || set_piece(t, id, c, a->len))
			return pfx_errorf(err, -ENOMEM, "out of memory");
		if (strcmp(t->piece[id], c))
			return pfx_errorf(err, -EINVAL, "tokenizer.json: added token %s has the id %lld of %.80s", c,
					  (long long)id, t->piece[id]);
	}
	return 0;
}

/* The config's special-token strings: a string, or {"content": ...}. */
static int config_token(json_object *cfg, const char *key, char **out)
{
	json_object *v = jget(cfg, key);
	const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : jstr(v, "content");
	if (s && !(*out = strdup(s)))
		return -ENOMEM;
	return 0;
}

static int load_config(struct pfx_tokenizer *t, const char *dir, struct pfx_error *err)
{
	char *buf;
	size_t len;
	int r = read_file(dir, "tokenizer_config.json", &buf, &len, err);
	if (r == -ENOENT)
		return 0;
	if (r)
		return r;
	json_object *cfg;
	r = json_parse_object(buf, len, &cfg, err);
	free(buf);
	if (r) {
		char m[sizeof(err->msg)];
		snprintf(m, sizeof(m), "%s", err ? err->msg : "");
		return pfx_errorf(err, r, "%s/tokenizer_config.json: %s", dir, m);
	}
	if (config_token(cfg, "bos_token", &t->bos) || config_token(cfg, "eos_token", &t->eos) ||
	    config_token(cfg, "unk_token", &t->unk) || config_token(cfg, "pad_token", &t->pad)) {
		json_object_put(cfg);
		return pfx_errorf(err, -ENOMEM, "out of memory");
	}
	t->cleanup = jbool(cfg, "clean_up_tokenization_spaces", false);
	json_object *ct = jget(cfg, "chat_template");
	r = 0;
	if (json_object_is_type(ct, json_type_string)) {
		t->tmpl = calloc(1, sizeof(char *));
		t->tmpl_name = calloc(1, sizeof(char *));
		if (t->tmpl && t->tmpl_name) {
			t->ntmpl = 1;
			t->tmpl[0] = strdup(json_object_get_string(ct));
			t->tmpl_name[0] = strdup("default");
		}
		if (!t->tmpl || !t->tmpl_name || !t->tmpl[0] || !t->tmpl_name[0])
			r = -ENOMEM;
	} else if (json_object_is_type(ct, json_type_array)) {
		size_t n = json_object_array_length(ct);
		t->tmpl = calloc(n + 1, sizeof(char *));
		t->tmpl_name = calloc(n + 1, sizeof(char *));
		if (!t->tmpl || !t->tmpl_name)
			r = -ENOMEM;
		for (size_t i = 0; !r && i < n; i++) {
			json_object *e = json_object_array_get_idx(ct, i);
			const char *name = jstr(e, "name"), *tpl = jstr(e, "template");
			if (!name || !tpl) {
				r = pfx_errorf(err, -EINVAL, "%s/tokenizer_config.json: chat_template entry %zu lacks name or template",
					       dir, i);
				break;
			}
			t->tmpl_name[i] = strdup(name);
			t->tmpl[i] = strdup(tpl);
			t->ntmpl++;
			if (!t->tmpl_name[i] || !t->tmpl[i])
				r = -ENOMEM;
		}
	} else if (ct && !json_object_is_type(ct, json_type_null)) {
		r = pfx_errorf(err, -EINVAL, "%s/tokenizer_config.json: chat_template is neither a string nor a list", dir);
	}
	json_object_put(cfg);
	if (r == -ENOMEM)
		pfx_errorf(err, r, "out of memory");
	return r;
}

static int load_generation(struct pfx_tokenizer *t, const char *dir, struct pfx_error *err)
{
	char *buf;
	size_t len;
	int r = read_file(dir, "generation_config.json", &buf, &len, err);
	if (r == -ENOENT)
		r = 0, buf = NULL;
	if (r)
		return r;
	json_object *cfg = NULL, *e = NULL;
	if (buf) {
		r = json_parse_object(buf, len, &cfg, err);
		free(buf);
		if (r) {
			char m[sizeof(err->msg)];
			snprintf(m, sizeof(m), "%s", err ? err->msg : "");
			return pfx_errorf(err, r, "%s/generation_config.json: %s", dir, m);
		}
		e = jget(cfg, "eos_token_id");
	}
	size_t n = json_object_is_type(e, json_type_array) ? json_object_array_length(e)
		   : json_object_is_type(e, json_type_int) ? 1 : 0;
	for (size_t i = 0; i < n; i++) {
		json_object *v = json_object_is_type(e, json_type_array) ? json_object_array_get_idx(e, i) : e;
		int64_t id = json_object_get_int64(v);
		if (!json_object_is_type(v, json_type_int) || id < 0 || (size_t)id >= t->nid) {
			json_object_put(cfg);
			return pfx_errorf(err, -EINVAL, "%s/generation_config.json: eos_token_id %lld is not a token",
					  dir, (long long)id);
		}
		if (ids_append(&t->eos_ids, &t->neos, (int32_t)id)) {
			json_object_put(cfg);
			return pfx_errorf(err, -ENOMEM, "out of memory");
		}
	}
	json_object_put(cfg);
	if (!n && t->eos) {
		int32_t id = added_or_vocab(t, t->eos);
		if (id >= 0 && ids_append(&t->eos_ids, &t->neos, id))
			return pfx_errorf(err, -ENOMEM, "out of memory");
	}
	return 0;
}

/* The symbols a word starts from that do not need a hash lookup: ByteLevel's
 * 256 byte characters, or byte_fallback's <0xHH>. */
static void byte_ids(struct pfx_tokenizer *t)
{
	for (int b = 0; b < 256; b++) {
		char s[8];
		size_t n;
		if (t->byte_level)
			n = utf8_put(s, bytelevel_char((unsigned char)b));
		else
			n = (size_t)snprintf(s, sizeof(s), "<0x%02X>", b);
		t->byte_id[b] = (t->byte_level || t->byte_fallback) ? strmap_get(&t->vocab, s, n) : -1;
	}
}

static int load_json(struct pfx_tokenizer *t, json_object *o, struct pfx_error *err)
{
	json_object *trunc = jget(o, "truncation"), *pad = jget(o, "padding");
	if (trunc && !json_object_is_type(trunc, json_type_null))
		return pfx_errorf(err, -ENOTSUP, "tokenizer.json: truncation is not implemented");
	if (pad && !json_object_is_type(pad, json_type_null))
		return pfx_errorf(err, -ENOTSUP, "tokenizer.json: padding is not implemented");
	int r = load_model(t, jget(o, "model"), err);
	if (!r)
		r = load_added(t, jget(o, "added_tokens"), err);
	if (!r)
		r = load_normalizer(t, jget(o, "normalizer"), err);
	if (!r)
		r = load_pretok(t, jget(o, "pre_tokenizer"), err);
	if (!r)
		r = load_post(t, jget(o, "post_processor"), err);
	if (!r)
		r = load_decoder(t, jget(o, "decoder"), err);
	if (r)
		return r;
	for (size_t i = 0; i < t->post.npre + t->post.nsuf; i++) {
		int32_t id = i < t->post.npre ? t->post.pre[i] : t->post.suf[i - t->post.npre];
		if ((size_t)id >= t->nid || !t->piece[id])
			return pfx_errorf(err, -EINVAL, "tokenizer.json: the post-processor adds id %d, not a token", id);
	}
	if (!(t->special = calloc(t->nid ? t->nid : 1, sizeof(bool))))
		return pfx_errorf(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < t->nadded; i++)
		t->special[t->added[i].id] = t->added[i].special;
	byte_ids(t);
	return added_index(t, err);
}

int pfx_tokenizer_load(const char *dir, struct pfx_tokenizer **out, struct pfx_error *err)
{
	*out = NULL;
	struct pfx_tokenizer *t = calloc(1, sizeof(*t));
	if (!t)
		return pfx_errorf(err, -ENOMEM, "out of memory");
	char *buf;
	size_t len;
	int r = read_file(dir, "tokenizer.json", &buf, &len, err);
	if (r) {
		free(t);
		return r;
	}
	json_object *o;
	r = json_parse_object(buf, len, &o, err);
	free(buf);
	if (r) {
		char m[sizeof(err->msg)];
		snprintf(m, sizeof(m), "%s", err ? err->msg : "");
		free(t);
		return pfx_errorf(err, r, "%s/tokenizer.json: %s", dir, m);
	}
	r = load_json(t, o, err);
	json_object_put(o);
	if (r && err && !strncmp(err->msg, "tokenizer.json", 14)) {
		char m[sizeof(err->msg)];
		snprintf(m, sizeof(m), "%s", err->msg);
		pfx_errorf(err, r, "%s/%s", dir, m);
	}
	if (!r)
		r = load_config(t, dir, err);
	if (!r)
		r = load_generation(t, dir, err);
	if (r) {
		pfx_tokenizer_free(t);
		return r;
	}
	*out = t;
	return 0;
}

void pfx_tokenizer_free(struct pfx_tokenizer *t)
{
	if (!t)
		return;
	strmap_free(&t->vocab);
	merges_free(&t->merges);
	arena_free(t->arena);
	free(t->piece);
	free(t->special);
	free(t->prefix);
	free(t->suffix);
	for (size_t i = 0; i < t->nnorm; i++) {
		free(t->norm[i].a);
		free(t->norm[i].b);
		pcre2_code_free(t->norm[i].re);
	}
	free(t->norm);
	for (size_t i = 0; i < t->npre; i++)
		pcre2_code_free(t->pre[i].re);
	free(t->pre);
	for (size_t i = 0; i < t->ndec; i++) {
		free(t->dec[i].a);
		free(t->dec[i].b);
		pcre2_code_free(t->dec[i].re);
	}
	free(t->dec);
	free(t->post.pre);
	free(t->post.suf);
	for (size_t i = 0; i < t->nadded; i++)
		free(t->added[i].content);
	free(t->added);
	free(t->raw.idx);
	free(t->normed.idx);
	free(t->bos);
	free(t->eos);
	free(t->unk);
	free(t->pad);
	for (size_t i = 0; i < t->ntmpl; i++) {
		free(t->tmpl[i]);
		free(t->tmpl_name[i]);
	}
	free(t->tmpl);
	free(t->tmpl_name);
	free(t->eos_ids);
	free(t);
}

size_t pfx_tokenizer_vocab_size(const struct pfx_tokenizer *t)
{
	return t->nid;
}

const char *pfx_tokenizer_piece(const struct pfx_tokenizer *t, int32_t id)
{
	return id >= 0 && (size_t)id < t->nid ? t->piece[id] : NULL;
}

const int32_t *pfx_tokenizer_eos(const struct pfx_tokenizer *t, size_t *n)
{
	*n = t->neos;
	return t->eos_ids;
}

bool pfx_tokenizer_is_special(const struct pfx_tokenizer *t, int32_t id)
{
	return id >= 0 && (size_t)id < t->nid && t->special[id];
}

bool pfx_tokenizer_has_chat_template(const struct pfx_tokenizer *t)
{
	return tok_chat_template(t, NULL) != NULL;
}

const char *tok_chat_template(const struct pfx_tokenizer *t, const char *name)
{
	if (!name)
		name = "default";
	for (size_t i = 0; i < t->ntmpl; i++)
		if (!strcmp(t->tmpl_name[i], name))
			return t->tmpl[i];
	return NULL;
}

const char *tok_special_string(const struct pfx_tokenizer *t, const char *which)
{
	if (!strcmp(which, "bos_token"))
		return t->bos;
	if (!strcmp(which, "eos_token"))
		return t->eos;
	if (!strcmp(which, "unk_token"))
		return t->unk;
	if (!strcmp(which, "pad_token"))
		return t->pad;
	return NULL;
}
