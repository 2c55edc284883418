/* SPDX-License-Identifier: MIT */
/* Parsing a whole buffer as one JSON object (config files, safetensors headers). */
#ifndef PFX_JSON_BUF_H
#define PFX_JSON_BUF_H

#include <json-c/json.h>
#include <stddef.h>

#include "pfx_error.h"

/* Parses buf[0, n) as one JSON object followed only by white space or NUL
 * padding. Returns 0 and *out (json_object_put it), or -EINVAL / -ENOMEM
 * with err saying what is wrong (without naming the buffer: callers know
 * which file it is). */
int json_parse_object(const char *buf, size_t n, json_object **out, struct pfx_error *err);

#endif
