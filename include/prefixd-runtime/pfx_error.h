/* SPDX-License-Identifier: MIT */
/*
 * Error messages that travel with return codes: library calls return 0 or
 * -errno and, when given a struct pfx_error, say in words what went wrong.
 */
#ifndef PFX_ERROR_H
#define PFX_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

struct pfx_error {
	char msg[512];
};

/* Formats into err (if non-NULL) and returns code, so callers can write
 * `return pfx_errorf(err, -EINVAL, "...")`. */
int pfx_errorf(struct pfx_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif
