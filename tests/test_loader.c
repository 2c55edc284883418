/* SPDX-License-Identifier: MIT */
/*
 * Checkpoint loading: dtypes, shards, the extra tensors old checkpoints
 * carry, the fingerprint, and every rejection with a message that names the
 * file and the tensor. Variants are written from the fixtures into
 * temporary directories.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "model_impl.h"
#include "random_model.h"
#include "safetensors.h"
#include "st_write.h"

/* ==== Building checkpoint variants ==== */

struct tset {
	struct st_file *src;
	struct st_out t[512];
	size_t n;
	void *owned[512];
	size_t nowned;
};

static void tset_load(struct tset *s, const char *model)
{
	char path[512];
	struct pfx_error err;
	snprintf(path, sizeof(path), "%s/%s/model.safetensors", fixtures_dir(), model);
	memset(s, 0, sizeof(*s));
	cr_assert_eq(st_open(path, &s->src, &err), 0, "%s", err.msg);
	for (size_t i = 0; i < st_count(s->src); i++) {
		const struct st_tensor *t = st_at(s->src, i);
		struct st_out *o = &s->t[s->n++];
		*o = (struct st_out){ t->name, t->dtype_name, t->ndim, { 0 }, t->data, t->nbytes };
		memcpy(o->shape, t->shape, sizeof(o->shape));
	}
}

static void tset_free(struct tset *s)
{
	for (size_t i = 0; i < s->nowned; i++)
		free(s->owned[i]);
	st_close(s->src);
}

static struct st_out *tset_get(struct tset *s, const char *name)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->t[i].name, name))
			return &s->t[i];
	cr_assert_fail("no tensor %s", name);
	return NULL;
}

static void tset_remove(struct tset *s, const char *name)
{
	struct st_out *o = tset_get(s, name);
	*o = s->t[--s->n];
}

static void *tset_alloc(struct tset *s, size_t bytes)
{
	return s->owned[s->nowned++] = calloc(1, bytes + 1);
}

/* A writable copy of a tensor's data, to change a weight. */
static float *tset_own_f32(struct tset *s, const char *name)
{
	struct st_out *o = tset_get(s, name);
	void *p = tset_alloc(s, o->nbytes);
	memcpy(p, o->data, o->nbytes);
	o->data = p;
	return p;
}

static void tset_write(struct tset *s, const char *dir, const char *file)
{
	char path[512];
	struct pfx_error err;
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	cr_assert_eq(st_write(path, s->t, s->n, &err), 0, "%s", err.msg);
}

static char *tmpdir_new(void)
{
	char *d = strdup("/tmp/pfx-test-XXXXXX");
	cr_assert(mkdtemp(d));
	return d;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(p);
}

static void tmpdir_free(char *d)
{
	nftw(d, rm_one, 8, FTW_DEPTH | FTW_PHYS);
	free(d);
}

/* Copies the fixture's config.json into dir, letting patch change it. */
static void write_config(const char *model, const char *dir, void (*patch)(json_object *))
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s/config.json", fixtures_dir(), model);
	json_object *j = json_object_from_file(path);
	cr_assert(j);
	if (patch)
		patch(j);
	snprintf(path, sizeof(path), "%s/config.json", dir);
	cr_assert_eq(json_object_to_file(path, j), 0);
	json_object_put(j);
}

static void write_text(const char *dir, const char *file, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	FILE *fp = fopen(path, "w");
	cr_assert(fp);
	fputs(text, fp);
	fclose(fp);
}

/* Loads dir expecting failure; returns the message. */
static void expect_reject(const char *dir, int code, const char *must1, const char *must2)
{
	struct pfx_model *m = NULL;
	struct pfx_error err = { "" };
	int rc = pfx_model_load(dir, NULL, &m, &err);
	cr_assert_neq(rc, 0, "loaded although it should not (want: %s)", must1);
	cr_expect_null(m);
	if (code)
		cr_expect_eq(rc, code, "rc %d (%s)", rc, err.msg);
	if (must1)
		cr_expect(strstr(err.msg, must1), "message lacks '%s': %s", must1, err.msg);
	if (must2)
		cr_expect(strstr(err.msg, must2), "message lacks '%s': %s", must2, err.msg);
}

static float *run_logits(const char *dir, size_t *n_out, char fp[65])
{
	struct pfx_model *m = load_model_dir(dir, 2);
	size_t n;
	int32_t *tok = expected_i32("neox-tiny", "tokens", &n);
	float *l = logits_uncached(m, tok, n);
	*n_out = n * pfx_model_config(m)->vocab;
	if (fp)
		pfx_model_fingerprint_hex(m, fp);
	free(tok);
	pfx_model_free(m);
	return l;
}

static char *fixture_path(const char *model)
{
	char *p = malloc(512);
	snprintf(p, 512, "%s/%s", fixtures_dir(), model);
	return p;
}

/* The checkpoint in dir gives the neox-tiny fixture's logits exactly, and
 * its fingerprint (why: what a difference would mean). */
static void expect_same_as_neox_tiny(const char *dir, const char *why)
{
	char fa[65], fb[65];
	size_t na, nb;
	char *orig = fixture_path("neox-tiny");
	float *a = run_logits(dir, &na, fa), *b = run_logits(orig, &nb, fb);
	cr_expect_eq(max_abs_diff(a, b, na), 0.0f);
	cr_expect_str_eq(fa, fb, "%s", why);
	free(a);
	free(b);
	free(orig);
}

/* ==== Accepted checkpoints ==== */

Test(loader, f32_is_mapped_not_copied)
{
	struct pfx_model *m = load_fixture_model("llama-tiny-gqa");
	cr_expect_str_eq(pfx_model_weight_dtype(m), "F32");
	cr_expect_eq(m->nowned, 0, "f32 weights were copied (%zu buffers)", m->nowned);
	pfx_model_free(m);
}

static void check_16bit(const char *dtype)
{
	struct tset h, f;
	tset_load(&h, "neox-tiny");
	tset_load(&f, "neox-tiny");
	for (size_t i = 0; i < h.n; i++) {
		size_t n = h.t[i].nbytes / 4;
		const float *src = h.t[i].data;
		uint16_t *half = tset_alloc(&h, 2 * n);
		float *rounded = tset_alloc(&f, 4 * n);
		for (size_t j = 0; j < n; j++) {
			float v;
			memcpy(&v, src + j, 4);
			if (!strcmp(dtype, "F16")) {
				_Float16 x = (_Float16)v;
				memcpy(&half[j], &x, 2);
				rounded[j] = (float)x;
			} else {
				uint32_t u;
				memcpy(&u, &v, 4);
				half[j] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
				u = (uint32_t)half[j] << 16;
				memcpy(&rounded[j], &u, 4);
			}
		}
		h.t[i] = (struct st_out){ h.t[i].name, dtype, h.t[i].ndim, { 0 }, half, 2 * n };
		memcpy(h.t[i].shape, f.t[i].shape, sizeof(h.t[i].shape));
		f.t[i].data = rounded;
	}
	char *dh = tmpdir_new(), *df = tmpdir_new();
	write_config("neox-tiny", dh, NULL);
	write_config("neox-tiny", df, NULL);
	tset_write(&h, dh, "model.safetensors");
	tset_write(&f, df, "model.safetensors");
	struct pfx_model *m = load_model_dir(dh, 2);
	cr_expect_str_eq(pfx_model_weight_dtype(m), dtype);
	pfx_model_free(m);
	size_t n1, n2;
	float *a = run_logits(dh, &n1, NULL), *b = run_logits(df, &n2, NULL);
	cr_assert_eq(n1, n2);
	cr_expect_eq(max_abs_diff(a, b, n1), 0.0f, "%s upcast differs from f32 of the same values",
		     dtype);
	free(a);
	free(b);
	tmpdir_free(dh);
	tmpdir_free(df);
	tset_free(&h);
	tset_free(&f);
}

Test(loader, f16_upcast) { check_16bit("F16"); }
Test(loader, bf16_upcast) { check_16bit("BF16"); }

Test(loader, sharded_equals_single_file)
{
	struct tset s;
	tset_load(&s, "neox-tiny");
	char *d = tmpdir_new();
	write_config("neox-tiny", d, NULL);
	json_object *idx = json_object_new_object(), *map = json_object_new_object();
	struct tset one = s;
	one.n = s.n / 2;
	struct tset two = s;
	memmove(two.t, s.t + s.n / 2, (s.n - s.n / 2) * sizeof(s.t[0]));
	two.n = s.n - s.n / 2;
	tset_write(&one, d, "model-00001-of-00002.safetensors");
	tset_write(&two, d, "model-00002-of-00002.safetensors");
	for (size_t i = 0; i < s.n; i++)
		json_object_object_add(map, s.t[i].name,
				       json_object_new_string(i < s.n / 2 ? "model-00001-of-00002.safetensors"
								      : "model-00002-of-00002.safetensors"));
	json_object_object_add(idx, "metadata", json_object_new_object());
	json_object_object_add(idx, "weight_map", map);
	char path[512];
	snprintf(path, sizeof(path), "%s/model.safetensors.index.json", d);
	cr_assert_eq(json_object_to_file(path, idx), 0);
	json_object_put(idx);
	expect_same_as_neox_tiny(d, "sharding must not change the fingerprint");
	tmpdir_free(d);
	tset_free(&s);
}

/* Buffers that old GPT-NeoX and Llama checkpoints carry, unused at runtime. */
Test(loader, extra_tensors_are_tolerated)
{
	struct tset s;
	tset_load(&s, "neox-tiny");
	uint8_t *mask = tset_alloc(&s, 512 * 512);
	float *masked = tset_alloc(&s, 4), *inv = tset_alloc(&s, 8);
	masked[0] = -1e9f;
	s.t[s.n++] = (struct st_out){ "gpt_neox.layers.0.attention.bias", "BOOL", 4,
				      { 1, 1, 512, 512 }, mask, 512 * 512 };
	s.t[s.n++] = (struct st_out){ "gpt_neox.layers.0.attention.masked_bias", "F32", 0, { 0 },
				      masked, 4 };
	s.t[s.n++] = (struct st_out){ "gpt_neox.layers.0.attention.rotary_emb.inv_freq", "F32", 1,
				      { 2 }, inv, 8 };
	s.t[s.n++] = (struct st_out){ "gpt_neox.layers.1.attention.some_future_buffer", "F8_E4M3", 1,
				      { 4 }, mask, 4 };
	char *d = tmpdir_new();
	write_config("neox-tiny", d, NULL);
	tset_write(&s, d, "model.safetensors");
	expect_same_as_neox_tiny(d, "unused buffers must not change the fingerprint");
	tmpdir_free(d);
	tset_free(&s);
}

Test(loader, tied_embeddings)
{
	struct pfx_config c = {
		.arch = "LlamaForCausalLM", .hidden = 32, .n_layers = 1, .n_heads = 2,
		.n_kv_heads = 1, .head_dim = 16, .intermediate = 48, .vocab = 64,
		.max_positions = 64, .rope_base = 10000, .norm_eps = 1e-5f, .tied_embeddings = true,
	};
	char *d = tmpdir_new();
	struct pfx_error err;
	cr_assert_eq(pfx_random_checkpoint(d, &c, "F32", 1, &err), 0, "%s", err.msg);
	struct pfx_model *m = load_model_dir(d, 1);
	cr_expect(pfx_model_config(m)->tied_embeddings);
	cr_expect_eq(m->w.lm_head, m->w.embed);
	cr_expect_eq(pfx_model_params(m), 64 * 32 + 32 + 32 * 2 + 32 * (32 + 16 + 16 + 32) + 3 * 48 * 32);
	pfx_model_free(m);
	tmpdir_free(d);
}

/* ==== Fingerprint and KV size ==== */

static void bump_rope(json_object *j)
{
	json_object_object_add(j, "rotary_emb_base", json_object_new_double(20000.0));
}

Test(loader, fingerprint_covers_weights_and_config)
{
	char *orig = fixture_path("neox-tiny");
	struct pfx_model *a = load_model_dir(orig, 1), *b = load_model_dir(orig, 2);
	cr_expect_eq(memcmp(pfx_model_fingerprint(a), pfx_model_fingerprint(b), 32), 0,
		     "same checkpoint, same fingerprint");
	struct tset s;
	tset_load(&s, "neox-tiny");
	float *w = tset_own_f32(&s, "gpt_neox.layers.1.mlp.dense_4h_to_h.weight");
	uint32_t u;
	memcpy(&u, &w[77], 4);
	u ^= 1; /* one ulp in one weight */
	memcpy(&w[77], &u, 4);
	char *d1 = tmpdir_new(), *d2 = tmpdir_new();
	write_config("neox-tiny", d1, NULL);
	tset_write(&s, d1, "model.safetensors");
	struct pfx_model *c = load_model_dir(d1, 1);
	cr_expect_neq(memcmp(pfx_model_fingerprint(a), pfx_model_fingerprint(c), 32), 0,
		      "one changed weight must change the fingerprint");
	tset_free(&s);
	tset_load(&s, "neox-tiny");
	write_config("neox-tiny", d2, bump_rope);
	tset_write(&s, d2, "model.safetensors");
	struct pfx_model *e = load_model_dir(d2, 1);
	cr_expect_neq(memcmp(pfx_model_fingerprint(a), pfx_model_fingerprint(e), 32), 0,
		      "a KV-shaping config value must change the fingerprint");
	pfx_model_free(a);
	pfx_model_free(b);
	pfx_model_free(c);
	pfx_model_free(e);
	tset_free(&s);
	tmpdir_free(d1);
	tmpdir_free(d2);
	free(orig);
}

Test(loader, kv_bytes_per_token)
{
	struct pfx_config c = pfx_config_smollm135m();
	cr_expect_eq(pfx_kv_bytes_per_token(&c), 2 * 30 * 3 * 64 * 4);
	struct pfx_model *m = load_fixture_model("llama-tiny-gqa");
	cr_expect_eq(pfx_kv_bytes_per_token(pfx_model_config(m)), 2 * 2 * 2 * 16 * 4);
	pfx_model_free(m);
}

/* ==== Rejections ==== */

static char *variant(const char *model, void (*patch_cfg)(json_object *),
		     void (*patch_tensors)(struct tset *))
{
	struct tset s;
	tset_load(&s, model);
	if (patch_tensors)
		patch_tensors(&s);
	char *d = tmpdir_new();
	write_config(model, d, patch_cfg);
	tset_write(&s, d, "model.safetensors");
	tset_free(&s);
	return d;
}

static void drop_dense(struct tset *s) { tset_remove(s, "gpt_neox.layers.1.attention.dense.weight"); }
static void wrong_shape(struct tset *s)
{
	struct st_out *o = tset_get(s, "gpt_neox.layers.0.mlp.dense_h_to_4h.weight");
	o->shape[0] = 128;
	o->shape[1] = 128; /* same bytes, other shape */
}
static void unknown_dtype(struct tset *s) { tset_get(s, "embed_out.weight")->dtype = "Q4_K"; }
static void int_dtype(struct tset *s) { tset_get(s, "embed_out.weight")->dtype = "I32"; }

Test(loader, rejects_missing_tensor)
{
	char *d = variant("neox-tiny", NULL, drop_dense);
	expect_reject(d, -EINVAL, "gpt_neox.layers.1.attention.dense.weight", "model.safetensors");
	tmpdir_free(d);
}

Test(loader, rejects_wrong_shape)
{
	char *d = variant("neox-tiny", NULL, wrong_shape);
	expect_reject(d, -EINVAL, "gpt_neox.layers.0.mlp.dense_h_to_4h.weight", "[128, 128], expected [256, 64]");
	tmpdir_free(d);
}

Test(loader, rejects_unknown_dtype)
{
	char *d = variant("neox-tiny", NULL, unknown_dtype);
	expect_reject(d, -EINVAL, "embed_out.weight", "Q4_K");
	tmpdir_free(d);
	d = variant("neox-tiny", NULL, int_dtype);
	expect_reject(d, -EINVAL, "embed_out.weight", "I32");
	tmpdir_free(d);
}

Test(loader, rejects_truncated_file)
{
	char *d = variant("neox-tiny", NULL, NULL);
	char path[512];
	snprintf(path, sizeof(path), "%s/model.safetensors", d);
	FILE *fp = fopen(path, "rb");
	fseek(fp, 0, SEEK_END);
	long size = ftell(fp);
	fclose(fp);
	cr_assert_eq(truncate(path, size - 1000), 0);
	expect_reject(d, -EINVAL, "model.safetensors", "truncated");
	/* Cut inside the header too. */
	cr_assert_eq(truncate(path, 200), 0);
	expect_reject(d, -EINVAL, "model.safetensors", "header");
	cr_assert_eq(truncate(path, 5), 0);
	expect_reject(d, -EINVAL, "model.safetensors", "too short");
	tmpdir_free(d);
}

static void write_raw(const char *dir, const void *hdr_json, size_t hlen, uint64_t declared)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	FILE *fp = fopen(path, "wb");
	uint8_t len[8];
	for (int i = 0; i < 8; i++)
		len[i] = (uint8_t)(declared >> (8 * i));
	fwrite(len, 1, 8, fp);
	fwrite(hdr_json, 1, hlen, fp);
	static const uint8_t data[64];
	fwrite(data, 1, sizeof(data), fp);
	fclose(fp);
}

Test(loader, rejects_malformed_headers)
{
	static const struct {
		const char *json;
		const char *why;
	} cases[] = {
		{ "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]", "malformed JSON" },
		{ "[1, 2, 3]", "not a JSON object" },
		{ "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 0]}}", "bad data_offsets" },
		{ "{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", "8 bytes for 3 elements" },
		{ "{\"a\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}", "bad shape" },
		{ "{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 8]}}", "malformed header entry" },
		{ "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}} xyz", "trailing bytes" },
		{ "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 800]}}", "truncated" },
	};
	char *d = tmpdir_new();
	write_config("neox-tiny", d, NULL);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		write_raw(d, cases[i].json, strlen(cases[i].json), strlen(cases[i].json));
		expect_reject(d, -EINVAL, "model.safetensors", cases[i].why);
	}
	/* A header length beyond the file. */
	write_raw(d, "{}", 2, 1u << 20);
	expect_reject(d, -EINVAL, "model.safetensors", "header length");
	/* A valid file with no tensors: the first bound tensor is missing. */
	write_raw(d, "{}", 2, 2);
	expect_reject(d, -EINVAL, "missing tensor", "gpt_neox.embed_in.weight");
	tmpdir_free(d);
}

static void arch_gpt2(json_object *j)
{
	json_object *a = json_object_new_array();
	json_object_array_add(a, json_object_new_string("GPT2LMHeadModel"));
	json_object_object_add(j, "architectures", a);
}
static void rope_scaling(json_object *j)
{
	json_object *r = json_object_new_object();
	json_object_object_add(r, "type", json_object_new_string("linear"));
	json_object_object_add(j, "rope_scaling", r);
}
static void relu(json_object *j) { json_object_object_add(j, "hidden_act", json_object_new_string("relu")); }
static void bad_heads(json_object *j) { json_object_object_add(j, "num_key_value_heads", json_object_new_int(3)); }
static void string_hidden(json_object *j) { json_object_object_add(j, "hidden_size", json_object_new_string("64")); }
static void no_layers(json_object *j) { json_object_object_del(j, "num_hidden_layers"); }

Test(loader, rejects_unsupported_config)
{
	char *d = variant("neox-tiny", arch_gpt2, NULL);
	expect_reject(d, -ENOTSUP, "GPT2LMHeadModel", "not supported");
	tmpdir_free(d);
	d = variant("llama-tiny-gqa", rope_scaling, NULL);
	expect_reject(d, -ENOTSUP, "rope_scaling", NULL);
	tmpdir_free(d);
	d = variant("neox-tiny", relu, NULL);
	expect_reject(d, -ENOTSUP, "hidden_act", "relu");
	tmpdir_free(d);
	d = variant("llama-tiny-gqa", bad_heads, NULL);
	expect_reject(d, -EINVAL, "key/value heads", NULL);
	tmpdir_free(d);
	d = variant("llama-tiny-gqa", string_hidden, NULL);
	expect_reject(d, -EINVAL, "hidden_size", "integer");
	tmpdir_free(d);
	d = variant("llama-tiny-gqa", no_layers, NULL);
	expect_reject(d, -EINVAL, "num_hidden_layers", "missing");
	tmpdir_free(d);
}

Test(loader, rejects_missing_files)
{
	char *d = tmpdir_new();
	expect_reject(d, -ENOENT, "config.json", NULL);
	write_text(d, "config.json", "{ \"architectures\": [\"LlamaForCausalLM\"], ");
	expect_reject(d, -EINVAL, "config.json", "malformed JSON");
	write_config("llama-tiny-gqa", d, NULL);
	expect_reject(d, -ENOENT, "no model.safetensors", NULL);
	write_text(d, "pytorch_model.bin", "x");
	expect_reject(d, -ENOENT, "pytorch_model.bin", "convert");
	tmpdir_free(d);
	expect_reject("/nonexistent/model", 0, "/nonexistent/model", NULL);
}

Test(loader, rejects_bad_index)
{
	char *d = variant("neox-tiny", NULL, NULL);
	char from[512], to[512];
	snprintf(from, sizeof(from), "%s/model.safetensors", d);
	snprintf(to, sizeof(to), "%s/shard.safetensors", d);
	cr_assert_eq(rename(from, to), 0);
	write_text(d, "model.safetensors.index.json",
		   "{\"weight_map\": {\"embed_out.weight\": \"../shard.safetensors\"}}");
	expect_reject(d, -EINVAL, "plain file name", "embed_out.weight");
	write_text(d, "model.safetensors.index.json",
		   "{\"weight_map\": {\"embed_out.weight\": \"missing.safetensors\"}}");
	expect_reject(d, 0, "missing.safetensors", "cannot open");
	write_text(d, "model.safetensors.index.json",
		   "{\"weight_map\": {\"not_there.weight\": \"shard.safetensors\"}}");
	expect_reject(d, -EINVAL, "not_there.weight", "missing from");
	write_text(d, "model.safetensors.index.json", "{\"metadata\": {}}");
	expect_reject(d, -EINVAL, "weight_map", NULL);
	/* A valid index that leaves a needed tensor out. */
	write_text(d, "model.safetensors.index.json",
		   "{\"weight_map\": {\"embed_out.weight\": \"shard.safetensors\"}}");
	expect_reject(d, -EINVAL, "missing tensor", "gpt_neox.embed_in.weight");
	tmpdir_free(d);
}
