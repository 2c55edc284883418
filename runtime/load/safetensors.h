/* SPDX-License-Identifier: MIT */
/*
 * Read-only access to one safetensors file: the header is parsed and every
 * entry validated against the file's size at open; data stay in an mmap.
 */
#ifndef PFX_SAFETENSORS_H
#define PFX_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "pfx_error.h"

#define ST_MAX_DIMS 8
/* A header larger than this is not a checkpoint (the format's own limit). */
#define ST_MAX_HEADER (100u << 20)

enum st_dtype {
	ST_UNKNOWN = 0,
	ST_BOOL, ST_U8, ST_I8, ST_F8_E4M3, ST_F8_E5M2,
	ST_I16, ST_U16, ST_F16, ST_BF16,
	ST_I32, ST_U32, ST_F32,
	ST_I64, ST_U64, ST_F64,
};

struct st_tensor {
	const char *name;        /* owned by the file */
	const char *dtype_name;  /* as written in the header */
	enum st_dtype dtype;     /* ST_UNKNOWN for names we do not know */
	int ndim;
	int64_t shape[ST_MAX_DIMS];
	const void *data;        /* into the file's mapping; not aligned */
	size_t nbytes;
};

struct st_file;

/* Opens and validates path. On failure returns -errno and describes the
 * problem (naming the file, and the tensor where one is at fault). */
int st_open(const char *path, struct st_file **out, struct pfx_error *err);
void st_close(struct st_file *f);

const char *st_path(const struct st_file *f);
/* The whole file, mapped read-only at a 2 MiB boundary (hugepages.h). */
const void *st_map(const struct st_file *f);
size_t st_size(const struct st_file *f);
size_t st_count(const struct st_file *f);
const struct st_tensor *st_at(const struct st_file *f, size_t i);
/* NULL when the file has no tensor of that name. */
const struct st_tensor *st_find(const struct st_file *f, const char *name);

size_t st_dtype_size(enum st_dtype d);
const char *st_dtype_str(enum st_dtype d);
int64_t st_numel(const struct st_tensor *t);

#endif
