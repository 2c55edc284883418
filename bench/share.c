/* SPDX-License-Identifier: MIT */
/*
 * bench/share: what sharing a prefix across processes buys. With a random
 * SmolLM-135M-shaped model, a 2048-token prefix and a 32-token suffix:
 *  - ttft_cold_ms: a fresh process prefills all 2080 tokens alone;
 *  - ttft_warm_ms: a fresh process attaches the prefix another process
 *    published, and computes the suffix;
 *  - attach_us: MATCH + mapping alone, from a fresh connection, for
 *    prefixes of 256, 2048 and 8192 tokens whose chain was hashed as they
 *    arrived (prefixd_prompt); attach_mapped_us: again on that connection,
 *    its arenas mapped; chain_hash_us: the hashing.
 * Time to first token runs from the prompt in hand (model loaded, as in a
 * server) to the first sampled token. Each figure is the median of several
 * runs, each in its own process. One JSON object on stdout.
 *
 * --kv-dtype f16 (or bf16) measures that KV dtype too, in the same rounds
 * as f32 (the runs of both take turns, so that the machine's noise hits
 * both alike): its figures carry the suffix _f16, next to the f32 ones,
 * with attach_bytes, what an attach maps, for each.
 *
 * Where the warm time goes (warm_breakdown_ms, medians over the rounds):
 * connect and HELLO, the attach (hashing, MATCH and mapping, split by the
 * attach_us figures of the same run), the forward pass's products, its
 * attention over the attached keys, the output head, the rest of the pass,
 * picking the token, from the runtime's profile (runtime/profile.h); the
 * first touch of the mapped KV as what attention took more than on the
 * same suffix computed again in that process. Each round also prefills
 * REF_TOKENS tokens alone in a fresh process: the runtime's own prefill
 * rate, at which the suffix would cost suffix_compute_ms; and
 * warm_overhead_ratio = ttft_warm_ms / suffix_compute_ms.
 * --prefix N: a prefix of N blocks of 64 tokens (32: 2048, the default;
 * 128: 8192);
 * --weights bf16: the random model's weights in bf16; --runs N: rounds.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_util.h"
#include "opts.h"
#include "daemon_util.h"
#include "prefixd.h"
#include "random_model.h"
#include "report.h"
#include "shapes.h"
#include "ttft.h"

#define NAME "share"
#define SUFFIX 32
#define MAX_RUNS 15
#define REF_TOKENS 512 /* the runtime's prefill rate, as bench/forward measures it */

static const char *model_dir;
static int PREFIX = 2048, RUNS = 7;

/* One run in a fresh process; r->ms, or a negative value on failure. */
static double ttft(const char *sock, int prefix, int suffix, int suffix_seed, enum pfx_kv_dtype kv,
		   struct bench_ttft *r)
{
	if (bench_ttft("share", model_dir, sock, prefix, suffix, (uint32_t)suffix_seed, kv, r))
		return -1;
	return r->ms;
}

/* ==== Attach cost ==== */

#define ATTACH_RUNS 101
#define SIZES 3

static const uint32_t attach_tokens[SIZES] = { 256, 2048, 8192 };

struct attach_cost {
	double fresh_us, mapped_us, chain_us;
};

/* One prompt of attach_tokens[i] tokens, published. */
struct attach_prompt {
	uint32_t *tokens;
	uint32_t nblocks;
	double us[3][ATTACH_RUNS]; /* fresh, mapped, chain */
};

/* Times one round of one prompt: its chain hashed as it would be while it
 * arrives, then MATCH + mapping on a fresh connection (arenas not mapped
 * yet) and again on it (mapped). */
static int attach_round(const char *sock, const struct prefixd_layout *l, struct attach_prompt *a,
			int r, const void **kv)
{
	struct prefixd *c = NULL;
	struct prefixd_prompt *p = NULL;
	uint32_t hit;
	uint64_t lease;
	double t0 = bench_now();
	int rc = prefixd_prompt_new(l, &p);
	if (!rc)
		rc = prefixd_prompt_append(p, a->tokens, (size_t)a->nblocks * l->block_tokens);
	a->us[2][r] = (bench_now() - t0) * 1e6;
	if (!rc)
		rc = prefixd_connect(sock, l, &c);
	for (int k = 0; !rc && k < 2; k++) {
		t0 = bench_now();
		rc = prefixd_match_prompt(c, p, a->nblocks, &lease, &hit, kv);
		a->us[k][r] = (bench_now() - t0) * 1e6;
		if (!rc && hit != a->nblocks)
			rc = -EIO;
		if (!rc)
			rc = prefixd_release(c, lease);
	}
	prefixd_close(c);
	prefixd_prompt_free(p);
	return rc;
}

/* The sizes take turns round by round, so that all of them sample the same
 * states of the machine (its wake-up latency swings from ~20 to ~60 us
 * here within a minute). */
static int attach_cost(const char *sock, const struct prefixd_layout *l,
		       struct attach_cost out[SIZES])
{
	uint32_t most = attach_tokens[SIZES - 1] / l->block_tokens;
	struct attach_prompt *a = calloc(SIZES, sizeof(*a));
	const void **kv = malloc(most * sizeof(*kv));
	void *blocks = mmap(NULL, l->block_bytes * most, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int rc = -ENOMEM;
	struct prefixd *c = NULL;
	if (!a || !kv || blocks == MAP_FAILED)
		goto out;
	for (uint32_t i = 0; i < most; i++)
		kv[i] = (const char *)blocks + (size_t)i * l->block_bytes;
	if ((rc = prefixd_connect(sock, l, &c)))
		goto out;
	for (int i = 0; i < SIZES; i++) {
		a[i].nblocks = attach_tokens[i] / l->block_tokens;
		if (!(a[i].tokens = malloc(attach_tokens[i] * sizeof(uint32_t)))) {
			rc = -ENOMEM;
			goto out;
		}
		for (uint32_t t = 0; t < attach_tokens[i]; t++)
			a[i].tokens[t] = attach_tokens[i] * 100u + t;
		uint32_t stored, dedup;
		if ((rc = prefixd_publish(c, 0, a[i].tokens, 0, a[i].nblocks, kv, &stored, &dedup)))
			goto out;
	}
	for (int r = 0; r < ATTACH_RUNS; r++)
		for (int i = 0; i < SIZES; i++)
			if ((rc = attach_round(sock, l, &a[i], r, kv)))
				goto out;
	for (int i = 0; i < SIZES; i++)
		out[i] = (struct attach_cost){ bench_median(a[i].us[0], ATTACH_RUNS),
					       bench_median(a[i].us[1], ATTACH_RUNS),
					       bench_median(a[i].us[2], ATTACH_RUNS) };
out:
	if (rc)
		fprintf(stderr, "share: attach: %s\n", rc == -EIO ? "not every block hit" : prefixd_errmsg());
	prefixd_close(c);
	for (int i = 0; a && i < SIZES; i++)
		free(a[i].tokens);
	if (blocks != MAP_FAILED)
		munmap(blocks, l->block_bytes * most);
	free(kv);
	free(a);
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The figures of one KV dtype. */
struct dtype_run {
	enum pfx_kv_dtype kv;
	double cold[MAX_RUNS], warm[MAX_RUNS], ref[MAX_RUNS], attached;
	struct bench_ttft w[MAX_RUNS]; /* the warm runs' profiles */
	double ref_cpu[MAX_RUNS];      /* CPU ms of the REF_TOKENS prefills */
	struct prefixd_layout layout;
	struct attach_cost att[SIZES];
};

/* Median over the warm rounds (the first has none) of f(run). */
static double warm_median(const struct dtype_run *d, double (*f)(const struct bench_ttft *))
{
	double v[MAX_RUNS];
	for (int r = 1; r < RUNS; r++)
		v[r - 1] = f(&d->w[r]);
	return bench_median(v, RUNS - 1);
}

static double w_connect(const struct bench_ttft *r) { return r->connect_ms; }
static double w_attach(const struct bench_ttft *r) { return r->prof.attach_s * 1e3; }
static double w_attach_cpu(const struct bench_ttft *r) { return r->prof.attach_cpu_s * 1e3; }
static double w_mm_cpu(const struct bench_ttft *r) { return r->prof.matmul_cpu_s * 1e3; }
static double w_att_cpu(const struct bench_ttft *r) { return r->prof.attention_cpu_s * 1e3; }
static double w_head_cpu(const struct bench_ttft *r) { return r->prof.head_cpu_s * 1e3; }
static double w_fwd_cpu(const struct bench_ttft *r) { return r->prof.forward_cpu_s * 1e3; }
static double w_matmul(const struct bench_ttft *r) { return r->prof.matmul_s * 1e3; }
static double w_att(const struct bench_ttft *r) { return r->prof.attention_s * 1e3; }
static double w_att_again(const struct bench_ttft *r) { return r->again.attention_s * 1e3; }
static double w_mm_again(const struct bench_ttft *r) { return r->again.matmul_s * 1e3; }
static double w_head(const struct bench_ttft *r) { return r->prof.head_s * 1e3; }
static double w_fwd(const struct bench_ttft *r) { return r->prof.forward_s * 1e3; }
static double w_fwd_again(const struct bench_ttft *r) { return r->again.forward_s * 1e3; }
static double w_sample(const struct bench_ttft *r) { return r->sample_ms; }
static double w_faults(const struct bench_ttft *r) { return (double)r->prof.faults; }
static double w_faults_again(const struct bench_ttft *r) { return (double)r->again.faults; }

/* The pass outside its products, attention and head: norms, RoPE, KV
 * stores, activations, the hand-offs between them. */
static double rest_of(const struct pfx_profile *p)
{
	return (p->forward_s - p->matmul_s - p->attention_s - p->head_s) * 1e3;
}

static double rest_cpu_of(const struct pfx_profile *p)
{
	return (p->forward_cpu_s - p->matmul_cpu_s - p->attention_cpu_s - p->head_cpu_s) * 1e3;
}

static double w_rest(const struct bench_ttft *r) { return rest_of(&r->prof); }
static double w_rest_cpu(const struct bench_ttft *r) { return rest_cpu_of(&r->prof); }
static double w_rest_again(const struct bench_ttft *r) { return rest_of(&r->again); }
static double w_head_again(const struct bench_ttft *r) { return r->again.head_s * 1e3; }
static double w_fwd_cpu_again(const struct bench_ttft *r) { return r->again.forward_cpu_s * 1e3; }

/* What the warm run did outside the cache, the pass and the sampling:
 * the session, the prefill's bookkeeping. */
static double w_outside(const struct bench_ttft *r)
{
	return r->ms - r->connect_ms - r->sample_ms - (r->prof.attach_s + r->prof.forward_s) * 1e3;
}

static void print_breakdown(const struct dtype_run *d, const char *sfx)
{
	/* The attach's parts at this prefix, from attach_cost (same run):
	 * hashing, MATCH on a mapped connection, and the mapping (fresh minus
	 * mapped); at 8192 tokens the 8192 figures, else the 2048 ones. */
	const struct attach_cost *a = &d->att[PREFIX >= 8192 ? 2 : 1];
	double map_us = a->fresh_us > a->mapped_us ? a->fresh_us - a->mapped_us : 0;
	double att = warm_median(d, w_att), again = warm_median(d, w_att_again);
	report_fmt(report_key("warm_breakdown_ms%s", sfx),
		   "{ \"connect_hello\": %.2f, \"attach\": %.2f, \"hash\": %.3f, \"match\": %.3f, "
		   "\"map\": %.3f, \"first_touch\": %.2f, \"projections\": %.2f, "
		   "\"attention\": %.2f, \"head\": %.2f, \"pass_rest\": %.2f, \"forward\": %.2f, "
		   "\"sample\": %.3f, \"outside\": %.2f }",
		   warm_median(d, w_connect), warm_median(d, w_attach), a->chain_us / 1e3,
		   a->mapped_us / 1e3, map_us / 1e3,
		   att > again ? att - again : 0, warm_median(d, w_matmul), att, warm_median(d, w_head),
		   warm_median(d, w_rest), warm_median(d, w_fwd), warm_median(d, w_sample),
		   warm_median(d, w_outside));
	report_fmt(report_key("warm_cpu_ms%s", sfx),
		   "{ \"forward\": %.2f, \"projections\": %.2f, \"attention\": %.2f, \"head\": %.2f, "
		   "\"pass_rest\": %.2f, \"attach\": %.2f }",
		   warm_median(d, w_fwd_cpu), warm_median(d, w_mm_cpu), warm_median(d, w_att_cpu),
		   warm_median(d, w_head_cpu), warm_median(d, w_rest_cpu), warm_median(d, w_attach_cpu));
	report_fmt(report_key("warm_again_ms%s", sfx),
		   "{ \"forward\": %.2f, \"projections\": %.2f, \"attention\": %.2f, \"head\": %.2f, "
		   "\"pass_rest\": %.2f, \"forward_cpu\": %.2f }",
		   warm_median(d, w_fwd_again), warm_median(d, w_mm_again), again,
		   warm_median(d, w_head_again), warm_median(d, w_rest_again),
		   warm_median(d, w_fwd_cpu_again));
	report_fmt(report_key("warm_page_faults%s", sfx), "{ \"first\": %.0f, \"again\": %.0f }",
		   warm_median(d, w_faults), warm_median(d, w_faults_again));
}

static void print_run(struct dtype_run *d, bool attach_only, const char *sfx)
{
	if (!attach_only) {
		double cold_ms = bench_median(d->cold, RUNS), warm_ms = bench_median(d->warm + 1, RUNS - 1);
		double ref_ms = bench_median(d->ref, RUNS) * SUFFIX / REF_TOKENS;
		qsort(d->cold, RUNS, sizeof(double), cmp_double);
		qsort(d->warm + 1, RUNS - 1, sizeof(double), cmp_double);
		report_fmt(report_key("ttft_cold_ms%s", sfx), "%.1f", cold_ms);
		report_fmt(report_key("ttft_warm_ms%s", sfx), "%.1f", warm_ms);
		report_fmt(report_key("warm_speedup%s", sfx), "%.1f", cold_ms / warm_ms);
		report_fmt(report_key("ttft_cold_range_ms%s", sfx), "[%.1f, %.1f]",
			   d->cold[0], d->cold[RUNS - 1]);
		report_fmt(report_key("ttft_warm_range_ms%s", sfx), "[%.1f, %.1f]",
			   d->warm[1], d->warm[RUNS - 1]);
		report_fmt(report_key("prefill_tok_s%s", sfx), "%.0f", SUFFIX / ref_ms * 1e3);
		report_fmt(report_key("suffix_compute_ms%s", sfx), "%.1f", ref_ms);
		report_fmt(report_key("warm_overhead_ratio%s", sfx), "%.2f", warm_ms / ref_ms);
		/* The same in CPU time, which the machine's other users move less. */
		double ref_cpu = bench_median(d->ref_cpu, RUNS) * SUFFIX / REF_TOKENS;
		report_fmt(report_key("suffix_compute_cpu_ms%s", sfx), "%.1f", ref_cpu);
		report_fmt(report_key("warm_overhead_ratio_cpu%s", sfx), "%.2f",
			   warm_median(d, w_fwd_cpu) / ref_cpu);
		print_breakdown(d, sfx);
		if (!*sfx) {
			report_target("warm_overhead_ratio", warm_ms / ref_ms, REPORT_AT_MOST, 1.5);
			report_target("warm_speedup", cold_ms / warm_ms, REPORT_AT_LEAST,
				      PREFIX >= 8192 ? 100 : 40);
		}
	}
	unsigned long long bb = d->layout.block_bytes;
	report_fmt(report_key("attach_bytes%s", sfx), "{ \"256\": %llu, \"2048\": %llu, \"8192\": %llu }",
		   bb * (256 / SMOLLM_BLOCK_TOKENS), bb * (2048 / SMOLLM_BLOCK_TOKENS),
		   bb * (8192 / SMOLLM_BLOCK_TOKENS));
	report_fmt(report_key("attach_us%s", sfx), "{ \"256\": %.1f, \"2048\": %.1f, \"8192\": %.1f }",
		   d->att[0].fresh_us, d->att[1].fresh_us, d->att[2].fresh_us);
	report_fmt(report_key("attach_growth_256_to_8192%s", sfx), "%.2f",
		   d->att[2].fresh_us / d->att[0].fresh_us);
	report_fmt(report_key("attach_mapped_us%s", sfx), "{ \"256\": %.1f, \"2048\": %.1f, \"8192\": %.1f }",
		   d->att[0].mapped_us, d->att[1].mapped_us, d->att[2].mapped_us);
	report_fmt(report_key("chain_hash_us%s", sfx), "{ \"256\": %.1f, \"2048\": %.1f, \"8192\": %.1f }",
		   d->att[0].chain_us, d->att[1].chain_us, d->att[2].chain_us);
}

int main(int argc, char **argv)
{
	/* --attach-only: skip the minutes of time-to-first-token runs. */
	bool attach_only = false;
	static struct dtype_run runs[2] = { { .kv = PFX_KV_F32 } };
	int ndt = 1;
	const char *wdtype = "F32";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--attach-only")) {
			attach_only = true;
		} else if (!strcmp(argv[i], "--kv-dtype") && i + 1 < argc &&
			   !pfx_kv_dtype_parse(argv[i + 1], &runs[1].kv)) {
			ndt = runs[1].kv == PFX_KV_F32 ? 1 : 2;
			i++;
		} else if (!strcmp(argv[i], "--weights") && i + 1 < argc &&
			   (!strcmp(argv[i + 1], "f32") || !strcmp(argv[i + 1], "bf16"))) {
			wdtype = strcmp(argv[++i], "bf16") ? "F32" : "BF16";
		} else if (!strcmp(argv[i], "--prefix") && i + 1 < argc) {
			/* Whole blocks: the attach takes them all. */
			PREFIX = opt_int(NAME, "prefix", argv[++i], 1, 256) * SMOLLM_BLOCK_TOKENS;
		} else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
			RUNS = opt_int(NAME, "runs", argv[++i], 3, MAX_RUNS);
		} else {
			fprintf(stderr,
				"usage: %s [--attach-only] [--kv-dtype f32|f16|bf16] [--weights f32|bf16] "
				"[--prefix BLOCKS of 64 tokens, 1..256] [--runs 3..%d]\n",
				argv[0], MAX_RUNS);
			return 2;
		}
	}
	char tmp[] = "/tmp/prefixd-share-XXXXXX";
	struct pfx_error err = { "" };
	struct pfx_config sc = pfx_config_smollm135m();
	/* Room for the suffix after the longest prefix (RoPE has no limit of
	 * its own; the random model's config only says how far it goes). */
	if (sc.max_positions < PREFIX + SUFFIX)
		sc.max_positions = PREFIX + SUFFIX;
	if (!mkdtemp(tmp) || pfx_random_checkpoint(tmp, &sc, wdtype, 1, &err)) {
		fprintf(stderr, "share: cannot write the random model: %s\n", err.msg);
		return 1;
	}
	model_dir = tmp;
	struct test_daemon d;
	int rc = 1;
	if (td_start(&d, (const char *const[]){ "--memory", "2G", NULL }))
		goto out;
	struct bench_ttft a;
	struct bench_cpu cpu0;
	bench_cpu_now(&cpu0);
	/* The first cold run of each dtype also publishes the prefix (it goes
	 * through the daemon with an empty cache); the others run alone. */
	for (int r = 0; r < RUNS && !attach_only; r++)
		for (int k = 0; k < ndt; k++) {
			struct dtype_run *x = &runs[k];
			x->cold[r] = ttft(r ? NULL : d.sock, PREFIX, SUFFIX, 100 + r, x->kv, &a);
			x->warm[r] = r ? ttft(d.sock, PREFIX, SUFFIX, 200 + r, x->kv, &x->w[r]) : 0;
			x->attached = r ? x->w[r].attached : 0;
			x->ref[r] = ttft(NULL, 0, REF_TOKENS, 300 + r, x->kv, &a);
			x->ref_cpu[r] = a.prof.forward_cpu_s * 1e3;
			if (x->cold[r] < 0 || x->warm[r] < 0 || x->ref[r] < 0) {
				fprintf(stderr, "share: a run failed\n");
				goto stop;
			}
		}
	double others, steal;
	bench_cpu_since(&cpu0, &others, &steal);
	for (int k = 0; k < ndt; k++) {
		struct dtype_run *x = &runs[k];
		if (!attach_only && x->attached != PREFIX) {
			fprintf(stderr, "share: warm %s runs attached %.0f tokens, not %d\n",
				pfx_kv_dtype_name(x->kv), x->attached, PREFIX);
			goto stop;
		}
		x->layout = (struct prefixd_layout){
			.block_tokens = SMOLLM_BLOCK_TOKENS,
			.block_bytes = pfx_kv_bytes_per_token(&sc, x->kv) * SMOLLM_BLOCK_TOKENS,
			.layout = PREFIXD_LAYOUT_F32 + (uint32_t)x->kv,
		};
		memset(x->layout.fingerprint, 0xbe, sizeof(x->layout.fingerprint));
		if (attach_cost(d.sock, &x->layout, x->att))
			goto stop;
	}
	report_begin(NAME);
	report_str("model", "random SmolLM-135M shape (%s weights), 2 threads, %d-token blocks",
		   wdtype, SMOLLM_BLOCK_TOKENS);
	report_fmt("prefix_tokens", "%d", PREFIX);
	report_fmt("suffix_tokens", "%d", SUFFIX);
	report_fmt("runs", "%d", RUNS);
	print_run(&runs[0], attach_only, "");
	if (ndt == 2) {
		char sfx[8];
		snprintf(sfx, sizeof(sfx), "_%s", pfx_kv_dtype_name(runs[1].kv));
		print_run(&runs[1], attach_only, sfx);
		if (!attach_only) {
			report_fmt(report_key("warm_ttft%s_vs_f32", sfx), "%.3f",
				   bench_median(runs[1].warm + 1, RUNS - 1) / bench_median(runs[0].warm + 1, RUNS - 1));
		}
		report_fmt(report_key("attach_bytes%s_vs_f32", sfx), "%.3f",
			   (double)runs[1].layout.block_bytes / (double)runs[0].layout.block_bytes);
	}
	report_machine();
	if (!attach_only)
		report_noise(others, steal);
	report_end("attach_us: MATCH + mapping on a fresh connection, the prompt hashed as it arrived (prefixd_prompt); attach_mapped_us: again on that connection; chain_hash_us: hashing the prompt; attach_bytes: the KV an attach maps; _f16/_bf16: that KV dtype, measured in the same rounds as f32 (runs alternating); warm_breakdown_ms: medians of the warm runs' phases (hash, match, map from attach_us; first_touch: attention's excess over warm_again_ms, the same suffix computed again in that process); suffix_compute_ms: the suffix at prefill_tok_s, %d tokens prefilled alone each round", REF_TOKENS);
	rc = 0;
stop:
	if (td_stop(&d))
		rc = 1;
out:;
	char p[sizeof(tmp) + 32];
	snprintf(p, sizeof(p), "%s/model.safetensors", tmp);
	unlink(p);
	snprintf(p, sizeof(p), "%s/config.json", tmp);
	unlink(p);
	rmdir(tmp);
	return rc;
}
