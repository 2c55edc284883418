/* SPDX-License-Identifier: MIT */
/* Typed access to config.json values for the architectures' parsers. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "model_impl.h"

static json_object *get(json_object *cfg, const char *key)
{
	json_object *v;
	if (!json_object_object_get_ex(cfg, key, &v) || json_object_is_type(v, json_type_null))
		return NULL;
	return v;
}

int cfg_int(json_object *cfg, const char *key, int dflt, int required, int *out,
	    struct pfx_error *err)
{
	json_object *v = get(cfg, key);
	if (!v) {
		if (required)
			return pfx_errorf(err, -EINVAL, "config.json: missing \"%s\"", key);
		*out = dflt;
		return 0;
	}
	if (!json_object_is_type(v, json_type_int))
		return pfx_errorf(err, -EINVAL, "config.json: \"%s\" must be an integer", key);
	int64_t x = json_object_get_int64(v);
	if (x < 0 || x > (1 << 30))
		return pfx_errorf(err, -EINVAL, "config.json: \"%s\" = %lld is out of range",
				  key, (long long)x);
	*out = (int)x;
	return 0;
}

int cfg_float(json_object *cfg, const char *key, double dflt, float *out, struct pfx_error *err)
{
	json_object *v = get(cfg, key);
	if (!v) {
		*out = (float)dflt;
		return 0;
	}
	if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
		return pfx_errorf(err, -EINVAL, "config.json: \"%s\" must be a number", key);
	double x = json_object_get_double(v);
	if (!isfinite(x))
		return pfx_errorf(err, -EINVAL, "config.json: \"%s\" is not finite", key);
	*out = (float)x;
	return 0;
}

int cfg_bool(json_object *cfg, const char *key, bool dflt, bool *out, struct pfx_error *err)
{
	json_object *v = get(cfg, key);
	if (!v) {
		*out = dflt;
		return 0;
	}
	if (!json_object_is_type(v, json_type_boolean))
		return pfx_errorf(err, -EINVAL, "config.json: \"%s\" must be true or false", key);
	*out = json_object_get_boolean(v);
	return 0;
}

int cfg_reject(json_object *cfg, const char *key, struct pfx_error *err)
{
	if (get(cfg, key))
		return pfx_errorf(err, -ENOTSUP, "config.json: \"%s\" is set; this option is not supported",
				  key);
	return 0;
}

int cfg_act(json_object *cfg, const char *key, const char *dflt, enum pfx_act *out,
	    struct pfx_error *err)
{
	json_object *v = get(cfg, key);
	const char *s = v ? json_object_get_string(v) : dflt;
	if (v && !json_object_is_type(v, json_type_string))
		return pfx_errorf(err, -EINVAL, "config.json: \"%s\" must be a string", key);
	if (!strcmp(s, "gelu"))
		*out = PFX_ACT_GELU;
	else if (!strcmp(s, "gelu_new") || !strcmp(s, "gelu_pytorch_tanh") ||
		 !strcmp(s, "gelu_fast"))
		*out = PFX_ACT_GELU_TANH;
	else if (!strcmp(s, "silu") || !strcmp(s, "swish"))
		*out = PFX_ACT_SILU;
	else
		return pfx_errorf(err, -ENOTSUP,
				  "config.json: \"%s\" = \"%s\" is not supported (gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, silu)",
				  key, s);
	return 0;
}

/* ==== Keys every Hugging Face causal LM config has ==== */

int cfg_parse_common(json_object *j, struct pfx_config *c, struct pfx_error *err)
{
	int rc;
	if ((rc = cfg_int(j, "hidden_size", 0, 1, &c->hidden, err)) ||
	    (rc = cfg_int(j, "num_hidden_layers", 0, 1, &c->n_layers, err)) ||
	    (rc = cfg_int(j, "num_attention_heads", 0, 1, &c->n_heads, err)) ||
	    (rc = cfg_int(j, "intermediate_size", 0, 1, &c->intermediate, err)) ||
	    (rc = cfg_int(j, "vocab_size", 0, 1, &c->vocab, err)) ||
	    (rc = cfg_int(j, "max_position_embeddings", 2048, 0, &c->max_positions, err)) ||
	    (rc = cfg_bool(j, "tie_word_embeddings", false, &c->tied_embeddings, err)) ||
	    (rc = cfg_reject(j, "rope_scaling", err)))
		return rc;
	/* Zero would leave empty weights or divide by zero in the derived shapes. */
	const struct {
		const char *key;
		int v;
	} sizes[] = {
		{ "hidden_size", c->hidden },
		{ "num_hidden_layers", c->n_layers },
		{ "num_attention_heads", c->n_heads },
		{ "intermediate_size", c->intermediate },
		{ "vocab_size", c->vocab },
	};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		if (sizes[i].v <= 0)
			return pfx_errorf(err, -EINVAL, "config.json: \"%s\" = %d; it must be at least 1",
					  sizes[i].key, sizes[i].v);
	return 0;
}

void cfg_write_common(const struct pfx_config *c, const char *model_type, json_object *j)
{
	json_object_object_add(j, "model_type", json_object_new_string(model_type));
	json_object_object_add(j, "hidden_size", json_object_new_int(c->hidden));
	json_object_object_add(j, "num_hidden_layers", json_object_new_int(c->n_layers));
	json_object_object_add(j, "num_attention_heads", json_object_new_int(c->n_heads));
	json_object_object_add(j, "intermediate_size", json_object_new_int(c->intermediate));
	json_object_object_add(j, "vocab_size", json_object_new_int(c->vocab));
	json_object_object_add(j, "max_position_embeddings", json_object_new_int(c->max_positions));
	json_object_object_add(j, "tie_word_embeddings", json_object_new_boolean(c->tied_embeddings));
}
