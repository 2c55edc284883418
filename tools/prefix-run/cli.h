/* SPDX-License-Identifier: MIT */
/* Helpers shared by the command-line programs: argument parsing, timing, sizes. */
#ifndef PFX_CLI_H
#define PFX_CLI_H

#include <stddef.h>
#include <stdint.h>

/* Parses "1,2,3" (commas and/or white space), "@FILE" or "@-" (standard
 * input) into a malloc'd array. An empty item ("1,,3", a comma first or
 * last) is refused, naming its position. Returns 0, or -1 after printing
 * why to stderr. */
int cli_tokens(const char *arg, int32_t **out, size_t *n);
/* Whole numbers and floats in [min, max]; -1 after printing why. */
int cli_long(const char *flag, const char *s, long min, long max, long *out);
int cli_float(const char *flag, const char *s, double min, double max, double *out);
double cli_now(void);
/* "1.50 MiB"-style text for a byte count. */
const char *cli_bytes(size_t bytes, char buf[32]);

#endif
