/* SPDX-License-Identifier: MIT */
/* What the loader's files share: json-c look-ups and the steps each file
 * does (load.c the model and added tokens, components.c the pipeline's
 * stages, config.c tokenizer_config.json and the end-of-sequence ids). */
#ifndef PFX_TEXT_LOAD_JSON_H
#define PFX_TEXT_LOAD_JSON_H

#include <json-c/json.h>

#include "tokenizer.h"

/* Ids index flat tables: real vocabularies stay under 2^18, so 2^24 is
 * room enough and refuses a file whose one huge id would size them. */
#define MAX_ID (1 << 24)

static inline const char *jstr(json_object *o, const char *key)
{
	json_object *v;
	if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static inline json_object *jget(json_object *o, const char *key)
{
	json_object *v;
	if (!o || !json_object_object_get_ex(o, key, &v))
		return NULL;
	return v;
}

/* key's boolean, dflt when absent or null. */
static inline bool jbool(json_object *o, const char *key, bool dflt)
{
	json_object *v = jget(o, key);
	if (!v || json_object_is_type(v, json_type_null))
		return dflt;
	return json_object_get_boolean(v);
}

/* Reads dir/name whole (NUL-terminated); -ENOENT, with a message, when it
 * is not there. */
int text_read_file(const char *dir, const char *name, char **buf, size_t *len, struct pfx_error *err);
/* Appends id to the malloc'd *v of *n. */
int ids_append(int32_t **v, size_t *n, int32_t id);
/* The id of an added token's or the vocabulary's string s, or -1. */
int32_t added_or_vocab(const struct pfx_tokenizer *t, const char *s);
/* split_parse.c: tokenizer.json's text as json_parse_object parses it,
 * on two threads where the file's layout allows. */
int tokenizer_json_parse(const char *buf, size_t len, json_object **out, struct pfx_error *err);
/* Its split parse: the tree, or NULL when the file does not split (the
 * whole-file parse then runs). */
json_object *tokenizer_json_split(const char *buf, size_t len);
/* The bytes [*start, *end) of the merges array where the file ends with
 * it, as Hugging Face writes them (a guess: callers have json-c confirm). */
bool tokenizer_json_find_merges(const char *buf, size_t len, size_t *start, size_t *end);
/* part[0] + ... + part[nparts - 1] parsed as one JSON document followed
 * only by white space or NUL padding; NULL when it is not one. */
json_object *json_parse_parts(const char *const *part, const size_t *n, int nparts);

/* model_scan.c: the vocabulary and merges of a file laid out as Hugging
 * Face writes it, read without json-c, and json-c's tree of the rest. */
struct model_scan {
	struct vocab_ent {
		const char *key; /* in the tokenizer's arena */
		uint32_t len;
		int32_t id;
	} *vocab; /* in the file's order */
	size_t nvocab, vocab_cap;
	struct scan_merge {
		/* text + off: the left half (alen bytes) then the right, or
		 * with alen < 0 a legacy "a b" string of several spaces whose
		 * split needs the vocabulary. */
		uint32_t off, len;
		int32_t alen;
	} *merges;
	size_t nmerges, merges_cap;
	struct tbuf text;
	/* The rest of the file, with placeholder strings as model.vocab and
	 * model.merges. */
	json_object *rest;
};
/* 0 and *s filled (model_scan_free it); 1 when the file is not laid out
 * so, anything in its vocabulary or merges is unusual, or memory ran out
 * (the caller then parses it whole with json-c, whose messages name what
 * is wrong). The vocabulary's keys go into t's arena either way. */
int model_scan(struct pfx_tokenizer *t, const char *buf, size_t len, struct model_scan *s);
void model_scan_free(struct model_scan *s);

/* load.c: pfx_tokenizer_load without model_scan's fast path (for tests:
 * the tables must come out the same). */
int tokenizer_load_whole(const char *dir, struct pfx_tokenizer **out, struct pfx_error *err);

/* merges.c: the BPE model's merges (a JSON list), after its vocabulary. */
int load_merges(struct pfx_tokenizer *t, json_object *merges, struct pfx_error *err);
/* The same from model_scan's list. */
int load_scanned_merges(struct pfx_tokenizer *t, const struct model_scan *s, struct pfx_error *err);
/* components.c: the normalizer, pre_tokenizer, post_processor and decoder
 * of tokenizer.json's root object. */
int load_components(struct pfx_tokenizer *t, json_object *root, struct pfx_error *err);
/* config.c: dir's tokenizer_config.json, when there, and end-of-sequence
 * ids (pfx_eos_read). */
int load_configs(struct pfx_tokenizer *t, const char *dir, struct pfx_error *err);

#endif
