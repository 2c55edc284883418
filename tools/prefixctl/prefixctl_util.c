/* SPDX-License-Identifier: MIT */
/* prefixctl: what every command shares: errors, units, hex, ids, tables. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "prefixctl.h"

__attribute__((format(printf, 1, 0))) static void vsay(const char *fmt, va_list ap)
{
	fputs("prefixctl: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

int ctl_usage(const struct ctl_args *a, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
	if (a && a->cmd)
		fprintf(stderr, "Try 'prefixctl %s --help'.\n", a->cmd->name);
	else
		fputs("Try 'prefixctl --help'.\n", stderr);
	return CTL_USAGE;
}

int ctl_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
	return CTL_FAILED;
}

int ctl_daemon_fail(void)
{
	return ctl_fail("%s", prefixd_errmsg());
}

static void *or_exit(void *p)
{
	if (!p) {
		ctl_fail("out of memory");
		exit(CTL_FAILED);
	}
	return p;
}

void *ctl_alloc(size_t n, size_t size)
{
	return or_exit(calloc(n ? n : 1, size));
}

int ctl_connect(const struct ctl_args *a, struct prefixd **c)
{
	return prefixd_connect(a->socket, NULL, c) ? ctl_daemon_fail() : CTL_OK;
}

const char *fmt_bytes(uint64_t bytes, char buf[CTL_TEXT])
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	if (bytes < 1024) {
		snprintf(buf, CTL_TEXT, "%llu B", (unsigned long long)bytes);
		return buf;
	}
	double v = (double)bytes / 1024;
	size_t u = 0;
	/* 1023.96 KiB would print as "1024.0 KiB": move up a unit first. */
	while (v >= 1023.95 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	snprintf(buf, CTL_TEXT, "%.1f %s", v, units[u]);
	return buf;
}

const char *fmt_duration(uint64_t s, char buf[CTL_TEXT])
{
	static const struct {
		uint64_t seconds;
		char unit;
	} units[] = { { 86400, 'd' }, { 3600, 'h' }, { 60, 'm' }, { 1, 's' } };
	size_t i = 0;
	while (s < units[i].seconds && units[i].seconds > 1)
		i++;
	snprintf(buf, CTL_TEXT, "%llu%c", (unsigned long long)(s / units[i].seconds), units[i].unit);
	return buf;
}

static const char hex_digits[] = "0123456789abcdefABCDEF";

void hex_encode(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex_digits[b[i] >> 4];
		out[2 * i + 1] = hex_digits[b[i] & 15];
	}
	out[2 * n] = 0;
}

int hex_decode(const char *s, uint8_t *out, size_t n)
{
	if (strlen(s) != 2 * n || strspn(s, hex_digits) != 2 * n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		sscanf(s + 2 * i, "%2x", &v);
		out[i] = (uint8_t)v;
	}
	return 0;
}

const char *where_name(unsigned where)
{
	static const char *const local[2][4] = {
		{ "none", "memory", "disk", "both" },
		{ "remote", "memory+remote", "disk+remote", "both+remote" },
	};
	return local[!!(where & PREFIXD_REMOTE)][where & (PREFIXD_IN_MEMORY | PREFIXD_ON_DISK)];
}

void ctl_print_json(json_object *o)
{
	puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
						       JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
}

void ctl_json_u64(json_object *o, const char *key, uint64_t v)
{
	json_object_object_add(o, key, json_object_new_uint64(v));
}

void ctl_json_str(json_object *o, const char *key, const char *v)
{
	json_object_object_add(o, key, json_object_new_string(v));
}

int ctl_check_hex(const struct ctl_args *a, const char *flag, const char *text, size_t full_len)
{
	size_t len = strlen(text);
	if (strspn(text, hex_digits) != len || len < CTL_MIN_PREFIX || len > full_len)
		return ctl_usage(a, "%s: '%s' is not a %s (%zu hex digits) or a prefix of at least %d of its digits",
				 flag, text, full_len == PREFIXD_ID_CHARS ? "chain id" : "model fingerprint",
				 full_len, CTL_MIN_PREFIX);
	return CTL_OK;
}

/* The hex name of a chain that prefixes are matched against. */
typedef void chain_name_fn(const struct prefixd_chain *ch, char out[PREFIXD_ID_CHARS + 1]);

static void id_name(const struct prefixd_chain *ch, char out[PREFIXD_ID_CHARS + 1])
{
	prefixd_id_format(&ch->id, out);
}

static void model_name(const struct prefixd_chain *ch, char out[PREFIXD_ID_CHARS + 1])
{
	hex_encode(ch->model, PREFIXD_FINGERPRINT_BYTES, out);
}

/*
 * The distinct names of cached chains that start with prefix (any case):
 * how many, and the first in out. The daemon keeps no index by prefix, so
 * this lists every chain; prefixes are typed by people, rarely.
 */
static int match_prefix(struct prefixd *c, const char *prefix, chain_name_fn *name,
			char out[PREFIXD_ID_CHARS + 1], size_t *matches)
{
	struct prefixd_chain *all;
	size_t n;
	if (prefixd_list(c, NULL, &all, &n))
		return ctl_fail("cannot look '%s' up among the cached chains: %s", prefix,
				prefixd_errmsg());
	char(*seen)[PREFIXD_ID_CHARS + 1] = ctl_alloc(n, sizeof(*seen));
	size_t len = strlen(prefix), k = 0;
	for (size_t i = 0; i < n; i++) {
		name(&all[i], seen[k]);
		if (strncasecmp(seen[k], prefix, len))
			continue;
		size_t j = 0;
		while (j < k && strcmp(seen[j], seen[k]))
			j++;
		k += j == k; /* chains of one model name it once */
	}
	if (k)
		memcpy(out, seen[0], sizeof(seen[0]));
	*matches = k;
	free(seen);
	free(all);
	return CTL_OK;
}

int ctl_resolve_id(struct prefixd *c, const char *text, struct prefixd_id *out)
{
	char full[PREFIXD_ID_CHARS + 1];
	size_t matches = 1;
	if (strlen(text) == PREFIXD_ID_CHARS)
		snprintf(full, sizeof(full), "%s", text);
	else if (match_prefix(c, text, id_name, full, &matches))
		return CTL_FAILED;
	if (!matches)
		return ctl_fail("no cached chain has an id starting with '%s' ('prefixctl ls' lists them)",
				text);
	if (matches > 1)
		return ctl_fail("'%s' starts the ids of %zu cached chains: give more of its digits",
				text, matches);
	return prefixd_id_parse(full, out) ? ctl_daemon_fail() : CTL_OK;
}

int ctl_resolve_model(struct prefixd *c, const char *text, uint8_t out[PREFIXD_FINGERPRINT_BYTES],
		      int *found)
{
	char full[PREFIXD_ID_CHARS + 1];
	size_t matches = 1;
	if (strlen(text) == 2 * PREFIXD_FINGERPRINT_BYTES)
		snprintf(full, sizeof(full), "%s", text);
	else if (match_prefix(c, text, model_name, full, &matches))
		return CTL_FAILED;
	if (matches > 1)
		return ctl_fail("'%s' starts the fingerprints of %zu models: give more of its digits",
				text, matches);
	*found = matches == 1 && !hex_decode(full, out, PREFIXD_FINGERPRINT_BYTES);
	return CTL_OK;
}

char (*ctl_table_row(struct ctl_table *t))[CTL_TEXT]
{
	if (t->nrows == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 16;
		t->cells = or_exit(realloc(t->cells, t->cap * t->ncols * sizeof(*t->cells)));
	}
	char(*row)[CTL_TEXT] = t->cells + t->nrows++ * t->ncols;
	memset(row, 0, t->ncols * sizeof(*row));
	return row;
}

static void print_row(const struct ctl_table *t, const int *width, const char *const *cell)
{
	for (size_t j = 0; j < t->ncols; j++) {
		int last = j + 1 == t->ncols;
		if (t->align[j] == 'r')
			printf("%*s", width[j], cell[j]);
		else /* no trailing blanks after the last column */
			printf("%-*s", last ? 0 : width[j], cell[j]);
		fputs(last ? "\n" : "  ", stdout);
	}
}

void ctl_table_print(const struct ctl_table *t)
{
	int *width = ctl_alloc(t->ncols, sizeof(*width));
	const char **cell = ctl_alloc(t->ncols, sizeof(*cell));
	for (size_t j = 0; j < t->ncols; j++) {
		width[j] = (int)strlen(t->head[j]);
		for (size_t i = 0; i < t->nrows; i++) {
			int w = (int)strlen(t->cells[i * t->ncols + j]);
			width[j] = w > width[j] ? w : width[j];
		}
	}
	print_row(t, width, t->head);
	for (size_t i = 0; i < t->nrows; i++) {
		for (size_t j = 0; j < t->ncols; j++)
			cell[j] = t->cells[i * t->ncols + j];
		print_row(t, width, cell);
	}
	free(cell);
	free(width);
}

void ctl_table_free(struct ctl_table *t)
{
	free(t->cells);
	t->cells = NULL;
	t->nrows = t->cap = 0;
}
