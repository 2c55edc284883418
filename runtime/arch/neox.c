/* SPDX-License-Identifier: MIT */
/*
 * GPTNeoXForCausalLM (Pythia): LayerNorm with biases, fused QKV laid out per
 * head as [q|k|v], partial rotary, GELU MLP, parallel or sequential residual.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "forward.h"
#include "model_impl.h"

static int parse_config(json_object *j, struct pfx_config *c, struct pfx_error *err)
{
	int rc;
	float pct;
	if ((rc = cfg_parse_common(j, c, err)) ||
	    (rc = cfg_float(j, "rotary_pct", 0.25, &pct, err)) ||
	    (rc = cfg_float(j, "rotary_emb_base", 10000.0, &c->rope_base, err)) ||
	    (rc = cfg_float(j, "layer_norm_eps", 1e-5, &c->norm_eps, err)) ||
	    (rc = cfg_bool(j, "use_parallel_residual", true, &c->parallel_residual, err)) ||
	    (rc = cfg_bool(j, "attention_bias", true, &c->attn_bias, err)) ||
	    (rc = cfg_act(j, "hidden_act", "gelu", &c->act, err)) ||
	    (rc = cfg_reject(j, "rope_scaling", err)))
		return rc;
	if (c->act == PFX_ACT_SILU)
		return pfx_errorf(err, -ENOTSUP, "config.json: GPT-NeoX with hidden_act silu is not supported");
	if (pct <= 0 || pct > 1)
		return pfx_errorf(err, -EINVAL, "config.json: \"rotary_pct\" must be in (0, 1]");
	/* As GPTNeoXConfig (and GPTNeoXAttention before it) refuses. */
	if (c->hidden % c->n_heads)
		return pfx_errorf(err, -EINVAL,
				  "config.json: \"hidden_size\" = %d is not divisible by \"num_attention_heads\" = %d; GPT-NeoX needs hidden_size %% num_attention_heads == 0",
				  c->hidden, c->n_heads);
	c->n_kv_heads = c->n_heads;
	c->head_dim = c->hidden / c->n_heads;
	/* As HF: int(head_size * rotary_pct), in double as Python computes it
	 * (the float above can round the product across an integer). */
	double pct_d = pct;
	json_object *v;
	if (json_object_object_get_ex(j, "rotary_pct", &v) && !json_object_is_type(v, json_type_null))
		pct_d = json_object_get_double(v);
	c->rotary_dim = (int)(c->head_dim * pct_d);
	/* transformers loads an odd one but its rotary cos/sin are a column
	 * wider than the rotated part, so its first forward pass fails. */
	if (c->rotary_dim % 2)
		return pfx_errorf(err, -EINVAL,
				  "config.json: \"rotary_pct\" = %.15g gives int(%d * %.15g) = %d rotary dimensions per head (head size %d = \"hidden_size\" %d / \"num_attention_heads\" %d); the rotary dimension must be even",
				  pct_d, c->head_dim, pct_d, c->rotary_dim, c->head_dim, c->hidden,
				  c->n_heads);
	c->norm = PFX_NORM_LAYER;
	c->mlp_bias = true;
	return 0;
}

static int bind(struct binder *b, const struct pfx_config *c, struct weights *w)
{
	char n[128];
	int64_t H = c->hidden, V = c->vocab, I = c->intermediate;
	w->embed = bind_matrix(b, "gpt_neox.embed_in.weight", V, H);
	w->norm_w = bind_tensor(b, "gpt_neox.final_layer_norm.weight", 1, H, 0);
	w->norm_b = bind_tensor(b, "gpt_neox.final_layer_norm.bias", 1, H, 0);
	w->lm_head = c->tied_embeddings ? w->embed : bind_matrix(b, "embed_out.weight", V, H);
	for (int i = 0; i < c->n_layers; i++) {
		struct layer_weights *l = &w->layers[i];
#define T(field, suffix, nd, d0, d1) \
	(snprintf(n, sizeof(n), "gpt_neox.layers.%d.%s", i, suffix), l->field = bind_tensor(b, n, nd, d0, d1))
#define M(field, suffix, d0, d1) \
	(snprintf(n, sizeof(n), "gpt_neox.layers.%d.%s", i, suffix), l->field = bind_matrix(b, n, d0, d1))
		T(ln1_w, "input_layernorm.weight", 1, H, 0);
		T(ln1_b, "input_layernorm.bias", 1, H, 0);
		T(ln2_w, "post_attention_layernorm.weight", 1, H, 0);
		T(ln2_b, "post_attention_layernorm.bias", 1, H, 0);
		M(wqkv, "attention.query_key_value.weight", 3 * H, H);
		M(wo, "attention.dense.weight", H, H);
		if (c->attn_bias) {
			T(bqkv, "attention.query_key_value.bias", 1, 3 * H, 0);
			T(bo, "attention.dense.bias", 1, H, 0);
		}
		M(w_up, "mlp.dense_h_to_4h.weight", I, H);
		T(b_up, "mlp.dense_h_to_4h.bias", 1, I, 0);
		M(w_down, "mlp.dense_4h_to_h.weight", H, I);
		T(b_down, "mlp.dense_4h_to_h.bias", 1, H, 0);
#undef M
#undef T
	}
	return binder_status(b);
}


/* The fused projection holds, per head, [q | k | v] of head_dim each. */
static void split_qkv(struct fwd *f)
{
	const struct pfx_config *c = f->c;
	size_t hd = (size_t)c->head_dim, nh = (size_t)c->n_heads;
	for (size_t r = 0; r < (size_t)f->T; r++)
		for (size_t h = 0; h < nh; h++) {
			const float *src = f->qkv + (r * nh + h) * 3 * hd;
			size_t dst = (r * nh + h) * hd;
			memcpy(f->q + dst, src, hd * sizeof(float));
			memcpy(f->k + dst, src + hd, hd * sizeof(float));
			memcpy(f->v + dst, src + 2 * hd, hd * sizeof(float));
		}
}

void block_neox(struct fwd *f, int layer)
{
	const struct pfx_config *c = f->c;
	const struct layer_weights *w = &f->m->w.layers[layer];
	int H = c->hidden, I = c->intermediate;

	op_norm(f, f->x, f->xn, w->ln1_w, w->ln1_b);
	/* Parallel residual: the MLP reads the block's input, not x + attention. */
	if (c->parallel_residual)
		op_norm(f, f->x, f->xn2, w->ln2_w, w->ln2_b);
	const struct mm_job qkv = { w->wqkv, w->bqkv, f->qkv, 3 * H, 3 * H, 0.0f };
	op_matmul(f, f->xn, H, H, &qkv, 1);
	split_qkv(f);
	op_rope(f, f->q, c->n_heads);
	op_rope(f, f->k, c->n_heads);
	op_store_kv(f, layer);
	op_attention(f, layer);
	const struct mm_job o = { w->wo, w->bo, f->x, H, H, 1.0f };
	op_matmul(f, f->att, H, H, &o, 1);

	if (!c->parallel_residual)
		op_norm(f, f->x, f->xn2, w->ln2_w, w->ln2_b);
	const struct mm_job up = { w->w_up, w->b_up, f->h1, I, I, 0.0f };
	op_matmul(f, f->xn2, H, H, &up, 1);
	op_act(f, f->h1, I, NULL);
	const struct mm_job down = { w->w_down, w->b_down, f->x, H, H, 1.0f };
	op_matmul(f, f->h1, I, I, &down, 1);
}

static void write_config(const struct pfx_config *c, json_object *j)
{
	cfg_write_common(c, "gpt_neox", j);
	json_object_object_add(j, "rotary_pct",
			       json_object_new_double((double)c->rotary_dim / c->head_dim));
	json_object_object_add(j, "rotary_emb_base", json_object_new_double(c->rope_base));
	json_object_object_add(j, "layer_norm_eps", json_object_new_double(c->norm_eps));
	json_object_object_add(j, "use_parallel_residual", json_object_new_boolean(c->parallel_residual));
	json_object_object_add(j, "hidden_act",
			       json_object_new_string(c->act == PFX_ACT_GELU ? "gelu" : "gelu_new"));
}

/* Older transformers saved the causal mask (attention.bias, masked_bias)
 * and the rotary frequencies as buffers with the weights; transformers
 * ignores them on load, and so do we. A tied output head may be stored. */
static bool may_carry(const struct pfx_config *c, const char *name)
{
	static const char *const legacy[] = { ".attention.bias", ".attention.masked_bias",
					      ".attention.rotary_emb.inv_freq" };
	if (c->tied_embeddings && !strcmp(name, "embed_out.weight"))
		return true;
	return arch_layer_buffer(name, "gpt_neox.layers.", legacy, 3);
}

const struct arch arch_neox = {
	.name = "GPTNeoXForCausalLM",
	.parse_config = parse_config,
	.bind = bind,
	.block = block_neox,
	.write_config = write_config,
	.may_carry = may_carry,
};
