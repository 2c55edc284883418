/* SPDX-License-Identifier: MIT */
/*
 * prefix-serve: an OpenAI-compatible HTTP server on the runtime, sharing
 * prompt prefixes through prefixd. It listens first (GET /health answers
 * 503 while loading), then loads the tokenizer, the model and the cache on
 * this thread, starts the engine, and waits for SIGTERM or SIGINT: it then
 * stops accepting, lets running requests finish within --grace, and exits 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <prefixd-runtime/cache.h>
#include <prefixd-runtime/model.h>
#include <prefixd-runtime/text.h>

#include "api.h"
#include "cli.h"
#include "engine.h"
#include "http.h"
#include "listen.h"
#include "log.h"
#include "metrics.h"
#include "prefixd_version.h"

#define MAX_KEY_FILE 4096

static const char usage[] =
	"usage: prefix-serve --model DIR [OPTIONS]\n"
	"\n"
	"An OpenAI-compatible HTTP server (POST /v1/chat/completions, POST\n"
	"/v1/completions, GET /v1/models, GET /health, GET /metrics) for the\n"
	"checkpoint in DIR and its tokenizer.json, sharing prompt prefixes with\n"
	"other processes through prefixd. It listens at once; /health answers 503\n"
	"until the model is loaded, then 200. SIGTERM or SIGINT: it stops accepting,\n"
	"finishes what runs (within --grace) and exits 0; a second one: at once, 1.\n"
	"\n"
	"  --model DIR         the checkpoint's directory (config.json, safetensors,\n"
	"                      tokenizer.json, tokenizer_config.json)\n"
	"  --model-name NAME   the model's name in responses and /v1/models\n"
	"                      (default: DIR's last component)\n"
	"\n"
	"listening:\n"
	"  --host HOST         the address to listen on (default 127.0.0.1; 0.0.0.0 or ::\n"
	"                      for every interface)\n"
	"  --port N            the TCP port (default 8080; 0: one the kernel picks).\n"
	"                      stderr says \"prefix-serve: listening on HOST:PORT\"\n"
	"  --reuse-port        let several prefix-serve processes listen on one port\n"
	"                      (SO_REUSEPORT): the kernel spreads connections\n"
	"  --api-key-file F    require \"Authorization: Bearer KEY\" on /v1/*, KEY being\n"
	"                      F's content (one line); /health and /metrics stay open\n"
	"  --max-conns N       connections at once (default 256)\n"
	"  --per-ip N          connections at once from one address (default 0: no limit)\n"
	"  --max-body BYTES    the largest request body (default 16777216): 413 past it\n"
	"  --timeout S         seconds a request has to arrive whole, and a connection\n"
	"                      may stay idle (default 60)\n"
	"  --grace S           on SIGTERM, seconds running requests have to finish before\n"
	"                      they are cancelled (default 30)\n"
	"\n"
	"the engine:\n"
	"  --parallel N        sequences generating at once (default 4)\n"
	"  --queue N           requests waiting beyond those (default 64): 429 past it\n"
	"  --ctx N             tokens of one sequence, prompt and generated (default: the\n"
	"                      model's max_position_embeddings)\n"
	"  --step-tokens N     prompt tokens prefilled per step, all sequences (default\n"
	"                      256): a long prompt does not stall running streams\n"
	"  --local-kv MIB      KV kept in this process's frozen prefixes, shared by its\n"
	"                      requests when prefixd misses or is absent (default 256)\n"
	"  --parse-special     match special-token text in messages and prompts as\n"
	"                      special tokens (Hugging Face's behaviour); by default it\n"
	"                      is plain text, so a user cannot inject a turn\n"
	"\n"
	"the model:\n"
	"  --threads N         worker threads (default: all CPUs)\n"
	"  --block-tokens B    KV block size in tokens, a power of two (default 64;\n"
	"                      prefixd must use the same)\n"
	"  --weights native|f32  hold 16-bit weights as stored (default) or upcast to f32\n"
	"  --kv-dtype f32|f16|bf16  how the KV cache holds keys and values (default f32)\n"
	"  --matmul f32|bf16   how prefill multiplies (default f32; prefix-run --help)\n"
	"\n"
	"sharing through prefixd:\n"
	"  --socket PATH       the daemon's socket (default: $PREFIXD_SOCKET, else\n"
	"                      $XDG_RUNTIME_DIR/prefixd.sock, else /run/prefixd.sock);\n"
	"                      when none answers, a warning, and the server runs alone\n"
	"  --no-cache          do not use prefixd\n"
	"  --no-wait           compute a prompt another process is computing now\n"
	"                      instead of waiting for it to publish (single flight)\n"
	"\n"
	"  --help, --version\n"
	"\n"
	"man prefix-serve has the endpoints, the errors, the log line and the metrics.\n";

enum {
	O_MODEL = 1, O_NAME, O_HOST, O_PORT, O_REUSE, O_KEY, O_CONNS, O_PERIP, O_BODY, O_TIMEOUT,
	O_GRACE, O_PARALLEL, O_QUEUE, O_CTX, O_STEP, O_LOCAL, O_SPECIAL, O_THREADS, O_BLOCK,
	O_WEIGHTS, O_KV, O_MATMUL, O_SOCKET, O_NOCACHE, O_NOWAIT, O_HELP, O_VERSION,
};

static const struct option longopts[] = {
	{ "model", required_argument, NULL, O_MODEL },
	{ "model-name", required_argument, NULL, O_NAME },
	{ "host", required_argument, NULL, O_HOST },
	{ "port", required_argument, NULL, O_PORT },
	{ "reuse-port", no_argument, NULL, O_REUSE },
	{ "api-key-file", required_argument, NULL, O_KEY },
	{ "max-conns", required_argument, NULL, O_CONNS },
	{ "per-ip", required_argument, NULL, O_PERIP },
	{ "max-body", required_argument, NULL, O_BODY },
	{ "timeout", required_argument, NULL, O_TIMEOUT },
	{ "grace", required_argument, NULL, O_GRACE },
	{ "parallel", required_argument, NULL, O_PARALLEL },
	{ "queue", required_argument, NULL, O_QUEUE },
	{ "ctx", required_argument, NULL, O_CTX },
	{ "step-tokens", required_argument, NULL, O_STEP },
	{ "local-kv", required_argument, NULL, O_LOCAL },
	{ "parse-special", no_argument, NULL, O_SPECIAL },
	{ "threads", required_argument, NULL, O_THREADS },
	{ "block-tokens", required_argument, NULL, O_BLOCK },
	{ "weights", required_argument, NULL, O_WEIGHTS },
	{ "kv-dtype", required_argument, NULL, O_KV },
	{ "matmul", required_argument, NULL, O_MATMUL },
	{ "socket", required_argument, NULL, O_SOCKET },
	{ "no-cache", no_argument, NULL, O_NOCACHE },
	{ "no-wait", no_argument, NULL, O_NOWAIT },
	{ "help", no_argument, NULL, O_HELP },
	{ "version", no_argument, NULL, O_VERSION },
	{ NULL, 0, NULL, 0 },
};

struct args {
	const char *model, *name, *host, *key_file, *socket;
	long port, max_conns, per_ip, max_body, timeout, grace, parallel, queue, ctx, step,
		local_mib, threads, block;
	bool reuse_port, parse_special, no_cache, no_wait;
	struct pfx_model_opts mo;
};

/* 1 while loading: a stop signal then exits at once (nothing runs yet). */
static atomic_int loading = 1;
static atomic_int signals;
static int stop_pipe[2] = { -1, -1 };

static void on_signal(int sig)
{
	(void)sig;
	if (atomic_load(&loading)) {
		static const char msg[] = "prefix-serve: stopped while loading the model\n";
		ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
		(void)w;
		_exit(0);
	}
	/* A second one while requests finish: the user will not wait. */
	if (atomic_fetch_add(&signals, 1) > 0) {
		static const char msg[] = "prefix-serve: stopped at once (a second signal)\n";
		ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
		(void)w;
		_exit(1);
	}
	int e = errno;
	ssize_t w = write(stop_pipe[1], "x", 1);
	(void)w;
	errno = e;
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "prefix-serve: %s (prefix-serve --help lists the options)\n", msg);
	return 2;
}

static int parse_args(int argc, char **argv, struct args *a)
{
	*a = (struct args){ .host = "127.0.0.1", .port = 8080, .max_conns = 256,
			    .max_body = 16 << 20, .timeout = 60, .grace = 30, .parallel = 4,
			    .queue = 64, .local_mib = 256 };
	uint64_t seen = 0;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (c == 'h' || c == O_HELP) {
			fputs(usage, stdout);
			exit(0);
		}
		if (c == O_VERSION) {
			printf("prefix-serve %s\n", PREFIXD_VERSION);
			exit(0);
		}
		if (c == '?' || c == ':')
			return usage_error("unknown option or missing value: %s", argv[optind - 1]);
		const char *name = NULL;
		for (const struct option *o = longopts; o->name; o++)
			if (o->val == c)
				name = o->name;
		if (seen & (UINT64_C(1) << c))
			return usage_error("--%s is given twice", name);
		seen |= UINT64_C(1) << c;
		char flag[32];
		snprintf(flag, sizeof(flag), "--%s", name);
		int bad = 0;
		long v = 0;
		switch (c) {
		case O_MODEL: a->model = optarg; break;
		case O_NAME:
			if (!optarg[0] || strlen(optarg) > 256)
				return usage_error("--model-name takes 1 to 256 characters, not '%s'",
						   optarg);
			a->name = optarg;
			break;
		case O_HOST:
			if (!optarg[0])
				return usage_error("--host takes an address or a name");
			a->host = optarg;
			break;
		case O_PORT: bad = cli_long(flag, optarg, 0, 65535, &a->port); break;
		case O_REUSE: a->reuse_port = true; break;
		case O_KEY: a->key_file = optarg; break;
		case O_CONNS: bad = cli_long(flag, optarg, 1, 65536, &a->max_conns); break;
		case O_PERIP: bad = cli_long(flag, optarg, 0, 65536, &a->per_ip); break;
		case O_BODY: bad = cli_long(flag, optarg, 1024, 1L << 30, &a->max_body); break;
		case O_TIMEOUT: bad = cli_long(flag, optarg, 1, 86400, &a->timeout); break;
		case O_GRACE: bad = cli_long(flag, optarg, 0, 86400, &a->grace); break;
		case O_PARALLEL: bad = cli_long(flag, optarg, 1, 1024, &a->parallel); break;
		case O_QUEUE: bad = cli_long(flag, optarg, 0, 1 << 20, &a->queue); break;
		case O_CTX: bad = cli_long(flag, optarg, 2, 1 << 24, &a->ctx); break;
		case O_STEP: bad = cli_long(flag, optarg, 1, 1 << 20, &a->step); break;
		case O_LOCAL: bad = cli_long(flag, optarg, 0, 1 << 24, &a->local_mib); break;
		case O_SPECIAL: a->parse_special = true; break;
		case O_THREADS: bad = cli_long(flag, optarg, 1, 1024, &a->threads); break;
		case O_BLOCK:
			bad = cli_long(flag, optarg, 1, PFX_MAX_BLOCK_TOKENS, &v);
			if (!bad && (v & (v - 1)))
				return usage_error("--block-tokens must be a power of two, not %s",
						   optarg);
			a->block = v;
			break;
		case O_WEIGHTS:
			if (strcmp(optarg, "native") && strcmp(optarg, "f32"))
				return usage_error("--weights is native or f32, not '%s'", optarg);
			a->mo.weights = optarg[0] == 'f' ? PFX_WEIGHTS_F32 : PFX_WEIGHTS_NATIVE;
			break;
		case O_KV:
			if (pfx_kv_dtype_parse(optarg, &a->mo.kv_dtype))
				return usage_error("--kv-dtype is f32, f16 or bf16, not '%s'", optarg);
			break;
		case O_MATMUL:
			if (strcmp(optarg, "f32") && strcmp(optarg, "bf16"))
				return usage_error("--matmul is f32 or bf16, not '%s'", optarg);
			a->mo.matmul = optarg[0] == 'b' ? PFX_MATMUL_BF16 : PFX_MATMUL_F32;
			break;
		case O_SOCKET: a->socket = optarg; break;
		case O_NOCACHE: a->no_cache = true; break;
		case O_NOWAIT: a->no_wait = true; break;
		}
		if (bad)
			return 2;
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (!a->model)
		return usage_error("--model DIR is required");
	if (a->no_cache && a->socket)
		return usage_error("--socket and --no-cache contradict each other");
	a->mo.threads = (int)a->threads;
	a->mo.block_tokens = (int)a->block;
	return 0;
}

/* The key in path's first line, into key (malloc'd). 0, or 1 after saying why. */
static int read_key(const char *path, char **key, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st)) {
		fprintf(stderr, "prefix-serve: cannot read --api-key-file %s: %s\n", path,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return 1;
	}
	char *buf = malloc(MAX_KEY_FILE + 1);
	ssize_t n = buf ? read(fd, buf, MAX_KEY_FILE + 1) : -1;
	int e = errno;
	close(fd);
	if (n < 0 || n > MAX_KEY_FILE) {
		fprintf(stderr, "prefix-serve: cannot read --api-key-file %s: %s\n", path,
			n < 0 ? strerror(e) : "over 4096 bytes: it should hold one key");
		free(buf);
		return 1;
	}
	buf[n] = 0;
	size_t l = strcspn(buf, "\r\n");
	buf[l] = 0;
	while (l && (buf[l - 1] == ' ' || buf[l - 1] == '\t'))
		buf[--l] = 0;
	size_t lead = strspn(buf, " \t");
	memmove(buf, buf + lead, l - lead + 1);
	l -= lead;
	for (size_t i = 0; i < l; i++)
		if ((unsigned char)buf[i] < 0x21 || buf[i] == 0x7f) {
			fprintf(stderr, "prefix-serve: --api-key-file %s: the key has a space or a "
				"control character at byte %zu; a key is one word of printable "
				"characters\n", path, i);
			free(buf);
			return 1;
		}
	if (!l) {
		fprintf(stderr, "prefix-serve: --api-key-file %s: its first line is empty; put "
			"the key there\n", path);
		free(buf);
		return 1;
	}
	if (st.st_mode & 077)
		serve_log("warning: --api-key-file %s can be read by other users (chmod 600 it)",
			  path);
	*key = buf;
	*len = l;
	return 0;
}

static char *default_name(const char *dir)
{
	char *d = strdup(dir);
	if (!d)
		return NULL;
	size_t l = strlen(d);
	while (l > 1 && d[l - 1] == '/')
		d[--l] = 0;
	char *s = strrchr(d, '/');
	char *name = strdup(s && s[1] ? s + 1 : d);
	free(d);
	return name;
}

/* Loads the tokenizer, the model and the cache; 0 or 1 after saying why. */
static int load(const struct args *a, struct pfx_tokenizer **tok, struct pfx_model **m,
		struct pfx_cache **cache)
{
	struct pfx_error err = { "" };
	if (pfx_tokenizer_load(a->model, tok, &err)) {
		fprintf(stderr, "prefix-serve: cannot load the tokenizer: %s\n", err.msg);
		return 1;
	}
	if (pfx_model_load(a->model, &a->mo, m, &err)) {
		fprintf(stderr, "prefix-serve: cannot load the model: %s\n", err.msg);
		return 1;
	}
	size_t vocab = pfx_tokenizer_vocab_size(*tok);
	if (vocab > (size_t)pfx_model_config(*m)->vocab) {
		fprintf(stderr, "prefix-serve: the tokenizer in %s has %zu ids but the model's "
			"embedding only %d rows: they are not one model's\n", a->model, vocab,
			pfx_model_config(*m)->vocab);
		return 1;
	}
	*cache = NULL;
	if (!a->no_cache && pfx_cache_open(*m, a->socket, NULL, 0, cache, &err)) {
		serve_log("warning: no prefixd (%s): serving alone, sharing prefixes only "
			  "between this process's requests", err.msg);
		*cache = NULL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct args a;
	int rc = parse_args(argc, argv, &a);
	if (rc)
		return rc;
	if (sodium_init() < 0) {
		fprintf(stderr, "prefix-serve: libsodium cannot start\n");
		return 1;
	}
	/* A wrong folder fails before anything listens. */
	struct stat st;
	if (stat(a.model, &st)) {
		fprintf(stderr, "prefix-serve: --model %s: %s\n", a.model, strerror(errno));
		return 1;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "prefix-serve: --model %s is not a directory: give the "
			"checkpoint's directory (config.json, safetensors, tokenizer.json)\n",
			a.model);
		return 1;
	}
	char *key = NULL;
	size_t key_len = 0;
	if (a.key_file && read_key(a.key_file, &key, &key_len))
		return 1;
	struct pfx_tokenizer *tok = NULL;
	struct pfx_model *model = NULL;
	struct pfx_cache *cache = NULL;
	struct serve_engine *engine = NULL;
	struct http *http = NULL;
	rc = 1;
	char *name = a.name ? strdup(a.name) : default_name(a.model);
	struct metrics *metrics = name ? metrics_new(name) : NULL;
	if (!metrics || pipe2(stop_pipe, O_CLOEXEC)) {
		fprintf(stderr, "prefix-serve: out of memory\n");
		goto out;
	}
	struct sigaction sa = { .sa_handler = on_signal };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct pfx_error err = { "" };
	char bound[128];
	int fd = listen_tcp(a.host, (int)a.port, a.reuse_port, bound, &err);
	if (fd < 0) {
		fprintf(stderr, "prefix-serve: %s\n", err.msg);
		goto out;
	}
	struct http_opts ho = {
		.listen_fd = fd, .model_name = name, .api_key = key, .api_key_len = key_len,
		.max_conns = (unsigned)a.max_conns, .per_ip = (unsigned)a.per_ip,
		.timeout_s = (unsigned)a.timeout, .max_body = (size_t)a.max_body,
		.conn_memory = 32 << 10, .metrics = metrics,
	};
	int started = http_start(&ho, &http, &err);
	if (key)
		sodium_memzero(key, key_len);
	free(key);
	key = NULL;
	if (started) {
		fprintf(stderr, "prefix-serve: %s\n", err.msg);
		goto out;
	}
	serve_log("listening on %s", bound);

	if (load(&a, &tok, &model, &cache))
		goto out;
	const struct pfx_config *cfg = pfx_model_config(model);
	size_t ctx = a.ctx ? (size_t)a.ctx : (size_t)cfg->max_positions;
	if (ctx > (size_t)cfg->max_positions) {
		fprintf(stderr, "prefix-serve: --ctx %ld is past the model's context, %d tokens "
			"(max_position_embeddings)\n", a.ctx, cfg->max_positions);
		goto out;
	}
	struct serve_engine_opts eo = {
		.model = model, .tok = tok, .cache = cache, .parallel = (unsigned)a.parallel,
		.queue = (unsigned)a.queue, .ctx = ctx, .step_tokens = (size_t)a.step,
		.local_bytes = (size_t)a.local_mib << 20,
		.wait_ms = a.no_wait ? 0 : PFX_CACHE_WAIT_MS,
		.notified = http_notified, .notified_arg = http,
	};
	if (serve_engine_start(&eo, &engine, &err)) {
		fprintf(stderr, "prefix-serve: cannot start the engine: %s\n", err.msg);
		goto out;
	}
	struct api_limits lim = { .ctx = ctx, .max_tokens_default = 0 /* what fits */,
				  .parse_special = a.parse_special };
	/* From here a signal stops gracefully: requests may run. The line
	 * comes first, so that whoever sees a 200 from /health can find it. */
	atomic_store(&loading, 0);
	serve_log("ready: %s (%s), ctx %zu, %ld sequences at once, queue %ld, %s", name,
		  cfg->arch, ctx, a.parallel, a.queue,
		  cache ? "sharing prefixes through prefixd" : "without prefixd");
	http_ready(http, engine, tok, &lim);

	char c;
	while (read(stop_pipe[0], &c, 1) < 0 && errno == EINTR)
		;
	serve_log("stopping: no new connections; running requests have %ld s to finish",
		  a.grace);
	http_quiesce(http);
	serve_engine_drain(engine, (int)(a.grace * 1000));
	/* What the engine finished is sent before the connections close. */
	if (!http_wait_idle(http, 5000))
		serve_log("stopping: some responses were not sent whole within 5 s");
	rc = 0;
out:
	if (rc && engine)
		serve_engine_drain(engine, 0);
	serve_engine_stop(engine);
	http_free(http);
	pfx_cache_close(cache);
	pfx_model_free(model);
	pfx_tokenizer_free(tok);
	metrics_free(metrics);
	free(name);
	free(key);
	if (!rc)
		serve_log("stopped");
	return rc;
}
