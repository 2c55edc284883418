/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes the safetensors reader (runtime/load/safetensors.c). st_open takes a path
 * and maps the file, so each input is written to a scratch file first. The
 * input is the whole file: u64 LE header length, JSON header, data.
 *
 * Checks beyond "no crash": a refusal is -errno with a message; what opens
 * holds only tensors whose shape, dtype and byte count agree and whose data
 * lie in the file's data region (read to the last byte here).
 */
#include <string.h>

#include "fuzz.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_write("model.safetensors", data, size);
	struct st_file *f = NULL;
	struct pfx_error err = { { 0 } };
	int rc = st_open(path, &f, &err);
	if (rc) {
		FUZZ_CHECK(rc < 0 && !f && err.msg[0]);
		return 0;
	}
	FUZZ_CHECK(f && size >= 8 && !strcmp(st_path(f), path));
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | data[i];
	FUZZ_CHECK(hlen <= ST_MAX_HEADER && hlen <= size - 8);
	size_t data_len = size - 8 - (size_t)hlen;
	/* Each tensor has at least `"":{}` in the header. */
	FUZZ_CHECK(st_count(f) <= hlen / 5);
	unsigned sum = 0;
	for (size_t i = 0; i < st_count(f); i++) {
		const struct st_tensor *t = st_at(f, i);
		FUZZ_CHECK(t->name && t->dtype_name && t->ndim >= 0 && t->ndim <= ST_MAX_DIMS);
		const struct st_tensor *named = st_find(f, t->name);
		FUZZ_CHECK(named && !strcmp(named->name, t->name));
		int64_t numel = st_numel(t);
		for (int d = 0; d < t->ndim; d++)
			FUZZ_CHECK(t->shape[d] >= 0 && t->shape[d] <= (int64_t)size);
		FUZZ_CHECK(numel >= 0 && numel <= (int64_t)size);
		FUZZ_CHECK(t->nbytes <= data_len);
		size_t esz = st_dtype_size(t->dtype);
		FUZZ_CHECK((esz == 0) == (t->dtype == ST_UNKNOWN));
		FUZZ_CHECK(!esz || t->nbytes == esz * (size_t)numel);
		FUZZ_CHECK(strcmp(st_dtype_str(t->dtype), "unknown") || t->dtype == ST_UNKNOWN);
		/* The data are in the mapping: a bad offset would fault here. */
		const volatile uint8_t *b = t->data;
		for (size_t k = 0; k < t->nbytes; k++)
			sum += b[k];
	}
	(void)sum;
	st_close(f);
	return 0;
}
