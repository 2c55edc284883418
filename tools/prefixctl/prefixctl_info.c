/* SPDX-License-Identifier: MIT */
/*
 * prefixctl info: what a model's prefixes cost in prefixd, and how many of
 * them its limits hold. The only command that any user may run: limits come
 * with the HELLO of a connection with a layout, not from an admin call.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "prefixctl.h"

/* The prompt lengths priced: these, none past the model's context, which
 * ends the list when it is shorter than the last. */
static const uint32_t common_tokens[] = { 512, 2048, 8192 };
#define NCOMMON (sizeof(common_tokens) / sizeof(common_tokens[0]))

struct kv_cost {
	uint64_t per_token, block_bytes, block_charged;
	uint32_t block_tokens;
	enum pfx_kv_dtype dtype;
	uint32_t prefix_tokens[NCOMMON + 1];
	size_t nprefixes;
};

static void price_lengths(struct kv_cost *k, uint32_t context)
{
	k->nprefixes = 0;
	for (size_t i = 0; i < NCOMMON && common_tokens[i] <= context; i++)
		k->prefix_tokens[k->nprefixes++] = common_tokens[i];
	if (context < common_tokens[NCOMMON - 1] &&
	    (!k->nprefixes || k->prefix_tokens[k->nprefixes - 1] != context))
		k->prefix_tokens[k->nprefixes++] = context;
}

/* What the daemon charges for a prefix: its full blocks (a partial one is
 * never cached), each in whole pages as daemon/store.c rounds a slot. */
static uint64_t charged(const struct kv_cost *k, uint32_t tokens)
{
	return (uint64_t)(tokens / k->block_tokens) * k->block_charged;
}

static void print_model(const char *dir, const struct pfx_model *m, const struct kv_cost *k)
{
	const struct pfx_config *c = pfx_model_config(m);
	char fp[2 * PFX_FINGERPRINT_BYTES + 1], b[CTL_TEXT], ch[CTL_TEXT];
	hex_encode(pfx_model_fingerprint(m), PFX_FINGERPRINT_BYTES, fp);
	printf("model         %s\n", dir);
	printf("architecture  %s\n", c->arch);
	printf("layers        %d\n", c->n_layers);
	printf("kv heads      %d\n", c->n_kv_heads);
	printf("head dim      %d\n", c->head_dim);
	printf("fingerprint   %s\n", fp);
	for (int t = PFX_KV_F32; t <= PFX_KV_BF16; t++) {
		uint64_t n = pfx_kv_bytes_per_token(c, (enum pfx_kv_dtype)t);
		printf("KV per token  %s (%llu bytes: 2 x %d layers x %d kv heads x %d dims x %d, %s)\n",
		       fmt_bytes(n, b), (unsigned long long)n, c->n_layers, c->n_kv_heads,
		       c->head_dim, t == PFX_KV_F32 ? 4 : 2, pfx_kv_dtype_name((enum pfx_kv_dtype)t));
	}
	printf("KV per block  %s (%u tokens, %s), charged %s in whole pages\n",
	       fmt_bytes(k->block_bytes, b), k->block_tokens, pfx_kv_dtype_name(k->dtype),
	       fmt_bytes(k->block_charged, ch));
	static const char *const head[] = { "PREFIX TOKENS", "KV", "FULL BLOCKS", "CHARGED" };
	struct ctl_table t = { .ncols = 4, .head = head, .align = "rrrr" };
	for (size_t i = 0; i < k->nprefixes; i++) {
		char(*cell)[CTL_TEXT] = ctl_table_row(&t);
		snprintf(cell[0], CTL_TEXT, "%u", k->prefix_tokens[i]);
		fmt_bytes(k->per_token * k->prefix_tokens[i], cell[1]);
		snprintf(cell[2], CTL_TEXT, "%u", k->prefix_tokens[i] / k->block_tokens);
		fmt_bytes(charged(k, k->prefix_tokens[i]), cell[3]);
	}
	putchar('\n');
	ctl_table_print(&t);
	ctl_table_free(&t);
}

/* How many prefixes of `tokens` fit in limit; "-" when it has no full block. */
static void fits(const struct kv_cost *k, uint32_t tokens, uint64_t limit, char cell[CTL_TEXT])
{
	uint64_t each = charged(k, tokens);
	if (each)
		snprintf(cell, CTL_TEXT, "%llu", (unsigned long long)(limit / each));
	else
		snprintf(cell, CTL_TEXT, "-");
}

static void print_fits(const struct kv_cost *k, const struct prefixd_limits *l)
{
	char b[CTL_TEXT], q[CTL_TEXT], p[CTL_TEXT];
	printf("\nprefixd: memory budget %s, quota per user %s, pin-max %s\n",
	       fmt_bytes(l->budget, b), fmt_bytes(l->quota, q), fmt_bytes(l->pin_max, p));
	static const char *const head[] = { "PREFIX TOKENS", "IN BUDGET", "IN QUOTA",
					    "UNDER PIN-MAX" };
	struct ctl_table t = { .ncols = 4, .head = head, .align = "rrrr" };
	for (size_t i = 0; i < k->nprefixes; i++) {
		char(*cell)[CTL_TEXT] = ctl_table_row(&t);
		snprintf(cell[0], CTL_TEXT, "%u", k->prefix_tokens[i]);
		fits(k, k->prefix_tokens[i], l->budget, cell[1]);
		fits(k, k->prefix_tokens[i], l->quota, cell[2]);
		fits(k, k->prefix_tokens[i], l->pin_max, cell[3]);
	}
	putchar('\n');
	ctl_table_print(&t);
	ctl_table_free(&t);
}

/* The daemon's limits, over a connection with the model's layout (so the
 * daemon also checks that it stores such blocks). */
static int ask_limits(const struct ctl_args *a, const struct pfx_model *m,
		      const struct kv_cost *k, struct prefixd_limits *out)
{
	struct prefixd_layout layout = { .block_tokens = k->block_tokens,
					 .block_bytes = k->block_bytes,
					 .layout = PREFIXD_LAYOUT_F32 + (uint32_t)k->dtype };
	memcpy(layout.fingerprint, pfx_model_fingerprint(m), sizeof(layout.fingerprint));
	struct prefixd *c;
	int rc = prefixd_connect(a->socket, &layout, &c);
	if (!rc) {
		rc = prefixd_limits(c, out);
		prefixd_close(c);
	}
	if (!rc)
		return CTL_OK;
	ctl_fail("cannot ask prefixd for its limits: %s", prefixd_errmsg());
	if (rc == -EINVAL) /* the daemon says "the client": here that is info's option */
		ctl_fail("give info the daemon's --block-tokens");
	return CTL_FAILED;
}

int cmd_info(const struct ctl_args *a)
{
	/* One thread: loading and fingerprinting need no more. */
	enum pfx_kv_dtype kvt = a->kv_dtype;
	struct pfx_model_opts o = { .threads = 1, .block_tokens = (int)a->block_tokens,
				    .kv_dtype = kvt };
	struct pfx_error err = { "" };
	struct pfx_model *m;
	if (pfx_model_load(a->model, &o, &m, &err))
		return ctl_fail("cannot load the model in %s: %s", a->model, err.msg);
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	struct kv_cost k = { .per_token = pfx_kv_bytes_per_token(pfx_model_config(m), kvt),
			     .block_tokens = (uint32_t)pfx_model_block_tokens(m), .dtype = kvt };
	k.block_bytes = k.per_token * k.block_tokens;
	k.block_charged = (k.block_bytes + page - 1) / page * page;
	price_lengths(&k, (uint32_t)pfx_model_config(m)->max_positions);
	print_model(a->model, m, &k);
	struct prefixd_limits l;
	fflush(stdout); /* the table before a reason on stderr */
	int rc = ask_limits(a, m, &k, &l);
	if (!rc)
		print_fits(&k, &l);
	pfx_model_free(m);
	return rc;
}
