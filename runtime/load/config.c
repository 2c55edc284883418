/* SPDX-License-Identifier: MIT */
/* Typed access to config.json values for the architectures' parsers. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "config.h"

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
	    (rc = cfg_bool(j, "tie_word_embeddings", false, &c->tied_embeddings, err)))
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

/* ==== rope_scaling, as transformers' modeling_rope_utils reads it ==== */

/* A number of the rope_scaling object, required. */
static int scaling_float(json_object *r, const char *key, float *out, struct pfx_error *err)
{
	json_object *v = get(r, key);
	if (!v)
		return pfx_errorf(err, -EINVAL, "config.json: \"rope_scaling\" has no \"%s\"", key);
	if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
		return pfx_errorf(err, -EINVAL, "config.json: \"rope_scaling\".\"%s\" must be a number",
				  key);
	double x = json_object_get_double(v);
	if (!isfinite(x) || x <= 0 || x > 1e9)
		return pfx_errorf(err, -EINVAL,
				  "config.json: \"rope_scaling\".\"%s\" = %g; it must be positive and finite",
				  key, x);
	*out = (float)x;
	return 0;
}

int cfg_rope_scaling(json_object *j, struct pfx_config *c, struct pfx_error *err)
{
	c->rope_scaling = (struct pfx_rope_scaling){ .type = PFX_ROPE_DEFAULT, .factor = 1.0f };
	json_object *r = get(j, "rope_scaling");
	if (!r)
		return 0;
	if (!json_object_is_type(r, json_type_object))
		return pfx_errorf(err, -EINVAL, "config.json: \"rope_scaling\" must be an object or null");
	/* "type" is what configs before transformers 4.42 called it. */
	json_object *t = get(r, "rope_type");
	if (!t)
		t = get(r, "type");
	if (!t || !json_object_is_type(t, json_type_string))
		return pfx_errorf(err, -EINVAL,
				  "config.json: \"rope_scaling\" needs a \"rope_type\" (or \"type\") string");
	const char *type = json_object_get_string(t);
	struct pfx_rope_scaling *s = &c->rope_scaling;
	int rc;
	if (!strcmp(type, "default"))
		return 0;
	if (!strcmp(type, "linear"))
		s->type = PFX_ROPE_LINEAR;
	else if (!strcmp(type, "dynamic"))
		s->type = PFX_ROPE_DYNAMIC;
	else if (!strcmp(type, "llama3"))
		s->type = PFX_ROPE_LLAMA3;
	else
		return pfx_errorf(err, -ENOTSUP,
				  "config.json: \"rope_scaling\" of type \"%s\" is set; this option is not supported (default, linear, dynamic, llama3)",
				  type);
	if ((rc = scaling_float(r, "factor", &s->factor, err)))
		return rc;
	/* As transformers' rope_config_validation: a factor below 1 shrinks
	 * nothing it was meant to stretch. */
	if (s->factor < 1.0f)
		return pfx_errorf(err, -EINVAL,
				  "config.json: \"rope_scaling\".\"factor\" = %g; it must be at least 1",
				  s->factor);
	if (s->type != PFX_ROPE_LLAMA3)
		return 0;
	float orig;
	if ((rc = scaling_float(r, "low_freq_factor", &s->low_freq_factor, err)) ||
	    (rc = scaling_float(r, "high_freq_factor", &s->high_freq_factor, err)) ||
	    (rc = scaling_float(r, "original_max_position_embeddings", &orig, err)))
		return rc;
	if (s->high_freq_factor <= s->low_freq_factor)
		return pfx_errorf(err, -EINVAL,
				  "config.json: \"rope_scaling\".\"high_freq_factor\" = %g must be larger than \"low_freq_factor\" = %g",
				  s->high_freq_factor, s->low_freq_factor);
	if (orig != (float)(int)orig || orig > (float)(1 << 30))
		return pfx_errorf(err, -EINVAL,
				  "config.json: \"rope_scaling\".\"original_max_position_embeddings\" = %g must be a whole number of positions",
				  orig);
	s->original_max_positions = (int)orig;
	return 0;
}

void cfg_write_rope_scaling(const struct pfx_config *c, json_object *j)
{
	const struct pfx_rope_scaling *s = &c->rope_scaling;
	static const char *const names[] = { "default", "linear", "dynamic", "llama3" };
	if (s->type == PFX_ROPE_DEFAULT)
		return;
	json_object *r = json_object_new_object();
	json_object_object_add(r, "rope_type", json_object_new_string(names[s->type]));
	json_object_object_add(r, "factor", json_object_new_double(s->factor));
	if (s->type == PFX_ROPE_LLAMA3) {
		json_object_object_add(r, "low_freq_factor", json_object_new_double(s->low_freq_factor));
		json_object_object_add(r, "high_freq_factor", json_object_new_double(s->high_freq_factor));
		json_object_object_add(r, "original_max_position_embeddings",
				       json_object_new_int(s->original_max_positions));
	}
	json_object_object_add(j, "rope_scaling", r);
}

int cfg_sliding_window(json_object *j, struct pfx_config *c, struct pfx_error *err)
{
	int rc = cfg_int(j, "sliding_window", 0, 0, &c->sliding_window, err);
	if (rc)
		return rc;
	/* transformers would mask every key (a window of 0 keys): a NaN softmax. */
	if (get(j, "sliding_window") && c->sliding_window < 1)
		return pfx_errorf(err, -EINVAL,
				  "config.json: \"sliding_window\" = 0; it must be at least 1 (or null for none)");
	return 0;
}
