/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>

#include "daemon.h"

void pd_log(const char *fmt, ...)
{
	/* One fprintf per line: lines of concurrent workers do not interleave. */
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "prefixd: %s\n", line);
}
