/* SPDX-License-Identifier: MIT */
/* A model folder's end-of-sequence ids, as transformers' generate takes
 * them: generation_config.json's eos_token_id, else config.json's (what
 * GenerationConfig.from_model_config copies when there is no
 * generation_config.json). The one reader of these keys: the tokenizer
 * and prefix-run both ask here. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load/json_buf.h"
#include "load_json.h"

/* o's eos_token_id (an id or a list of them) into out: 1, 0 when o has
 * none (or null), -errno naming file. */
static int eos_of(json_object *o, const char *dir, const char *file, size_t vocab,
		  struct pfx_eos_ids *out, struct pfx_error *err)
{
	json_object *v = jget(o, "eos_token_id");
	if (!v || json_object_is_type(v, json_type_null))
		return 0;
	bool list = json_object_is_type(v, json_type_array);
	size_t k = list ? json_object_array_length(v) : 1;
	if (k > PFX_EOS_MAX)
		return pfx_errorf(err, -EINVAL, "%s/%s: eos_token_id lists %zu ids; at most %d are supported",
				  dir, file, k, PFX_EOS_MAX);
	for (size_t i = 0; i < k; i++) {
		json_object *x = list ? json_object_array_get_idx(v, i) : v;
		int64_t id = json_object_is_type(x, json_type_int) ? json_object_get_int64(x) : -1;
		if (id < 0 || (uint64_t)id >= vocab)
			return pfx_errorf(err, -EINVAL,
					  "%s/%s: eos_token_id must be a token id from 0 to %zu or a list of them, not %s",
					  dir, file, vocab - 1,
					  json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
		out->id[i] = (int32_t)id;
	}
	out->n = k;
	out->from = file;
	return 1;
}

int pfx_eos_read(const char *dir, size_t vocab, struct pfx_eos_ids *out, struct pfx_error *err)
{
	static const char *const files[] = { "generation_config.json", "config.json" };
	memset(out, 0, sizeof(*out));
	if (!dir || !vocab || vocab > INT32_MAX)
		return pfx_errorf(err, -EINVAL, "eos: no folder, or a vocabulary of %zu tokens", vocab);
	for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
		char *buf;
		size_t len;
		int r = text_read_file(dir, files[f], &buf, &len, err);
		if (r == -ENOENT)
			continue;
		if (r)
			return r;
		json_object *o;
		r = json_parse_object(buf, len, &o, err);
		free(buf);
		if (r) {
			char m[sizeof(err->msg)];
			snprintf(m, sizeof(m), "%s", err ? err->msg : "");
			return pfx_errorf(err, r, "%s/%s: malformed JSON: %s", dir, files[f], m);
		}
		r = eos_of(o, dir, files[f], vocab, out, err);
		json_object_put(o);
		if (r)
			return r < 0 ? r : 0;
	}
	return 0;
}
