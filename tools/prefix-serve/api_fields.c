/* SPDX-License-Identifier: MIT */
/* A request's fields read with their types and ranges checked, each
 * failure a 400 naming the field in OpenAI's words. */
#include <inttypes.h>
#include <math.h>

#include "api_impl.h"

#define BAD "invalid_request_error"

struct json_object *api_member(struct json_object *o, const char *key)
{
	struct json_object *v = NULL;
	if (!json_object_object_get_ex(o, key, &v))
		return NULL;
	return v; /* JSON null is NULL too */
}

const char *api_type_name(struct json_object *v)
{
	switch (json_object_get_type(v)) {
	case json_type_null: return "null";
	case json_type_boolean: return "a boolean";
	case json_type_double: return "a number";
	case json_type_int: return "an integer";
	case json_type_object: return "an object";
	case json_type_array: return "an array";
	case json_type_string: return "a string";
	}
	return "a value";
}

static int wrong_type(const char *param, const char *want, struct json_object *v,
		      struct api_error *e)
{
	return api_fail(e, 400, BAD, NULL, param,
			"Invalid type for '%s': expected %s, but got %s instead.", param, want,
			api_type_name(v));
}

int api_read_bool(struct json_object *o, const char *key, const char *param, bool *out,
		  bool *set, struct api_error *e)
{
	struct json_object *v = api_member(o, key);
	if (set)
		*set = v != NULL;
	if (!v)
		return 0;
	if (!json_object_is_type(v, json_type_boolean))
		return wrong_type(param, "a boolean", v, e);
	*out = json_object_get_boolean(v);
	return 0;
}

int api_read_int(struct json_object *o, const char *key, const char *param, int64_t lo,
		 int64_t hi, int64_t *out, bool *set, struct api_error *e)
{
	struct json_object *v = api_member(o, key);
	if (set)
		*set = v != NULL;
	if (!v)
		return 0;
	int64_t x;
	bool beyond = false; /* past 64 bits, or a saturated value */
	if (json_object_is_type(v, json_type_int)) {
		x = json_object_get_int64(v);
		beyond = x == INT64_MIN ||
			 (x == INT64_MAX && json_object_get_uint64(v) > (uint64_t)INT64_MAX);
	} else if (json_object_is_type(v, json_type_double)) {
		double d = json_object_get_double(v);
		if (!isfinite(d) || d != floor(d))
			return api_fail(e, 400, BAD, NULL, param,
					"Invalid type for '%s': expected an integer, but got %g instead.",
					param, d);
		beyond = !(d > -9.2e18 && d < 9.2e18);
		x = beyond ? 0 : (int64_t)d;
	} else {
		return wrong_type(param, "an integer", v, e);
	}
	if (beyond)
		return api_fail(e, 400, BAD, NULL, param,
				"Invalid '%s': integer out of range. Expected a value from %" PRId64
				" to %" PRId64 ".", param, lo, hi);
	if (x < lo || x > hi)
		return api_fail(e, 400, BAD, NULL, param,
				"Invalid '%s': integer %s value. Expected a value %s %" PRId64
				", but got %" PRId64 " instead.", param,
				x < lo ? "below minimum" : "above maximum", x < lo ? ">=" : "<=",
				x < lo ? lo : hi, x);
	*out = x;
	return 0;
}

int api_read_num(struct json_object *o, const char *key, const char *param, double lo,
		 bool lo_open, double hi, double *out, bool *set, struct api_error *e)
{
	struct json_object *v = api_member(o, key);
	if (set)
		*set = v != NULL;
	if (!v)
		return 0;
	if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
		return wrong_type(param, "a decimal", v, e);
	double d = json_object_get_double(v);
	if (!isfinite(d))
		return api_fail(e, 400, BAD, NULL, param,
				"Invalid '%s': expected a finite number, but got %g instead.", param, d);
	if (d > hi)
		return api_fail(e, 400, BAD, NULL, param,
				"Invalid '%s': decimal above maximum value. Expected a value <= %g, "
				"but got %g instead.", param, hi, d);
	if (d < lo || (lo_open && d == lo))
		return api_fail(e, 400, BAD, NULL, param,
				"Invalid '%s': decimal below minimum value. Expected a value %s %g, "
				"but got %g instead.", param, lo_open ? ">" : ">=", lo, d);
	*out = d;
	return 0;
}

int api_read_str(struct json_object *o, const char *key, const char *param, const char **out,
		 size_t *len, struct api_error *e)
{
	struct json_object *v = api_member(o, key);
	if (!v)
		return 0;
	if (!json_object_is_type(v, json_type_string))
		return wrong_type(param, "a string", v, e);
	*out = json_object_get_string(v);
	if (len)
		*len = (size_t)json_object_get_string_len(v);
	return 0;
}
