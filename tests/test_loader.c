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
#include <math.h>
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

/* A copy of a fixture with its config and tensors changed. */
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

/* s as two shards and their index in d: the first half, then the rest. */
static void write_two_shards(struct tset *s, const char *d)
{
	json_object *idx = json_object_new_object(), *map = json_object_new_object();
	struct tset one = *s;
	one.n = s->n / 2;
	struct tset two = *s;
	memmove(two.t, s->t + s->n / 2, (s->n - s->n / 2) * sizeof(s->t[0]));
	two.n = s->n - s->n / 2;
	tset_write(&one, d, "model-00001-of-00002.safetensors");
	tset_write(&two, d, "model-00002-of-00002.safetensors");
	for (size_t i = 0; i < s->n; i++)
		json_object_object_add(map, s->t[i].name,
				       json_object_new_string(i < s->n / 2 ? "model-00001-of-00002.safetensors"
								      : "model-00002-of-00002.safetensors"));
	json_object_object_add(idx, "metadata", json_object_new_object());
	json_object_object_add(idx, "weight_map", map);
	char path[512];
	snprintf(path, sizeof(path), "%s/model.safetensors.index.json", d);
	cr_assert_eq(json_object_to_file(path, idx), 0);
	json_object_put(idx);
}

Test(loader, sharded_equals_single_file)
{
	struct tset s;
	tset_load(&s, "neox-tiny");
	char *d = tmpdir_new();
	write_config("neox-tiny", d, NULL);
	write_two_shards(&s, d);
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
	s.t[s.n++] = (struct st_out){ "gpt_neox.layers.1.attention.rotary_emb.inv_freq", "F32", 1,
				      { 2 }, inv, 8 };
	char *d = tmpdir_new();
	write_config("neox-tiny", d, NULL);
	tset_write(&s, d, "model.safetensors");
	expect_same_as_neox_tiny(d, "unused buffers must not change the fingerprint");
	tmpdir_free(d);
	tset_free(&s);
}

static void llama_inv_freq(struct tset *s)
{
	float *inv = tset_alloc(s, 16);
	s->t[s->n++] = (struct st_out){ "model.layers.0.self_attn.rotary_emb.inv_freq", "F32", 1,
					{ 4 }, inv, 16 };
}

Test(loader, llama_rotary_buffer_is_tolerated)
{
	char *d = variant("llama-tiny-gqa", NULL, llama_inv_freq);
	struct pfx_model *m = load_model_dir(d, 1);
	pfx_model_free(m);
	tmpdir_free(d);
}

/* ==== Tensors the config does not use ==== */

static void one_layer(json_object *j)
{
	json_object_object_add(j, "num_hidden_layers", json_object_new_int(1));
}
static void stray_tensor(struct tset *s)
{
	float *w = tset_alloc(s, 16);
	s->t[s->n++] = (struct st_out){ "gpt_neox.layers.0.attention.extra.weight", "F32", 1,
					{ 4 }, w, 16 };
}
/* A buffer name of a legacy layer buffer, but outside the layers. */
static void misplaced_buffer(struct tset *s)
{
	float *w = tset_alloc(s, 8);
	s->t[s->n++] = (struct st_out){ "gpt_neox.attention.rotary_emb.inv_freq", "F32", 1,
					{ 2 }, w, 8 };
}

/* The last layer's weights would be ignored and the logits wrong. */
Test(loader, rejects_a_config_with_fewer_layers_than_the_weights)
{
	char *d = variant("neox-tiny", one_layer, NULL);
	expect_reject(d, -EINVAL, "gpt_neox.layers.1.", "(GPTNeoXForCausalLM, 1 layer) does not use");
	tmpdir_free(d);
}

Test(loader, rejects_tensors_nothing_uses)
{
	char *d = variant("neox-tiny", NULL, stray_tensor);
	expect_reject(d, -EINVAL, "'gpt_neox.layers.0.attention.extra.weight'", "1 tensor that");
	tmpdir_free(d);
	d = variant("neox-tiny", NULL, misplaced_buffer);
	expect_reject(d, -EINVAL, "'gpt_neox.attention.rotary_emb.inv_freq'", "does not use");
	tmpdir_free(d);
}

/* Every shard is looked at, not the first only: the stray tensor is last,
 * so in the second. */
Test(loader, rejects_tensors_nothing_uses_in_any_shard)
{
	struct tset s;
	tset_load(&s, "neox-tiny");
	stray_tensor(&s);
	char *d = tmpdir_new();
	write_config("neox-tiny", d, NULL);
	write_two_shards(&s, d);
	expect_reject(d, -EINVAL, "'gpt_neox.layers.0.attention.extra.weight'", "does not use");
	tmpdir_free(d);
	tset_free(&s);
}

static void tie(json_object *j)
{
	json_object_object_add(j, "tie_word_embeddings", json_object_new_boolean(1));
}

/* A tied head may still be stored (transformers saves it): unused, not
 * refused. */
Test(loader, tied_head_stored_is_accepted)
{
	char *d = variant("neox-tiny", tie, NULL);
	struct pfx_model *m = load_model_dir(d, 1);
	cr_expect(pfx_model_config(m)->tied_embeddings);
	cr_expect_eq(m->w.lm_head.p, m->w.embed.p);
	pfx_model_free(m);
	tmpdir_free(d);
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
	cr_expect_eq(m->w.lm_head.p, m->w.embed.p);
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
	cr_expect_eq(pfx_kv_bytes_per_token(&c, PFX_KV_F32), 2 * 30 * 3 * 64 * 4);
	cr_expect_eq(pfx_kv_bytes_per_token(&c, PFX_KV_F16), 2 * 30 * 3 * 64 * 2);
	cr_expect_eq(pfx_kv_bytes_per_token(&c, PFX_KV_BF16), 2 * 30 * 3 * 64 * 2);
	struct pfx_model *m = load_fixture_model("llama-tiny-gqa");
	cr_expect_eq(pfx_kv_bytes_per_token(pfx_model_config(m), PFX_KV_F32), 2 * 2 * 2 * 16 * 4);
	cr_expect_eq(pfx_model_kv_dtype(m), PFX_KV_F32, "f32 unless asked");
	pfx_model_free(m);
}

/* ==== Rejections ==== */

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

/* model.safetensors as given: length, header, then data_len zero bytes. */
static void write_raw_data(const char *dir, const void *hdr_json, size_t hlen, uint64_t declared,
			   size_t data_len)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	FILE *fp = fopen(path, "wb");
	cr_assert(fp);
	uint8_t len[8];
	for (int i = 0; i < 8; i++)
		len[i] = (uint8_t)(declared >> (8 * i));
	fwrite(len, 1, 8, fp);
	fwrite(hdr_json, 1, hlen, fp);
	uint8_t *data = calloc(1, data_len + 1);
	fwrite(data, 1, data_len, fp);
	free(data);
	fclose(fp);
}

static void write_raw(const char *dir, const void *hdr_json, size_t hlen, uint64_t declared)
{
	write_raw_data(dir, hdr_json, hlen, declared, 64);
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
	/* A valid file with no tensors (and no data): the first bound tensor is missing. */
	write_raw_data(d, "{}", 2, 2, 0);
	expect_reject(d, -EINVAL, "missing tensor", "gpt_neox.embed_in.weight");
	tmpdir_free(d);
}

/* How write_layout departs from st_write's contiguous layout. */
struct layout {
	const char *alias, *target; /* alias gets target's data_offsets; its bytes are not written */
	const char *gap_before;     /* gap zero bytes before this tensor, */
	size_t gap;                 /* or after the last one when gap_before is NULL */
	bool reverse_header;        /* the header lists the tensors in reverse data order */
};

static void write_layout(struct tset *s, const char *dir, const struct layout *l)
{
	int64_t (*off)[2] = calloc(s->n, sizeof(*off));
	int64_t pos = 0;
	for (size_t i = 0; i < s->n; i++) {
		if (l->gap_before && !strcmp(s->t[i].name, l->gap_before))
			pos += (int64_t)l->gap;
		if (l->alias && !strcmp(s->t[i].name, l->alias))
			continue;
		off[i][0] = pos;
		off[i][1] = pos += (int64_t)s->t[i].nbytes;
	}
	if (l->alias) {
		size_t a = (size_t)(tset_get(s, l->alias) - s->t), t = (size_t)(tset_get(s, l->target) - s->t);
		off[a][0] = off[t][0];
		off[a][1] = off[t][1];
	}
	json_object *h = json_object_new_object();
	for (size_t k = 0; k < s->n; k++) {
		size_t i = l->reverse_header ? s->n - 1 - k : k;
		json_object *e = json_object_new_object(), *shape = json_object_new_array();
		json_object *o = json_object_new_array();
		for (int d = 0; d < s->t[i].ndim; d++)
			json_object_array_add(shape, json_object_new_int64(s->t[i].shape[d]));
		json_object_array_add(o, json_object_new_int64(off[i][0]));
		json_object_array_add(o, json_object_new_int64(off[i][1]));
		json_object_object_add(e, "dtype", json_object_new_string(s->t[i].dtype));
		json_object_object_add(e, "shape", shape);
		json_object_object_add(e, "data_offsets", o);
		json_object_object_add(h, s->t[i].name, e);
	}
	const char *js = json_object_to_json_string_ext(h, JSON_C_TO_STRING_PLAIN);
	size_t jl = strlen(js), padded = (jl + 7) & ~(size_t)7;
	char path[512];
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	FILE *fp = fopen(path, "wb");
	cr_assert(fp);
	for (int i = 0; i < 8; i++)
		fputc((int)((padded >> (8 * i)) & 0xff), fp);
	fputs(js, fp);
	for (size_t i = jl; i < padded; i++)
		fputc(' ', fp);
	for (size_t i = 0; i < s->n; i++) {
		if (l->gap_before && !strcmp(s->t[i].name, l->gap_before))
			for (size_t g = 0; g < l->gap; g++)
				fputc(0, fp);
		if (!l->alias || strcmp(s->t[i].name, l->alias))
			fwrite(s->t[i].data, 1, s->t[i].nbytes, fp);
	}
	for (size_t g = 0; !l->gap_before && g < l->gap; g++)
		fputc(0, fp);
	cr_assert_eq(fclose(fp), 0);
	json_object_put(h);
	free(off);
}

static char *layout_variant(const char *model, const struct layout *l)
{
	struct tset s;
	tset_load(&s, model);
	char *d = tmpdir_new();
	write_config(model, d, NULL);
	write_layout(&s, d, l);
	tset_free(&s);
	return d;
}

/* The checks below must not refuse what the reference implementation reads:
 * a header in any order, and zero-byte tensors between others. */
Test(loader, accepts_header_order_and_empty_tensors)
{
	struct tset s;
	tset_load(&s, "neox-tiny");
	static const float none[1];
	/* Named as buffers the loader tolerates unused (extra_tensors_are_tolerated). */
	s.t[s.n++] = (struct st_out){ "gpt_neox.layers.0.attention.masked_bias", "F32", 1,
				      { 0 }, none, 0 };
	s.t[s.n++] = (struct st_out){ "gpt_neox.layers.1.attention.bias", "F32", 2,
				      { 4, 0 }, none, 0 };
	struct st_out moved = s.t[3]; /* one empty tensor amid the data, one near its end */
	s.t[3] = s.t[s.n - 1];
	s.t[s.n - 1] = moved;
	char *d = tmpdir_new();
	write_config("neox-tiny", d, NULL);
	write_layout(&s, d, &(struct layout){ .reverse_header = true });
	expect_same_as_neox_tiny(d, "header order and empty buffers must not change the fingerprint");
	tmpdir_free(d);
	tset_free(&s);
}

/* Overlapping tensors used to load: two names for the same bytes. */
Test(loader, rejects_overlapping_tensors)
{
	char *d = layout_variant("neox-tiny", &(struct layout){ .alias = "embed_out.weight",
								 .target = "gpt_neox.embed_in.weight" });
	expect_reject(d, -EINVAL, "tensors 'embed_out.weight' [", "and 'gpt_neox.embed_in.weight' [");
	expect_reject(d, -EINVAL, "model.safetensors: ", "overlap");
	tmpdir_free(d);

	d = tmpdir_new();
	write_config("neox-tiny", d, NULL);
	/* Partly, listed out of order: found after sorting by start. */
	const char *partial =
		"{\"b\": {\"dtype\": \"F32\", \"shape\": [16], \"data_offsets\": [32, 96]}, "
		"\"a\": {\"dtype\": \"F32\", \"shape\": [16], \"data_offsets\": [0, 64]}}";
	write_raw_data(d, partial, strlen(partial), strlen(partial), 96);
	expect_reject(d, -EINVAL, "model.safetensors: tensors 'a' [0, 64) and 'b' [32, 96) overlap",
		      NULL);
	/* A zero-byte tensor inside another (the reference implementation refuses it too). */
	const char *inside =
		"{\"a\": {\"dtype\": \"F32\", \"shape\": [16], \"data_offsets\": [0, 64]}, "
		"\"z\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [32, 32]}}";
	write_raw_data(d, inside, strlen(inside), strlen(inside), 64);
	expect_reject(d, -EINVAL, "tensor 'z' [32, 32) lies inside tensor 'a' [0, 64)", NULL);
	tmpdir_free(d);
}

/* As huggingface/safetensors (Metadata::validate, MetadataIncompleteBuffer):
 * every data byte belongs to exactly one tensor. */
Test(loader, rejects_data_holes)
{
	char *d = layout_variant("neox-tiny", &(struct layout){
		.gap_before = "gpt_neox.layers.0.attention.dense.weight", .gap = 64 });
	expect_reject(d, -EINVAL, "belong to no tensor", "holes");
	expect_reject(d, -EINVAL, "between tensors '", "and 'gpt_neox.layers.0.attention.dense.weight'");
	tmpdir_free(d);

	d = layout_variant("neox-tiny", &(struct layout){ .gap = 16 });
	expect_reject(d, -EINVAL, "belong to no tensor", "cover the data to its end");
	tmpdir_free(d);

	d = tmpdir_new();
	write_config("neox-tiny", d, NULL);
	const char *late = "{\"a\": {\"dtype\": \"F32\", \"shape\": [16], \"data_offsets\": [8, 72]}}";
	write_raw_data(d, late, strlen(late), strlen(late), 72);
	expect_reject(d, -EINVAL, "model.safetensors: data bytes [0, 8) before tensor 'a' belong to no tensor",
		      NULL);
	write_raw_data(d, "{}", 2, 2, 64);
	expect_reject(d, -EINVAL, "data bytes [0, 64) belong to no tensor", "lists none");
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
	json_object_object_add(r, "type", json_object_new_string("yarn"));
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
	expect_reject(d, -EINVAL, "\"num_attention_heads\" = 4 is not a multiple of \"num_key_value_heads\" = 3",
		      NULL);
	tmpdir_free(d);
	d = variant("llama-tiny-gqa", string_hidden, NULL);
	expect_reject(d, -EINVAL, "hidden_size", "integer");
	tmpdir_free(d);
	d = variant("llama-tiny-gqa", no_layers, NULL);
	expect_reject(d, -EINVAL, "num_hidden_layers", "missing");
	tmpdir_free(d);
}

/* ==== Config values that shapes derive from ====
 * Checkpoints written for a config as given, with every tensor shaped as
 * bind expects for it, so that only the config check under test can refuse. */

static void write_checkpoint(const char *dir, const struct pfx_config *c,
			     void (*patch)(json_object *))
{
	const struct arch *a = arch_find(c->arch);
	cr_assert(a);
	json_object *j = json_object_new_object(), *archs = json_object_new_array();
	json_object_array_add(archs, json_object_new_string(a->name));
	json_object_object_add(j, "architectures", archs);
	a->write_config(c, j);
	if (patch)
		patch(j);
	char path[512];
	snprintf(path, sizeof(path), "%s/config.json", dir);
	cr_assert_eq(json_object_to_file(path, j), 0);
	json_object_put(j);
	struct tensor_desc *desc;
	size_t n;
	cr_assert_eq(arch_describe(a, c, &desc, &n), 0);
	struct st_out *out = calloc(n, sizeof(*out));
	for (size_t i = 0; i < n; i++) {
		size_t numel = (size_t)desc[i].shape[0] * (desc[i].ndim > 1 ? (size_t)desc[i].shape[1] : 1);
		float *w = malloc(numel * sizeof(float) + 1);
		for (size_t k = 0; k < numel; k++)
			w[k] = (float)((k * 7 + i) % 13) / 64.0f - 0.09f;
		out[i] = (struct st_out){ desc[i].name, "F32", desc[i].ndim,
					  { desc[i].shape[0], desc[i].shape[1] }, w, numel * sizeof(float) };
	}
	struct pfx_error err;
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	cr_assert_eq(st_write(path, out, n, &err), 0, "%s", err.msg);
	for (size_t i = 0; i < n; i++)
		free((void *)out[i].data);
	free(out);
	free(desc);
}

static struct pfx_config small_neox(int hidden, int heads, int rotary_dim)
{
	return (struct pfx_config){
		.arch = "GPTNeoXForCausalLM", .hidden = hidden, .n_layers = 1, .n_heads = heads,
		.n_kv_heads = heads, .head_dim = hidden / heads, .intermediate = 32, .vocab = 16,
		.max_positions = 64, .rotary_dim = rotary_dim, .rope_base = 10000,
		.norm_eps = 1e-5f, .act = PFX_ACT_GELU, .parallel_residual = true, .attn_bias = true,
	};
}

static struct pfx_config small_llama(int hidden, int heads, int kv_heads, int head_dim)
{
	return (struct pfx_config){
		.arch = "LlamaForCausalLM", .hidden = hidden, .n_layers = 1, .n_heads = heads,
		.n_kv_heads = kv_heads, .head_dim = head_dim, .intermediate = 32, .vocab = 16,
		.max_positions = 64, .rotary_dim = head_dim, .rope_base = 10000, .norm_eps = 1e-5f,
		.act = PFX_ACT_SILU,
	};
}

/* Loads the checkpoint of c (config patched) and returns its parsed config. */
static struct pfx_config load_config_of(const struct pfx_config *c, void (*patch)(json_object *))
{
	char *d = tmpdir_new();
	write_checkpoint(d, c, patch);
	struct pfx_model *m = load_model_dir(d, 1);
	struct pfx_config got = *pfx_model_config(m);
	pfx_model_free(m);
	tmpdir_free(d);
	return got;
}

static void reject_config(const struct pfx_config *c, void (*patch)(json_object *),
			  const char *must1, const char *must2)
{
	char *d = tmpdir_new();
	write_checkpoint(d, c, patch);
	expect_reject(d, -EINVAL, must1, must2);
	tmpdir_free(d);
}

static void rotary_pct_5_16(json_object *j) { json_object_object_add(j, "rotary_pct", json_object_new_double(0.3125)); }
static void rotary_pct_029(json_object *j) { json_object_object_add(j, "rotary_pct", json_object_new_double(0.29)); }
static void no_head_dim(json_object *j) { json_object_object_del(j, "head_dim"); }
static void kv_heads_0(json_object *j) { json_object_object_add(j, "num_key_value_heads", json_object_new_int(0)); }

Test(loader, neox_hidden_size_must_divide_into_heads)
{
	/* Used to load with head size 16 over 64 of the 66 columns. */
	struct pfx_config c = small_neox(66, 4, 4);
	reject_config(&c, NULL, "\"hidden_size\" = 66 is not divisible by \"num_attention_heads\" = 4",
		      "hidden_size % num_attention_heads == 0");
	c = small_neox(64, 4, 4); /* the same checkpoint writer, valid sizes */
	cr_expect_eq(load_config_of(&c, NULL).head_dim, 16);
}

Test(loader, neox_rotary_dim_must_be_even)
{
	struct pfx_config c = small_neox(64, 4, 4);
	reject_config(&c, rotary_pct_5_16, "\"rotary_pct\" = 0.3125 gives int(16 * 0.3125) = 5",
		      "must be even");
	/* transformers' int(head_size * rotary_pct) is in double: 100 * 0.29 is
	 * 28.999..., so 28 (in float it would round up to 29, odd, and refused). */
	c = small_neox(400, 4, 28);
	cr_expect_eq(load_config_of(&c, rotary_pct_029).rotary_dim, 28);
}

Test(loader, llama_head_dim)
{
	/* hidden_size 66 over 4 heads: only an explicit head_dim says what is meant. */
	struct pfx_config c = small_llama(66, 4, 2, 16);
	reject_config(&c, no_head_dim,
		      "\"hidden_size\" = 66 is not divisible by \"num_attention_heads\" = 4 and \"head_dim\" is not set",
		      "head_dim given");
	char *d = tmpdir_new();
	write_checkpoint(d, &c, NULL);
	struct pfx_model *m = load_model_dir(d, 1);
	cr_expect_eq(pfx_model_config(m)->head_dim, 16, "explicit head_dim 16 with hidden_size 66");
	const int32_t tok[] = { 1, 5, 9 };
	float *l = logits_uncached(m, tok, 3);
	for (size_t i = 0; i < 3 * 16; i++)
		cr_assert(isfinite(l[i]), "logit %zu is %g", i, l[i]);
	free(l);
	pfx_model_free(m);
	tmpdir_free(d);
	c = small_llama(64, 4, 2, 15);
	reject_config(&c, NULL, "\"head_dim\" = 15 is odd", "must be even");
	c = small_llama(60, 4, 2, 15);
	reject_config(&c, NULL, "head size 15 = \"hidden_size\" 60 / \"num_attention_heads\" 4 is odd",
		      "must be even");
	c = small_llama(64, 4, 2, 0);
	reject_config(&c, NULL, "\"head_dim\" = 0", "at least 1");
}

Test(loader, llama_query_heads_must_group_over_kv_heads)
{
	/* Shapes consistent with 3 key/value heads of 16. */
	struct pfx_config c = small_llama(64, 4, 3, 16);
	reject_config(&c, NULL, "\"num_attention_heads\" = 4 is not a multiple of \"num_key_value_heads\" = 3",
		      "num_attention_heads % num_key_value_heads == 0");
	c = small_llama(64, 4, 2, 16);
	reject_config(&c, kv_heads_0, "\"num_key_value_heads\" = 0", "at least 1");
	cr_expect_eq(load_config_of(&c, NULL).n_kv_heads, 2);
}

static const char *zero_key;
static void set_zero(json_object *j) { json_object_object_add(j, zero_key, json_object_new_int(0)); }

Test(loader, sizes_must_be_positive)
{
	static const char *const keys[] = { "hidden_size", "num_hidden_layers", "num_attention_heads",
					    "intermediate_size", "vocab_size" };
	static const char *const models[] = { "neox-tiny", "llama-tiny-gqa" };
	for (size_t m = 0; m < 2; m++)
		for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
			char want[96];
			zero_key = keys[i];
			snprintf(want, sizeof(want), "\"%s\" = 0; it must be at least 1", keys[i]);
			char *d = variant(models[m], set_zero, NULL);
			expect_reject(d, -EINVAL, want, NULL);
			tmpdir_free(d);
		}
}

static void kv_heads_4(json_object *j) { json_object_object_add(j, "num_key_value_heads", json_object_new_int(4)); }
static void head_dim_8(json_object *j) { json_object_object_add(j, "head_dim", json_object_new_int(8)); }
static void intermediate_128(json_object *j) { json_object_object_add(j, "intermediate_size", json_object_new_int(128)); }
static void vocab_500(json_object *j) { json_object_object_add(j, "vocab_size", json_object_new_int(500)); }

/* A valid config that does not describe the checkpoint's tensors. */
Test(loader, rejects_tensors_that_disagree_with_config)
{
	char *d = variant("llama-tiny-gqa", kv_heads_4, NULL);
	expect_reject(d, -EINVAL, "'model.layers.0.self_attn.k_proj.weight' has shape [32, 64]",
		      "expected [64, 64]");
	tmpdir_free(d);
	d = variant("llama-tiny-gqa", head_dim_8, NULL);
	expect_reject(d, -EINVAL, "'model.layers.0.self_attn.q_proj.weight' has shape [64, 64]",
		      "expected [32, 64]");
	tmpdir_free(d);
	d = variant("neox-tiny", intermediate_128, NULL);
	expect_reject(d, -EINVAL, "'gpt_neox.layers.0.mlp.dense_h_to_4h.weight' has shape [256, 64]",
		      "expected [128, 64]");
	tmpdir_free(d);
	d = variant("neox-tiny", vocab_500, NULL);
	expect_reject(d, -EINVAL, "'gpt_neox.embed_in.weight' has shape [512, 64]", "expected [500, 64]");
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
