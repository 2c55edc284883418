/* SPDX-License-Identifier: MIT */
/*
 * tokenizer.json's vocabulary and merges read without json-c. They are
 * nearly all of a large file (qwen3: 151,643 keys and as many merges in
 * 11 MB), and json-c builds, hashes and frees an object for every key,
 * string and pair in them: about two thirds of a load. Here a scanner made
 * for their two shapes (an object of "string": small integer, a list of
 * "a b" strings or ["a", "b"] pairs) reads them straight into the
 * tokenizer's tables, the merges on a second thread while this one reads
 * the vocabulary, and json-c parses the rest of the file with a
 * placeholder string in their places.
 *
 * The scan is only a fast path, taken when json-c confirms it: the
 * placeholders come out as model.vocab and model.merges of the rest's
 * tree (so the bytes they replaced are the values the whole file's parse
 * would give those keys, repeated keys included), and each scanned part is
 * exactly one value. Anything else, and anything the scanner reads
 * differently from json-c or that the loader would refuse (an escape
 * json-c rejects or maps, \u0000 or a lone surrogate, a control byte, a
 * comment, a number that is not a small non-negative integer, a merge that
 * is not a pair, a repeated vocabulary key or id), returns 1: the caller
 * then parses the whole file with json-c as before, so its tree, its
 * refusals and their messages are the ones they were.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "load_json.h"

/* Below this the merges are scanned on this thread. */
#define MERGES_THREAD_BYTES (1u << 18)

static const char *skip_ws(const char *p, const char *e)
{
	while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
		p++;
	return p;
}

/* The string whose opening quote is at p - 1: its raw length up to the
 * closing quote, *end at that quote (NULL when there is none or it holds a
 * control byte, which the scan leaves to json-c), *esc when it has
 * escapes. */
static size_t string_span(const char *p, const char *e, const char **end, bool *esc)
{
	const char *q = p;
	bool any = false;
	*end = NULL;
	while (q < e) {
		unsigned char c = (unsigned char)*q;
		if (c == '"') {
			*end = q;
			break;
		}
		if (c < 0x20)
			return 0;
		if (c == '\\') {
			any = true;
			q++;
		}
		q++;
	}
	*esc = any;
	return (size_t)(q - p);
}

static int32_t hex4(const char *s)
{
	int32_t v = 0;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		int d = c >= '0' && c <= '9' ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (d < 0)
			return -1;
		v = v << 4 | d;
	}
	return v;
}

/* s[0, n) (a string's raw bytes, escapes whole) decoded into out (room for
 * n bytes); its length, or SIZE_MAX for what json-c reads otherwise or
 * refuses, and for \u0000 (json-c cuts a key there). */
static size_t unescape(const char *s, size_t n, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c != '\\') {
			out[o++] = c;
			continue;
		}
		switch (s[++i]) {
		case '"': out[o++] = '"'; break;
		case '\\': out[o++] = '\\'; break;
		case '/': out[o++] = '/'; break;
		case 'b': out[o++] = '\b'; break;
		case 'f': out[o++] = '\f'; break;
		case 'n': out[o++] = '\n'; break;
		case 'r': out[o++] = '\r'; break;
		case 't': out[o++] = '\t'; break;
		case 'u': {
			int32_t cp = i + 4 < n ? hex4(s + i + 1) : -1;
			if (cp <= 0 || (cp >= 0xdc00 && cp <= 0xdfff))
				return SIZE_MAX;
			i += 4;
			if (cp >= 0xd800 && cp <= 0xdbff) {
				int32_t lo = i + 6 < n && s[i + 1] == '\\' && s[i + 2] == 'u' ? hex4(s + i + 3) : -1;
				if (lo < 0xdc00 || lo > 0xdfff)
					return SIZE_MAX;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				i += 6;
			}
			o += utf8_put(out + o, cp);
			break;
		}
		default:
			return SIZE_MAX;
		}
	}
	return o;
}

/* The string at p (its opening quote) decoded into room (*room(ctx, n)
 * gives n bytes); the byte after its closing quote, or NULL. */
static const char *read_string(const char *p, const char *e, char *(*room)(void *, size_t), void *ctx,
			       char **out, size_t *len)
{
	const char *end;
	bool esc;
	if (p == e || *p != '"')
		return NULL;
	size_t raw = string_span(p + 1, e, &end, &esc);
	char *o = end ? room(ctx, raw) : NULL;
	if (!o)
		return NULL;
	if (esc) {
		if ((*len = unescape(p + 1, raw, o)) == SIZE_MAX)
			return NULL;
	} else {
		memcpy(o, p + 1, raw);
		*len = raw;
	}
	*out = o;
	return end + 1;
}

/* ---- the vocabulary: { "key": id, ... } ---- */

static char *arena_room_cb(void *arena, size_t n)
{
	return arena_room(arena, n);
}

/* The object at p ('{') into s->vocab, its keys in *arena; the byte after
 * its '}', or NULL. */
static const char *scan_vocab(struct arena_block **arena, const char *p, const char *e,
			      struct model_scan *s)
{
	p = skip_ws(p + 1, e);
	if (p < e && *p == '}')
		return p + 1;
	for (;;) {
		char *k;
		size_t kl;
		if (!(p = read_string(p, e, arena_room_cb, arena, &k, &kl)))
			return NULL;
		arena_commit(*arena, kl);
		p = skip_ws(p, e);
		if (p == e || *p != ':')
			return NULL;
		const char *d = p = skip_ws(p + 1, e);
		uint32_t id = 0;
		while (p < e && *p >= '0' && *p <= '9' && p - d < 9)
			id = id * 10 + (uint32_t)(*p++ - '0');
		/* json-c's own reading for anything longer, signed, fractional
		 * or with a leading zero (and the loader's refusal past 2^24). */
		if (p == d || p - d > 8 || (*d == '0' && p - d > 1) || id >= MAX_ID)
			return NULL;
		if (s->nvocab == s->vocab_cap) {
			size_t cap = s->vocab_cap ? s->vocab_cap * 2 : 4096;
			struct vocab_ent *v = realloc(s->vocab, cap * sizeof(*v));
			if (!v)
				return NULL;
			s->vocab = v;
			s->vocab_cap = cap;
		}
		s->vocab[s->nvocab++] = (struct vocab_ent){ k, (uint32_t)kl, (int32_t)id };
		p = skip_ws(p, e);
		if (p == e)
			return NULL;
		if (*p == '}')
			return p + 1;
		if (*p != ',')
			return NULL;
		p = skip_ws(p + 1, e);
	}
}

/* ---- the merges: [ "a b" or ["a", "b"], ... ] ---- */

static char *tbuf_room_cb(void *b, size_t n)
{
	struct tbuf *t = b;
	if (t->n + n + 1 > t->cap) {
		size_t cap = t->cap ? t->cap : 1u << 16;
		while (cap < t->n + n + 1)
			cap *= 2;
		char *p = realloc(t->p, cap);
		if (!p)
			return NULL;
		t->p = p;
		t->cap = cap;
	}
	return t->p + t->n;
}

static bool merge_push(struct model_scan *s, size_t off, size_t len, int32_t alen)
{
	if (s->nmerges == s->merges_cap) {
		size_t cap = s->merges_cap ? s->merges_cap * 2 : 4096;
		struct scan_merge *m = realloc(s->merges, cap * sizeof(*m));
		if (!m)
			return false;
		s->merges = m;
		s->merges_cap = cap;
	}
	s->merges[s->nmerges++] = (struct scan_merge){ (uint32_t)off, (uint32_t)len, alen };
	return true;
}

/* One merge at p into s: the byte after it, or NULL. */
static const char *scan_merge(const char *p, const char *e, struct model_scan *s)
{
	struct tbuf *b = &s->text;
	size_t off = b->n, an, bn;
	char *x;
	if (*p == '"') {
		if (!(p = read_string(p, e, tbuf_room_cb, b, &x, &an)))
			return NULL;
		const char *sp = memchr(x, ' ', an);
		if (!sp)
			return NULL;
		size_t l = (size_t)(sp - x);
		if (memchr(sp + 1, ' ', an - l - 1)) {
			b->n += an; /* legacy: split by the vocabulary later */
			return merge_push(s, off, an, -1) ? p : NULL;
		}
		memmove(x + l, sp + 1, an - l - 1);
		b->n += an - 1;
		return merge_push(s, off, an - 1, (int32_t)l) ? p : NULL;
	}
	if (*p != '[')
		return NULL;
	p = skip_ws(p + 1, e);
	if (!(p = read_string(p, e, tbuf_room_cb, b, &x, &an)))
		return NULL;
	b->n += an;
	p = skip_ws(p, e);
	if (p == e || *p != ',')
		return NULL;
	p = skip_ws(p + 1, e);
	if (!(p = read_string(p, e, tbuf_room_cb, b, &x, &bn)))
		return NULL;
	b->n += bn;
	p = skip_ws(p, e);
	if (p == e || *p != ']')
		return NULL;
	return merge_push(s, off, an + bn, (int32_t)an) ? p + 1 : NULL;
}

struct merges_job {
	const char *p, *e;
	struct model_scan *s;
	bool ok; /* the list is exactly [p, e) */
};

static void *scan_merges(void *arg)
{
	struct merges_job *j = arg;
	const char *p = skip_ws(j->p + 1, j->e), *e = j->e;
	j->ok = false;
	if (p < e && *p == ']') {
		j->ok = p + 1 == e;
		return NULL;
	}
	for (;;) {
		if (p == e || !(p = scan_merge(p, e, j->s)))
			return NULL;
		p = skip_ws(p, e);
		if (p == e)
			return NULL;
		if (*p == ']') {
			j->ok = p + 1 == e;
			return NULL;
		}
		if (*p != ',')
			return NULL;
		p = skip_ws(p + 1, e);
	}
}

/* ---- the file ---- */

/* The '{' of the first "vocab": { in buf[0, end), as a key (after { or ,). */
static const char *find_vocab(const char *buf, const char *end)
{
	for (const char *k = buf; (k = memmem(k, (size_t)(end - k), "\"vocab\"", 7)); k++) {
		const char *b = k;
		while (b > buf && (b[-1] == ' ' || b[-1] == '\n' || b[-1] == '\r' || b[-1] == '\t'))
			b--;
		if (b == buf || (b[-1] != ',' && b[-1] != '{'))
			continue;
		const char *v = skip_ws(k + 7, end);
		if (v == end || *v != ':')
			continue;
		v = skip_ws(v + 1, end);
		if (v < end && *v == '{')
			return v;
	}
	return NULL;
}

/* Whether o's key is the string want[0, wn). */
static bool is_placeholder(json_object *o, const char *key, const char *want, size_t wn)
{
	json_object *v = jget(o, key);
	return json_object_is_type(v, json_type_string) && (size_t)json_object_get_string_len(v) == wn &&
	       !memcmp(json_object_get_string(v), want, wn);
}

int model_scan(struct pfx_tokenizer *t, const char *buf, size_t len, struct model_scan *s)
{
	*s = (struct model_scan){ 0 };
	size_t ms, me;
	unsigned char nonce[12];
	const char *vs;
	if (len > INT32_MAX || !tokenizer_json_find_merges(buf, len, &ms, &me) ||
	    !(vs = find_vocab(buf, buf + ms)) ||
	    getrandom(nonce, sizeof(nonce), GRND_NONBLOCK) != (ssize_t)sizeof(nonce))
		return 1;
	struct merges_job job = { buf + ms, buf + me, s, false };
	pthread_t th;
	bool thread = me - ms >= MERGES_THREAD_BYTES && !pthread_create(&th, NULL, scan_merges, &job);
	const char *ve = scan_vocab(&t->arena, vs, buf + ms, s);
	json_object *rest = NULL;
	/* Strings no file holds by chance, as JSON and as json-c decodes them. */
	char ph[2][64], want[2][48];
	size_t wn[2];
	for (int k = 0; k < 2 && ve; k++) {
		wn[k] = (size_t)sprintf(want[k], "%cpfx-%s-", 0, k ? "merges" : "vocab");
		for (size_t i = 0; i < sizeof(nonce); i++)
			wn[k] += (size_t)sprintf(want[k] + wn[k], "%02x", nonce[i]);
		snprintf(ph[k], sizeof(ph[k]), "\"\\u0000%s\"", want[k] + 1);
	}
	if (ve) {
		const char *part[5] = { buf, ph[0], ve, ph[1], buf + me };
		size_t n[5] = { (size_t)(vs - buf), strlen(ph[0]), (size_t)(buf + ms - ve), strlen(ph[1]), len - me };
		rest = json_parse_parts(part, n, 5);
	}
	if (thread)
		pthread_join(th, NULL);
	else if (ve && rest)
		scan_merges(&job);
	json_object *model = jget(rest, "model");
	s->rest = rest;
	if (!ve || !job.ok || !json_object_is_type(model, json_type_object) ||
	    !is_placeholder(model, "vocab", want[0], wn[0]) || !is_placeholder(model, "merges", want[1], wn[1])) {
		model_scan_free(s);
		return 1;
	}
	return 0;
}

void model_scan_free(struct model_scan *s)
{
	free(s->vocab);
	free(s->merges);
	tbuf_free(&s->text);
	json_object_put(s->rest);
	*s = (struct model_scan){ 0 };
}
