/* SPDX-License-Identifier: MIT */
/* Error message formatting for the library's return codes. */
#include "pfx_error.h"

#include <stdarg.h>
#include <stdio.h>

int pfx_errorf(struct pfx_error *err, int code, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
	}
	return code;
}
