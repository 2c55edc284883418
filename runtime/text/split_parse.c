/* SPDX-License-Identifier: MIT */
/*
 * tokenizer.json parsed by json-c on two threads. Hugging Face writes the
 * model last and its merges last in it, so a file ends with
 * `"merges": [...] } }`; the merges (a third of the file, a fifth of the
 * parse) are parsed on a second thread while this one parses the rest
 * with a placeholder in their place. The split is only a guess: it is
 * taken only when json-c confirms it, the rest parsing with the
 * placeholder as model.merges and the merges parsing as one complete
 * array exactly filling their bytes, so the tree is the one the whole
 * file parses to; any doubt and the file is parsed whole, as before.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "load/json_buf.h"
#include "load_json.h"

/* Below this the second thread costs more than it saves. */
#define SPLIT_MIN_BYTES (1u << 20)

static bool space(char c)
{
	return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

bool tokenizer_json_find_merges(const char *buf, size_t len, size_t *start, size_t *end)
{
	size_t e = len;
	while (e && (space(buf[e - 1]) || !buf[e - 1]))
		e--;
	for (int k = 0; k < 2; k++) { /* the model's and the root's } */
		if (!e || buf[e - 1] != '}')
			return false;
		for (e--; e && space(buf[e - 1]); e--)
			;
	}
	if (!e || buf[e - 1] != ']')
		return false;
	/* The last "merges" key: its quotes must follow { or , (a quote
	 * elsewhere would make the rest fail to parse or the placeholder land
	 * away from model.merges, and both are checked). */
	const char *key = NULL;
	for (const char *p = buf; (p = memmem(p, (size_t)(buf + e - p), "\"merges\"", 8)); p++)
		key = p;
	if (!key)
		return false;
	const char *b = key;
	while (b > buf && space(b[-1]))
		b--;
	if (b == buf || (b[-1] != ',' && b[-1] != '{'))
		return false;
	const char *v = key + 8;
	while (v < buf + e && space(*v))
		v++;
	if (v == buf + e || *v++ != ':')
		return false;
	while (v < buf + e && space(*v))
		v++;
	if (v == buf + e || *v != '[')
		return false;
	*start = (size_t)(v - buf);
	*end = e;
	return true;
}

struct merges_parse {
	const char *s;
	size_t n;
	int depth;
	json_object *out; /* the array, or NULL */
};

static void *parse_merges(void *arg)
{
	struct merges_parse *m = arg;
	json_tokener *tok = json_tokener_new_ex(m->depth);
	if (!tok)
		return NULL;
	json_object *o = json_tokener_parse_ex(tok, m->s, (int)m->n);
	if (o && (json_tokener_get_error(tok) != json_tokener_success ||
		  json_tokener_get_parse_end(tok) != m->n || !json_object_is_type(o, json_type_array))) {
		json_object_put(o);
		o = NULL;
	}
	json_tokener_free(tok);
	m->out = o;
	return NULL;
}

json_object *json_parse_parts(const char *const *part, const size_t *n, int nparts)
{
	json_tokener *tok = json_tokener_new();
	if (!tok)
		return NULL;
	json_object *o = NULL;
	for (int i = 0; i < nparts; i++) {
		o = json_tokener_parse_ex(tok, part[i], (int)n[i]);
		enum json_tokener_error e = json_tokener_get_error(tok);
		if (i < nparts - 1 ? o || e != json_tokener_continue : !o || e != json_tokener_success) {
			json_object_put(o);
			o = NULL;
			break;
		}
	}
	/* Only white space or NUL padding after the document. */
	size_t at = json_tokener_get_parse_end(tok);
	const char *last = part[nparts - 1];
	for (size_t i = at; o && i < n[nparts - 1]; i++)
		if (last[i] && !space(last[i])) {
			json_object_put(o);
			o = NULL;
		}
	json_tokener_free(tok);
	return o;
}

/* buf[0, start) + placeholder + buf[end, len) as one document. */
static json_object *parse_rest(const char *buf, size_t len, size_t start, size_t end,
			       const char *placeholder)
{
	const char *part[3] = { buf, placeholder, buf + end };
	size_t n[3] = { start, strlen(placeholder), len - end };
	return json_parse_parts(part, n, 3);
}

json_object *tokenizer_json_split(const char *buf, size_t len)
{
	size_t start, end;
	unsigned char nonce[12];
	if (len < SPLIT_MIN_BYTES || len > INT32_MAX || !tokenizer_json_find_merges(buf, len, &start, &end) ||
	    getrandom(nonce, sizeof(nonce), GRND_NONBLOCK) != (ssize_t)sizeof(nonce))
		return NULL;
	/* A string no file holds by chance: then model.merges is it only
	 * where the placeholder went. As JSON, and as json-c decodes it. */
	char placeholder[64], want[48];
	size_t wn = 12;
	memcpy(want, "\0pfx-merges-", 12);
	for (size_t i = 0; i < sizeof(nonce); i++)
		wn += (size_t)sprintf(want + wn, "%02x", nonce[i]);
	snprintf(placeholder, sizeof(placeholder), "\"\\u0000%s\"", want + 1);
	struct merges_parse m = { buf + start, end - start, JSON_TOKENER_DEFAULT_DEPTH - 2, NULL };
	pthread_t th;
	if (pthread_create(&th, NULL, parse_merges, &m))
		return NULL;
	json_object *root = parse_rest(buf, len, start, end, placeholder);
	pthread_join(th, NULL);
	json_object *model = jget(root, "model"), *ph = jget(model, "merges");
	if (!m.out || !json_object_is_type(model, json_type_object) ||
	    !json_object_is_type(ph, json_type_string) || (size_t)json_object_get_string_len(ph) != wn ||
	    memcmp(json_object_get_string(ph), want, wn) ||
	    json_object_object_add(model, "merges", m.out)) {
		json_object_put(m.out);
		json_object_put(root);
		return NULL;
	}
	return root;
}

int tokenizer_json_parse(const char *buf, size_t len, json_object **out, struct pfx_error *err)
{
	json_object *o = tokenizer_json_split(buf, len);
	if (o && json_object_is_type(o, json_type_object)) {
		*out = o;
		return 0;
	}
	json_object_put(o);
	return json_parse_object(buf, len, out, err);
}
