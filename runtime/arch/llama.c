/* SPDX-License-Identifier: MIT */
/*
 * LlamaForCausalLM (Llama 1-3): RMSNorm, SwiGLU, grouped-query attention,
 * full rotary with rope_scaling (linear, dynamic, llama3). Its layout,
 * binding and block serve Qwen2, Mistral, Phi-3 and Gemma too.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "forward.h"
#include "model_impl.h"

int llama_parse_layout(json_object *j, struct pfx_config *c, int dflt_head_dim,
		       struct pfx_error *err)
{
	int rc;
	json_object *hd;
	bool head_dim_set = json_object_object_get_ex(j, "head_dim", &hd) &&
			    !json_object_is_type(hd, json_type_null);
	if ((rc = cfg_parse_common(j, c, err)) ||
	    (rc = cfg_int(j, "num_key_value_heads", c->n_heads, 0, &c->n_kv_heads, err)) ||
	    (rc = cfg_int(j, "head_dim", dflt_head_dim ? dflt_head_dim : c->hidden / c->n_heads, 0,
			  &c->head_dim, err)) ||
	    (rc = cfg_float(j, "rms_norm_eps", 1e-6, &c->norm_eps, err)) ||
	    (rc = cfg_float(j, "rope_theta", 10000.0, &c->rope_base, err)) ||
	    /* Rotating part of each head (Phi-4-mini, StableLM): not these
	     * architectures as transformers 4.46 runs them. */
	    (rc = cfg_reject(j, "partial_rotary_factor", err)))
		return rc;
	/* Without head_dim the head size is hidden_size / num_attention_heads,
	 * which transformers refuses to floor (LlamaAttention up to 4.4x, and
	 * LlamaConfig since); an explicit head_dim decouples the two. */
	if (!head_dim_set && !dflt_head_dim && c->hidden % c->n_heads)
		return pfx_errorf(err, -EINVAL,
				  "config.json: \"hidden_size\" = %d is not divisible by \"num_attention_heads\" = %d and \"head_dim\" is not set; hidden_size %% num_attention_heads must be 0 (or head_dim given)",
				  c->hidden, c->n_heads);
	if (c->head_dim <= 0)
		return pfx_errorf(err, -EINVAL, "config.json: \"head_dim\" = %d; it must be at least 1",
				  c->head_dim);
	/* Llama rotates whole heads in two halves. */
	if (c->head_dim % 2 && head_dim_set)
		return pfx_errorf(err, -EINVAL,
				  "config.json: \"head_dim\" = %d is odd; Llama rotates whole heads in halves, so head_dim must be even",
				  c->head_dim);
	if (c->head_dim % 2)
		return pfx_errorf(err, -EINVAL,
				  "config.json: head size %d = \"hidden_size\" %d / \"num_attention_heads\" %d is odd; Llama rotates whole heads in halves, so it must be even",
				  c->head_dim, c->hidden, c->n_heads);
	if (c->n_kv_heads <= 0)
		return pfx_errorf(err, -EINVAL,
				  "config.json: \"num_key_value_heads\" = %d; it must be at least 1",
				  c->n_kv_heads);
	if (c->n_heads % c->n_kv_heads)
		return pfx_errorf(err, -EINVAL,
				  "config.json: \"num_attention_heads\" = %d is not a multiple of \"num_key_value_heads\" = %d; grouped-query attention needs num_attention_heads %% num_key_value_heads == 0",
				  c->n_heads, c->n_kv_heads);
	c->norm = PFX_NORM_RMS;
	c->rotary_dim = c->head_dim;
	c->parallel_residual = false;
	c->gated_mlp = true;
	return 0;
}

static int parse_config(json_object *j, struct pfx_config *c, struct pfx_error *err)
{
	int rc;
	if ((rc = llama_parse_layout(j, c, 0, err)) ||
	    (rc = cfg_bool(j, "attention_bias", false, &c->attn_bias, err)) ||
	    (rc = cfg_bool(j, "mlp_bias", false, &c->mlp_bias, err)) ||
	    (rc = cfg_act(j, "hidden_act", "silu", &c->act, err)) ||
	    (rc = cfg_rope_scaling(j, c, err)))
		return rc;
	if (c->act != PFX_ACT_SILU)
		return pfx_errorf(err, -ENOTSUP, "config.json: Llama with hidden_act other than silu is not supported");
	return 0;
}

int llama_bind(struct binder *b, const struct pfx_config *c, struct weights *w)
{
	char n[128];
	int64_t H = c->hidden, V = c->vocab, I = c->intermediate;
	int64_t Q = (int64_t)c->n_heads * c->head_dim, KV = (int64_t)c->n_kv_heads * c->head_dim;
	w->embed = bind_matrix(b, "model.embed_tokens.weight", V, H);
	w->norm_w = c->norm_plus_one ? bind_tensor_plus_one(b, "model.norm.weight", H)
				     : bind_tensor(b, "model.norm.weight", 1, H, 0);
	w->lm_head = c->tied_embeddings ? w->embed : bind_matrix(b, "lm_head.weight", V, H);
	for (int i = 0; i < c->n_layers; i++) {
		struct layer_weights *l = &w->layers[i];
#define NAME(suffix) (snprintf(n, sizeof(n), "model.layers.%d.%s", i, suffix), n)
#define T(field, suffix, nd, d0, d1) (l->field = bind_tensor(b, NAME(suffix), nd, d0, d1))
#define M(field, suffix, d0, d1) (l->field = bind_matrix(b, NAME(suffix), d0, d1))
#define OPT(cond, field, suffix, d0) \
	if (cond) T(field, suffix, 1, d0, 0)
		if (c->norm_plus_one) {
			l->ln1_w = bind_tensor_plus_one(b, NAME("input_layernorm.weight"), H);
			l->ln2_w = bind_tensor_plus_one(b, NAME("post_attention_layernorm.weight"), H);
		} else {
			T(ln1_w, "input_layernorm.weight", 1, H, 0);
			T(ln2_w, "post_attention_layernorm.weight", 1, H, 0);
		}
		if (c->fused_qkv) {
			/* Phi-3: q, k and v are consecutive rows of one matrix,
			 * gate and up of another: views into them are the
			 * matrices the block multiplies by. */
			struct kern_wmat qkv = M(wqkv, "self_attn.qkv_proj.weight", Q + 2 * KV, H);
			struct kern_wmat gu = bind_matrix(b, NAME("mlp.gate_up_proj.weight"), 2 * I, H);
			if (qkv.p && gu.p) {
				l->wq = qkv;
				l->wk = kern_wmat_at(qkv, (size_t)Q * H);
				l->wv = kern_wmat_at(qkv, (size_t)(Q + KV) * H);
				l->w_gate = gu;
				l->w_up = kern_wmat_at(gu, (size_t)I * H);
			}
		} else {
			M(wq, "self_attn.q_proj.weight", Q, H);
			M(wk, "self_attn.k_proj.weight", KV, H);
			M(wv, "self_attn.v_proj.weight", KV, H);
			M(w_gate, "mlp.gate_proj.weight", I, H);
			M(w_up, "mlp.up_proj.weight", I, H);
		}
		M(wo, "self_attn.o_proj.weight", H, Q);
		OPT(c->attn_bias, bq, "self_attn.q_proj.bias", Q);
		OPT(c->attn_bias, bk, "self_attn.k_proj.bias", KV);
		OPT(c->attn_bias, bv, "self_attn.v_proj.bias", KV);
		OPT(c->attn_bias && !c->qkv_bias_only, bo, "self_attn.o_proj.bias", H);
		M(w_down, "mlp.down_proj.weight", H, I);
		OPT(c->mlp_bias, b_gate, "mlp.gate_proj.bias", I);
		OPT(c->mlp_bias, b_up, "mlp.up_proj.bias", I);
		OPT(c->mlp_bias, b_down, "mlp.down_proj.bias", H);
#undef OPT
#undef M
#undef T
#undef NAME
	}
	return binder_status(b);
}

void block_llama(struct fwd *f, int layer)
{
	const struct pfx_config *c = f->c;
	const struct layer_weights *w = &f->m->w.layers[layer];
	int H = c->hidden, I = c->intermediate;
	int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;

	op_norm(f, f->x, f->xn, w->ln1_w, NULL);
	const struct mm_job qkv[3] = {
		{ w->wq, w->bq, f->q, qd, qd, 0.0f },
		{ w->wk, w->bk, f->k, kvd, kvd, 0.0f },
		{ w->wv, w->bv, f->v, kvd, kvd, 0.0f },
	};
	op_matmul(f, f->xn, H, H, qkv, 3);
	op_rope(f, f->q, c->n_heads);
	op_rope(f, f->k, c->n_kv_heads);
	op_store_kv(f, layer);
	op_attention(f, layer);
	const struct mm_job o = { w->wo, w->bo, f->x, H, H, 1.0f };
	op_matmul(f, f->att, qd, qd, &o, 1);

	op_norm(f, f->x, f->xn, w->ln2_w, NULL);
	const struct mm_job gate_up[2] = {
		{ w->w_gate, w->b_gate, f->h1, I, I, 0.0f },
		{ w->w_up, w->b_up, f->h2, I, I, 0.0f },
	};
	op_matmul(f, f->xn, H, H, gate_up, 2);
	op_act(f, f->h1, I, f->h2);
	const struct mm_job down = { w->w_down, w->b_down, f->x, H, H, 1.0f };
	op_matmul(f, f->h1, I, I, &down, 1);
}

void llama_write_layout(const struct pfx_config *c, const char *model_type, json_object *j)
{
	cfg_write_common(c, model_type, j);
	json_object_object_add(j, "num_key_value_heads", json_object_new_int(c->n_kv_heads));
	/* Only when it is not the default, so a reader without head_dim agrees. */
	if (!c->n_heads || c->hidden % c->n_heads || c->head_dim != c->hidden / c->n_heads)
		json_object_object_add(j, "head_dim", json_object_new_int(c->head_dim));
	json_object_object_add(j, "rms_norm_eps", json_object_new_double(c->norm_eps));
	json_object_object_add(j, "rope_theta", json_object_new_double(c->rope_base));
	cfg_write_rope_scaling(c, j);
}

static void write_config(const struct pfx_config *c, json_object *j)
{
	llama_write_layout(c, "llama", j);
	json_object_object_add(j, "hidden_act", json_object_new_string("silu"));
}

/* Older transformers saved the rotary frequencies as a buffer with the
 * weights; transformers ignores it on load, and so do we. A tied output
 * head may be stored. */
bool llama_may_carry(const struct pfx_config *c, const char *name)
{
	static const char *const legacy[] = { ".self_attn.rotary_emb.inv_freq" };
	if (c->tied_embeddings && !strcmp(name, "lm_head.weight"))
		return true;
	return arch_layer_buffer(name, "model.layers.", legacy, 1);
}

const struct arch arch_llama = {
	.name = "LlamaForCausalLM",
	.parse_config = parse_config,
	.bind = llama_bind,
	.block = block_llama,
	.write_config = write_config,
	.may_carry = llama_may_carry,
};
