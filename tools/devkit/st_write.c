/* SPDX-License-Identifier: MIT */
/* safetensors writer: JSON header from json-c, then the data in order. */
#include "st_write.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

int st_write(const char *path, const struct st_out *t, size_t n, struct pfx_error *err)
{
	json_object *h = json_object_new_object();
	uint64_t off = 0;
	for (size_t i = 0; i < n; i++) {
		json_object *e = json_object_new_object(), *shape = json_object_new_array();
		json_object *offs = json_object_new_array();
		for (int d = 0; d < t[i].ndim; d++)
			json_object_array_add(shape, json_object_new_int64(t[i].shape[d]));
		json_object_array_add(offs, json_object_new_int64((int64_t)off));
		json_object_array_add(offs, json_object_new_int64((int64_t)(off + t[i].nbytes)));
		json_object_object_add(e, "dtype", json_object_new_string(t[i].dtype));
		json_object_object_add(e, "shape", shape);
		json_object_object_add(e, "data_offsets", offs);
		json_object_object_add(h, t[i].name, e);
		off += t[i].nbytes;
	}
	const char *js = json_object_to_json_string_ext(h, JSON_C_TO_STRING_PLAIN);
	size_t jl = strlen(js), padded = (jl + 7) & ~(size_t)7;
	int rc = 0;
	FILE *fp = fopen(path, "wb");
	if (!fp) {
		rc = pfx_errorf(err, -errno, "%s: cannot create: %s", path, strerror(errno));
		goto out;
	}
	uint8_t len[8];
	for (int i = 0; i < 8; i++)
		len[i] = (uint8_t)((uint64_t)padded >> (8 * i));
	int ok = fwrite(len, 1, 8, fp) == 8 && fwrite(js, 1, jl, fp) == jl;
	for (size_t i = jl; ok && i < padded; i++)
		ok = fputc(' ', fp) != EOF;
	for (size_t i = 0; ok && i < n; i++)
		ok = fwrite(t[i].data, 1, t[i].nbytes, fp) == t[i].nbytes;
	if (fclose(fp) || !ok)
		rc = pfx_errorf(err, -EIO, "%s: write failed", path);
out:
	json_object_put(h);
	return rc;
}
