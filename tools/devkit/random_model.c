/* SPDX-License-Identifier: MIT */
/*
 * Random-weight checkpoints. The tensor list comes from the architecture's
 * own bind function (arch_describe), so a random model always has exactly
 * the names and shapes the loader expects.
 */
#include "random_model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model_impl.h"
#include "st_write.h"
#include "kernels.h"

struct pfx_config pfx_config_smollm135m(void)
{
	return (struct pfx_config){
		.arch = "LlamaForCausalLM", .hidden = 576, .n_layers = 30, .n_heads = 9,
		.n_kv_heads = 3, .head_dim = 64, .intermediate = 1536, .vocab = 49152,
		.max_positions = 8192, .rotary_dim = 64, .rope_base = 10000.0f,
		.norm_eps = 1e-5f, .norm = PFX_NORM_RMS, .act = PFX_ACT_SILU,
		.tied_embeddings = true,
	};
}

static uint64_t mix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float uni(uint64_t *x)
{
	return (float)((double)(mix(x) >> 40) * 0x1.0p-23 - 1.0);
}

static int fill(const struct tensor_desc *d, const char *dtype, uint64_t *rng, void **out,
		size_t *nbytes)
{
	size_t n = (size_t)d->shape[0] * (d->ndim > 1 ? (size_t)d->shape[1] : 1);
	size_t esz = strcmp(dtype, "F32") ? 2 : 4;
	uint8_t *p = malloc(n * esz);
	if (!p)
		return -ENOMEM;
	int is_bias = strstr(d->name, ".bias") != NULL;
	/* Norm gains near 1, biases near 0, matrices with std ~0.02. */
	float scale = d->ndim == 1 ? 0.1f : 0.0346f, base = d->ndim == 1 && !is_bias ? 1.0f : 0.0f;
	for (size_t i = 0; i < n; i++) {
		float v = base + scale * uni(rng);
		if (esz == 4) {
			memcpy(p + 4 * i, &v, 4);
		} else {
			uint16_t h = !strcmp(dtype, "F16") ? kern_f32_to_f16(v) : kern_f32_to_bf16(v);
			memcpy(p + 2 * i, &h, 2);
		}
	}
	*out = p;
	*nbytes = n * esz;
	return 0;
}

int pfx_random_checkpoint(const char *dir, const struct pfx_config *c, const char *dtype,
			  uint64_t seed, struct pfx_error *err)
{
	const struct arch *a = c->arch ? arch_find(c->arch) : NULL;
	if (!a)
		return pfx_errorf(err, -ENOTSUP, "unknown architecture '%s'", c->arch ? c->arch : "");
	if (strcmp(dtype, "F32") && strcmp(dtype, "F16") && strcmp(dtype, "BF16"))
		return pfx_errorf(err, -EINVAL, "dtype '%s' is not F32, F16 or BF16", dtype);
	if (mkdir(dir, 0755) && errno != EEXIST)
		return pfx_errorf(err, -errno, "%s: cannot create: %s", dir, strerror(errno));
	char path[4096];
	json_object *j = json_object_new_object(), *archs = json_object_new_array();
	json_object_array_add(archs, json_object_new_string(a->name));
	json_object_object_add(j, "architectures", archs);
	a->write_config(c, j);
	snprintf(path, sizeof(path), "%s/config.json", dir);
	int rc = json_object_to_file_ext(path, j, JSON_C_TO_STRING_PRETTY) ? -EIO : 0;
	struct pfx_config parsed = { .arch = a->name };
	if (rc)
		pfx_errorf(err, rc, "%s: cannot write", path);
	else
		rc = a->parse_config(j, &parsed, err);
	json_object_put(j);
	if (rc)
		return rc;

	struct tensor_desc *desc;
	size_t n;
	if ((rc = arch_describe(a, &parsed, &desc, &n)))
		return pfx_errorf(err, rc, "cannot describe the tensors of %s", a->name);
	struct st_out *out = calloc(n, sizeof(*out));
	uint64_t rng = seed;
	for (size_t i = 0; out && i < n && !rc; i++) {
		out[i] = (struct st_out){ .name = desc[i].name, .dtype = dtype, .ndim = desc[i].ndim,
					  .shape = { desc[i].shape[0], desc[i].shape[1] } };
		rc = fill(&desc[i], dtype, &rng, (void **)&out[i].data, &out[i].nbytes);
	}
	if (!out || rc) {
		rc = pfx_errorf(err, -ENOMEM, "out of memory for random weights");
	} else {
		snprintf(path, sizeof(path), "%s/model.safetensors", dir);
		rc = st_write(path, out, n, err);
	}
	for (size_t i = 0; out && i < n; i++)
		free((void *)out[i].data);
	free(out);
	free(desc);
	return rc;
}
