/* SPDX-License-Identifier: MIT */
/*
 * bench/serve: prefix-serve as clients see it. A random model of the
 * SmolLM-135M shape with SmolLM's tokenizer; K server processes on one
 * port (--reuse-port), R concurrent streaming clients on /v1/completions,
 * each request max_tokens new tokens (greedy, ignore_eos).
 *
 * Workloads:
 *   shared:   one ~2,000-token system prompt plus a distinct ~40-token
 *             question per request;
 *   distinct: prompts of the same length with nothing in common.
 * Each runs in one invocation with the servers started afresh each time:
 *   prefixd: one daemon, every server connected to it (and each reusing
 *            its own frozen prompts too, as by default);
 *   local:   without prefixd (--no-cache): each process reuses only its
 *            own frozen prompts;
 *   none:    no reuse at all (--no-cache --local-kv 0), shared only.
 * Printed per run: TTFT p50/p99 (request sent -> first token's event),
 * time per output token p50/p99 (a request's first event to its last,
 * over its tokens - 1), generated tokens/s (all clients, wall clock),
 * the cached-token share (usage.prompt_tokens_details.cached_tokens over
 * prompt tokens) and the servers' peak RSS; and the CPU time of the
 * servers' HTTP threads (those libmicrohttpd runs, named "MHD-..."; the
 * JSON of every chunk is built there too) per generated token.
 *
 * HTTP + SSE's own cost, as the issue measures it: the same steps with and
 * without HTTP, in the same invocation (run_overhead below): one server
 * against the same engine driven in-process, taking turns 3 times (9
 * with --overhead-only); printed per generated token, the medians of the
 * pairs' wall and CPU differences (and the MHD threads' CPU of that
 * server). --overhead-only runs just that.
 *
 *   serve [--procs K] [--clients R] [--requests N] [--prefix TOKENS]
 *         [--new N] [--threads T] [--parallel P] [--overhead-only]
 *         [--workload both|shared|distinct] [--rounds N]
 *
 * --workload runs one workload's configurations only (without the HTTP
 * cost runs), --rounds N times, taking turns (ABBA); figures are the
 * medians over the rounds, ratios the medians of each round's pair, and
 * the per-round tokens/s and CPU are listed too. Beside the wall figures:
 * CPU milliseconds a request, the servers' and prefixd's (from /proc,
 * clients' start to end), which a shared machine's load disturbs far less.
 *
 * Targets: shared p50 TTFT with prefixd >= 8x lower than without and
 * tokens/s >= 2x, against both servers without prefixd; distinct within
 * 10% of local (TTFT p50 and tokens/s); HTTP + SSE <= 50 us a generated
 * token (the CPU difference). One JSON object on stdout.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <prefixd-runtime/model.h>

#include "api.h"
#include "bench_util.h"
#include "corpus.h"
#include "daemon_util.h"
#include "engine.h"
#include "opts.h"
#include "random_model.h"
#include "report.h"
#include "serve_util.h"
#include "text.h"

#define NAME "serve"
#define MAX_PROCS 8
#define MAX_CLIENTS 64
#define MAX_ROUNDS 15
/* --overhead-only's pairs of runs (HTTP, in-process), each about a second. */
#define OVERHEAD_ROUNDS 9

enum workload { WL_BOTH, WL_SHARED, WL_DISTINCT };

static struct {
	int procs, clients, requests, prefix, new_tokens, threads, parallel, rounds;
	enum workload workload;
	bool overhead_only;
} opt = { 2, 4, 16, 2000, 32, 1, 4, 1, WL_BOTH, false };

static char model_dir[PATH_MAX];
/* The overhead runs' model: SmolLM's tokenizer and embedding, 2 thin
 * layers (see run_overhead). */
static char tiny_dir[PATH_MAX];
static const struct pfx_tokenizer *tok;

/* ==== Prompts ==== */

static struct bench_corpus corpus;

static size_t count_tokens(const char *text)
{
	int32_t *ids = NULL;
	size_t n = 0;
	struct pfx_error err;
	if (pfx_tokenize(tok, text, strlen(text), 0, &ids, &n, &err)) {
		fprintf(stderr, NAME ": tokenize: %s\n", err.msg);
		exit(1);
	}
	free(ids);
	return n;
}

/* Corpus lines from line `first` on (wrapping), prefixed by head, until
 * the text holds at least `tokens` tokens (counted line by line: close to
 * the whole text's count); lines of more than 256 tokens are left out, so
 * that no prompt overshoots by much. malloc'd. */
static char *text_of(const char *head, size_t first, size_t tokens)
{
	size_t nl = corpus.n, cap = 1 << 16, len = 0;
	char *s = malloc(cap);
	len = (size_t)snprintf(s, cap, "%s", head);
	size_t have = count_tokens(s);
	for (size_t i = first; have < tokens; i++) {
		const char *l = corpus.line[i % nl];
		size_t ll = strlen(l), lt = count_tokens(l) + 1;
		if (lt > 256)
			continue;
		while (len + ll + 2 > cap)
			s = realloc(s, cap *= 2);
		memcpy(s + len, l, ll);
		len += ll;
		s[len++] = '\n';
		s[len] = 0;
		have += lt;
	}
	return s;
}

/* The prompt of request r of a workload (made before the clients start,
 * so that tokenizing them does not compete with the servers). */
static char *prompt_of(bool shared, int r)
{
	static char *system;
	char head[64];
	if (shared) {
		if (!system) /* freed at exit */
			system = text_of("You are a helpful assistant. Read this first.\n", 0,
					 (size_t)opt.prefix);
		size_t nl = corpus.n;
		char *q = text_of("", (size_t)r * 7 % nl, 40);
		char *p = malloc(strlen(system) + strlen(q) + 64);
		sprintf(p, "%sQuestion %d: %s", system, r, q);
		free(q);
		return p;
	}
	/* Nothing in common from the first token on. */
	snprintf(head, sizeof(head), "Request %d. ", r);
	return text_of(head, (size_t)r * 13, (size_t)opt.prefix + 40);
}

/* ==== Servers ==== */

/* How a run's servers reuse prompts. */
enum reuse {
	REUSE_PREFIXD,  /* prefixd, and each process's own frozen prompts */
	REUSE_LOCAL,    /* --no-cache: each process's own frozen prompts only */
	REUSE_NONE,     /* --no-cache --local-kv 0: every prompt computed whole */
};

struct servers {
	struct serve_proc p[MAX_PROCS];
	int port;
};

static int start_servers(struct servers *s, const char *model, const char *dir, const char *sock,
			 enum reuse reuse)
{
	char port[16] = "0", parallel[16], threads[16], log[PATH_MAX + 32];
	snprintf(parallel, sizeof(parallel), "%d", opt.parallel);
	snprintf(threads, sizeof(threads), "%d", opt.threads);
	for (int i = 0; i < opt.procs; i++) {
		const char *argv[24] = { "--model", model, "--port", port, "--reuse-port",
					 "--parallel", parallel, "--threads", threads };
		int a = 9;
		if (reuse == REUSE_PREFIXD) {
			argv[a++] = "--socket";
			argv[a++] = sock;
		} else {
			argv[a++] = "--no-cache";
		}
		if (reuse == REUSE_NONE) {
			argv[a++] = "--local-kv";
			argv[a++] = "0";
		}
		snprintf(log, sizeof(log), "%s/serve%d.log", dir, i);
		if (sp_start(&s->p[i], log, argv))
			return -1;
		if (i == 0)
			snprintf(port, sizeof(port), "%d", s->port = s->p[0].port);
		else if (s->p[i].port != s->port)
			return -1;
	}
	/* The kernel picks which process a connection reaches: ask until
	 * every process said "listening" and many answers in a row were 200
	 * (each answers 503 until its model is loaded). */
	for (int tries = 0; tries < 3000; tries++) {
		int ok = 0;
		for (int k = 0; k < 8 * opt.procs; k++)
			ok += sp_http(s->port, "GET", "/health", NULL, NULL, NULL) == 200;
		if (ok == 8 * opt.procs)
			return 0;
		usleep(20000);
	}
	fprintf(stderr, NAME ": the servers did not become healthy\n");
	return -1;
}

/* Peak RSS of every server, MiB; then a clean stop. */
static double stop_servers(struct servers *s)
{
	double mib = 0;
	for (int i = 0; i < opt.procs; i++) {
		char path[64], line[256];
		if (s->p[i].pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/status", (int)s->p[i].pid);
		FILE *f = fopen(path, "r");
		while (f && fgets(line, sizeof(line), f))
			if (!strncmp(line, "VmHWM:", 6))
				mib += atof(line + 6) / 1024;
		if (f)
			fclose(f);
		report_require(sp_stop(&s->p[i]) == 0, "a server did not stop cleanly");
	}
	return mib;
}

/* ==== Clients ==== */

/* One streamed request's figures. */
struct result {
	double ttft, tpot;   /* seconds */
	long prompt, cached, generated;
	bool ok;
};

/* The request's body: a streamed greedy completion of max_tokens new
 * tokens (json_object_put it; the string lives as long). */
static json_object *body_of(const char *prompt)
{
	json_object *b = json_object_new_object();
	json_object_object_add(b, "model", json_object_new_string("bench"));
	json_object_object_add(b, "prompt", json_object_new_string(prompt));
	json_object_object_add(b, "max_tokens", json_object_new_int(opt.new_tokens));
	json_object_object_add(b, "temperature", json_object_new_double(0));
	json_object_object_add(b, "ignore_eos", json_object_new_boolean(1));
	json_object_object_add(b, "stream", json_object_new_boolean(1));
	json_object *so = json_object_new_object();
	json_object_object_add(so, "include_usage", json_object_new_boolean(1));
	json_object_object_add(b, "stream_options", so);
	return b;
}

/* Sends one streaming completion and reads its events to [DONE]. */
static void stream_one(int port, const char *prompt, struct result *out)
{
	memset(out, 0, sizeof(*out));
	json_object *b = body_of(prompt);
	size_t blen;
	const char *body = json_object_to_json_string_length(b, JSON_C_TO_STRING_PLAIN, &blen);
	char head[256];
	int hl = snprintf(head, sizeof(head),
			  "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
			  "Content-Length: %zu\r\nConnection: close\r\n\r\n", blen);
	int fd = sp_connect(port, 0);
	double t0 = bench_now(), first = 0, last = 0;
	if (fd < 0 || sp_send(fd, head, (size_t)hl) || sp_send(fd, body, blen)) {
		json_object_put(b);
		if (fd >= 0)
			close(fd);
		return;
	}
	json_object_put(b);
	/* Events are parsed as they arrive: "data: {...}\n\n". */
	size_t cap = 1 << 16, len = 0, at = 0;
	char *buf = malloc(cap);
	bool done = false, headers = false;
	while (!done) {
		if (len + 4096 > cap)
			buf = realloc(buf, cap *= 2);
		ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
		if (r <= 0)
			break;
		len += (size_t)r;
		buf[len] = 0;
		if (!headers) {
			char *e = strstr(buf, "\r\n\r\n");
			if (!e)
				continue;
			if (strncmp(buf, "HTTP/1.1 200", 12)) {
				fprintf(stderr, NAME ": %.*s\n", (int)len, buf);
				break;
			}
			headers = true;
			at = (size_t)(e + 4 - buf);
		}
		/* Chunked transfer: the chunk-size lines sit between events; an
		 * event is found by its "data: " and ends at "\n\n". */
		char *ev;
		while ((ev = strstr(buf + at, "data: ")) && strstr(ev, "\n\n")) {
			char *end = strstr(ev, "\n\n");
			*end = 0;
			at = (size_t)(end + 2 - buf);
			if (!strcmp(ev + 6, "[DONE]")) {
				done = true;
				break;
			}
			json_object *j = json_tokener_parse(ev + 6);
			json_object *u, *choices;
			if (json_object_object_get_ex(j, "usage", &u) && json_object_is_type(u, json_type_object)) {
				json_object *v, *d;
				if (json_object_object_get_ex(u, "prompt_tokens", &v))
					out->prompt = json_object_get_int64(v);
				if (json_object_object_get_ex(u, "completion_tokens", &v))
					out->generated = json_object_get_int64(v);
				if (json_object_object_get_ex(u, "prompt_tokens_details", &d) &&
				    json_object_object_get_ex(d, "cached_tokens", &v))
					out->cached = json_object_get_int64(v);
			}
			if (json_object_object_get_ex(j, "choices", &choices) &&
			    json_object_array_length(choices) > 0) {
				double t = bench_now();
				if (!first)
					first = t;
				last = t;
			}
			json_object_put(j);
		}
	}
	close(fd);
	free(buf);
	out->ok = done && first > 0 && out->generated > 0;
	out->ttft = first - t0;
	out->tpot = out->generated > 1 ? (last - first) / (double)(out->generated - 1) : 0;
}

/* ==== One run ==== */

struct run {
	char **prompts;
	int port;
	atomic_int next;
	struct result *res;
};

static void *client(void *arg)
{
	struct run *r = arg;
	for (int i; (i = atomic_fetch_add(&r->next, 1)) < opt.requests;)
		stream_one(r->port, r->prompts[i], &r->res[i]);
	return NULL;
}

/* CPU seconds of a process's threads (alive now) whose name starts with
 * prefix (libmicrohttpd names its own "MHD-..."; "" takes all), from
 * /proc/PID/task/TID/schedstat: nanoseconds on a CPU, where stat's utime
 * and stime count clock ticks (10 ms, too coarse for ~0.1 s of HTTP). */
static double threads_cpu_seconds(pid_t pid, const char *prefix)
{
	char path[320];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	double s = 0;
	for (struct dirent *e; d && (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", (int)pid, e->d_name);
		const char *comm = td_read_file(path);
		if (strncmp(comm, prefix, strlen(prefix)))
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
		s += atof(td_read_file(path)) / 1e9;
	}
	if (d)
		closedir(d);
	return s;
}

/* Context switches of a process's threads whose name starts with prefix,
 * from /proc: the voluntary ones (wake-ups, mostly), or the involuntary
 * ones (preempted). */
static double threads_switches(pid_t pid, const char *prefix, bool voluntary)
{
	const char *key = voluntary ? "\nvoluntary_ctxt_switches:" : "nonvoluntary_ctxt_switches:";
	char path[320];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	double n = 0;
	for (struct dirent *e; d && (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", (int)pid, e->d_name);
		if (strncmp(td_read_file(path), prefix, strlen(prefix)))
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/status", (int)pid, e->d_name);
		const char *v = strstr(td_read_file(path), key);
		if (v)
			n += atof(v + strlen(key));
	}
	if (d)
		closedir(d);
	return n;
}

/* Waits (up to 3 s) until process pid has used under 0.5 ms of CPU in
 * 50 ms: a process that just loaded the runtime still has startup work
 * running beside it (OpenBLAS's worker spins ~0.1 s after the sgemm the
 * runtime runs at load), and in a 0.5 s run that was charged to HTTP, up
 * to 100 us a token, in the runs that started early enough. */
static void settle(pid_t pid)
{
	for (int i = 0; i < 60; i++) {
		double c0 = threads_cpu_seconds(pid, "");
		usleep(50000);
		if (threads_cpu_seconds(pid, "") - c0 < 0.0005)
			return;
	}
}

struct figures {
	double ttft_p50, ttft_p99, tpot_p50, tpot_p99, tok_s, cached_share, rss_mib, http_us;
	/* CPU seconds a request, from the clients' start to their end: the
	 * servers' (every thread, those that ended too) and prefixd's. */
	double cpu_servers, cpu_daemon;
};

static double pct(double *v, int n, double q)
{
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
			double t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	int k = (int)(q * n + 0.999999) - 1;
	return n ? v[k < 0 ? 0 : k >= n ? n - 1 : k] : 0;
}

static int run_one(char **prompts, enum reuse reuse, struct figures *f)
{
	struct test_daemon d;
	struct servers s = { 0 };
	char dir[] = "/tmp/pfx-bench-serve-XXXXXX";
	if (!mkdtemp(dir))
		return -1;
	const char *args[] = { "--memory", "4G", NULL };
	bool with_prefixd = reuse == REUSE_PREFIXD;
	if (with_prefixd && td_start(&d, args))
		return -1;
	int rc = start_servers(&s, model_dir, dir, with_prefixd ? d.sock : NULL, reuse);
	struct run r = { .prompts = prompts, .port = s.port };
	r.res = calloc((size_t)opt.requests, sizeof(*r.res));
	pthread_t th[MAX_CLIENTS];
	double t0 = bench_now(), wall = 0, cpu_s = 0, cpu_d = 0;
	if (!rc) {
		/* CPU is the steadier figure on a shared machine: what the
		 * servers and the daemon did, whoever else ran meanwhile. */
		for (int i = 0; i < opt.procs; i++)
			cpu_s -= bench_proc_cpu_s(s.p[i].pid);
		cpu_d -= with_prefixd ? bench_proc_cpu_s(d.pid) : 0;
		for (int i = 0; i < opt.clients; i++)
			pthread_create(&th[i], NULL, client, &r);
		for (int i = 0; i < opt.clients; i++)
			pthread_join(th[i], NULL);
		wall = bench_now() - t0;
		for (int i = 0; i < opt.procs; i++)
			cpu_s += bench_proc_cpu_s(s.p[i].pid);
		cpu_d += with_prefixd ? bench_proc_cpu_s(d.pid) : 0;
	}
	double http_cpu = 0;
	for (int i = 0; !rc && i < opt.procs; i++)
		http_cpu += threads_cpu_seconds(s.p[i].pid, "MHD");
	f->rss_mib = stop_servers(&s);
	if (with_prefixd)
		report_require(td_stop(&d) == 0, "prefixd did not stop cleanly");
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd))
		fprintf(stderr, NAME ": could not remove %s\n", dir);
	if (rc)
		return -1;
	double *ttft = malloc(sizeof(double) * (size_t)opt.requests);
	double *tpot = malloc(sizeof(double) * (size_t)opt.requests);
	long gen = 0, prompt = 0, cached = 0;
	int n = 0;
	for (int i = 0; i < opt.requests; i++) {
		if (!r.res[i].ok)
			continue;
		ttft[n] = r.res[i].ttft;
		tpot[n++] = r.res[i].tpot;
		gen += r.res[i].generated;
		prompt += r.res[i].prompt;
		cached += r.res[i].cached;
	}
	report_require(n == opt.requests, "a request failed");
	f->ttft_p50 = pct(ttft, n, 0.5) * 1e3;
	f->ttft_p99 = pct(ttft, n, 0.99) * 1e3;
	f->tpot_p50 = pct(tpot, n, 0.5) * 1e3;
	f->tpot_p99 = pct(tpot, n, 0.99) * 1e3;
	f->tok_s = wall > 0 ? (double)gen / wall : 0;
	f->cached_share = prompt ? (double)cached / (double)prompt : 0;
	f->http_us = gen ? http_cpu / (double)gen * 1e6 : -1;
	f->cpu_servers = cpu_s / n;
	f->cpu_daemon = cpu_d / n;
	free(ttft);
	free(tpot);
	free(r.res);
	return n == opt.requests ? 0 : -1;
}

/* ==== HTTP's own cost ====
 *
 * The measure: the same workload's steps with and without HTTP.
 * One server process without prefixd (its own frozen prompts reused, as by
 * default) against the same engine driven in this process through
 * serve_engine (same options, same requests: each body parsed by the API
 * layer as the server parses it, so the same prompt ids, max_tokens and
 * sampling), R clients each. What HTTP adds per generated token is the
 * difference of the two runs' wall time and of their CPU time (the
 * server's threads, from schedstat, against this process's, in which the waiting
 * clients cost next to nothing).
 *
 * The model is SmolLM's vocabulary with 2 layers of 64: HTTP's cost does
 * not depend on the model (the chunks hold the same text), and with the
 * 135M model's compute in both runs (~40 s each at 2,048 tokens) the
 * difference (~0.1 s) drowns in a shared machine's noise. */

static double self_cpu_seconds(void)
{
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec / 1e6 +
	       (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec / 1e6;
}

struct cost {
	double wall, cpu, mhd_cpu; /* seconds: clients' start to end */
	double engine_cpu;         /* the engine thread's ("serve-engine") */
	double engine_preempted;   /* its involuntary context switches */
	double mhd_switches;
	long generated;
};

/* One job driven as the HTTP side drives it, waiting on notify. */
struct waiter {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool woken;
};

static void waiter_notify(void *arg)
{
	struct waiter *w = arg;
	pthread_mutex_lock(&w->mu);
	w->woken = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

struct direct_run {
	struct serve_engine *e;
	const struct pfx_tokenizer *tok;
	struct api_limits lim;
	char **prompts;
	atomic_int next;
	atomic_long generated;
	atomic_int failed;
	atomic_int clients;
	/* One a client, living until the engine stopped: a notify may come
	 * after the job is seen done (it wakes the next job's wait for
	 * nothing, which checks again), as the server's slots do. */
	struct waiter w[MAX_CLIENTS];
};

static void *direct_client(void *arg)
{
	struct direct_run *d = arg;
	struct waiter *wp = &d->w[atomic_fetch_add(&d->clients, 1)];
	for (int i; (i = atomic_fetch_add(&d->next, 1)) < opt.requests;) {
		json_object *b = body_of(d->prompts[i]);
		size_t blen;
		const char *body = json_object_to_json_string_length(b, JSON_C_TO_STRING_PLAIN,
								      &blen);
		struct api_call call;
		struct api_error ae;
		struct pfx_error err = { "" };
		struct serve_job *j = NULL;
		int rc = api_parse(API_COMPLETION, body, blen, d->tok, &d->lim, &call, &ae);
		json_object_put(b);
		if (rc) {
			fprintf(stderr, NAME ": %s\n", ae.message);
			atomic_fetch_add(&d->failed, 1);
			continue;
		}
		call.req.notify = waiter_notify;
		call.req.notify_arg = wp;
		rc = serve_engine_submit(d->e, &call.req, &j, &err);
		call.req.prompt = NULL;
		call.req.nstop = 0;
		api_call_free(&call);
		if (rc) {
			fprintf(stderr, NAME ": submit: %s\n", err.msg);
			atomic_fetch_add(&d->failed, 1);
			continue;
		}
		for (bool done = false; !done;) {
			pthread_mutex_lock(&wp->mu);
			while (!wp->woken)
				pthread_cond_wait(&wp->cv, &wp->mu);
			wp->woken = false;
			pthread_mutex_unlock(&wp->mu);
			serve_job_lock(j);
			done = serve_job_done(j);
			serve_job_unlock(j);
		}
		struct serve_job_usage u;
		serve_job_usage(j, &u);
		atomic_fetch_add(&d->generated, (long)u.completion_tokens);
		serve_job_release(j);
	}
	return NULL;
}

static int run_direct(char **prompts, struct cost *c)
{
	struct pfx_error err = { "" };
	struct pfx_tokenizer *t = NULL;
	struct pfx_model *m = NULL;
	struct pfx_model_opts mo = { .threads = opt.threads };
	if (pfx_tokenizer_load(tiny_dir, &t, &err) || pfx_model_load(tiny_dir, &mo, &m, &err)) {
		fprintf(stderr, NAME ": %s\n", err.msg);
		pfx_tokenizer_free(t);
		return -1;
	}
	size_t ctx = (size_t)pfx_model_config(m)->max_positions;
	/* prefix-serve's defaults for what the bench does not set. */
	struct serve_engine_opts eo = { .model = m, .tok = t, .parallel = (unsigned)opt.parallel,
					.queue = 64, .ctx = ctx, .local_bytes = (size_t)256 << 20 };
	static struct direct_run d;
	memset(&d, 0, sizeof(d));
	d.tok = t;
	d.prompts = prompts;
	d.lim.ctx = ctx;
	for (int i = 0; i < MAX_CLIENTS; i++) {
		pthread_mutex_init(&d.w[i].mu, NULL);
		pthread_cond_init(&d.w[i].cv, NULL);
	}
	int rc = serve_engine_start(&eo, &d.e, &err);
	if (rc) {
		fprintf(stderr, NAME ": %s\n", err.msg);
	} else {
		pthread_t th[MAX_CLIENTS];
		settle(getpid()); /* as the server's run does */
		double t0 = bench_now(), cpu0 = self_cpu_seconds();
		double eng0 = threads_cpu_seconds(getpid(), "serve-engine");
		double pre0 = threads_switches(getpid(), "serve-engine", false);
		for (int i = 0; i < opt.clients; i++)
			pthread_create(&th[i], NULL, direct_client, &d);
		for (int i = 0; i < opt.clients; i++)
			pthread_join(th[i], NULL);
		c->wall = bench_now() - t0;
		c->cpu = self_cpu_seconds() - cpu0;
		c->engine_cpu = threads_cpu_seconds(getpid(), "serve-engine") - eng0;
		c->engine_preempted = threads_switches(getpid(), "serve-engine", false) - pre0;
		c->mhd_cpu = 0;
		c->generated = atomic_load(&d.generated);
		serve_engine_stop(d.e);
		rc = atomic_load(&d.failed) ? -1 : 0;
	}
	pfx_model_free(m);
	pfx_tokenizer_free(t);
	return rc;
}

static int run_http(char **prompts, struct cost *c)
{
	struct servers s = { 0 };
	char dir[] = "/tmp/pfx-bench-serve-XXXXXX";
	if (!mkdtemp(dir))
		return -1;
	int procs = opt.procs;
	opt.procs = 1;
	int rc = start_servers(&s, tiny_dir, dir, NULL, REUSE_LOCAL);
	opt.procs = procs;
	struct run r = { .prompts = prompts, .port = s.port };
	r.res = calloc((size_t)opt.requests, sizeof(*r.res));
	if (!rc) {
		pthread_t th[MAX_CLIENTS];
		pid_t pid = s.p[0].pid;
		settle(pid);
		double t0 = bench_now(), cpu0 = threads_cpu_seconds(pid, "");
		double mhd0 = threads_cpu_seconds(pid, "MHD");
		double eng0 = threads_cpu_seconds(pid, "serve-engine");
		double sw0 = threads_switches(pid, "MHD", true);
		double pre0 = threads_switches(pid, "serve-engine", false);
		for (int i = 0; i < opt.clients; i++)
			pthread_create(&th[i], NULL, client, &r);
		for (int i = 0; i < opt.clients; i++)
			pthread_join(th[i], NULL);
		c->wall = bench_now() - t0;
		c->cpu = threads_cpu_seconds(pid, "") - cpu0;
		c->mhd_cpu = threads_cpu_seconds(pid, "MHD") - mhd0;
		c->engine_cpu = threads_cpu_seconds(pid, "serve-engine") - eng0;
		c->mhd_switches = threads_switches(pid, "MHD", true) - sw0;
		c->engine_preempted = threads_switches(pid, "serve-engine", false) - pre0;
		c->generated = 0;
		for (int i = 0; i < opt.requests; i++) {
			rc |= r.res[i].ok ? 0 : -1;
			c->generated += r.res[i].generated;
		}
	}
	opt.procs = 1;
	stop_servers(&s);
	opt.procs = procs;
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd))
		fprintf(stderr, NAME ": could not remove %s\n", dir);
	free(r.res);
	return rc;
}

/* HTTP's cost per generated token, us: wall and CPU differences. */
struct overhead {
	double wall_us, cpu_us, mhd_cpu_us, mhd_switches;
	double engine_http_us, engine_direct_us; /* the engine thread's CPU a token */
	double engine_http_preempted, engine_direct_preempted; /* a token */
	double http_wall_s, direct_wall_s, http_cpu_s, direct_cpu_s;
};

static int run_overhead(char **prompts, int rounds, struct overhead *o)
{
	struct cost h = { 0 }, d = { 0 };
	double wall[MAX_ROUNDS], cpu[MAX_ROUNDS];
	/* Taking turns, so that the machine's drift hits both alike; each
	 * pair's difference per token, and their median: a run lasts about a
	 * second, and one burst of another process's work in it moved a sum
	 * of two pairs from 20 to 220 us a token. */
	for (int i = 0; i < rounds; i++) {
		struct cost a, b;
		/* Every other pair in the reverse order (ABBA). */
		if (i % 2 ? run_direct(prompts, &b) || run_http(prompts, &a)
			  : run_http(prompts, &a) || run_direct(prompts, &b))
			return -1;
		report_require(a.generated == b.generated, "the runs generated different token counts");
		double g = (double)(a.generated ? a.generated : 1);
		wall[i] = (a.wall - b.wall) / g * 1e6;
		cpu[i] = (a.cpu - b.cpu) / g * 1e6;
		h.wall += a.wall, h.cpu += a.cpu, h.mhd_cpu += a.mhd_cpu, h.generated += a.generated;
		h.mhd_switches += a.mhd_switches;
		h.engine_cpu += a.engine_cpu, d.engine_cpu += b.engine_cpu;
		h.engine_preempted += a.engine_preempted, d.engine_preempted += b.engine_preempted;
		d.wall += b.wall, d.cpu += b.cpu;
	}
	double g = (double)(h.generated ? h.generated : 1);
	o->wall_us = bench_median_of(wall, rounds);
	o->cpu_us = bench_median_of(cpu, rounds);
	o->mhd_cpu_us = h.mhd_cpu / g * 1e6;
	o->mhd_switches = h.mhd_switches / g;
	o->engine_http_us = h.engine_cpu / g * 1e6;
	o->engine_direct_us = d.engine_cpu / g * 1e6;
	o->engine_http_preempted = h.engine_preempted / g;
	o->engine_direct_preempted = d.engine_preempted / g;
	o->http_wall_s = h.wall, o->direct_wall_s = d.wall;
	o->http_cpu_s = h.cpu, o->direct_cpu_s = d.cpu;
	return 0;
}

/* The median of each figure over n rounds. */
static struct figures median_of(const struct figures *f, int n)
{
	static const size_t at[] = {
		offsetof(struct figures, ttft_p50),    offsetof(struct figures, ttft_p99),
		offsetof(struct figures, tpot_p50),    offsetof(struct figures, tpot_p99),
		offsetof(struct figures, tok_s),       offsetof(struct figures, cached_share),
		offsetof(struct figures, rss_mib),     offsetof(struct figures, http_us),
		offsetof(struct figures, cpu_servers), offsetof(struct figures, cpu_daemon),
	};
	struct figures m;
	double v[MAX_ROUNDS];
	for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++) {
		for (int i = 0; i < n; i++)
			v[i] = *(const double *)((const char *)&f[i] + at[k]);
		*(double *)((char *)&m + at[k]) = bench_median_of(v, n);
	}
	return m;
}

static double cpu_ms(const struct figures *f) { return (f->cpu_servers + f->cpu_daemon) * 1e3; }

static void report_run(const char *tag, const struct figures *rounds, int n)
{
	struct figures m = median_of(rounds, n), *f = &m;
	report_fmt(report_key("ttft_p50_ms_%s", tag), "%.1f", f->ttft_p50);
	report_fmt(report_key("ttft_p99_ms_%s", tag), "%.1f", f->ttft_p99);
	report_fmt(report_key("tpot_p50_ms_%s", tag), "%.2f", f->tpot_p50);
	report_fmt(report_key("tpot_p99_ms_%s", tag), "%.2f", f->tpot_p99);
	report_fmt(report_key("tokens_per_s_%s", tag), "%.1f", f->tok_s);
	report_fmt(report_key("cached_share_%s", tag), "%.3f", f->cached_share);
	report_fmt(report_key("servers_rss_mib_%s", tag), "%.0f", f->rss_mib);
	report_fmt(report_key("http_us_per_token_%s", tag), "%.1f", f->http_us);
	report_fmt(report_key("cpu_ms_per_request_%s", tag), "%.1f", cpu_ms(f));
	report_fmt(report_key("servers_cpu_ms_per_request_%s", tag), "%.1f", f->cpu_servers * 1e3);
	report_fmt(report_key("prefixd_cpu_ms_per_request_%s", tag), "%.1f", f->cpu_daemon * 1e3);
	if (n < 2)
		return;
	double v[MAX_ROUNDS];
	for (int i = 0; i < n; i++)
		v[i] = rounds[i].tok_s;
	report_array(report_key("tokens_per_s_%s_rounds", tag), v, n, 1);
	for (int i = 0; i < n; i++)
		v[i] = cpu_ms(&rounds[i]);
	report_array(report_key("cpu_ms_per_request_%s_rounds", tag), v, n, 1);
}

/* The median over rounds of a's figure over b's, each round's pair taken
 * together (they ran next to each other). */
static double ratio_of(const struct figures *a, const struct figures *b, int n,
		       double (*fig)(const struct figures *))
{
	double v[MAX_ROUNDS];
	for (int i = 0; i < n; i++)
		v[i] = fig(&b[i]) > 0 ? fig(&a[i]) / fig(&b[i]) : 0;
	return bench_median_of(v, n);
}

static double tok_s_of(const struct figures *f) { return f->tok_s; }
static double ttft_of(const struct figures *f) { return f->ttft_p50; }

static void usage(FILE *to)
{
	fprintf(to, "usage: serve [--procs K] [--clients R] [--requests N] [--prefix TOKENS]\n"
		    "             [--new N] [--threads T] [--parallel P] [--overhead-only]\n"
		    "             [--workload both|shared|distinct] [--rounds N]\n");
}

/* The runs, in the order they take turns: with prefixd, then without. */
enum { RUN_SHARED_PREFIXD, RUN_SHARED_LOCAL, RUN_SHARED_NONE, RUN_DISTINCT_PREFIXD,
       RUN_DISTINCT_LOCAL, RUNS };
static const struct {
	const char *tag;
	bool shared;
	enum reuse reuse;
} runs[RUNS] = {
	{ "shared_prefixd", true, REUSE_PREFIXD },
	{ "shared_local", true, REUSE_LOCAL },
	{ "shared_none", true, REUSE_NONE },
	{ "distinct_prefixd", false, REUSE_PREFIXD },
	{ "distinct_local", false, REUSE_LOCAL },
};

static bool run_wanted(int i)
{
	return opt.workload == WL_BOTH || (opt.workload == WL_SHARED) == runs[i].shared;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "procs", required_argument, NULL, 'k' },   { "clients", required_argument, NULL, 'r' },
		{ "requests", required_argument, NULL, 'n' }, { "prefix", required_argument, NULL, 'p' },
		{ "new", required_argument, NULL, 'g' },     { "threads", required_argument, NULL, 't' },
		{ "parallel", required_argument, NULL, 'P' }, { "help", no_argument, NULL, 'h' },
		{ "overhead-only", no_argument, NULL, 'O' },
		{ "workload", required_argument, NULL, 'w' }, { "rounds", required_argument, NULL, 'R' },
		{ 0 },
	};
	for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
		switch (c) {
		case 'k': opt.procs = opt_int(NAME, "procs", optarg, 1, MAX_PROCS); break;
		case 'r': opt.clients = opt_int(NAME, "clients", optarg, 1, MAX_CLIENTS); break;
		case 'n': opt.requests = opt_int(NAME, "requests", optarg, 1, 100000); break;
		case 'p': opt.prefix = opt_int(NAME, "prefix", optarg, 64, 100000); break;
		case 'g': opt.new_tokens = opt_int(NAME, "new", optarg, 2, 4096); break;
		case 't': opt.threads = opt_int(NAME, "threads", optarg, 1, 256); break;
		case 'P': opt.parallel = opt_int(NAME, "parallel", optarg, 1, 256); break;
		case 'O': opt.overhead_only = true; break;
		case 'R': opt.rounds = opt_int(NAME, "rounds", optarg, 1, MAX_ROUNDS); break;
		case 'w':
			if (!strcmp(optarg, "both"))
				opt.workload = WL_BOTH;
			else if (!strcmp(optarg, "shared"))
				opt.workload = WL_SHARED;
			else if (!strcmp(optarg, "distinct"))
				opt.workload = WL_DISTINCT;
			else {
				fprintf(stderr, "bench/" NAME ": --workload must be one of both, shared, "
						"distinct, not '%s'\n", optarg);
				return 2;
			}
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if (opt.overhead_only && opt.workload != WL_BOTH) {
		fprintf(stderr, "bench/" NAME ": --overhead-only runs no workload: leave --workload out\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	bench_corpus_read(TOKDIR, &corpus);
	struct pfx_error err;
	struct pfx_tokenizer *t;
	if (pfx_tokenizer_load(TOKDIR "/smollm", &t, &err)) {
		fprintf(stderr, NAME ": %s\n", err.msg);
		return 1;
	}
	tok = t;
	snprintf(model_dir, sizeof(model_dir), "/tmp/pfx-bench-serve-model-%d", (int)getpid());
	struct pfx_config c = pfx_config_smollm135m();
	char out[256];
	if (pfx_random_checkpoint(model_dir, &c, "BF16", 7, &err) ||
	    td_sh(out, sizeof(out), "cp %s/smollm/tokenizer.json %s/smollm/tokenizer_config.json %s/",
		  TOKDIR, TOKDIR, model_dir)) {
		fprintf(stderr, NAME ": writing the model: %s\n", err.msg);
		return 1;
	}
	snprintf(tiny_dir, sizeof(tiny_dir), "/tmp/pfx-bench-serve-tiny-%d", (int)getpid());
	struct pfx_config tc = c;
	tc.hidden = 64, tc.n_layers = 2, tc.n_heads = 4, tc.n_kv_heads = 2, tc.head_dim = 16;
	tc.rotary_dim = 16, tc.intermediate = 128;
	if (pfx_random_checkpoint(tiny_dir, &tc, "BF16", 7, &err) ||
	    td_sh(out, sizeof(out), "cp %s/smollm/tokenizer.json %s/smollm/tokenizer_config.json %s/",
		  TOKDIR, TOKDIR, tiny_dir)) {
		fprintf(stderr, NAME ": writing the model: %s\n", err.msg);
		return 1;
	}
	static const char *const wl_names[] = { "both", "shared", "distinct" };
	report_begin(NAME);
	report_machine();
	report_fmt("procs", "%d", opt.procs);
	report_fmt("clients", "%d", opt.clients);
	report_fmt("requests", "%d", opt.requests);
	report_fmt("prefix_tokens", "%d", opt.prefix);
	report_fmt("new_tokens", "%d", opt.new_tokens);
	report_str("workload", "%s", wl_names[opt.workload]);
	report_fmt("rounds", "%d", opt.rounds);
	struct bench_cpu cpu0;
	bench_cpu_now(&cpu0);
	static struct figures f[RUNS][MAX_ROUNDS];
	char **prompts[2];
	for (int w = 0; w < 2; w++) {
		prompts[w] = malloc(sizeof(char *) * (size_t)opt.requests);
		for (int i = 0; i < opt.requests; i++)
			prompts[w][i] = prompt_of(w == 0, i);
	}
	int rc = 0;
	/* HTTP's own cost runs with both workloads (the default) or alone:
	 * a chosen workload's rounds measure that workload only. */
	bool overhead = opt.workload == WL_BOTH;
	struct overhead oh = { 0 };
	if (overhead)
		rc = run_overhead(prompts[0], opt.overhead_only ? OVERHEAD_ROUNDS : 3, &oh);
	if (!rc && overhead) {
		report_fmt("http_overhead_wall_us_per_token", "%.1f", oh.wall_us);
		report_fmt("http_overhead_cpu_us_per_token", "%.1f", oh.cpu_us);
		report_fmt("http_mhd_threads_cpu_us_per_token", "%.1f", oh.mhd_cpu_us);
		report_fmt("http_mhd_wakeups_per_token", "%.2f", oh.mhd_switches);
		report_fmt("http_engine_thread_cpu_us_per_token", "%.1f", oh.engine_http_us);
		report_fmt("direct_engine_thread_cpu_us_per_token", "%.1f", oh.engine_direct_us);
		report_fmt("http_engine_preempted_per_token", "%.3f", oh.engine_http_preempted);
		report_fmt("direct_engine_preempted_per_token", "%.3f", oh.engine_direct_preempted);
		report_fmt("http_run_wall_s", "%.3f", oh.http_wall_s);
		report_fmt("direct_run_wall_s", "%.3f", oh.direct_wall_s);
		report_fmt("http_run_cpu_s", "%.3f", oh.http_cpu_s);
		report_fmt("direct_run_cpu_s", "%.3f", oh.direct_cpu_s);
	}
	/* The runs take turns so that the machine's drift hits them alike;
	 * every other round in the reverse order (ABBA), so that neither is
	 * always the one after the other. */
	for (int k = 0; k < opt.rounds && !rc && !opt.overhead_only; k++)
		for (int j = 0; j < RUNS && !rc; j++) {
			int i = k % 2 ? RUNS - 1 - j : j;
			if (run_wanted(i))
				rc = run_one(prompts[runs[i].shared ? 0 : 1], runs[i].reuse, &f[i][k]);
		}
	for (int i = 0; i < RUNS && !rc && !opt.overhead_only; i++)
		if (run_wanted(i))
			report_run(runs[i].tag, f[i], opt.rounds);
	const int n = opt.rounds;
	if (!rc && !opt.overhead_only && opt.workload != WL_SHARED) {
		/* What prefixd costs when nothing is shared, in CPU: steadier
		 * than the wall figures the targets are. */
		report_fmt("distinct_cpu_per_request_ratio", "%.3f",
			   ratio_of(f[RUN_DISTINCT_PREFIXD], f[RUN_DISTINCT_LOCAL], n, cpu_ms));
	}
	double others, steal;
	bench_cpu_since(&cpu0, &others, &steal);
	report_noise(others, steal);
	td_sh(out, sizeof(out), "rm -rf %s %s", model_dir, tiny_dir);
	for (int w = 0; w < 2; w++) {
		for (int i = 0; i < opt.requests; i++)
			free(prompts[w][i]);
		free(prompts[w]);
	}
	pfx_tokenizer_free(t);
	bench_corpus_free(&corpus);
	if (rc) {
		report_require(false, "a run failed");
		report_end("a run failed: see stderr");
		return 1;
	}
	if (overhead)
		report_target("http_us_per_token", oh.cpu_us, REPORT_AT_MOST, 50);
	if (opt.overhead_only)
		return report_end("random SmolLM-135M-shaped model (bf16 weights), SmolLM's "
				  "tokenizer; HTTP's cost only") ? 0 : 1;
	/* Against servers without prefixd: computing every prompt whole
	 * (none), and with each process reusing its own prompts (local).
	 * Ratios are the medians of each round's pair. */
	const struct figures *sp = f[RUN_SHARED_PREFIXD], *sl = f[RUN_SHARED_LOCAL],
			     *sn = f[RUN_SHARED_NONE], *dp = f[RUN_DISTINCT_PREFIXD],
			     *dl = f[RUN_DISTINCT_LOCAL];
	if (opt.workload != WL_DISTINCT) {
		report_target("shared_ttft_p50_speedup_vs_none", ratio_of(sn, sp, n, ttft_of),
			      REPORT_AT_LEAST, 8);
		report_target("shared_tokens_per_s_gain_vs_none", ratio_of(sp, sn, n, tok_s_of),
			      REPORT_AT_LEAST, 2);
		report_target("shared_ttft_p50_speedup_vs_local", ratio_of(sl, sp, n, ttft_of),
			      REPORT_AT_LEAST, 8);
		report_target("shared_tokens_per_s_gain_vs_local", ratio_of(sp, sl, n, tok_s_of),
			      REPORT_AT_LEAST, 2);
	}
	if (opt.workload != WL_SHARED) {
		report_target("distinct_ttft_p50_ratio", ratio_of(dp, dl, n, ttft_of), REPORT_AT_MOST,
			      1.1);
		report_target("distinct_tokens_per_s_ratio", ratio_of(dp, dl, n, tok_s_of),
			      REPORT_AT_LEAST, 0.9);
	}
	return report_end("random SmolLM-135M-shaped model (bf16 weights), SmolLM's tokenizer; "
			  "TTFT from the request sent to the first token's event; CPU from /proc "
			  "(servers and prefixd, clients' start to end)") ? 0 : 1;
}
