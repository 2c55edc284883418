/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "daemon.h"

static void vlog(const char *fmt, va_list ap, uint64_t skipped)
{
	/* One fprintf per line: lines of concurrent workers do not interleave. */
	char line[1024];
	vsnprintf(line, sizeof(line), fmt, ap);
	if (skipped)
		fprintf(stderr, "prefixd: %s (and %llu more like it)\n", line,
			(unsigned long long)skipped);
	else
		fprintf(stderr, "prefixd: %s\n", line);
}

void pd_log(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(fmt, ap, 0);
	va_end(ap);
}

void pd_log_limited(struct pd_log_limit *l, const char *fmt, ...)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	int64_t last = atomic_load(&l->last_s);
	if (t.tv_sec == last || !atomic_compare_exchange_strong(&l->last_s, &last, t.tv_sec)) {
		atomic_fetch_add(&l->skipped, 1);
		return;
	}
	va_list ap;
	va_start(ap, fmt);
	vlog(fmt, ap, atomic_exchange(&l->skipped, 0));
	va_end(ap);
}
