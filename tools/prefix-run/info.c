/* SPDX-License-Identifier: MIT */
/*
 * prefix-run info: what a checkpoint is, what its prefixes cost in prefixd
 * and how many of them the daemon's limits hold, and the kernels that run
 * it. Limits come with the HELLO of a connection with the model's layout,
 * so any user may ask, and the daemon checks that it stores such blocks.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "prefixd.h"

#include "cli.h"
#include "prefix_run.h"

/* The prompt lengths to price: 512, 2048 and 8192 tokens, none past the
 * model's context, which ends the list when it is shorter than 8192. */
static int kv_lengths(int context, int out[4])
{
	static const int common[] = { 512, 2048, 8192 };
	int n = 0;
	for (int i = 0; i < 3 && common[i] <= context; i++)
		out[n++] = common[i];
	if (context < 8192 && (n == 0 || out[n - 1] != context))
		out[n++] = context;
	return n;
}

struct price {
	size_t per_token, block_bytes, block_charged;
	int block_tokens;
	int tokens[4], n;
};

/* What the daemon charges for a prefix: its full blocks (a partial one is
 * never cached), each in whole pages as daemon/store.c rounds a slot. */
static size_t charged(const struct price *p, int tokens)
{
	return (size_t)(tokens / p->block_tokens) * p->block_charged;
}

/* rope_scaling and its parameters, in config.json's words. */
static const char *rope_scaling(const struct pfx_rope_scaling *s, char *buf, size_t cap)
{
	switch (s->type) {
	case PFX_ROPE_LINEAR:
		snprintf(buf, cap, "linear scaling (factor %g)", s->factor);
		break;
	case PFX_ROPE_DYNAMIC:
		snprintf(buf, cap, "dynamic (NTK) scaling (factor %g; the plain frequencies up to max positions)",
			 s->factor);
		break;
	case PFX_ROPE_LLAMA3:
		snprintf(buf, cap,
			 "llama3 scaling (factor %g, low_freq_factor %g, high_freq_factor %g, original context %d)",
			 s->factor, s->low_freq_factor, s->high_freq_factor, s->original_max_positions);
		break;
	default:
		snprintf(buf, cap, "no scaling");
	}
	return buf;
}

static const char *biases(const struct pfx_config *c)
{
	if (c->attn_bias && c->qkv_bias_only)
		return c->mlp_bias ? "q/k/v projections and MLP" : "q/k/v projections";
	if (c->attn_bias)
		return c->mlp_bias ? "attention (q/k/v and output) and MLP" : "attention (q/k/v and output)";
	return c->mlp_bias ? "MLP" : "none";
}

static const char *mlp(const struct pfx_config *c)
{
	static const char *const act[] = { "GELU", "tanh GELU", "SiLU" };
	static char buf[64];
	if (!c->gated_mlp)
		snprintf(buf, sizeof(buf), "%s", act[c->act]);
	else if (c->act == PFX_ACT_SILU)
		snprintf(buf, sizeof(buf), "SwiGLU: silu(gate) * up");
	else
		snprintf(buf, sizeof(buf), "GeGLU: %s(gate) * up", act[c->act]);
	return buf;
}

static void print_model(const struct pfx_model *m, const struct price *p)
{
	const struct pfx_config *c = pfx_model_config(m);
	char fp[2 * PFX_FINGERPRINT_BYTES + 1], b[32], ch[32], rs[192];
	pfx_model_fingerprint_hex(m, fp);
	printf("architecture     %s\n", c->arch);
	printf("weights          %lld parameters, %s in the checkpoint\n",
	       (long long)pfx_model_params(m), pfx_model_weight_dtype(m));
	printf("weights held     %s matrices, norms and biases F32: %s\n",
	       pfx_model_weight_held(m), cli_bytes(pfx_model_weight_bytes(m), b));
	size_t huge = pfx_model_weight_huge_bytes(m);
	printf("in 2 MiB pages   %s of them%s\n", cli_bytes(huge, b),
	       huge < pfx_model_weight_bytes(m) / 2 ? " (prefix-run recache may read them in so)" : "");
	printf("hidden           %d\n", c->hidden);
	printf("layers           %d\n", c->n_layers);
	printf("heads            %d (key/value heads %d, head dim %d)\n", c->n_heads, c->n_kv_heads,
	       c->head_dim);
	printf("intermediate     %d\n", c->intermediate);
	printf("vocab            %d\n", c->vocab);
	printf("max positions    %d\n", c->max_positions);
	printf("rotary           %d of %d dims, base %g, %s\n", c->rotary_dim, c->head_dim,
	       c->rope_base, rope_scaling(&c->rope_scaling, rs, sizeof(rs)));
	if (c->sliding_window)
		printf("attention        causal, sliding window: each position sees the last %d\n",
		       c->sliding_window);
	else
		printf("attention        causal, every earlier position\n");
	printf("norm             %s%s, eps %g\n", c->norm == PFX_NORM_RMS ? "RMSNorm" : "LayerNorm",
	       c->norm_plus_one ? " scaled by (1 + weight)" : "", c->norm_eps);
	printf("biases           %s\n", biases(c));
	printf("MLP              %s\n", mlp(c));
	if (c->fused_qkv)
		printf("projections      fused: q/k/v in qkv_proj, gate/up in gate_up_proj\n");
	printf("residual         %s\n", c->parallel_residual ? "parallel" : "sequential");
	if (c->embed_scale)
		printf("embeddings       %s, scaled by %g (sqrt of hidden) on the way in\n",
		       c->tied_embeddings ? "tied: the output head is the embedding matrix" : "untied",
		       c->embed_scale);
	else
		printf("embeddings       %s\n",
		       c->tied_embeddings ? "tied: the output head is the embedding matrix" : "untied");
	printf("fingerprint      %s\n", fp);
	printf("KV per token     %zu bytes f32, %zu f16 or bf16 (2 x %d layers x %d kv heads x %d dims x 4 or 2)\n",
	       pfx_kv_bytes_per_token(c, PFX_KV_F32), pfx_kv_bytes_per_token(c, PFX_KV_F16),
	       c->n_layers, c->n_kv_heads, c->head_dim);
	printf("KV dtype         %s (--kv-dtype)\n", pfx_kv_dtype_name(pfx_model_kv_dtype(m)));
	printf("KV block         %d tokens, %s, charged %s in whole pages\n", p->block_tokens,
	       cli_bytes(p->block_bytes, b), cli_bytes(p->block_charged, ch));
	for (int i = 0; i < p->n; i++) {
		size_t kv = p->per_token * (size_t)p->tokens[i];
		printf("KV for %-5d      %zu bytes (%s), %d full blocks charged %s\n", p->tokens[i], kv,
		       cli_bytes(kv, b), p->tokens[i] / p->block_tokens,
		       cli_bytes(charged(p, p->tokens[i]), ch));
	}
	printf("threads          %d\n", pfx_model_threads(m));
	struct pfx_kernels k;
	pfx_kernels_describe(&k);
	if (k.blas_is_best)
		printf("BLAS kernels     %s\n", k.blas_core);
	else
		printf("BLAS kernels     %s, not %s, the best this CPU supports (%s)\n", k.blas_core,
		       k.blas_best, k.blas_why);
	printf("own kernels      %s\n", k.own);
	/* What --matmul bf16 runs here, whether or not this load asked for it. */
	if (strcmp(pfx_model_matmul(m), "f32"))
		printf("matmul           %s (--matmul)\n", pfx_model_matmul(m));
	else
		printf("matmul           f32 (--matmul; bf16 would run %s)\n", k.bf16);
}

/* How many prefixes of `tokens` fit in limit; "-" when it has no full block. */
static const char *fits(const struct price *p, int tokens, uint64_t limit, char cell[32])
{
	size_t each = charged(p, tokens);
	if (each)
		snprintf(cell, 32, "%llu", (unsigned long long)(limit / each));
	else
		snprintf(cell, 32, "-");
	return cell;
}

/* The daemon's limits and what they hold: 0, 1 after saying why on stderr
 * (the daemon refused the layout, or --socket leads nowhere). No daemon at
 * the default socket is no error: info is about the model. */
static int print_daemon(const struct run_args *a, const struct pfx_model *m,
			const struct price *p)
{
	char def[PREFIXD_SOCKET_PATH_MAX];
	const char *path = a->socket;
	if (!path) {
		if (prefixd_default_socket(def, sizeof(def)) || access(def, F_OK)) {
			printf("prefixd          none at %s (--socket PATH to ask another)\n", def);
			return 0;
		}
		path = def;
	}
	struct prefixd_layout layout = { .block_tokens = (uint32_t)p->block_tokens,
					 .block_bytes = p->block_bytes,
					 .layout = PREFIXD_LAYOUT_F32 + (uint32_t)pfx_model_kv_dtype(m) };
	memcpy(layout.fingerprint, pfx_model_fingerprint(m), sizeof(layout.fingerprint));
	struct prefixd *c;
	struct prefixd_limits l;
	int rc = prefixd_connect(path, &layout, &c);
	if (!rc) {
		rc = prefixd_limits(c, &l);
		prefixd_close(c);
	}
	if (rc) {
		fflush(stdout); /* the model's figures before the reason */
		fprintf(stderr, "prefix-run info: cannot ask prefixd at %s for its limits: %s\n", path,
			prefixd_errmsg());
		if (rc == -EINVAL) /* the daemon says "the client": here that is this option */
			fprintf(stderr, "prefix-run info: give info the daemon's --block-tokens\n");
		return 1;
	}
	char b[32], q[32], pm[32], c1[32], c2[32], c3[32];
	printf("prefixd          %s: memory budget %s, quota per user %s, pin-max %s\n", path,
	       cli_bytes(l.budget, b), cli_bytes(l.quota, q), cli_bytes(l.pin_max, pm));
	for (int i = 0; i < p->n; i++)
		printf("fit %-5d        %s in the budget, %s in the quota, %s under pin-max\n",
		       p->tokens[i], fits(p, p->tokens[i], l.budget, c1),
		       fits(p, p->tokens[i], l.quota, c2), fits(p, p->tokens[i], l.pin_max, c3));
	return 0;
}

int cmd_info(struct run_args *a)
{
	struct pfx_model *m;
	if (load_model(a, &m))
		return 1;
	const struct pfx_config *c = pfx_model_config(m);
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct price p = { .per_token = pfx_kv_bytes_per_token(c, pfx_model_kv_dtype(m)),
			   .block_tokens = pfx_model_block_tokens(m) };
	p.block_bytes = p.per_token * (size_t)p.block_tokens;
	p.block_charged = (p.block_bytes + page - 1) / page * page;
	p.n = kv_lengths(c->max_positions, p.tokens);
	print_model(m, &p);
	int rc = print_daemon(a, m, &p);
	pfx_model_free(m);
	return rc;
}
