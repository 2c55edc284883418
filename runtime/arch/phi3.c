/* SPDX-License-Identifier: MIT */
/*
 * Phi3ForCausalLM: the Llama computation with q/k/v fused into qkv_proj
 * and gate/up into gate_up_proj (llama_bind takes views of their rows),
 * and Mistral's sliding window where the config sets one.
 */
#include <errno.h>
#include <string.h>

#include "forward.h"
#include "model_impl.h"

static int parse_config(json_object *j, struct pfx_config *c, struct pfx_error *err)
{
	int rc;
	json_object *r, *t;
	if ((rc = llama_parse_layout(j, c, 0, err)) ||
	    (rc = cfg_act(j, "hidden_act", "silu", &c->act, err)) ||
	    (rc = cfg_sliding_window(j, c, err)))
		return rc;
	if (c->act != PFX_ACT_SILU)
		return pfx_errorf(err, -ENOTSUP, "config.json: Phi-3 with hidden_act other than silu is not supported");
	/* Phi3Attention's head is hidden_size / num_attention_heads. */
	if (c->hidden % c->n_heads || c->head_dim != c->hidden / c->n_heads)
		return pfx_errorf(err, -EINVAL,
				  "config.json: Phi-3 heads are \"hidden_size\" / \"num_attention_heads\" = %d / %d; \"head_dim\" = %d disagrees",
				  c->hidden, c->n_heads, c->head_dim);
	/* longrope (once "su"; the 128k and Phi-3.5 models) switches between
	 * short and long factors by the length of each forward pass, and
	 * transformers recomputes the whole cache when a sequence crosses
	 * over: a prefix cache cannot share either. */
	if (json_object_object_get_ex(j, "rope_scaling", &r) && !json_object_is_type(r, json_type_null)) {
		const char *type = "?";
		if (json_object_is_type(r, json_type_object) &&
		    ((json_object_object_get_ex(r, "type", &t) && json_object_is_type(t, json_type_string)) ||
		     (json_object_object_get_ex(r, "rope_type", &t) && json_object_is_type(t, json_type_string))))
			type = json_object_get_string(t);
		return pfx_errorf(err, -ENOTSUP,
				  "config.json: \"rope_scaling\" of type \"%s\" is set; this option is not supported for Phi-3 (its long-context models: use a 4k-context one)",
				  type);
	}
	c->fused_qkv = true;
	return 0;
}

static void write_config(const struct pfx_config *c, json_object *j)
{
	llama_write_layout(c, "phi3", j);
	json_object_object_add(j, "hidden_act", json_object_new_string("silu"));
	if (c->sliding_window)
		json_object_object_add(j, "sliding_window", json_object_new_int(c->sliding_window));
}

/* Never the unfused names: a checkpoint with them is another layout. */
static bool may_carry(const struct pfx_config *c, const char *name)
{
	return llama_may_carry(c, name);
}

const struct arch arch_phi3 = {
	.name = "Phi3ForCausalLM",
	.parse_config = parse_config,
	.bind = llama_bind,
	.block = block_llama,
	.write_config = write_config,
	.may_carry = may_carry,
};
