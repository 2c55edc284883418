/* SPDX-License-Identifier: MIT */
/* Loading a model folder: tokenizer.json's model and added tokens into the
 * flat tables of tokenizer.h (its stages: components.c; the other files:
 * config.c), and the tokenizer's accessors. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "load/json_buf.h"
#include "load_json.h"

#define MAX_FILE (1u << 30)

int32_t added_or_vocab(const struct pfx_tokenizer *t, const char *s)
{
	for (size_t i = 0; i < t->nadded; i++)
		if (!strcmp(t->added[i].content, s))
			return t->added[i].id;
	return strmap_get(&t->vocab, s, strlen(s));
}

int ids_append(int32_t **v, size_t *n, int32_t id)
{
	int32_t *p = realloc(*v, (*n + 1) * sizeof(*p));
	if (!p)
		return -ENOMEM;
	p[(*n)++] = id;
	*v = p;
	return 0;
}

int text_read_file(const char *dir, const char *name, char **buf, size_t *len,
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

/* Room in t->piece for id. */
static int piece_room(struct pfx_tokenizer *t, int64_t id)
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
	return 0;
}

static int set_piece(struct pfx_tokenizer *t, int64_t id, const char *s, size_t n)
{
	if (piece_room(t, id))
		return -ENOMEM;
	if (!t->piece[id] && !(t->piece[id] = arena_dup(&t->arena, s, n)))
		return -ENOMEM;
	return 0;
}

/* A large tokenizer.json is a million json-c objects, and freeing them
 * takes as long as a fifth of the load: the vocabulary's subtree is freed
 * on a thread of its own once its table is built, while the merges are
 * looked up, and the rest of the model's once the merges are in theirs,
 * while the rest loads (pfx_tokenizer_load joins them before returning). */
struct json_freeing {
	bool threads; /* a file large enough for a thread to pay */
	pthread_t thread[2];
	int n;
};

static void *put_json(void *o)
{
	json_object_put(o);
	return NULL;
}

/* Takes parent's member key out of it and frees it, on a thread if one
 * starts, else here. */
static void free_member(json_object *parent, const char *key, struct json_freeing *f)
{
	json_object *m = jget(parent, key);
	if (!m)
		return;
	json_object_get(m);
	json_object_object_del(parent, key);
	if (!f->threads || f->n == 2 || pthread_create(&f->thread[f->n], NULL, put_json, m))
		json_object_put(m);
	else
		f->n++;
}

static void freeing_join(struct json_freeing *f)
{
	while (f->n)
		pthread_join(f->thread[--f->n], NULL);
}

/* model_scan's vocabulary, as the loop below would read json-c's object
 * of it; 1 for a repeated key or id, whose outcome depends on the order
 * json-c keeps (the caller parses the file whole then). */
static int scanned_vocab(struct pfx_tokenizer *t, const struct model_scan *s, struct pfx_error *err)
{
	if (strmap_reserve(&t->vocab, s->nvocab))
		return pfx_errorf(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < s->nvocab; i++) {
		const struct vocab_ent *v = &s->vocab[i];
		if (piece_room(t, v->id))
			return pfx_errorf(err, -ENOMEM, "out of memory");
		if (t->piece[v->id])
			return 1;
		size_t n = t->vocab.n;
		t->piece[v->id] = (char *)v->key;
		if (strmap_put(&t->vocab, v->key, v->len, v->id))
			return pfx_errorf(err, -ENOMEM, "out of memory");
		if (t->vocab.n == n)
			return 1;
	}
	return 0;
}

static int load_model(struct pfx_tokenizer *t, json_object *m, const struct model_scan *scan,
		      struct json_freeing *f, struct pfx_error *err)
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
	int r;
	if (scan && (r = scanned_vocab(t, scan, err)))
		return r;
	if (!scan && (!json_object_is_type(vocab, json_type_object) || !json_object_is_type(merges, json_type_array)))
		return pfx_errorf(err, -EINVAL, "tokenizer.json: BPE model without vocab or merges");
	if (!scan && strmap_reserve(&t->vocab, (size_t)json_object_object_length(vocab)))
		return pfx_errorf(err, -ENOMEM, "out of memory");
	for (struct lh_entry *e = scan ? NULL : json_object_get_object(vocab)->head; e; e = e->next) {
		const char *key = (const char *)lh_entry_k(e);
		json_object *val = (json_object *)lh_entry_v(e);
		int64_t id = json_object_get_int64(val);
		if (!json_object_is_type(val, json_type_int) || id < 0 || id >= MAX_ID)
			return pfx_errorf(err, -EINVAL, "tokenizer.json: vocab entry \"%.80s\" has id %lld (0 to 2^24 - 1)", key,
					  (long long)id);
		if ((r = set_piece(t, id, key, strlen(key))) ||
		    (r = strmap_put(&t->vocab, t->piece[id], strlen(t->piece[id]), (int32_t)id)))
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
	free_member(m, "vocab", f);
	return scan ? load_scanned_merges(t, scan, err) : load_merges(t, merges, err);
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

static int load_json(struct pfx_tokenizer *t, json_object *o, const struct model_scan *scan,
		     struct json_freeing *f, struct pfx_error *err)
{
	json_object *trunc = jget(o, "truncation"), *pad = jget(o, "padding");
	if (trunc && !json_object_is_type(trunc, json_type_null))
		return pfx_errorf(err, -ENOTSUP, "tokenizer.json: truncation is not implemented");
	if (pad && !json_object_is_type(pad, json_type_null))
		return pfx_errorf(err, -ENOTSUP, "tokenizer.json: padding is not implemented");
	int r = load_model(t, jget(o, "model"), scan, f, err);
	if (!r)
		free_member(o, "model", f);
	if (!r)
		r = load_added(t, jget(o, "added_tokens"), err);
	if (!r)
		r = load_components(t, o, err);
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

/* The fast path (model_scan.c): 0, or nonzero when the file is to be
 * parsed whole (t is then partly filled). */
static int load_scanned(struct pfx_tokenizer *t, const char *dir, const char *buf, size_t len,
			struct pfx_error *err)
{
	struct model_scan s;
	if (model_scan(t, buf, len, &s))
		return 1;
	struct json_freeing f = { .threads = false, .n = 0 };
	int r = load_json(t, s.rest, &s, &f, err);
	model_scan_free(&s);
	return r ? r : load_configs(t, dir, err);
}

/* The whole file parsed by json-c: every refusal and its message. */
static int load_parsed(struct pfx_tokenizer *t, const char *dir, char *buf, size_t len,
		       struct pfx_error *err)
{
	json_object *o;
	int r = tokenizer_json_parse(buf, len, &o, err);
	free(buf);
	if (r) {
		char m[sizeof(err->msg)];
		snprintf(m, sizeof(m), "%s", err ? err->msg : "");
		return pfx_errorf(err, r, "%s/tokenizer.json: %s", dir, m);
	}
	struct json_freeing f = { .threads = len >= (1u << 20), .n = 0 };
	r = load_json(t, o, NULL, &f, err);
	json_object_put(o);
	if (r && err && !strncmp(err->msg, "tokenizer.json", 14)) {
		char m[sizeof(err->msg)];
		snprintf(m, sizeof(m), "%s", err->msg);
		pfx_errorf(err, r, "%s/%s", dir, m);
	}
	if (!r)
		r = load_configs(t, dir, err);
	freeing_join(&f);
	return r;
}

static int load(const char *dir, bool scan, struct pfx_tokenizer **out, struct pfx_error *err)
{
	*out = NULL;
	struct pfx_tokenizer *t = calloc(1, sizeof(*t));
	if (!t)
		return pfx_errorf(err, -ENOMEM, "out of memory");
	char *buf;
	size_t len;
	int r = text_read_file(dir, "tokenizer.json", &buf, &len, err);
	if (r) {
		free(t);
		return r;
	}
	/* Any failure of the fast path, the file's own included, is
	 * loaded again the whole-file way, which words the refusal. */
	if (scan && !load_scanned(t, dir, buf, len, err)) {
		free(buf);
		*out = t;
		return 0;
	}
	if (scan) {
		pfx_tokenizer_free(t);
		if (!(t = calloc(1, sizeof(*t)))) {
			free(buf);
			return pfx_errorf(err, -ENOMEM, "out of memory");
		}
	}
	r = load_parsed(t, dir, buf, len, err);
	if (r) {
		pfx_tokenizer_free(t);
		return r;
	}
	*out = t;
	return 0;
}

int pfx_tokenizer_load(const char *dir, struct pfx_tokenizer **out, struct pfx_error *err)
{
	return load(dir, true, out, err);
}

int tokenizer_load_whole(const char *dir, struct pfx_tokenizer **out, struct pfx_error *err)
{
	return load(dir, false, out, err);
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

bool pfx_tokenizer_is_special(const struct pfx_tokenizer *t, int32_t id)
{
	return id >= 0 && (size_t)id < t->nid && t->special[id];
}

