/* SPDX-License-Identifier: MIT */
/*
 * Qwen2ForCausalLM (Qwen2, Qwen2.5): the Llama layout with biases on the
 * q, k and v projections (added before rotary, so the cached keys hold
 * them), none on the output projection; small models tie the head.
 */
#include <errno.h>

#include "forward.h"
#include "model_impl.h"

static int parse_config(json_object *j, struct pfx_config *c, struct pfx_error *err)
{
	int rc;
	bool sliding;
	if ((rc = llama_parse_layout(j, c, 0, err)) ||
	    (rc = cfg_act(j, "hidden_act", "silu", &c->act, err)) ||
	    (rc = cfg_rope_scaling(j, c, err)) ||
	    (rc = cfg_bool(j, "use_sliding_window", false, &sliding, err)))
		return rc;
	if (c->act != PFX_ACT_SILU)
		return pfx_errorf(err, -ENOTSUP, "config.json: Qwen2 with hidden_act other than silu is not supported");
	/* Qwen2Attention's head is hidden_size / num_attention_heads, whatever
	 * head_dim says (which its rotary would read): refuse the mismatch. */
	if (c->hidden % c->n_heads || c->head_dim != c->hidden / c->n_heads)
		return pfx_errorf(err, -EINVAL,
				  "config.json: Qwen2 heads are \"hidden_size\" / \"num_attention_heads\" = %d / %d; \"head_dim\" = %d disagrees",
				  c->hidden, c->n_heads, c->head_dim);
	/* With it, layers from max_window_layers on attend within
	 * sliding_window: no shipped Qwen2 checkpoint sets it. */
	if (sliding)
		return pfx_errorf(err, -ENOTSUP,
				  "config.json: \"use_sliding_window\" is true; Qwen2's sliding-window layers are not supported");
	c->attn_bias = true;
	c->qkv_bias_only = true;
	return 0;
}

static void write_config(const struct pfx_config *c, json_object *j)
{
	llama_write_layout(c, "qwen2", j);
	json_object_object_add(j, "hidden_act", json_object_new_string("silu"));
	json_object_object_add(j, "use_sliding_window", json_object_new_boolean(false));
}

const struct arch arch_qwen2 = {
	.name = "Qwen2ForCausalLM",
	.parse_config = parse_config,
	.bind = llama_bind,
	.block = block_llama,
	.write_config = write_config,
	.may_carry = llama_may_carry,
};
