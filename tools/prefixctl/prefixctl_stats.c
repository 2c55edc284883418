/* SPDX-License-Identifier: MIT */
/*
 * prefixctl stats: the daemon's counters and its usage rows (one per user
 * and model), as text, JSON or Prometheus metrics. Every counter comes from
 * the PREFIXD_COUNTERS list, so a new one shows up here without a change;
 * naming it for Prometheus is one line in prom_names.
 */
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prefixctl.h"

enum kind { KIND_gauge, KIND_counter };

enum counter_index {
#define PREFIXCTL_INDEX_(field, kind, help) C_##field,
	PREFIXD_COUNTERS(PREFIXCTL_INDEX_)
#undef PREFIXCTL_INDEX_
	NCOUNTERS
};

static const struct counter {
	const char *field, *help;
	enum kind kind;
	size_t offset;
} counters[NCOUNTERS] = {
#define PREFIXCTL_COUNTER_(field, kind, help) \
	{ #field, help, KIND_##kind, offsetof(struct prefixd_stats, field) },
	PREFIXD_COUNTERS(PREFIXCTL_COUNTER_)
#undef PREFIXCTL_COUNTER_
};

/* Prometheus names in vLLM's style, without the _total that counters get.
 * A counter missing here is exported as prefixd_<field>. Names (and usage
 * fields) ending in "bytes" are printed in human units too. */
static const char *const prom_names[NCOUNTERS] = {
	[C_query_tokens] = "prefixd_prefix_cache_queries",
	[C_hit_tokens] = "prefixd_prefix_cache_hits",
	[C_bytes_used] = "prefixd_cache_usage_bytes",
	[C_budget] = "prefixd_cache_budget_bytes",
	[C_quota] = "prefixd_cache_quota_bytes",
	[C_pin_max] = "prefixd_cache_pin_max_bytes",
	[C_pinned_bytes] = "prefixd_cache_pinned_bytes",
	[C_idle_bytes] = "prefixd_cache_idle_bytes",
	[C_blocks] = "prefixd_cache_blocks",
	[C_matches] = "prefixd_requests",
	[C_hits] = "prefixd_match_hits",
	[C_misses] = "prefixd_match_misses",
	[C_published] = "prefixd_published_blocks",
	[C_dedup] = "prefixd_deduplicated_blocks",
	[C_evictions] = "prefixd_evictions",
	[C_admin_evictions] = "prefixd_admin_evictions",
	[C_refused_blocks] = "prefixd_refused_blocks",
	[C_collisions] = "prefixd_collisions",
	[C_errors] = "prefixd_errors",
	[C_connections] = "prefixd_connections",
	[C_leases] = "prefixd_leases",
	[C_arenas] = "prefixd_arenas",
	[C_pins] = "prefixd_pins",
	[C_pins_expired] = "prefixd_pins_expired",
	[C_disk_blocks] = "prefixd_disk_blocks",
	[C_disk_bytes] = "prefixd_disk_usage_bytes",
	[C_disk_budget] = "prefixd_disk_budget_bytes",
	[C_spills] = "prefixd_disk_spills",
	[C_restores] = "prefixd_disk_restores",
	[C_restore_bytes] = "prefixd_disk_restore_bytes",
	[C_disk_corrupt] = "prefixd_disk_corrupt_records",
	[C_disk_evictions] = "prefixd_disk_evictions",
	[C_disk_pending] = "prefixd_disk_pending_blocks",
	[C_unwritten_evictions] = "prefixd_disk_unwritten_evictions",
	[C_claims] = "prefixd_flight_claims",
	[C_waits] = "prefixd_flight_waits",
	[C_wait_ms] = "prefixd_flight_wait_milliseconds",
	[C_claims_inherited] = "prefixd_flight_claims_inherited",
	[C_claims_expired] = "prefixd_flight_claims_expired",
	[C_remote_hits] = "prefixd_remote_hit_blocks",
	[C_remote_bytes_in] = "prefixd_remote_read_bytes",
	[C_remote_bytes_out] = "prefixd_remote_written_bytes",
	[C_remote_us] = "prefixd_remote_microseconds",
};

#define PROM_PREFIX "prefixd_"
/* Per (user, model) series: prefixd_user_model_<the daemon-wide name after
 * "prefixd_">. Distinct names, because Prometheus wants one type per name
 * and a daemon-wide value is not always the sum of the rows. */
#define PROM_USAGE_PREFIX "prefixd_user_model_"

/* The fields of a usage row, each the share of one daemon-wide counter
 * (whose help text, kind and Prometheus name it borrows). */
static const struct usage_field {
	const char *key;  /* in JSON; also the field's name */
	const char *head; /* column of the text tables; NULL: none */
	size_t offset;
	enum counter_index counter;
	int exported;     /* a prefixd_user_model_* series */
} usage_fields[] = {
#define U(f) .key = #f, .offset = offsetof(struct prefixd_usage, f)
	{ U(blocks), .head = "BLOCKS", .counter = C_blocks, .exported = 1 },
	{ U(bytes), .head = "SIZE", .counter = C_bytes_used, .exported = 1 },
	{ U(pinned_bytes), .head = "PINNED", .counter = C_pinned_bytes, .exported = 1 },
	{ U(hits), .head = "HITS", .counter = C_hits },
	{ U(hit_tokens), .head = "HIT TOKENS", .counter = C_hit_tokens, .exported = 1 },
	{ U(query_tokens), .counter = C_query_tokens, .exported = 1 },
	{ U(evictions), .head = "EVICTIONS", .counter = C_evictions, .exported = 1 },
#undef U
};

#define NUSAGE (sizeof(usage_fields) / sizeof(usage_fields[0]))

static int is_bytes(const char *name)
{
	size_t n = strlen(name);
	return n >= 5 && !strcmp(name + n - 5, "bytes");
}

static uint64_t counter_value(const struct prefixd_stats *s, size_t i)
{
	uint64_t v;
	memcpy(&v, (const char *)s + counters[i].offset, sizeof(v));
	return v;
}

static uint64_t usage_get(const struct prefixd_usage *u, size_t f)
{
	uint64_t v;
	memcpy(&v, (const char *)u + usage_fields[f].offset, sizeof(v));
	return v;
}

static void usage_add(struct prefixd_usage *to, const struct prefixd_usage *from)
{
	for (size_t f = 0; f < NUSAGE; f++) {
		uint64_t v = usage_get(to, f) + usage_get(from, f);
		memcpy((char *)to + usage_fields[f].offset, &v, sizeof(v));
	}
}

/* Counter i's Prometheus name without _total; buf when made up. */
static const char *prom_base(size_t i, char buf[CTL_TEXT])
{
	if (prom_names[i])
		return prom_names[i];
	snprintf(buf, CTL_TEXT, PROM_PREFIX "%s", counters[i].field);
	return buf;
}

#define PROM_NAME (2 * CTL_TEXT)
/* The name counter i is exported by, with prefix in place of "prefixd_";
 * a counter's ends in _total. */
static const char *prom_name(size_t i, const char *prefix, char out[PROM_NAME])
{
	char buf[CTL_TEXT];
	snprintf(out, PROM_NAME, "%s%s%s", prefix, prom_base(i, buf) + strlen(PROM_PREFIX),
		 counters[i].kind == KIND_counter ? "_total" : "");
	return out;
}

/* ---- usage rows summed by a key ---- */

static int by_user(const void *pa, const void *pb)
{
	const struct prefixd_usage *a = pa, *b = pb;
	return (a->user > b->user) - (a->user < b->user);
}

static int by_model(const void *pa, const void *pb)
{
	const struct prefixd_usage *a = pa, *b = pb;
	return memcmp(a->model, b->model, sizeof(a->model));
}

static int by_user_and_model(const void *pa, const void *pb)
{
	int c = by_user(pa, pb);
	return c ? c : by_model(pa, pb);
}

/* Rows sorted by key, rows with equal keys summed into one (malloc'd). */
static size_t group_usage(const struct prefixd_usage *rows, size_t n,
			  int (*key)(const void *, const void *), struct prefixd_usage **out)
{
	struct prefixd_usage *g = ctl_alloc(n, sizeof(*g));
	if (n)
		memcpy(g, rows, n * sizeof(*g));
	qsort(g, n, sizeof(*g), key);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (k && !key(&g[k - 1], &g[i]))
			usage_add(&g[k - 1], &g[i]);
		else
			g[k++] = g[i];
	}
	*out = g;
	return k;
}

/* ---- text ---- */

static void print_counters(const struct prefixd_stats *s)
{
	char name[CTL_TEXT], b[CTL_TEXT];
	int width = 0;
	for (size_t i = 0; i < NCOUNTERS; i++) {
		int w = (int)strlen(counters[i].help);
		width = w > width ? w : width;
	}
	for (size_t i = 0; i < NCOUNTERS; i++) {
		uint64_t v = counter_value(s, i);
		printf("%-*s  %llu", width, counters[i].help, (unsigned long long)v);
		if (is_bytes(prom_base(i, name)))
			printf(" (%s)", fmt_bytes(v, b));
		putchar('\n');
	}
	if (s->budget)
		printf("budget in use: %.1f%%\n", 100.0 * (double)s->bytes_used / (double)s->budget);
	if (s->disk_budget)
		printf("disk budget in use: %.1f%%\n",
		       100.0 * (double)s->disk_bytes / (double)s->disk_budget);
}

static void usage_cell(const struct prefixd_usage *u, size_t f, char cell[CTL_TEXT])
{
	if (is_bytes(usage_fields[f].key))
		fmt_bytes(usage_get(u, f), cell);
	else
		snprintf(cell, CTL_TEXT, "%llu", (unsigned long long)usage_get(u, f));
}

static void print_usage_table(const char *title, const struct prefixd_usage *rows, size_t n,
			      int (*key)(const void *, const void *))
{
	const char *head[1 + NUSAGE];
	char align[1 + NUSAGE + 1] = "l";
	size_t ncols = 1;
	int model = key == by_model;
	head[0] = model ? "MODEL" : "USER";
	for (size_t f = 0; f < NUSAGE; f++)
		if (usage_fields[f].head) {
			head[ncols] = usage_fields[f].head;
			align[ncols++] = 'r';
		}
	struct prefixd_usage *g;
	size_t k = group_usage(rows, n, key, &g);
	struct ctl_table t = { .ncols = ncols, .head = head, .align = align };
	for (size_t i = 0; i < k; i++) {
		char(*cell)[CTL_TEXT] = ctl_table_row(&t), fp[2 * PREFIXD_FINGERPRINT_BYTES + 1];
		hex_encode(g[i].model, sizeof(g[i].model), fp);
		if (model)
			snprintf(cell[0], CTL_TEXT, "%.*s", CTL_SHORT_MODEL, fp);
		else
			snprintf(cell[0], CTL_TEXT, "%u", g[i].user);
		for (size_t f = 0, j = 1; f < NUSAGE; f++)
			if (usage_fields[f].head)
				usage_cell(&g[i], f, cell[j++]);
	}
	printf("\n%s:\n", title);
	if (k)
		ctl_table_print(&t);
	else
		puts("(nothing cached or asked for yet)");
	ctl_table_free(&t);
	free(g);
}

/* ---- JSON ---- */

static json_object *usage_json(const struct prefixd_usage *u, int user, int model)
{
	json_object *o = json_object_new_object();
	char fp[2 * PREFIXD_FINGERPRINT_BYTES + 1];
	if (user)
		ctl_json_u64(o, "user", u->user);
	if (model) {
		hex_encode(u->model, sizeof(u->model), fp);
		ctl_json_str(o, "model", fp);
	}
	for (size_t f = 0; f < NUSAGE; f++)
		ctl_json_u64(o, usage_fields[f].key, usage_get(u, f));
	return o;
}

/* The rows summed by key, as an array. */
static json_object *usage_array(const struct prefixd_usage *rows, size_t n,
				int (*key)(const void *, const void *))
{
	json_object *arr = json_object_new_array();
	struct prefixd_usage *g;
	size_t k = group_usage(rows, n, key, &g);
	for (size_t i = 0; i < k; i++)
		/* A sum by model has no user, and one by user no model. */
		json_object_array_add(arr, usage_json(&g[i], key != by_model, key != by_user));
	free(g);
	return arr;
}

/* one_line: the whole object on one line (NDJSON, for a stream of reports). */
static void print_json(const struct prefixd_stats *s, const struct prefixd_usage *rows, size_t n,
		       int one_line)
{
	/* Counters first: scripts that look for the first "name": find them. */
	json_object *o = json_object_new_object();
	for (size_t i = 0; i < NCOUNTERS; i++)
		ctl_json_u64(o, counters[i].field, counter_value(s, i));
	json_object_object_add(o, "users", usage_array(rows, n, by_user));
	json_object_object_add(o, "models", usage_array(rows, n, by_model));
	json_object_object_add(o, "usage", usage_array(rows, n, by_user_and_model));
	if (!one_line) {
		ctl_print_json(o);
		return;
	}
	puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
						       JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
}

/* ---- Prometheus text format ---- */

static void prom_family(const char *name, enum kind kind, const char *help, const char *more)
{
	printf("# HELP %s %s%s\n# TYPE %s %s\n", name, help, more, name,
	       kind == KIND_counter ? "counter" : "gauge");
}

static void print_prometheus(const struct prefixd_stats *s, const struct prefixd_usage *rows,
			     size_t n)
{
	char name[PROM_NAME], fp[2 * PREFIXD_FINGERPRINT_BYTES + 1];
	for (size_t i = 0; i < NCOUNTERS; i++) {
		prom_family(prom_name(i, PROM_PREFIX, name), counters[i].kind, counters[i].help, "");
		printf("%s %llu\n", name, (unsigned long long)counter_value(s, i));
	}
	struct prefixd_usage *g;
	size_t k = group_usage(rows, n, by_user_and_model, &g);
	for (size_t f = 0; f < NUSAGE; f++) {
		const struct counter *c = &counters[usage_fields[f].counter];
		if (!usage_fields[f].exported)
			continue;
		prom_name(usage_fields[f].counter, PROM_USAGE_PREFIX, name);
		prom_family(name, c->kind, c->help, ", by user and model");
		for (size_t i = 0; i < k; i++) {
			hex_encode(g[i].model, sizeof(g[i].model), fp);
			printf("%s{user=\"%u\",model=\"%s\"} %llu\n", name, g[i].user, fp,
			       (unsigned long long)usage_get(&g[i], f));
		}
	}
	free(g);
}

/* ---- the command ---- */

/* stream: one report of a --watch series that is not drawn on a terminal;
 * each must stand alone for a program reading the stream. */
static int print_stats(const struct ctl_args *a, struct prefixd *c, int stream)
{
	struct prefixd_stats s;
	struct prefixd_usage *rows;
	size_t n;
	if (prefixd_stats_usage(c, &s, &rows, &n))
		return ctl_daemon_fail();
	if (a->json) {
		print_json(&s, rows, n, stream);
	} else if (a->prometheus) {
		print_prometheus(&s, rows, n);
		if (stream) /* a comment to the text format; OpenMetrics' end */
			puts("# EOF");
	} else {
		print_counters(&s);
		print_usage_table("per user", rows, n, by_user);
		print_usage_table("per model", rows, n, by_model);
	}
	free(rows);
	return CTL_OK;
}

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* Sleeps s seconds, or until interrupted. */
static void wait_for(uint32_t s)
{
	struct timespec left = { (time_t)s, 0 };
	while (!interrupted && nanosleep(&left, &left))
		;
}

/* On a terminal each frame replaces the last; elsewhere (a log) text
 * frames are separated, with the time they were taken. JSON and Prometheus
 * reports are for programs: one JSON object a line, one complete
 * exposition ending "# EOF", nothing between. */
static void frame_start(const struct ctl_args *a, int tty, int first)
{
	char when[32];
	time_t now = time(NULL);
	if (tty) {
		fputs("\033[H\033[2J", stdout);
	} else if (!first && !a->json && !a->prometheus) {
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime(&now));
		printf("---- %s\n", when);
	}
}

static int watch(const struct ctl_args *a, struct prefixd *c)
{
	/* No SA_RESTART: the sleep must end at Ctrl-C. */
	struct sigaction sa = { .sa_handler = on_interrupt };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	int tty = isatty(STDOUT_FILENO);
	for (int first = 1; !interrupted; first = 0) {
		frame_start(a, tty, first);
		int rc = print_stats(a, c, !tty);
		fflush(stdout);
		if (rc)
			return interrupted ? CTL_OK : rc;
		wait_for(a->watch_s);
	}
	return CTL_OK;
}

int cmd_stats(const struct ctl_args *a)
{
	if (a->json && a->prometheus)
		return ctl_usage(a, "--json and --prometheus exclude each other");
	struct prefixd *c;
	if (ctl_connect(a, &c))
		return CTL_FAILED;
	int rc = a->watch_s ? watch(a, c) : print_stats(a, c, 0);
	prefixd_close(c);
	return rc;
}
