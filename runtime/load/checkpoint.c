/* SPDX-License-Identifier: MIT */
/* Checkpoint directories: config.json plus one or several safetensors files. */
#include "checkpoint.h"
#include "json_buf.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_SHARDS 4096
#define MAX_JSON_BYTES (64u << 20)

struct ckpt {
	char *dir;
	char *source;
	json_object *config;
	json_object *weight_map; /* owned by index; NULL for one file */
	json_object *index;
	struct st_file **files;  /* (nfiles) */
	size_t nfiles;
};

static int read_json(const char *path, json_object **out, struct pfx_error *err)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return pfx_errorf(err, -errno, "%s: cannot open: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fileno(fp), &st) || !S_ISREG(st.st_mode) || st.st_size > MAX_JSON_BYTES) {
		fclose(fp);
		return pfx_errorf(err, -EINVAL, "%s: not a regular file of at most %u bytes",
				  path, MAX_JSON_BYTES);
	}
	char *buf = malloc((size_t)st.st_size + 1);
	size_t n = buf ? fread(buf, 1, (size_t)st.st_size, fp) : 0;
	int rd_err = ferror(fp);
	fclose(fp);
	if (!buf)
		return pfx_errorf(err, -ENOMEM, "%s: out of memory", path);
	if (rd_err) {
		free(buf);
		return pfx_errorf(err, -EIO, "%s: read error", path);
	}
	struct pfx_error why;
	json_object *o = NULL;
	int rc = json_parse_object(buf, n, &o, &why);
	free(buf);
	if (rc)
		return pfx_errorf(err, rc, "%s: malformed JSON: %s", path, why.msg);
	*out = o;
	return 0;
}

static char *join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}

static int add_file(struct ckpt *c, const char *name, struct pfx_error *err)
{
	char *path = join(c->dir, name);
	if (!path)
		return pfx_errorf(err, -ENOMEM, "out of memory");
	struct st_file *f;
	int rc = st_open(path, &f, err);
	free(path);
	if (rc)
		return rc;
	c->files[c->nfiles++] = f;
	return 0;
}

static struct st_file *file_named(const struct ckpt *c, const char *name)
{
	for (size_t i = 0; i < c->nfiles; i++) {
		const char *p = st_path(c->files[i]);
		size_t dl = strlen(c->dir);
		if (!strcmp(p + dl + 1, name))
			return c->files[i];
	}
	return NULL;
}

static int open_sharded(struct ckpt *c, const char *index_path, struct pfx_error *err)
{
	int rc = read_json(index_path, &c->index, err);
	if (rc)
		return rc;
	if (!json_object_object_get_ex(c->index, "weight_map", &c->weight_map) ||
	    !json_object_is_type(c->weight_map, json_type_object))
		return pfx_errorf(err, -EINVAL, "%s: no \"weight_map\" object", index_path);
	c->files = calloc(MAX_SHARDS, sizeof(*c->files));
	if (!c->files)
		return pfx_errorf(err, -ENOMEM, "out of memory");
	json_object_object_foreach(c->weight_map, tname, shard) {
		if (!json_object_is_type(shard, json_type_string))
			return pfx_errorf(err, -EINVAL, "%s: tensor '%s': shard is not a string",
					  index_path, tname);
		const char *sname = json_object_get_string(shard);
		/* Shards live beside the index; a path could reach any file. */
		if (!*sname || strchr(sname, '/') || !strcmp(sname, ".") || !strcmp(sname, ".."))
			return pfx_errorf(err, -EINVAL, "%s: tensor '%s': shard name '%s' is not a plain file name",
					  index_path, tname, sname);
		struct st_file *f = file_named(c, sname);
		if (!f) {
			if (c->nfiles == MAX_SHARDS)
				return pfx_errorf(err, -EINVAL, "%s: more than %d shards",
						  index_path, MAX_SHARDS);
			rc = add_file(c, sname, err);
			if (rc)
				return rc;
			f = c->files[c->nfiles - 1];
		}
		if (!st_find(f, tname))
			return pfx_errorf(err, -EINVAL, "%s: tensor '%s' is listed in the index but missing from %s",
					  index_path, tname, st_path(f));
	}
	return 0;
}

int ckpt_open(const char *dir, struct ckpt **out, struct pfx_error *err)
{
	int rc;
	struct ckpt *c = calloc(1, sizeof(*c));
	if (!c)
		return pfx_errorf(err, -ENOMEM, "out of memory");
	c->dir = strdup(dir);
	char *cfg = join(dir, "config.json");
	char *single = join(dir, "model.safetensors");
	char *index = join(dir, "model.safetensors.index.json");
	if (!c->dir || !cfg || !single || !index) {
		rc = pfx_errorf(err, -ENOMEM, "out of memory");
		goto fail;
	}
	if (access(dir, R_OK | X_OK)) {
		rc = pfx_errorf(err, -errno, "%s: cannot read model directory: %s", dir, strerror(errno));
		goto fail;
	}
	rc = read_json(cfg, &c->config, err);
	if (rc)
		goto fail;
	if (!access(single, F_OK)) {
		c->files = calloc(1, sizeof(*c->files));
		if (!c->files) {
			rc = pfx_errorf(err, -ENOMEM, "out of memory");
			goto fail;
		}
		c->source = single;
		single = NULL;
		rc = add_file(c, "model.safetensors", err);
	} else if (!access(index, F_OK)) {
		c->source = index;
		index = NULL;
		rc = open_sharded(c, c->source, err);
	} else {
		char *bin = join(dir, "pytorch_model.bin");
		int has_bin = bin && !access(bin, F_OK);
		free(bin);
		rc = pfx_errorf(err, -ENOENT,
				"%s: no model.safetensors or model.safetensors.index.json%s", dir,
				has_bin ? " (only pytorch_model.bin, which is not supported: convert it to safetensors)" : "");
	}
	if (rc)
		goto fail;
	free(cfg);
	free(single);
	free(index);
	*out = c;
	return 0;
fail:
	free(cfg);
	free(single);
	free(index);
	ckpt_close(c);
	return rc;
}

void ckpt_close(struct ckpt *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nfiles; i++)
		st_close(c->files[i]);
	free(c->files);
	json_object_put(c->config);
	json_object_put(c->index);
	free(c->source);
	free(c->dir);
	free(c);
}

const char *ckpt_dir(const struct ckpt *c) { return c->dir; }
json_object *ckpt_config(const struct ckpt *c) { return c->config; }
const char *ckpt_source(const struct ckpt *c) { return c->source; }
size_t ckpt_nfiles(const struct ckpt *c) { return c->nfiles; }
const struct st_file *ckpt_file(const struct ckpt *c, size_t i) { return c->files[i]; }

const struct st_tensor *ckpt_find(const struct ckpt *c, const char *name, const char **file)
{
	struct st_file *f = NULL;
	if (c->weight_map) {
		json_object *shard;
		if (!json_object_object_get_ex(c->weight_map, name, &shard))
			return NULL;
		f = file_named(c, json_object_get_string(shard));
	} else {
		f = c->files[0];
	}
	const struct st_tensor *t = f ? st_find(f, name) : NULL;
	if (t && file)
		*file = st_path(f);
	return t;
}
