/* SPDX-License-Identifier: MIT */
/* Command-line helpers. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_TOKENS_FILE (64u << 20)

static char *slurp(const char *path)
{
	FILE *fp = fopen(path, "rb");
	if (!fp) {
		fprintf(stderr, "%s: cannot read token file %s: %s\n", program_invocation_short_name, path, strerror(errno));
		return NULL;
	}
	char *buf = malloc(MAX_TOKENS_FILE + 1);
	size_t n = buf ? fread(buf, 1, MAX_TOKENS_FILE + 1, fp) : 0;
	int bad = ferror(fp);
	fclose(fp);
	if (!buf || bad || n > MAX_TOKENS_FILE) {
		fprintf(stderr, "%s: cannot read token file %s (unreadable or over %u bytes)\n",
			program_invocation_short_name, path,
			MAX_TOKENS_FILE);
		free(buf);
		return NULL;
	}
	buf[n] = 0;
	return buf;
}

int cli_tokens(const char *arg, int32_t **out, size_t *n)
{
	char *text = arg[0] == '@' ? slurp(arg + 1) : strdup(arg);
	if (!text)
		return -1;
	size_t cap = 64, len = 0;
	int32_t *t = malloc(cap * sizeof(*t));
	char *p = text;
	for (;;) {
		while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
			p++;
		if (!*p)
			break;
		char *end;
		errno = 0;
		long v = strtol(p, &end, 10);
		if (end == p || errno || v < 0 || v > INT32_MAX ||
		    (*end && !strchr(", \t\r\n", *end))) {
			fprintf(stderr, "%s: token %zu is not a non-negative integer: '%.20s'\n",
				program_invocation_short_name, len, p);
			free(t);
			free(text);
			return -1;
		}
		if (len == cap) {
			cap *= 2;
			t = realloc(t, cap * sizeof(*t));
		}
		t[len++] = (int32_t)v;
		p = end;
	}
	free(text);
	if (!len) {
		fprintf(stderr, "%s: no tokens given\n", program_invocation_short_name);
		free(t);
		return -1;
	}
	*out = t;
	*n = len;
	return 0;
}

int cli_long(const char *flag, const char *s, long min, long max, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (end == s || *end || errno || v < min || v > max) {
		fprintf(stderr, "%s: %s takes a whole number from %ld to %ld, not '%s'\n",
			program_invocation_short_name, flag, min, max, s);
		return -1;
	}
	*out = v;
	return 0;
}

int cli_float(const char *flag, const char *s, double min, double max, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || *end || errno || !isfinite(v) || v < min || v > max) {
		fprintf(stderr, "%s: %s takes a number from %g to %g, not '%s'\n",
			program_invocation_short_name, flag, min, max, s);
		return -1;
	}
	*out = v;
	return 0;
}

double cli_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

const char *cli_bytes(size_t b, char buf[32])
{
	if (b >= (1u << 30))
		snprintf(buf, 32, "%.2f GiB", (double)b / (1u << 30));
	else if (b >= (1u << 20))
		snprintf(buf, 32, "%.2f MiB", (double)b / (1u << 20));
	else if (b >= 1024)
		snprintf(buf, 32, "%.2f KiB", (double)b / 1024);
	else
		snprintf(buf, 32, "%zu B", b);
	return buf;
}
