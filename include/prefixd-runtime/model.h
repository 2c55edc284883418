/* SPDX-License-Identifier: MIT */
/*
 * The model runtime: load a Hugging Face checkpoint and describe it.
 * Sessions and the forward pass are in session.h.
 */
#ifndef PFX_MODEL_H
#define PFX_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pfx_error.h"
#include "prefixd_proto.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PFX_FINGERPRINT_BYTES PREFIXD_FINGERPRINT_BYTES

enum pfx_act { PFX_ACT_GELU, PFX_ACT_GELU_TANH, PFX_ACT_SILU };
enum pfx_norm { PFX_NORM_LAYER, PFX_NORM_RMS };
/* rope_scaling's rope_type, as transformers computes each (docs/DESIGN.md). */
enum pfx_rope_type { PFX_ROPE_DEFAULT, PFX_ROPE_LINEAR, PFX_ROPE_DYNAMIC, PFX_ROPE_LLAMA3 };

struct pfx_rope_scaling {
	enum pfx_rope_type type;
	float factor;          /* linear, dynamic, llama3 */
	float low_freq_factor, high_freq_factor; /* llama3 */
	int original_max_positions; /* llama3: the context it was trained on */
};

/* Everything read from config.json that shapes the computation. */
struct pfx_config {
	const char *arch;      /* "LlamaForCausalLM", "GPTNeoXForCausalLM", "Qwen2ForCausalLM", ... */
	int hidden;
	int n_layers;
	int n_heads;
	int n_kv_heads;
	int head_dim;
	int intermediate;
	int vocab;
	int max_positions;
	int rotary_dim;        /* leading dims of each head that rotate */
	float rope_base;
	float norm_eps;
	enum pfx_norm norm;
	enum pfx_act act;
	bool parallel_residual;
	bool tied_embeddings;
	bool attn_bias;        /* q/k/v (and o) projections carry biases */
	bool mlp_bias;
	/* Added with Llama 3, Qwen2, Mistral, Phi-3 and Gemma: */
	bool qkv_bias_only;    /* attn_bias is on q/k/v, not the output projection (Qwen2) */
	bool fused_qkv;        /* the checkpoint fuses q/k/v and gate/up (Phi-3) */
	bool gated_mlp;        /* act(gate) * up (SwiGLU, GeGLU), not act(up) */
	bool norm_plus_one;    /* RMSNorm scales by (1 + weight) (Gemma) */
	float embed_scale;     /* embeddings are multiplied by it (Gemma: sqrt(hidden)); 0: not scaled */
	int sliding_window;    /* a position attends to the last this many (itself included); 0: all */
	struct pfx_rope_scaling rope_scaling;
};

/* How weight matrices are held. */
enum pfx_weights {
	PFX_WEIGHTS_NATIVE,    /* in the checkpoint's dtype: f16 and bf16 mapped from the file */
	PFX_WEIGHTS_F32,       /* upcast to f32 at load (twice the memory, same values) */
};

/* How KV blocks hold keys and values. Attention reads them with f32 math
 * either way; 16-bit halves the memory, the blocks shared through prefixd
 * and the bytes read per decode step, at a rounding error (docs/DESIGN.md
 * has it measured against transformers). Blocks of different dtypes never
 * mix: the dtype is part of prefixd's layout and chain root. */
enum pfx_kv_dtype {
	PFX_KV_F32,            /* the default, faithful to the reference */
	PFX_KV_F16,
	PFX_KV_BF16,
};

/*
 * How the layer products of prefill (more than a few rows at once) multiply.
 * PFX_MATMUL_BF16 rounds their input activations to bf16 for the product
 * alone and multiplies them with the bf16 weights as stored, summing in
 * f32 (AMX tiles or AVX512-BF16 where the CPU has them, else f32 products
 * of the rounded values): several times faster prefill at an error
 * docs/DESIGN.md states. Needs weight matrices held in bf16 (a bf16
 * checkpoint, weights native); products of other weights stay f32, and so
 * does every decode step.
 */
enum pfx_matmul {
	PFX_MATMUL_F32,        /* the default, faithful to the reference */
	PFX_MATMUL_BF16,
};

struct pfx_model_opts {
	int threads;           /* worker threads incl. the caller; 0: all CPUs */
	int block_tokens;      /* KV block size (power of two); 0: default */
	enum pfx_weights weights; /* 0: native */
	enum pfx_kv_dtype kv_dtype; /* of every session's KV; 0: f32 */
	enum pfx_matmul matmul; /* 0: f32 */
};

/* prefixd's: blocks are shared only with a daemon that uses the same size. */
#define PFX_DEFAULT_BLOCK_TOKENS PREFIXD_DEFAULT_BLOCK_TOKENS
#define PFX_MAX_BLOCK_TOKENS PREFIXD_MAX_BLOCK_TOKENS

struct pfx_model;

/*
 * Loads the checkpoint in dir (config.json + model.safetensors or a sharded
 * index). Weight matrices stay in the file's mapping in their dtype (f32,
 * f16, bf16) unless opts->weights upcasts them; norms and biases are held
 * as f32. Either way the products compute with the same f32 values.
 * Returns 0 and *out (free with pfx_model_free), or -errno with err naming
 * the file and tensor at fault.
 */
int pfx_model_load(const char *dir, const struct pfx_model_opts *opts,
		   struct pfx_model **out, struct pfx_error *err);
void pfx_model_free(struct pfx_model *m);

const struct pfx_config *pfx_model_config(const struct pfx_model *m);
/* BLAKE2b-256 over the architecture, the KV-shaping config and every
 * weight's bytes as stored: equal fingerprints mean the same model, whose
 * KV of one dtype is interchangeable. How the weights are held and the KV
 * dtype do not change it (prefixd's layout carries the latter). */
const uint8_t *pfx_model_fingerprint(const struct pfx_model *m);
void pfx_model_fingerprint_hex(const struct pfx_model *m, char out[2 * PFX_FINGERPRINT_BYTES + 1]);
int64_t pfx_model_params(const struct pfx_model *m);
int pfx_model_threads(const struct pfx_model *m);
int pfx_model_block_tokens(const struct pfx_model *m);
/* The dtype names of the checkpoint's weights, e.g. "F32" or "BF16". */
const char *pfx_model_weight_dtype(const struct pfx_model *m);
/* The dtype names the weight matrices are held in ("BF16", "F32", ...). */
const char *pfx_model_weight_held(const struct pfx_model *m);
/* Bytes of all weights as held (mapped from the file or allocated). */
size_t pfx_model_weight_bytes(const struct pfx_model *m);
/* How many of those bytes the kernel maps with 2 MiB pages (from
 * /proc/self/smaps; 0 where it cannot be read). Decode streams every
 * weight each token and reads 2 MiB pages faster: a checkpoint written or
 * copied a moment ago sits in the page cache in the small pages its writer
 * made, which pfx_checkpoint_recache lets the next load replace. */
size_t pfx_model_weight_huge_bytes(const struct pfx_model *m);
/* Writes back and drops the page cache of dir's checkpoint files, so that
 * the next load reads them in again, into 2 MiB pages where the kernel and
 * file system can (transparent huge pages, large folios). Pages another
 * process maps stay as they are. Costs one read of the files from disk.
 * 0, or -errno with err saying which file and why. */
int pfx_checkpoint_recache(const char *dir, struct pfx_error *err);

/* KV cache bytes one token costs: 2 x layers x kv_heads x head_dim x 4 (f32)
 * or 2 (f16, bf16). */
size_t pfx_kv_bytes_per_token(const struct pfx_config *c, enum pfx_kv_dtype t);
enum pfx_kv_dtype pfx_model_kv_dtype(const struct pfx_model *m);
/* "f32", "f16", "bf16" ("?" for anything else). */
const char *pfx_kv_dtype_name(enum pfx_kv_dtype t);
/* The dtype of such a name: 0, or -EINVAL. */
int pfx_kv_dtype_parse(const char *name, enum pfx_kv_dtype *out);

/* The architectures pfx_model_load runs (config.json's "architectures"),
 * ", "-separated into buf of cap bytes (cut short if it is smaller than
 * 256); returns buf. */
const char *pfx_architectures(char *buf, size_t cap);
/* How the model's prefill products run: "f32", or "bf16, " and the path
 * (e.g. "bf16, AMX-BF16 tiles"; "bf16, AVX512-BF16 (PFX_NO_AMX is set)"). */
const char *pfx_model_matmul(const struct pfx_model *m);

/* The OpenBLAS kernel set in use (after pfx_model_load picked the best). */
const char *pfx_blas_corename(void);

/* Which kernels run this process's products, for humans (prefix-run info). */
struct pfx_kernels {
	const char *blas_core;  /* OpenBLAS's running core, as pfx_blas_corename() */
	const char *blas_best;  /* the best core this CPU and OpenBLAS support; NULL: unknown */
	bool blas_is_best;      /* the running core is the best one (or none is known) */
	char blas_why[128];     /* when not: why (e.g. "OPENBLAS_CORETYPE=Prescott is set") */
	const char *own;        /* the runtime's own: "AVX-512", "AVX2 (...)", "portable, plain C (...)" */
	const char *bf16;       /* what --matmul bf16 runs: "AMX-BF16 tiles", "AVX512-BF16", ... */
};
void pfx_kernels_describe(struct pfx_kernels *out);

#ifdef __cplusplus
}
#endif

#endif
