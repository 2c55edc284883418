/* SPDX-License-Identifier: MIT */
/* /metrics: Prometheus text exposition format 0.0.4. */
#include "metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* vLLM's buckets, so that its dashboards' quantiles read the same. */
static const double ttft_le[] = { 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
				  0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0,
				  640.0, 2560.0 };
static const double tpot_le[] = { 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
				  0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0 };
static const double e2e_le[] = { 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
				 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
				 7680.0 };
#define NB(a) (sizeof(a) / sizeof(a[0]))

struct histogram {
	uint64_t bucket[32];     /* bucket[i]: observations <= le[i] (not cumulative) */
	uint64_t count;
	double sum;
};

/* The statuses prefix-serve answers with; anything else counts as "other". */
/* 499: the client left before its response (nginx's code; never sent). */
static const int statuses[] = { 200, 400, 401, 404, 405, 413, 429, 431, 499, 500, 503 };
#define NSTATUS (NB(statuses) + 1)

struct metrics {
	pthread_mutex_t mu;
	char *model;
	uint64_t requests[NSTATUS];
	uint64_t prompt_tokens, cached_tokens, generation_tokens;
	struct histogram ttft, tpot, e2e;
};

struct metrics *metrics_new(const char *model)
{
	struct metrics *m = calloc(1, sizeof(*m));
	if (!m || !(m->model = strdup(model))) {
		free(m);
		return NULL;
	}
	pthread_mutex_init(&m->mu, NULL);
	return m;
}

void metrics_free(struct metrics *m)
{
	if (!m)
		return;
	pthread_mutex_destroy(&m->mu);
	free(m->model);
	free(m);
}

static void observe(struct histogram *h, const double *le, size_t n, double v)
{
	size_t i = 0;
	while (i < n && v > le[i])
		i++;
	h->bucket[i]++; /* i == n: only +Inf */
	h->count++;
	h->sum += v;
}

void metrics_request(struct metrics *m, int status, const struct serve_job_usage *u)
{
	size_t k = 0;
	while (k < NB(statuses) && statuses[k] != status)
		k++;
	pthread_mutex_lock(&m->mu);
	m->requests[k]++;
	if (u) {
		m->prompt_tokens += u->prompt_tokens;
		m->cached_tokens += u->cached_tokens;
		m->generation_tokens += u->completion_tokens;
		observe(&m->e2e, e2e_le, NB(e2e_le), (double)u->total_ns * 1e-9);
		if (u->completion_tokens && u->ttft_ns > 0) {
			observe(&m->ttft, ttft_le, NB(ttft_le), (double)u->ttft_ns * 1e-9);
			/* One mean interval per request: the engine reports a
			 * request's totals, not each token's time. */
			if (u->completion_tokens > 1 && u->total_ns > u->ttft_ns)
				observe(&m->tpot, tpot_le, NB(tpot_le),
					(double)(u->total_ns - u->ttft_ns) * 1e-9 /
						(double)(u->completion_tokens - 1));
		}
	}
	pthread_mutex_unlock(&m->mu);
}

struct out {
	char *buf;
	size_t len, cap;
	int oom;
};

__attribute__((format(printf, 2, 3))) static void put(struct out *o, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = o->oom ? 0 : vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
		va_end(ap);
		if (o->oom || n < 0) {
			o->oom = 1;
			return;
		}
		if ((size_t)n < o->cap - o->len) {
			o->len += (size_t)n;
			return;
		}
		size_t cap = 2 * o->cap + (size_t)n;
		char *b = realloc(o->buf, cap);
		if (!b) {
			o->oom = 1;
			return;
		}
		o->buf = b;
		o->cap = cap;
	}
}

static void put_histogram(struct out *o, const char *name, const char *help,
			  const struct histogram *h, const double *le, size_t n, const char *label)
{
	put(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	uint64_t cum = 0;
	for (size_t i = 0; i < n; i++) {
		cum += h->bucket[i];
		put(o, "%s_bucket{%s,le=\"%g\"} %llu\n", name, label, le[i], (unsigned long long)cum);
	}
	put(o, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, label, (unsigned long long)h->count);
	put(o, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, label, h->sum, name, label,
	    (unsigned long long)h->count);
}

static void put_counter(struct out *o, const char *name, const char *help, const char *label,
			uint64_t v)
{
	put(o, "# HELP %s %s\n# TYPE %s counter\n%s{%s} %llu\n", name, help, name, name, label,
	    (unsigned long long)v);
}

char *metrics_render(struct metrics *m, const struct serve_engine_stats *s, int ready)
{
	struct out o = { malloc(8192), 0, 8192, 0 };
	if (!o.buf)
		return NULL;
	/* The label value: the model's name with its quotes and backslashes
	 * escaped, as the format wants. */
	char label[300] = "model_name=\"";
	size_t l = strlen(label);
	for (const char *p = m->model; *p && l < sizeof(label) - 4; p++) {
		if (*p == '"' || *p == '\\')
			label[l++] = '\\';
		label[l++] = *p == '\n' ? ' ' : *p;
	}
	label[l++] = '"';
	label[l] = 0;

	put(&o, "# HELP vllm:num_requests_running Sequences running in the engine.\n"
		"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{%s} %u\n",
	    label, s ? s->running : 0);
	put(&o, "# HELP vllm:num_requests_waiting Requests queued for the engine.\n"
		"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{%s} %u\n",
	    label, s ? s->queued : 0);
	put(&o, "# HELP prefix_serve_ready 1 once the model is loaded and requests are served.\n"
		"# TYPE prefix_serve_ready gauge\nprefix_serve_ready{%s} %d\n", label, ready);
	put(&o, "# HELP prefix_serve_local_kv_bytes KV bytes of this process's frozen prompts.\n"
		"# TYPE prefix_serve_local_kv_bytes gauge\nprefix_serve_local_kv_bytes{%s} %zu\n",
	    label, s ? s->local_bytes : 0);
	put(&o, "# HELP prefix_serve_engine_steps_total Forward steps the engine ran.\n"
		"# TYPE prefix_serve_engine_steps_total counter\n"
		"prefix_serve_engine_steps_total{%s} %llu\n",
	    label, (unsigned long long)(s ? s->steps : 0));

	pthread_mutex_lock(&m->mu);
	put_counter(&o, "vllm:prompt_tokens_total", "Prompt tokens of finished requests.", label,
		    m->prompt_tokens);
	put_counter(&o, "vllm:generation_tokens_total", "Tokens generated.", label,
		    m->generation_tokens);
	put_counter(&o, "prefix_serve_cached_prompt_tokens_total",
		    "Prompt tokens attached from prefixd or shared from this process's sessions.",
		    label, m->cached_tokens);
	put(&o, "# HELP prefix_serve_requests_total HTTP requests answered, by status.\n"
		"# TYPE prefix_serve_requests_total counter\n");
	for (size_t k = 0; k < NSTATUS; k++) {
		char st[16];
		if (k < NB(statuses))
			snprintf(st, sizeof(st), "%d", statuses[k]);
		else
			snprintf(st, sizeof(st), "other");
		put(&o, "prefix_serve_requests_total{%s,status=\"%s\"} %llu\n", label, st,
		    (unsigned long long)m->requests[k]);
	}
	put_histogram(&o, "vllm:time_to_first_token_seconds",
		      "Time from a request's arrival to its first token.", &m->ttft, ttft_le,
		      NB(ttft_le), label);
	put_histogram(&o, "vllm:time_per_output_token_seconds",
		      "Mean time per output token after the first, one per request.", &m->tpot,
		      tpot_le, NB(tpot_le), label);
	put_histogram(&o, "vllm:e2e_request_latency_seconds",
		      "Time from a request's arrival to its end.", &m->e2e, e2e_le, NB(e2e_le),
		      label);
	pthread_mutex_unlock(&m->mu);
	if (o.oom) {
		free(o.buf);
		return NULL;
	}
	return o.buf;
}
