/* SPDX-License-Identifier: MIT */
/*
 * safetensors reader. Layout: u64 little-endian header length N, N bytes of
 * JSON ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__"}),
 * then the data region that the offsets are relative to.
 *
 * Every entry is checked at open (shape, offsets inside the data region, size
 * equal to numel x dtype size) so later code can trust st_tensor. As in the
 * reference implementation (huggingface/safetensors, Metadata::validate and
 * MetadataIncompleteBuffer), the tensors, ordered by offset, must then tile
 * the data region exactly: no two overlap and no byte, between them or after
 * the last, belongs to none (check_layout). Unknown
 * dtypes are kept as ST_UNKNOWN rather than rejected: old checkpoints carry
 * buffers we ignore, and only a tensor that is actually used must be known.
 */
#include "safetensors.h"
#include "hugepages.h"
#include "json_buf.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct st_file {
	char *path;
	const uint8_t *map;
	size_t size;
	json_object *header;
	struct st_tensor *tensors; /* (count) */
	size_t count;
};

static const struct {
	const char *name;
	enum st_dtype dtype;
	size_t size;
} dtypes[] = {
	{ "BOOL", ST_BOOL, 1 }, { "U8", ST_U8, 1 }, { "I8", ST_I8, 1 },
	{ "F8_E4M3", ST_F8_E4M3, 1 }, { "F8_E5M2", ST_F8_E5M2, 1 },
	{ "I16", ST_I16, 2 }, { "U16", ST_U16, 2 }, { "F16", ST_F16, 2 },
	{ "BF16", ST_BF16, 2 }, { "I32", ST_I32, 4 }, { "U32", ST_U32, 4 },
	{ "F32", ST_F32, 4 }, { "I64", ST_I64, 8 }, { "U64", ST_U64, 8 },
	{ "F64", ST_F64, 8 },
};

size_t st_dtype_size(enum st_dtype d)
{
	for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
		if (dtypes[i].dtype == d)
			return dtypes[i].size;
	return 0;
}

const char *st_dtype_str(enum st_dtype d)
{
	for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
		if (dtypes[i].dtype == d)
			return dtypes[i].name;
	return "unknown";
}

static enum st_dtype dtype_parse(const char *s)
{
	for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
		if (!strcmp(dtypes[i].name, s))
			return dtypes[i].dtype;
	return ST_UNKNOWN;
}

int64_t st_numel(const struct st_tensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

/* Reads a JSON integer that must be in [0, max]. */
static int json_uint(json_object *o, int64_t max, int64_t *out)
{
	if (!o || !json_object_is_type(o, json_type_int))
		return -1;
	errno = 0;
	int64_t v = json_object_get_int64(o);
	if (errno || v < 0 || v > max)
		return -1;
	*out = v;
	return 0;
}

static int parse_entry(struct st_file *f, const char *name, json_object *e,
		       const uint8_t *data, size_t data_len, struct st_tensor *t,
		       struct pfx_error *err)
{
	json_object *dt, *shape, *offs;
	if (!json_object_is_type(e, json_type_object) ||
	    !json_object_object_get_ex(e, "dtype", &dt) ||
	    !json_object_is_type(dt, json_type_string) ||
	    !json_object_object_get_ex(e, "shape", &shape) ||
	    !json_object_is_type(shape, json_type_array) ||
	    !json_object_object_get_ex(e, "data_offsets", &offs) ||
	    !json_object_is_type(offs, json_type_array) ||
	    json_object_array_length(offs) != 2)
		return pfx_errorf(err, -EINVAL,
				  "%s: tensor '%s': malformed header entry (needs dtype, shape, data_offsets)",
				  f->path, name);
	t->name = name;
	t->dtype_name = json_object_get_string(dt);
	t->dtype = dtype_parse(t->dtype_name);
	size_t nd = json_object_array_length(shape);
	if (nd > ST_MAX_DIMS)
		return pfx_errorf(err, -EINVAL, "%s: tensor '%s': %zu dimensions (at most %d)",
				  f->path, name, nd, ST_MAX_DIMS);
	t->ndim = (int)nd;
	/* numel must fit in the file, so cap each dim and the product by its size. */
	int64_t numel = 1;
	for (size_t i = 0; i < nd; i++) {
		if (json_uint(json_object_array_get_idx(shape, i), (int64_t)f->size, &t->shape[i]))
			return pfx_errorf(err, -EINVAL, "%s: tensor '%s': bad shape entry %zu",
					  f->path, name, i);
		if (t->shape[i] && numel > (int64_t)f->size / t->shape[i])
			return pfx_errorf(err, -EINVAL, "%s: tensor '%s': shape larger than the file",
					  f->path, name);
		numel *= t->shape[i];
	}
	int64_t begin, end;
	if (json_uint(json_object_array_get_idx(offs, 0), (int64_t)data_len, &begin) ||
	    json_uint(json_object_array_get_idx(offs, 1), INT64_MAX, &end) ||
	    end < begin)
		return pfx_errorf(err, -EINVAL, "%s: tensor '%s': bad data_offsets",
				  f->path, name);
	if (end > (int64_t)data_len)
		return pfx_errorf(err, -EINVAL,
				  "%s: tensor '%s': data ends at byte %lld but the file holds %zu data bytes (truncated file?)",
				  f->path, name, (long long)end, data_len);
	size_t esz = st_dtype_size(t->dtype);
	if (esz && (int64_t)esz * numel != end - begin)
		return pfx_errorf(err, -EINVAL,
				  "%s: tensor '%s': %lld bytes for %lld elements of %s",
				  f->path, name, (long long)(end - begin), (long long)numel,
				  t->dtype_name);
	t->nbytes = (size_t)(end - begin);
	t->data = data + begin;
	return 0;
}

/* Orders by (begin, end), as the reference implementation sorts, then by
 * name so that messages do not depend on qsort. */
static int cmp_range(const void *pa, const void *pb)
{
	const struct st_tensor *a = *(const struct st_tensor *const *)pa;
	const struct st_tensor *b = *(const struct st_tensor *const *)pb;
	const uint8_t *ea = (const uint8_t *)a->data + a->nbytes;
	const uint8_t *eb = (const uint8_t *)b->data + b->nbytes;
	if (a->data != b->data)
		return (const uint8_t *)a->data < (const uint8_t *)b->data ? -1 : 1;
	if (ea != eb)
		return ea < eb ? -1 : 1;
	return strcmp(a->name, b->name);
}

/*
 * The tensors must cover [0, data_len) exactly once: sorted by offset, each
 * starts where the furthest end so far is. Starting before it is an overlap
 * (also a zero-byte tensor inside another, which the reference implementation
 * refuses too); starting after it, or the last ending before data_len, leaves
 * bytes that belong to no tensor. O(n log n).
 */
static int check_layout(struct st_file *f, const uint8_t *data, size_t data_len,
			struct pfx_error *err)
{
	const struct st_tensor **by = malloc((f->count + 1) * sizeof(*by));
	if (!by)
		return pfx_errorf(err, -ENOMEM, "%s: out of memory", f->path);
	for (size_t i = 0; i < f->count; i++)
		by[i] = &f->tensors[i];
	qsort(by, f->count, sizeof(*by), cmp_range);
	int rc = 0;
	size_t covered = 0;             /* [0, covered) is tiled so far */
	const struct st_tensor *last = NULL; /* the tensor that ends at covered */
	for (size_t i = 0; i < f->count && !rc; i++) {
		const struct st_tensor *t = by[i];
		size_t b = (size_t)((const uint8_t *)t->data - data), e = b + t->nbytes;
		if (b < covered && b == e)
			rc = pfx_errorf(err, -EINVAL,
					"%s: tensor '%s' [%zu, %zu) lies inside tensor '%s' [%zu, %zu) (data_offsets must not overlap)",
					f->path, t->name, b, e, last->name,
					(size_t)((const uint8_t *)last->data - data), covered);
		else if (b < covered)
			rc = pfx_errorf(err, -EINVAL,
					"%s: tensors '%s' [%zu, %zu) and '%s' [%zu, %zu) overlap (data_offsets must not share bytes)",
					f->path, last->name, (size_t)((const uint8_t *)last->data - data),
					covered, t->name, b, e);
		else if (b > covered && last)
			rc = pfx_errorf(err, -EINVAL,
					"%s: data bytes [%zu, %zu) between tensors '%s' and '%s' belong to no tensor (the format forbids holes in the data)",
					f->path, covered, b, last->name, t->name);
		else if (b > covered)
			rc = pfx_errorf(err, -EINVAL,
					"%s: data bytes [%zu, %zu) before tensor '%s' belong to no tensor (the format forbids holes in the data)",
					f->path, covered, b, t->name);
		covered = e;
		last = t;
	}
	if (!rc && covered != data_len) {
		if (last)
			rc = pfx_errorf(err, -EINVAL,
					"%s: data bytes [%zu, %zu) after tensor '%s' belong to no tensor (the tensors must cover the data to its end)",
					f->path, covered, data_len, last->name);
		else
			rc = pfx_errorf(err, -EINVAL,
					"%s: data bytes [0, %zu) belong to no tensor (the header lists none)",
					f->path, data_len);
	}
	free(by);
	return rc;
}

int st_open(const char *path, struct st_file **out, struct pfx_error *err)
{
	int rc;
	struct st_file *f = calloc(1, sizeof(*f));
	if (!f)
		return pfx_errorf(err, -ENOMEM, "%s: out of memory", path);
	f->path = strdup(path);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = pfx_errorf(err, -errno, "%s: cannot open: %s", path, strerror(errno));
		goto fail;
	}
	struct stat st;
	if (fstat(fd, &st) < 0) {
		rc = pfx_errorf(err, -errno, "%s: cannot stat: %s", path, strerror(errno));
		close(fd);
		goto fail;
	}
	f->size = (size_t)st.st_size;
	if (f->size < 8) {
		close(fd);
		rc = pfx_errorf(err, -EINVAL, "%s: %zu bytes is too short for a safetensors file",
				path, f->size);
		goto fail;
	}
	f->map = huge_map_file(fd, f->size);
	close(fd);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		rc = pfx_errorf(err, -errno, "%s: cannot map: %s", path, strerror(errno));
		goto fail;
	}
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | f->map[i];
	if (hlen > ST_MAX_HEADER || hlen > f->size - 8) {
		rc = pfx_errorf(err, -EINVAL,
				"%s: header length %llu exceeds the file (%zu bytes) or the %u-byte limit",
				path, (unsigned long long)hlen, f->size, ST_MAX_HEADER);
		goto fail;
	}
	struct pfx_error why;
	rc = json_parse_object((const char *)f->map + 8, hlen, &f->header, &why);
	if (rc) {
		pfx_errorf(err, rc, "%s: malformed JSON header: %s", path, why.msg);
		goto fail;
	}
	const uint8_t *data = f->map + 8 + hlen;
	size_t data_len = f->size - 8 - hlen;
	f->tensors = calloc((size_t)json_object_object_length(f->header) + 1, sizeof(*f->tensors));
	if (!f->tensors) {
		rc = pfx_errorf(err, -ENOMEM, "%s: out of memory", path);
		goto fail;
	}
	json_object_object_foreach(f->header, key, val) {
		if (!strcmp(key, "__metadata__"))
			continue;
		struct st_tensor *t = &f->tensors[f->count];
		rc = parse_entry(f, key, val, data, data_len, t, err);
		if (rc)
			goto fail;
		f->count++;
	}
	if ((rc = check_layout(f, data, data_len, err)))
		goto fail;
	*out = f;
	return 0;
fail:
	st_close(f);
	return rc;
}

void st_close(struct st_file *f)
{
	if (!f)
		return;
	if (f->map)
		munmap((void *)f->map, f->size);
	json_object_put(f->header);
	free(f->tensors);
	free(f->path);
	free(f);
}

const char *st_path(const struct st_file *f) { return f->path; }
const void *st_map(const struct st_file *f) { return f->map; }
size_t st_size(const struct st_file *f) { return f->size; }
size_t st_count(const struct st_file *f) { return f->count; }
const struct st_tensor *st_at(const struct st_file *f, size_t i) { return &f->tensors[i]; }

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
	for (size_t i = 0; i < f->count; i++)
		if (!strcmp(f->tensors[i].name, name))
			return &f->tensors[i];
	return NULL;
}
