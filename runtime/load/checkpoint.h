/* SPDX-License-Identifier: MIT */
/*
 * A Hugging Face checkpoint directory as the Hub ships it: config.json and
 * either model.safetensors or model.safetensors.index.json with its shards.
 */
#ifndef PFX_CHECKPOINT_H
#define PFX_CHECKPOINT_H

#include <json-c/json.h>

#include "safetensors.h"

struct ckpt;

/* Opens dir, parses config.json and validates every safetensors file it
 * names. Returns 0 or -errno with a message naming the file at fault. */
int ckpt_open(const char *dir, struct ckpt **out, struct pfx_error *err);
void ckpt_close(struct ckpt *c);

const char *ckpt_dir(const struct ckpt *c);
/* The parsed config.json; owned by c. */
json_object *ckpt_config(const struct ckpt *c);
/* Finds a tensor in whichever file holds it; *file (if non-NULL) gets that
 * file's path. NULL if no file has it. */
const struct st_tensor *ckpt_find(const struct ckpt *c, const char *name,
				  const char **file);
/* The safetensors files, i < ckpt_nfiles(c). */
size_t ckpt_nfiles(const struct ckpt *c);
const struct st_file *ckpt_file(const struct ckpt *c, size_t i);
/* A name for error messages: the single file or the index. */
const char *ckpt_source(const struct ckpt *c);

#endif
