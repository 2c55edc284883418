/* SPDX-License-Identifier: MIT */
/* One line per write(2), so lines of several threads never interleave. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void serve_log(const char *fmt, ...)
{
	char line[1024];
	int n = snprintf(line, sizeof(line), "prefix-serve: ");
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = m < 0 ? (size_t)n : strlen(line);
	line[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}
