/* SPDX-License-Identifier: MIT */
/*
 * MistralForCausalLM: the Llama layout, and a sliding window: position i
 * attends to keys max(0, i - sliding_window + 1) .. i (attention.c).
 */
#include <errno.h>

#include "forward.h"
#include "model_impl.h"

static int parse_config(json_object *j, struct pfx_config *c, struct pfx_error *err)
{
	int rc;
	json_object *v;
	if ((rc = llama_parse_layout(j, c, 0, err)) ||
	    (rc = cfg_act(j, "hidden_act", "silu", &c->act, err)) ||
	    (rc = cfg_sliding_window(j, c, err)) ||
	    /* MistralConfig has no rope_scaling: transformers would ignore it. */
	    (rc = cfg_reject(j, "rope_scaling", err)))
		return rc;
	if (c->act != PFX_ACT_SILU)
		return pfx_errorf(err, -ENOTSUP, "config.json: Mistral with hidden_act other than silu is not supported");
	/* MistralConfig's default is a window of 4096; null means none. */
	if (!json_object_object_get_ex(j, "sliding_window", &v))
		c->sliding_window = 4096;
	return 0;
}

static void write_config(const struct pfx_config *c, json_object *j)
{
	llama_write_layout(c, "mistral", j);
	json_object_object_add(j, "hidden_act", json_object_new_string("silu"));
	json_object_object_add(j, "sliding_window",
			       c->sliding_window ? json_object_new_int(c->sliding_window) : NULL);
}

const struct arch arch_mistral = {
	.name = "MistralForCausalLM",
	.parse_config = parse_config,
	.bind = llama_bind,
	.block = block_llama,
	.write_config = write_config,
	.may_carry = llama_may_carry,
};
