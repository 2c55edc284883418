/* SPDX-License-Identifier: MIT */
/* prefix-run: run a Hugging Face checkpoint with prefixd's runtime from the shell. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prefixd.h"
#include "sock.h"

#include "cache.h"
#include "cli.h"
#include "cpu.h"
#include "npy.h"
#include "prefix_run.h"
#include "sample.h"
#include "session.h"

static const char usage[] =
	"usage: prefix-run COMMAND [OPTIONS]\n"
	"\n"
	"commands:\n"
	"  info      --model DIR                  architecture, shapes, fingerprint, KV size\n"
	"  logits    --model DIR --tokens IDS --out FILE.npy [--split K]\n"
	"                                         float32 logits of every position, shape\n"
	"                                         (n_tokens, vocab); with --split the first K\n"
	"                                         tokens run, are frozen, and the rest is\n"
	"                                         appended in one call (the cached path)\n"
	"  generate  --model DIR --tokens IDS --max-new N\n"
	"            [--temperature T --top-k K --top-p P --seed S]\n"
	"                                         prints the new token ids (greedy without\n"
	"                                         --temperature)\n"
	"  demo      [--model DIR] [--prefix N] [--suffix N] [--suffixes N]\n"
	"                                         a shared frozen prefix and several suffixes,\n"
	"                                         timed against recomputing from scratch\n"
	"  warm      --model DIR --tokens IDS [--pin [--ttl SECS]]\n"
	"                                         computes a prefix (a system prompt) and\n"
	"                                         publishes it to prefixd ahead of time; --pin\n"
	"                                         keeps it from eviction (the daemon's user and\n"
	"                                         root only), for SECS seconds with --ttl\n"
	"  random-model --out DIR [--shape demo|smollm]\n"
	"                                         writes a random-weight Llama checkpoint\n"
	"                                         (config.json, model.safetensors): the demo's\n"
	"                                         small shape, or SmolLM-135M's\n"
	"\n"
	"options for every command:\n"
	"  --threads N       worker threads (default: all CPUs)\n"
	"  --block-tokens B  KV block size in tokens, a power of two (default 64)\n"
	"\n"
	"sharing prompt prefixes through prefixd (generate, logits):\n"
	"  --socket PATH     the daemon's socket. generate uses the default socket\n"
	"                    ($XDG_RUNTIME_DIR/prefixd.sock, else /run/prefixd.sock) when a\n"
	"                    daemon is running there; logits only with --socket, and then\n"
	"                    writes the rows of the positions it computed (stderr says which)\n"
	"  --salt TEXT       share only with processes that give the same salt\n"
	"  --no-cache        compute everything here\n"
	"IDS is a comma- or space-separated list, or @FILE to read one from a file.\n";

enum opt {
	O_MODEL = 1 << 0, O_TOKENS = 1 << 1, O_SPLIT = 1 << 2, O_OUT = 1 << 3,
	O_MAXNEW = 1 << 4, O_TEMP = 1 << 5, O_TOPK = 1 << 6, O_TOPP = 1 << 7,
	O_SEED = 1 << 8, O_THREADS = 1 << 9, O_BLOCK = 1 << 10, O_PREFIX = 1 << 11,
	O_SUFFIX = 1 << 12, O_NSUFFIX = 1 << 13, O_SOCKET = 1 << 14, O_SALT = 1 << 15,
	O_NOCACHE = 1 << 16, O_SHAPE = 1 << 17, O_PIN = 1 << 18, O_TTL = 1 << 19,
	O_LAST = O_TTL,
};
#define O_CACHE (O_SOCKET | O_SALT | O_NOCACHE)

static const struct option longopts[] = {
	{ "model", required_argument, NULL, O_MODEL },
	{ "tokens", required_argument, NULL, O_TOKENS },
	{ "split", required_argument, NULL, O_SPLIT },
	{ "out", required_argument, NULL, O_OUT },
	{ "max-new", required_argument, NULL, O_MAXNEW },
	{ "temperature", required_argument, NULL, O_TEMP },
	{ "top-k", required_argument, NULL, O_TOPK },
	{ "top-p", required_argument, NULL, O_TOPP },
	{ "seed", required_argument, NULL, O_SEED },
	{ "threads", required_argument, NULL, O_THREADS },
	{ "block-tokens", required_argument, NULL, O_BLOCK },
	{ "prefix", required_argument, NULL, O_PREFIX },
	{ "suffix", required_argument, NULL, O_SUFFIX },
	{ "suffixes", required_argument, NULL, O_NSUFFIX },
	{ "socket", required_argument, NULL, O_SOCKET },
	{ "salt", required_argument, NULL, O_SALT },
	{ "no-cache", no_argument, NULL, O_NOCACHE },
	{ "shape", required_argument, NULL, O_SHAPE },
	{ "pin", no_argument, NULL, O_PIN },
	{ "ttl", required_argument, NULL, O_TTL },
	{ "help", no_argument, NULL, 'h' },
	{ 0 },
};

static const struct {
	const char *name;
	int allowed, required;
	int (*run)(struct run_args *a);
} commands[] = {
	{ "info", O_MODEL | O_THREADS | O_BLOCK, O_MODEL, cmd_info },
	{ "logits", O_MODEL | O_TOKENS | O_SPLIT | O_OUT | O_THREADS | O_BLOCK | O_CACHE,
	  O_MODEL | O_TOKENS | O_OUT, cmd_logits },
	{ "generate", O_MODEL | O_TOKENS | O_MAXNEW | O_TEMP | O_TOPK | O_TOPP | O_SEED | O_THREADS |
	  O_BLOCK | O_CACHE, O_MODEL | O_TOKENS | O_MAXNEW, cmd_generate },
	{ "demo", O_MODEL | O_PREFIX | O_SUFFIX | O_NSUFFIX | O_THREADS | O_BLOCK, 0, cmd_demo },
	{ "random-model", O_OUT | O_SHAPE, O_OUT, cmd_random_model },
	{ "warm", O_MODEL | O_TOKENS | O_THREADS | O_BLOCK | O_SOCKET | O_SALT | O_PIN | O_TTL,
	  O_MODEL | O_TOKENS, cmd_warm },
};

static const char *opt_name(int bit)
{
	for (const struct option *o = longopts; o->name; o++)
		if (o->val == bit)
			return o->name;
	return "?";
}

int load_model(const struct run_args *a, struct pfx_model **m)
{
	struct pfx_model_opts o = { .threads = a->threads, .block_tokens = a->block_tokens };
	struct pfx_error err = { "" };
	if (pfx_model_load(a->model, &o, m, &err)) {
		fprintf(stderr, "prefix-run: cannot load model: %s\n", err.msg);
		return -1;
	}
	return 0;
}

int cmd_info(struct run_args *a)
{
	struct pfx_model *m;
	if (load_model(a, &m))
		return 1;
	const struct pfx_config *c = pfx_model_config(m);
	char fp[2 * PFX_FINGERPRINT_BYTES + 1], b[32];
	pfx_model_fingerprint_hex(m, fp);
	printf("architecture     %s\n", c->arch);
	printf("weights          %lld parameters, %s\n", (long long)pfx_model_params(m),
	       pfx_model_weight_dtype(m));
	printf("hidden           %d\n", c->hidden);
	printf("layers           %d\n", c->n_layers);
	printf("heads            %d (key/value heads %d, head dim %d)\n", c->n_heads, c->n_kv_heads,
	       c->head_dim);
	printf("intermediate     %d\n", c->intermediate);
	printf("vocab            %d\n", c->vocab);
	printf("max positions    %d\n", c->max_positions);
	printf("rotary           %d of %d dims, base %g\n", c->rotary_dim, c->head_dim, c->rope_base);
	printf("norm             %s, eps %g\n", c->norm == PFX_NORM_RMS ? "RMSNorm" : "LayerNorm",
	       c->norm_eps);
	printf("residual         %s\n", c->parallel_residual ? "parallel" : "sequential");
	printf("embeddings       %s\n", c->tied_embeddings ? "tied" : "untied");
	printf("fingerprint      %s\n", fp);
	size_t kv = pfx_kv_bytes_per_token(c);
	printf("KV per token     %zu bytes (f32: 2 x %d layers x %d kv heads x %d dims x 4)\n", kv,
	       c->n_layers, c->n_kv_heads, c->head_dim);
	const int ctx[] = { 512, 2048, 8192 };
	for (int i = 0; i < 3; i++)
		printf("KV for %-5d      %zu bytes (%s)\n", ctx[i], kv * ctx[i], cli_bytes(kv * ctx[i], b));
	printf("KV block         %d tokens, %s\n", pfx_model_block_tokens(m),
	       cli_bytes(kv * pfx_model_block_tokens(m), b));
	printf("threads          %d\n", pfx_model_threads(m));
	printf("BLAS kernels     %s\n", pfx_blas_corename());
	printf("own kernels      %s\n", pfx_cpu_kernels());
	pfx_model_free(m);
	return 0;
}

struct pfx_cache *open_cache(const struct run_args *a, struct pfx_model *m, int explicit_only)
{
	char def[256];
	const char *path = a->socket;
	if (a->no_cache || (explicit_only && !path))
		return NULL;
	if (!path) {
		/* The default socket: use a daemon if one runs, say so once if not. */
		if (pd_default_socket(def, sizeof(def)) || access(def, F_OK)) {
			fprintf(stderr, "prefix-run: no prefixd running at %s; computing alone\n", def);
			return NULL;
		}
		path = def;
	}
	struct pfx_cache *c;
	struct pfx_error err = { "" };
	const char *salt = a->salt ? a->salt : "";
	if (pfx_cache_open(m, path, salt, strlen(salt), &c, &err)) {
		fprintf(stderr, "prefix-run: not using prefixd: %s; computing alone\n", err.msg);
		return NULL;
	}
	return c;
}

void report_prefill(const struct pfx_prefill_info *info, const struct pfx_error *cache_err)
{
	if (info->cache_rc)
		fprintf(stderr, "prefix-run: prefixd could not be used: %s; computed alone\n",
			cache_err->msg);
	fprintf(stderr, "prefix-run: prompt of %zu tokens: %zu attached from the cache, %zu computed; %u new blocks published, %u already there\n",
		info->attached + info->computed, info->attached, info->computed, info->published,
		info->deduplicated);
	if (info->publish_rc)
		fprintf(stderr, "prefix-run: %u new blocks not published: %s\n", info->unpublished,
			cache_err->msg);
}

int cmd_warm(struct run_args *a)
{
	struct pfx_model *m;
	if (load_model(a, &m))
		return 1;
	int rc = 1;
	size_t B = (size_t)pfx_model_block_tokens(m), full = a->ntokens / B * B;
	struct pfx_session *s = NULL;
	struct pfx_prefill_info info;
	struct pfx_error err = { "" }, cerr = { "" };
	struct pfx_cache *cache = open_cache(a, m, 0);
	if (!cache) {
		fprintf(stderr, "prefix-run: warm needs prefixd (above): nothing was published\n");
		goto out;
	}
	if (!full) {
		fprintf(stderr, "prefix-run: %zu tokens are less than one %zu-token block: nothing to publish\n",
			a->ntokens, B);
		goto out;
	}
	if (full < a->ntokens)
		fprintf(stderr, "prefix-run: the last %zu tokens do not fill a block: only the first %zu are published\n",
			a->ntokens - full, full);
	if (pfx_session_new(m, &s, &err) ||
	    pfx_session_prefill(s, cache, a->tokens, a->ntokens, PFX_LOGITS_NONE, NULL, &info, &cerr,
				&err)) {
		fprintf(stderr, "prefix-run: %s\n", err.msg[0] ? err.msg : "out of memory");
		goto out;
	}
	report_prefill(&info, &cerr);
	if (info.cache_rc || info.publish_rc)
		goto out;
	if (a->pin) {
		uint64_t pinned;
		if (pfx_cache_pin(cache, a->tokens, full, a->ttl, &pinned, &cerr)) {
			fprintf(stderr, "prefix-run: cannot pin: %s\n", cerr.msg);
			goto out;
		}
		fprintf(stderr, "prefix-run: pinned %zu tokens%s (pins hold %.1f MiB)\n", full,
			a->ttl ? " until the TTL ends" : "", (double)pinned / (1 << 20));
	}
	rc = 0;
out:
	pfx_session_free(s);
	pfx_cache_close(cache);
	pfx_model_free(m);
	return rc;
}

int cmd_logits(struct run_args *a)
{
	struct pfx_model *m;
	if (load_model(a, &m))
		return 1;
	int rc = 1, V = pfx_model_config(m)->vocab;
	size_t n = a->ntokens, split = a->split, rows = n;
	struct pfx_session *s = NULL;
	struct pfx_cache *cache = NULL;
	struct pfx_error err = { "" };
	float *logits = malloc(n * (size_t)V * sizeof(float));
	if (a->has_split && (split < 1 || split >= n)) {
		fprintf(stderr, "prefix-run: --split %zu must be between 1 and %zu (tokens - 1)\n",
			split, n - 1);
		goto out;
	}
	if (!logits || pfx_session_new(m, &s, &err))
		goto fail;
	if (a->has_split) {
		if (pfx_session_append(s, a->tokens, split, PFX_LOGITS_ALL, logits, &err) ||
		    pfx_session_freeze(s, &err) ||
		    pfx_session_append(s, a->tokens + split, n - split, PFX_LOGITS_ALL,
				       logits + split * V, &err))
			goto fail;
	} else if ((cache = open_cache(a, m, 1))) {
		struct pfx_prefill_info info;
		struct pfx_error cerr = { "" };
		if (pfx_session_prefill(s, cache, a->tokens, n, PFX_LOGITS_ALL, logits, &info, &cerr,
					&err))
			goto fail;
		report_prefill(&info, &cerr);
		fprintf(stderr, "prefix-run: %s holds the logits of positions %zu to %zu\n", a->out,
			info.attached, n - 1);
		rows = info.computed;
	} else if (pfx_session_append(s, a->tokens, n, PFX_LOGITS_ALL, logits, &err)) {
		goto fail;
	}
	if (npy_write_f32(a->out, logits, rows, (size_t)V, &err))
		goto fail;
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "prefix-run: %s\n", err.msg[0] ? err.msg : "out of memory");
out:
	pfx_session_free(s);
	pfx_cache_close(cache);
	free(logits);
	pfx_model_free(m);
	return rc;
}

int cmd_generate(struct run_args *a)
{
	struct pfx_model *m;
	if (load_model(a, &m))
		return 1;
	int rc = 1, V = pfx_model_config(m)->vocab;
	struct pfx_session *s = NULL;
	struct pfx_sampler *smp = NULL;
	struct pfx_cache *cache = open_cache(a, m, 0);
	struct pfx_prefill_info info;
	struct pfx_error err = { "" }, cerr = { "" };
	float *logits = malloc((size_t)V * sizeof(float));
	struct pfx_sampler_opts so = { .temperature = (float)a->temperature, .top_k = (int)a->top_k,
				       .top_p = (float)a->top_p, .seed = a->seed };
	if (!logits || pfx_sampler_new(&so, V, &smp, &err) || pfx_session_new(m, &s, &err))
		goto fail;
	double t0 = cli_now();
	if (pfx_session_prefill(s, cache, a->tokens, a->ntokens, PFX_LOGITS_LAST, logits, &info,
				&cerr, &err))
		goto fail;
	double t1 = cli_now();
	if (cache)
		report_prefill(&info, &cerr);
	for (long i = 0; i < a->max_new; i++) {
		int32_t t = pfx_sample(smp, logits);
		printf("%s%d", i ? " " : "", t);
		if (i + 1 < a->max_new && pfx_session_decode(s, t, logits, &err))
			goto fail;
	}
	printf("\n");
	double t2 = cli_now();
	fprintf(stderr, "prefix-run: time to first token %.1f ms (prompt of %zu tokens); %ld more tokens in %.1f ms (%.1f tok/s)\n",
		(t1 - t0) * 1e3, a->ntokens, a->max_new - 1, (t2 - t1) * 1e3,
		a->max_new > 1 ? (a->max_new - 1) / (t2 - t1) : 0.0);
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "prefix-run: %s\n", err.msg[0] ? err.msg : "out of memory");
out:
	pfx_sampler_free(smp);
	pfx_session_free(s);
	pfx_cache_close(cache);
	free(logits);
	pfx_model_free(m);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	int cmd = -1;
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[1], commands[i].name))
			cmd = (int)i;
	if (cmd < 0) {
		fprintf(stderr, "prefix-run: unknown command '%s' (info, logits, generate, demo, random-model)\n",
			argv[1]);
		return 2;
	}
	struct run_args a = { .top_p = 1.0, .prefix = 1024, .suffix = 32, .nsuffixes = 4 };
	int seen = 0, c;
	long v;
	const char *tokens = NULL;
	opterr = 0;
	while ((c = getopt_long(argc - 1, argv + 1, "h", longopts, NULL)) != -1) {
		if (c == 'h') {
			fputs(usage, stdout);
			return 0;
		}
		if (c == '?' || c == ':') {
			fprintf(stderr, "prefix-run: unknown option or missing value: %s\n",
				argv[optind]);
			return 2;
		}
		if (!(commands[cmd].allowed & c)) {
			fprintf(stderr, "prefix-run: --%s is not an option of '%s'\n", opt_name(c),
				commands[cmd].name);
			return 2;
		}
		seen |= c;
		char flag[32];
		snprintf(flag, sizeof(flag), "--%s", opt_name(c));
		int bad = 0;
		switch (c) {
		case O_MODEL: a.model = optarg; break;
		case O_TOKENS: tokens = optarg; break;
		case O_OUT: a.out = optarg; break;
		case O_SPLIT: bad = cli_long(flag, optarg, 1, 1 << 30, &v); a.split = (size_t)v; a.has_split = 1; break;
		case O_MAXNEW: bad = cli_long(flag, optarg, 1, 1 << 20, &a.max_new); break;
		case O_TEMP: bad = cli_float(flag, optarg, 0, 1e6, &a.temperature); break;
		case O_TOPK: bad = cli_long(flag, optarg, 0, 1 << 24, &a.top_k); break;
		case O_TOPP: bad = cli_float(flag, optarg, 1e-9, 1, &a.top_p); break;
		case O_SEED: bad = cli_long(flag, optarg, 0, __LONG_MAX__, &v); a.seed = (uint64_t)v; break;
		case O_THREADS: bad = cli_long(flag, optarg, 1, 1024, &v); a.threads = (int)v; break;
		case O_BLOCK:
			bad = cli_long(flag, optarg, 1, PFX_MAX_BLOCK_TOKENS, &v);
			if (!bad && (v & (v - 1))) {
				fprintf(stderr, "prefix-run: --block-tokens must be a power of two, not %ld\n", v);
				bad = -1;
			}
			a.block_tokens = (int)v;
			break;
		case O_PREFIX: bad = cli_long(flag, optarg, 1, 1 << 20, &v); a.prefix = (int)v; break;
		case O_SUFFIX: bad = cli_long(flag, optarg, 1, 1 << 20, &v); a.suffix = (int)v; break;
		case O_NSUFFIX: bad = cli_long(flag, optarg, 1, 1024, &v); a.nsuffixes = (int)v; break;
		case O_SOCKET: a.socket = optarg; break;
		case O_SALT: a.salt = optarg; break;
		case O_NOCACHE: a.no_cache = 1; break;
		case O_SHAPE: a.shape = optarg; break;
		case O_PIN: a.pin = 1; break;
		case O_TTL: bad = cli_long(flag, optarg, 1, UINT32_MAX, &v); a.ttl = (uint32_t)v; break;
		}
		if (bad)
			return 2;
	}
	if (optind + 1 < argc) {
		fprintf(stderr, "prefix-run: unexpected argument '%s'\n", argv[optind + 1]);
		return 2;
	}
	int missing = commands[cmd].required & ~seen;
	if (missing) {
		for (int bit = 1; bit <= O_LAST; bit <<= 1)
			if (missing & bit)
				fprintf(stderr, "prefix-run %s: --%s is required\n", commands[cmd].name,
					opt_name(bit));
		return 2;
	}
	if ((seen & O_NOCACHE) && (seen & (O_SOCKET | O_SALT))) {
		fprintf(stderr, "prefix-run: --no-cache excludes --socket and --salt\n");
		return 2;
	}
	if (a.salt && strlen(a.salt) > PREFIXD_MAX_SALT) {
		fprintf(stderr, "prefix-run: --salt is at most %d bytes\n", PREFIXD_MAX_SALT);
		return 2;
	}
	if (cmd == 1 && a.has_split && (seen & O_SOCKET)) {
		fprintf(stderr, "prefix-run: logits --split runs the in-process cached path; it excludes --socket\n");
		return 2;
	}
	if ((seen & O_TTL) && !(seen & O_PIN)) {
		fprintf(stderr, "prefix-run: --ttl needs --pin\n");
		return 2;
	}
	if ((seen & (O_TOPK | O_TOPP | O_SEED)) && !(seen & O_TEMP)) {
		fprintf(stderr, "prefix-run: --top-k, --top-p and --seed need --temperature\n");
		return 2;
	}
	if (tokens && cli_tokens(tokens, &a.tokens, &a.ntokens))
		return 2;
	int rc = commands[cmd].run(&a);
	free(a.tokens);
	return rc;
}
