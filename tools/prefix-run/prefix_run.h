/* SPDX-License-Identifier: MIT */
/* prefix-run's commands and their parsed arguments. */
#ifndef PFX_PREFIX_RUN_H
#define PFX_PREFIX_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "run_text.h"

struct run_args {
	const char *model;
	const char *out;
	int32_t *tokens;
	size_t ntokens;
	size_t split;
	int has_split;
	long max_new;
	double temperature, top_p;
	long top_k;
	uint64_t seed;
	int threads, block_tokens;
	int prefix, suffix, nsuffixes;
	const char *socket, *salt;
	const char *shape;
	const char *dtype;          /* random-model: "f32", "f16" or "bf16" */
	enum pfx_weights weights;
	enum pfx_kv_dtype kv_dtype;
	enum pfx_matmul matmul;
	int no_cache;
	int shared;                 /* --shared: the daemon's shared namespace too */
	int no_wait;                /* --no-wait: no single flight */
	int pin;
	uint32_t ttl;
	struct text_opts text;
	struct pfx_tokenizer *tok; /* the model folder's, when text is used */
};

/* Prints why and returns -1 when the model cannot be loaded. */
int load_model(const struct run_args *a, struct pfx_model **m);

struct pfx_cache;
struct pfx_prefill_info;
/* The cache to prefill through, or NULL (computing alone, said on stderr).
 * explicit_only: only with --socket. */
struct pfx_cache *open_cache(const struct run_args *a, struct pfx_model *m, int explicit_only);
/* One line on stderr: tokens attached and computed, blocks published. */
void report_prefill(const struct pfx_prefill_info *info, const struct pfx_error *cache_err);

int cmd_info(struct run_args *a);
int cmd_recache(struct run_args *a);
int cmd_logits(struct run_args *a);
int cmd_generate(struct run_args *a);
int cmd_demo(struct run_args *a);
/* demo with a tokenizer in the model folder (demo_text.c). */
int cmd_demo_text(struct run_args *a, struct pfx_model *m, const struct pfx_tokenizer *tok);
int cmd_random_model(struct run_args *a);
int cmd_warm(struct run_args *a);

#endif
