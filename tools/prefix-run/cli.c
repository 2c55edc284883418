/* SPDX-License-Identifier: MIT */
/* Command-line helpers. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_TOKENS_FILE (64u << 20)

/* The whole of path ("-": standard input) as a string, or NULL after
 * saying why. */
static char *slurp(const char *path)
{
	int in = !strcmp(path, "-");
	FILE *fp = in ? stdin : fopen(path, "rb");
	if (!fp) {
		fprintf(stderr, "%s: cannot read token file %s: %s\n", program_invocation_short_name, path, strerror(errno));
		return NULL;
	}
	if (in && isatty(fileno(fp)))
		fprintf(stderr, "%s: reading token ids from standard input (end with Ctrl-D)\n",
			program_invocation_short_name);
	char *buf = malloc(MAX_TOKENS_FILE + 1);
	size_t n = buf ? fread(buf, 1, MAX_TOKENS_FILE + 1, fp) : 0;
	int bad = ferror(fp);
	if (!in)
		fclose(fp);
	if (!buf || bad || n > MAX_TOKENS_FILE) {
		fprintf(stderr, "%s: cannot read token %s %s (unreadable or over %u bytes)\n",
			program_invocation_short_name, in ? "ids from" : "file",
			in ? "standard input" : path, MAX_TOKENS_FILE);
		free(buf);
		return NULL;
	}
	buf[n] = 0;
	return buf;
}

/* Where p is in text: "at character C" for an argument, "at line L,
 * column C" for a file. */
static const char *where(const char *text, const char *p, int file, char buf[64])
{
	size_t line = 1, col = 1;
	for (const char *q = text; q < p; q++, col++)
		if (*q == '\n') {
			line++;
			col = 0;
		}
	if (file)
		snprintf(buf, 64, "at line %zu, column %zu", line, col);
	else
		snprintf(buf, 64, "at character %zu", (size_t)(p - text) + 1);
	return buf;
}

int cli_tokens(const char *arg, int32_t **out, size_t *n)
{
	int file = arg[0] == '@';
	char *text = file ? slurp(arg + 1) : strdup(arg);
	if (!text)
		return -1;
	/* Where the ids come from, for messages. */
	char src[96];
	snprintf(src, sizeof(src), "--tokens%s%.80s", file ? " " : "", file ? arg : "");
	size_t cap = 64, len = 0;
	int32_t *t = malloc(cap * sizeof(*t));
	char *p = text, pos[64];
	/* After a comma an id must follow: "1,,3", ",1" and "1," have an
	 * empty item, which would otherwise shift every later id silently. */
	int after_comma = 0;
	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
			p++;
		if (*p == ',' || (!*p && after_comma)) {
			if (!len || after_comma) {
				fprintf(stderr, "%s: %s: token %zu (counting from 0) is empty, %s: %s; give one id between commas\n",
					program_invocation_short_name, src, len, where(text, p, file, pos),
					!len && *p ? "a comma with no id before it"
					: !*p ? "a comma with no id after it"
					      : "two commas with no id between them");
				goto fail;
			}
			after_comma = 1;
			p++;
			continue;
		}
		if (!*p)
			break;
		if (!t)
			goto oom;
		char *end;
		errno = 0;
		long v = strtol(p, &end, 10);
		if (end == p || errno || v < 0 || v > INT32_MAX ||
		    (*end && !strchr(", \t\r\n", *end))) {
			size_t w = strcspn(p, ", \t\r\n");
			fprintf(stderr, "%s: %s: token %zu (counting from 0) is not a non-negative integer, %s: '%.*s'\n",
				program_invocation_short_name, src, len, where(text, p, file, pos),
				(int)(w < 20 ? w : 20), p);
			goto fail;
		}
		if (len == cap) {
			int32_t *g = realloc(t, 2 * cap * sizeof(*t));
			if (!g)
				goto oom;
			t = g;
			cap *= 2;
		}
		t[len++] = (int32_t)v;
		after_comma = 0;
		p = end;
	}
	free(text);
	if (!len) {
		fprintf(stderr, "%s: %s: no tokens given\n", program_invocation_short_name, src);
		free(t);
		return -1;
	}
	*out = t;
	*n = len;
	return 0;
oom:
	fprintf(stderr, "%s: out of memory reading %s\n", program_invocation_short_name, src);
fail:
	free(t);
	free(text);
	return -1;
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
