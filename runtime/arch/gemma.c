/* SPDX-License-Identifier: MIT */
/*
 * GemmaForCausalLM (Gemma 1): the Llama layout with RMSNorm scaled by
 * (1 + weight), embeddings scaled by sqrt(hidden_size) in float32 before
 * the first layer (the tied head uses them unscaled), GeGLU with the tanh
 * GELU, an explicit head_dim (256 unless set) and tied embeddings unless
 * the config says otherwise.
 */
#include <errno.h>
#include <math.h>

#include "forward.h"
#include "model_impl.h"

static int parse_config(json_object *j, struct pfx_config *c, struct pfx_error *err)
{
	int rc;
	json_object *v;
	/* Gemma 2's options on a Gemma 1 architecture: refused by name. */
	if ((rc = cfg_reject(j, "attn_logit_softcapping", err)) ||
	    (rc = cfg_reject(j, "final_logit_softcapping", err)) ||
	    (rc = cfg_reject(j, "query_pre_attn_scalar", err)) ||
	    (rc = cfg_reject(j, "sliding_window", err)) ||
	    /* GemmaConfig has no rope_scaling: transformers would ignore it. */
	    (rc = cfg_reject(j, "rope_scaling", err)) ||
	    (rc = llama_parse_layout(j, c, 256, err)) ||
	    /* PretrainedConfig's default, which Gemma configs leave out. */
	    (rc = cfg_bool(j, "tie_word_embeddings", true, &c->tied_embeddings, err)) ||
	    (rc = cfg_bool(j, "attention_bias", false, &c->attn_bias, err)))
		return rc;
	/* GemmaMLP takes hidden_activation, and without it the tanh GELU,
	 * whatever hidden_act says (early Gemma configs said "gelu"). */
	if (json_object_object_get_ex(j, "hidden_activation", &v) && !json_object_is_type(v, json_type_null))
		rc = cfg_act(j, "hidden_activation", NULL, &c->act, err);
	else
		c->act = PFX_ACT_GELU_TANH;
	if (rc)
		return rc;
	c->norm_plus_one = true;
	/* torch.tensor(hidden_size ** 0.5, dtype=float32): rounded once. */
	c->embed_scale = (float)sqrt((double)c->hidden);
	return 0;
}

static void write_config(const struct pfx_config *c, json_object *j)
{
	llama_write_layout(c, "gemma", j);
	json_object_object_add(j, "head_dim", json_object_new_int(c->head_dim));
	json_object_object_add(j, "hidden_activation",
			       json_object_new_string(c->act == PFX_ACT_GELU      ? "gelu"
						      : c->act == PFX_ACT_SILU    ? "silu"
										  : "gelu_pytorch_tanh"));
}

const struct arch arch_gemma = {
	.name = "GemmaForCausalLM",
	.parse_config = parse_config,
	.bind = llama_bind,
	.block = block_llama,
	.write_config = write_config,
	.may_carry = llama_may_carry,
};
