/* SPDX-License-Identifier: MIT */
/*
 * The forward pass over a ragged batch, and the operations architectures
 * compose their blocks from. All activations are row-major (tokens, features).
 */
#ifndef PFX_FORWARD_H
#define PFX_FORWARD_H

#include <stdbool.h>

#include "kv.h"
#include "kernels/kernels.h"

#define ATT_CHUNK 64 /* query rows per attention task */

/* Prefill (nsplit 0): KV head `head`, rows [r0, r1) of the item's new
 * tokens. Decode (nsplit > 0, !few): every head, keys [r0, r1), part
 * `split` of nsplit. A few rows over many keys (few): KV head `head`, rows
 * [r0, r1), keys [k0, k1), part `split` of nsplit. See attention.c. */
struct att_task {
	int item;
	int head;
	int r0, r1;
	int split, nsplit;
	bool few;
	int k0, k1;
};

/* Which path a few rows over many keys take (tests compare them):
 * ATT_SPLIT_AUTO where it wins, ATT_SPLIT_OFF never (the reference),
 * ATT_SPLIT_ON wherever it can run (AVX-512, 2 to ATT_FEW_MAX_ROWS rows),
 * ATT_SPLIT_MOST as ON with the keys split as finely as allowed (to test
 * the merge). Process-wide, for tests and benchmarks: set it only while no
 * forward pass runs (a pass plans its tasks twice). */
enum att_split { ATT_SPLIT_AUTO, ATT_SPLIT_OFF, ATT_SPLIT_ON, ATT_SPLIT_MOST };
void att_split_set(enum att_split mode);
#define ATT_FEW_MAX_ROWS 64

struct fwd {
	struct pfx_model *m;
	const struct pfx_config *c;
	struct pfx_batch_item *items;
	int nitems;
	int T;                 /* new tokens in the batch */
	int *row_item;         /* (T) */
	int *row_pos;          /* (T) position of each new token */
	int *item_row;         /* (nitems) first row of each item */
	float *x;              /* (T, hidden) residual stream */
	float *xn, *xn2;       /* (T, hidden) normalised */
	float *q;              /* (T, heads * head_dim) */
	float *k, *v;          /* (T, kv_heads * head_dim) */
	float *qkv;            /* (T, 3 * hidden) fused projections (NeoX) */
	float *att;            /* (T, heads * head_dim) */
	float *h1, *h2;        /* (T, intermediate) */
	float *cos, *sin;      /* (T, rotary_dim / 2) */
	struct att_task *tasks;
	int ntasks;
	float *scores;         /* per thread: att_thread_scratch() */
	float *partials;       /* per decode task, heads x (head_dim + 2): softmax parts (attention.c) */
	float *xt;             /* per thread, xt_floats each: gemm_few.c's x transposed (ops.c) */
	size_t xt_floats;
	unsigned *xt_call;     /* per thread: the op_matmul call whose x its xt holds */
	float *wpanel;         /* per thread, wpanel_floats each: 16-bit weights as f32 (ops.c) */
	size_t wpanel_floats;
	unsigned mm_calls;
	void *xbf;             /* --matmul bf16: x packed, or rounded as f32 (ops.c) */
	size_t cap_xbf;        /* its bytes */
	size_t score_ld;
	int layer;             /* the layer attention works on */
	struct pfx_profile *prof; /* the model's, for this pass (profile.h); NULL: none */
	bool head;             /* in the output head: its products are not the layers' */
	/* capacities of the buffers above, to reuse them across passes */
	size_t cap_T, cap_items, cap_tasks, cap_scores, cap_partials;
};

void fwd_scratch_free(struct fwd *f);
/* m->scratch (NULL before) made and written for passes of up to
 * GEMM_FEW_MAX_T rows. 0 or -ENOMEM. */
int fwd_scratch_prepare(struct pfx_model *m);

/* y[:, job] (+)= x W^T + b for several weight matrices sharing one input. */
struct mm_job {
	struct kern_wmat w;     /* (out, in) */
	const float *b;        /* (out) or NULL */
	float *y;              /* (rows, ldy) */
	int ldy;
	int out;
	float beta;            /* 0: overwrite y, 1: accumulate (residual) */
};
void op_matmul(struct fwd *f, const float *x, int ldx, int in, const struct mm_job *jobs, int njobs);

void op_norm(struct fwd *f, const float *x, float *y, const float *w, const float *b);
/* Rotates the first rotary_dim dims of each of nheads heads of every row. */
void op_rope(struct fwd *f, float *x, int nheads);
/* Copies this layer's new K/V rows into the sessions' blocks. */
void op_store_kv(struct fwd *f, int layer);
/* Fills tasks (if non-NULL) for the batch; returns how many there are. */
/* A thread's attention scratch: ATT_CHUNK x (score_ld + 2 head_dim) floats
 * (prefill) or heads x block_tokens (decode), whichever is more, and a
 * block's K or V of one head as f32 when the KV is 16-bit. */
size_t att_thread_floats(const struct fwd *f);
/* Floats of the decode tasks' partial softmaxes (f->partials). */
size_t att_partials_floats(const struct fwd *f, int ntasks);
float *att_thread_scratch(const struct fwd *f, int thread);
int att_plan(const struct fwd *f, const struct pfx_batch_item *items, int nitems,
	     struct att_task *tasks);
/* att = softmax(q K^T / sqrt(d)) V per session and head, causal. */
void op_attention(struct fwd *f, int layer);
/* y = act(y) for rows x n (GELU variants), or y = act(y) * up (SwiGLU, GeGLU). */
void op_act(struct fwd *f, float *y, int n, const float *up);

void block_llama(struct fwd *f, int layer);
void block_neox(struct fwd *f, int layer);

#endif
