/* SPDX-License-Identifier: MIT */
/* What the loader's files share: json-c look-ups and the steps each file
 * does (load.c the model and added tokens, components.c the pipeline's
 * stages, config.c tokenizer_config.json and the end-of-sequence ids). */
#ifndef PFX_TEXT_LOAD_JSON_H
#define PFX_TEXT_LOAD_JSON_H

#include <json-c/json.h>

#include "tokenizer.h"

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
/* merges.c: the BPE model's merges (a JSON list), after its vocabulary. */
int load_merges(struct pfx_tokenizer *t, json_object *merges, struct pfx_error *err);
/* components.c: the normalizer, pre_tokenizer, post_processor and decoder
 * of tokenizer.json's root object. */
int load_components(struct pfx_tokenizer *t, json_object *root, struct pfx_error *err);
/* config.c: dir's tokenizer_config.json, when there, and end-of-sequence
 * ids (pfx_eos_read). */
int load_configs(struct pfx_tokenizer *t, const char *dir, struct pfx_error *err);

#endif
