/* SPDX-License-Identifier: MIT */
#include "opts.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static _Noreturn void refuse(const char *prog, const char *name, const char *what, const char *arg)
{
	fprintf(stderr, "bench/%s: --%s must be %s, not '%s'\n", prog, name, what, arg);
	exit(2);
}

int opt_int(const char *prog, const char *name, const char *arg, long min, long max)
{
	char *end, what[96];
	errno = 0;
	long v = strtol(arg, &end, 10);
	snprintf(what, sizeof(what), "a whole number from %ld to %ld", min, max);
	if (errno || end == arg || *end || v < min || v > max)
		refuse(prog, name, what, arg);
	return (int)v;
}

uint64_t opt_u64(const char *prog, const char *name, const char *arg, uint64_t min, uint64_t max)
{
	char *end, what[96];
	errno = 0;
	/* strtoull takes "-1" as 2^64 - 1: a sign is refused first. */
	const char *p = arg;
	while (isspace((unsigned char)*p))
		p++;
	unsigned long long v = *p == '-' ? 0 : strtoull(arg, &end, 10);
	snprintf(what, sizeof(what), "a whole number from %" PRIu64 " to %" PRIu64, min, max);
	if (*p == '-' || errno || end == arg || *end || v < min || v > max)
		refuse(prog, name, what, arg);
	return v;
}

double opt_double(const char *prog, const char *name, const char *arg, double min, double max)
{
	char *end, what[96];
	errno = 0;
	double v = strtod(arg, &end);
	snprintf(what, sizeof(what), "a number from %g to %g", min, max);
	if (errno || end == arg || *end || !isfinite(v) || v < min || v > max)
		refuse(prog, name, what, arg);
	return v;
}
