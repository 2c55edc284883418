/* SPDX-License-Identifier: MIT */
/* tokenizer_config.json (chat templates, special-token strings,
 * clean_up_tokenization_spaces), the end-of-sequence ids (eos.c), and
 * what text-chat reads of them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load/json_buf.h"
#include "load_json.h"

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
	int r = text_read_file(dir, "tokenizer_config.json", &buf, &len, err);
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

static int load_eos(struct pfx_tokenizer *t, const char *dir, struct pfx_error *err)
{
	struct pfx_eos_ids e;
	int r = pfx_eos_read(dir, t->nid, &e, err);
	if (r)
		return r;
	for (size_t i = 0; i < e.n; i++)
		if (ids_append(&t->eos_ids, &t->neos, e.id[i]))
			return pfx_errorf(err, -ENOMEM, "out of memory");
	if (!e.n && t->eos) {
		int32_t id = added_or_vocab(t, t->eos);
		if (id >= 0 && ids_append(&t->eos_ids, &t->neos, id))
			return pfx_errorf(err, -ENOMEM, "out of memory");
	}
	return 0;
}

int load_configs(struct pfx_tokenizer *t, const char *dir, struct pfx_error *err)
{
	int r = load_config(t, dir, err);
	return r ? r : load_eos(t, dir, err);
}

const int32_t *pfx_tokenizer_eos(const struct pfx_tokenizer *t, size_t *n)
{
	*n = t->neos;
	return t->eos_ids;
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
