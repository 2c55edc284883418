/* SPDX-License-Identifier: MIT */
/* Internals of the model runtime shared by model.c, the architectures and forward.c. */
#ifndef PFX_MODEL_IMPL_H
#define PFX_MODEL_IMPL_H

#include <json-c/json.h>
#include <pthread.h>

#include "load/checkpoint.h"
#include "load/config.h"
#include "model.h"
#include "pool.h"
#include "kernels/kernels.h"

/* Weights of one transformer block; an architecture fills what it uses.
 * Matrices are [out, in] row-major as in the checkpoint (y = x W^T + b),
 * in their own dtype unless upcast (kernels.h, weight.c); norms and biases are f32. */
struct layer_weights {
	const float *ln1_w, *ln1_b;   /* (hidden) */
	const float *ln2_w, *ln2_b;   /* (hidden) */
	struct kern_wmat wqkv;         /* (3 * hidden, hidden) NeoX, per head [q|k|v] */
	struct kern_wmat wq, wk, wv;   /* (heads or kv_heads * head_dim, hidden) */
	struct kern_wmat wo;           /* (hidden, heads * head_dim) */
	struct kern_wmat w_gate, w_up; /* (intermediate, hidden) */
	struct kern_wmat w_down;       /* (hidden, intermediate) */
	const float *bqkv, *bq, *bk, *bv, *bo, *b_gate, *b_up, *b_down; /* (out) */
};

struct weights {
	struct kern_wmat embed;        /* (vocab, hidden) */
	const float *norm_w, *norm_b; /* (hidden) final norm */
	struct kern_wmat lm_head;      /* (vocab, hidden); == embed when tied */
	struct layer_weights *layers; /* (n_layers) */
};

struct binder;
struct fwd;
struct pfx_profile;

/* One architecture: how to read its config, where its weights are, and
 * what one block computes. The loop around blocks is shared (forward.c). */
struct arch {
	const char *name;
	int (*parse_config)(json_object *cfg, struct pfx_config *c, struct pfx_error *err);
	int (*bind)(struct binder *b, const struct pfx_config *c, struct weights *w);
	void (*block)(struct fwd *f, int layer);
	/* config.json keys for c, so random checkpoints can be written. */
	void (*write_config)(const struct pfx_config *c, json_object *cfg);
	/* Whether a checkpoint for c may carry tensor name although bind
	 * does not use it; any other unused tensor refuses the checkpoint. */
	bool (*may_carry)(const struct pfx_config *c, const char *name);
};

/* Whether name is prefix, a layer number, then one of the n suffixes:
 * the per-layer buffers that older transformers saved with the weights. */
bool arch_layer_buffer(const char *name, const char *prefix, const char *const *suffixes,
		       size_t n);

const struct arch *arch_find(const char *name);

/* The checkpoint tensors an architecture binds for config c, in order. */
struct tensor_desc {
	char name[128];
	int ndim;
	int64_t shape[2];
};
int arch_describe(const struct arch *a, const struct pfx_config *c, struct tensor_desc **out,
		  size_t *n);

extern const struct arch arch_llama;
extern const struct arch arch_neox;
extern const struct arch arch_qwen2;
extern const struct arch arch_mistral;
extern const struct arch arch_phi3;
extern const struct arch arch_gemma;

/* The rotary inverse frequencies (rotary_dim / 2) for c, in float32 as
 * transformers computes them, rope_scaling applied (rope.c). */
void rope_inv_freq(const struct pfx_config *c, float *out);

/*
 * Binds a checkpoint tensor that must have exactly the given shape
 * (ndim 1 or 2; d1 ignored for ndim 1) and returns it as f32, or NULL after
 * recording an error that names file and tensor. After the first error
 * every call returns NULL, so bind functions check once at their end.
 */
const float *bind_tensor(struct binder *b, const char *name, int ndim, int64_t d0, int64_t d1);
/* As bind_tensor, in a copy of its own with one added to every element:
 * Gemma's RMSNorm multiplies by (1 + weight), in float32. */
const float *bind_tensor_plus_one(struct binder *b, const char *name, int64_t d0);
/* As bind_tensor, but NULL without error when the tensor is absent. */
const float *bind_optional(struct binder *b, const char *name, int ndim, int64_t d0, int64_t d1);
/* A (d0, d1) matrix, kept in its 16-bit dtype unless the model upcasts
 * (pfx_model_opts.weights); .p is NULL after an error, as above. */
struct kern_wmat bind_matrix(struct binder *b, const char *name, int64_t d0, int64_t d1);
int binder_status(const struct binder *b);

/* The Llama layout that Qwen2, Mistral, Phi-3 and Gemma share (llama.c):
 * its config keys after the common ones (heads, head_dim, eps, theta, GQA
 * checks; head_dim defaulting to dflt_head_dim, or hidden / heads when 0),
 * the binding of model.layers.N.* (fused for Phi-3, qkv biases, Gemma's
 * 1 + w norms by c's flags), the block, and its config.json keys. */
int llama_parse_layout(json_object *cfg, struct pfx_config *c, int dflt_head_dim,
		       struct pfx_error *err);
int llama_bind(struct binder *b, const struct pfx_config *c, struct weights *w);
void llama_write_layout(const struct pfx_config *c, const char *model_type, json_object *cfg);
bool llama_may_carry(const struct pfx_config *c, const char *name);

struct owned {
	void *p;
	size_t bytes;
};

/* Data of private KV blocks no session holds, kept with their pages
 * mapped (kv.c). */
#define KV_SPARE_MAX 2
struct kv_spare {
	pthread_mutex_t lock;
	void *data[KV_SPARE_MAX]; /* (n) */
	int n;
};

struct pfx_model {
	struct pfx_config cfg;
	const struct arch *arch;
	struct ckpt *ckpt;            /* keeps the weights held as stored mapped */
	struct weights w;
	struct owned *owned;          /* (nowned) upcast or realigned weights */
	size_t nowned;
	bool weights_mapped;          /* some weight is held in the checkpoint's mapping */
	int64_t params;
	size_t weight_bytes;          /* as held */
	enum pfx_weights weights;     /* as asked */
	char weight_dtype[32];        /* as stored */
	char weight_held[32];         /* the matrices' as held */
	bool held16;                  /* some matrix is held in 16 bits */
	bool held_bf16;               /* some matrix is held in bf16 */
	bool matmul_bf16;             /* pfx_model_opts.matmul: PFX_MATMUL_BF16 */
	enum kern_wtype kv_type;       /* of the KV blocks' elements */
	uint8_t fingerprint[PFX_FINGERPRINT_BYTES];
	int block_tokens;
	float *inv_freq;              /* (rotary_dim / 2) */
	struct pool *pool;
	pthread_mutex_t fwd_lock;     /* one forward pass at a time per model */
	struct fwd *scratch;          /* reused across forward passes; under fwd_lock */
	struct pfx_profile *prof;     /* profile.h: NULL unless a benchmark asks; under fwd_lock */
	struct kv_spare spare;        /* kv.c */
};

/* Elements of one KV block: [layer][k|v][kv_head][token][head_dim]. */
static inline size_t kv_block_elems(const struct pfx_model *m)
{
	const struct pfx_config *c = &m->cfg;
	return (size_t)c->n_layers * 2 * c->n_kv_heads * m->block_tokens * c->head_dim;
}

static inline size_t kv_block_bytes(const struct pfx_model *m)
{
	return kv_block_elems(m) * kern_wtype_size(m->kv_type);
}

/* The elements of a block from element `elems` on. */
static inline struct kern_wmat kv_at(const struct pfx_model *m, const void *block, size_t elems)
{
	return kern_wmat_at((struct kern_wmat){ block, m->kv_type }, elems);
}

/* Offset of (layer, k or v, kv_head, token) inside a block. */
static inline size_t kv_offset(const struct pfx_model *m, int layer, int kv, int head, int tok)
{
	const struct pfx_config *c = &m->cfg;
	return ((((size_t)layer * 2 + kv) * c->n_kv_heads + head) * m->block_tokens + tok) *
	       c->head_dim;
}

#endif
