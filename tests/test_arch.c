/* SPDX-License-Identifier: MIT */
/*
 * What the newer architectures read from config.json: rope_scaling as
 * transformers computes it, the defaults transformers gives a key left out,
 * and every option not implemented refused by name. (Their logits against
 * transformers are test_fixtures.c's.)
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "model_impl.h"

/* A copy of fixture `model` (weights linked) whose config.json gets
 * `key` = the JSON `value` ("null" sets null, NULL removes the key). */
static char *variant(const char *model, const char *key, const char *value)
{
	char *d = strdup("/tmp/pfx-arch-XXXXXX"), path[512], src[512];
	cr_assert(mkdtemp(d));
	snprintf(src, sizeof(src), "%s/%s/model.safetensors", fixtures_dir(), model);
	snprintf(path, sizeof(path), "%s/model.safetensors", d);
	cr_assert_eq(symlink(src, path), 0);
	snprintf(src, sizeof(src), "%s/%s/config.json", fixtures_dir(), model);
	json_object *j = json_object_from_file(src);
	cr_assert(j);
	if (value)
		json_object_object_add(j, key, json_tokener_parse(value));
	else
		json_object_object_del(j, key);
	snprintf(path, sizeof(path), "%s/config.json", d);
	cr_assert_eq(json_object_to_file(path, j), 0);
	json_object_put(j);
	return d;
}

static void variant_free(char *d)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/model.safetensors", d);
	unlink(path);
	snprintf(path, sizeof(path), "%s/config.json", d);
	unlink(path);
	rmdir(d);
	free(d);
}

static void expect_refused(const char *model, const char *key, const char *value, int code,
			   const char *must1, const char *must2)
{
	char *d = variant(model, key, value);
	struct pfx_model *m = NULL;
	struct pfx_error err = { "" };
	int rc = pfx_model_load(d, NULL, &m, &err);
	cr_expect_eq(rc, code, "%s with %s = %s: rc %d (%s)", model, key, value, rc, err.msg);
	cr_expect_null(m);
	cr_expect(strstr(err.msg, must1), "message lacks '%s': %s", must1, err.msg);
	if (must2)
		cr_expect(strstr(err.msg, must2), "message lacks '%s': %s", must2, err.msg);
	pfx_model_free(m);
	variant_free(d);
}

/* The first tokens' logits of fixture `model` with key = value. */
static float *logits_with(const char *model, const char *key, const char *value, size_t *nl)
{
	char *d = variant(model, key, value);
	struct pfx_model *m = load_model_dir(d, 2);
	size_t n;
	int32_t *tok = expected_i32(model, "tokens", &n);
	float *l = logits_uncached(m, tok, 8);
	*nl = 8 * (size_t)pfx_model_config(m)->vocab;
	free(tok);
	pfx_model_free(m);
	variant_free(d);
	return l;
}

/* llama3: the exact float32 frequencies transformers used (expected.json). */
Test(arch, llama3_frequencies_are_transformers_own)
{
	struct pfx_model *m = load_fixture_model("llama3-tiny-ropescaled");
	const struct pfx_config *c = pfx_model_config(m);
	cr_expect_eq(c->rope_scaling.type, PFX_ROPE_LLAMA3);
	char path[512];
	snprintf(path, sizeof(path), "%s/llama3-tiny-ropescaled/expected.json", fixtures_dir());
	json_object *j = json_object_from_file(path), *checks, *want;
	cr_assert(j && json_object_object_get_ex(j, "architecture_checks", &checks) &&
		  json_object_object_get_ex(checks, "rope_inv_freq_used_float32", &want));
	int half = c->rotary_dim / 2;
	cr_assert_eq((int)json_object_array_length(want), half);
	float got[512];
	rope_inv_freq(c, got);
	for (int i = 0; i < half; i++) {
		float w = (float)json_object_get_double(json_object_array_get_idx(want, (size_t)i));
		cr_expect_eq(got[i], w, "inv_freq[%d] = %.9g, transformers used %.9g", i, got[i], w);
	}
	json_object_put(j);
	pfx_model_free(m);
}

/* linear divides every frequency by factor; dynamic (NTK) changes nothing
 * below max_position_embeddings, which no session passes. */
Test(arch, linear_and_dynamic_scaling)
{
	struct pfx_config c = { .rotary_dim = 16, .rope_base = 10000.0f };
	float plain[8], lin[8], dyn[8];
	rope_inv_freq(&c, plain);
	c.rope_scaling = (struct pfx_rope_scaling){ .type = PFX_ROPE_LINEAR, .factor = 4.0f };
	rope_inv_freq(&c, lin);
	c.rope_scaling.type = PFX_ROPE_DYNAMIC;
	rope_inv_freq(&c, dyn);
	for (int i = 0; i < 8; i++) {
		cr_expect_eq(lin[i], plain[i] / 4.0f);
		cr_expect_eq(dyn[i], plain[i]);
	}
	size_t nl, nd;
	float *a = logits_with("llama-tiny-gqa", "rope_scaling", "{\"type\": \"dynamic\", \"factor\": 2.0}", &nl);
	float *b = logits_with("llama-tiny-gqa", "rope_scaling", "null", &nd);
	cr_expect_eq(max_abs_diff(a, b, nl), 0.0f);
	free(a);
	a = logits_with("llama-tiny-gqa", "rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 2.0}", &nl);
	cr_expect_gt(max_abs_diff(a, b, nl), 1e-3f, "linear scaling changes the logits");
	free(a);
	free(b);
}

Test(arch, rope_scaling_is_checked)
{
	expect_refused("llama-tiny-gqa", "rope_scaling", "{\"type\": \"yarn\", \"factor\": 4.0}",
		       -ENOTSUP, "\"rope_scaling\" of type \"yarn\"", "not supported");
	expect_refused("llama-tiny-gqa", "rope_scaling", "{\"rope_type\": \"linear\"}", -EINVAL,
		       "\"rope_scaling\" has no \"factor\"", NULL);
	expect_refused("llama-tiny-gqa", "rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 0.5}",
		       -EINVAL, "at least 1", NULL);
	expect_refused("llama3-tiny-ropescaled", "rope_scaling",
		       "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0, \"high_freq_factor\": 1.0, \"original_max_position_embeddings\": 128}",
		       -EINVAL, "\"high_freq_factor\" = 1 must be larger", NULL);
	expect_refused("llama3-tiny-ropescaled", "rope_scaling",
		       "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0}",
		       -EINVAL, "no \"original_max_position_embeddings\"", NULL);
	expect_refused("llama-tiny-gqa", "rope_scaling", "[1]", -EINVAL, "must be an object", NULL);
	/* Where transformers would ignore it, it is refused, never ignored. */
	expect_refused("mistral-tiny-swa", "rope_scaling", "{\"type\": \"linear\", \"factor\": 2.0}",
		       -ENOTSUP, "\"rope_scaling\" is set", NULL);
	expect_refused("gemma-tiny", "rope_scaling", "{\"type\": \"linear\", \"factor\": 2.0}",
		       -ENOTSUP, "\"rope_scaling\" is set", NULL);
	expect_refused("neox-tiny", "rope_scaling", "{\"type\": \"linear\", \"factor\": 2.0}",
		       -ENOTSUP, "\"rope_scaling\" is set", NULL);
	expect_refused("phi3-tiny", "rope_scaling",
		       "{\"type\": \"longrope\", \"short_factor\": [1], \"long_factor\": [2]}", -ENOTSUP,
		       "\"rope_scaling\" of type \"longrope\"", "Phi-3");
	expect_refused("phi3-tiny", "partial_rotary_factor", "0.75", -ENOTSUP,
		       "\"partial_rotary_factor\" is set", NULL);
	expect_refused("llama-tiny-gqa", "partial_rotary_factor", "0.5", -ENOTSUP,
		       "\"partial_rotary_factor\" is set", NULL);
}

Test(arch, options_not_implemented_are_refused_by_name)
{
	expect_refused("qwen2-tiny", "use_sliding_window", "true", -ENOTSUP, "\"use_sliding_window\"",
		       "not supported");
	expect_refused("gemma-tiny", "attn_logit_softcapping", "50.0", -ENOTSUP,
		       "\"attn_logit_softcapping\" is set", NULL);
	expect_refused("gemma-tiny", "final_logit_softcapping", "30.0", -ENOTSUP,
		       "\"final_logit_softcapping\" is set", NULL);
	expect_refused("gemma-tiny", "architectures", "[\"Gemma2ForCausalLM\"]", -ENOTSUP,
		       "'Gemma2ForCausalLM' is not supported", "soft-capping");
	expect_refused("qwen2-tiny", "architectures", "[\"Qwen3ForCausalLM\"]", -ENOTSUP,
		       "'Qwen3ForCausalLM' is not supported", "RMSNorm of queries and keys");
	expect_refused("neox-tiny", "architectures", "[\"GPT2LMHeadModel\"]", -ENOTSUP,
		       "'GPT2LMHeadModel' is not supported", "MistralForCausalLM, Phi3ForCausalLM");
	expect_refused("mistral-tiny-swa", "sliding_window", "0", -EINVAL, "\"sliding_window\" = 0",
		       NULL);
	expect_refused("qwen2-tiny", "head_dim", "32", -EINVAL, "\"head_dim\" = 32 disagrees", NULL);
}

/* What a key left out means is what transformers' config class says. */
Test(arch, defaults_are_transformers)
{
	struct pfx_model *m = load_fixture_model("gemma-tiny");
	const struct pfx_config *c = pfx_model_config(m);
	cr_expect(c->tied_embeddings, "Gemma's configs leave out tie_word_embeddings: true");
	cr_expect(c->norm_plus_one);
	cr_expect_eq(c->embed_scale, 8.0f);
	cr_expect_eq(c->act, PFX_ACT_GELU_TANH);
	pfx_model_free(m);
	m = load_fixture_model("mistral-tiny-swa");
	cr_expect_eq(pfx_model_config(m)->sliding_window, 16);
	pfx_model_free(m);

	char *d = variant("mistral-tiny-swa", "sliding_window", NULL);
	m = load_model_dir(d, 1);
	cr_expect_eq(pfx_model_config(m)->sliding_window, 4096, "MistralConfig's default window");
	pfx_model_free(m);
	variant_free(d);
	d = variant("mistral-tiny-swa", "sliding_window", "null");
	m = load_model_dir(d, 1);
	cr_expect_eq(pfx_model_config(m)->sliding_window, 0, "null: no window");
	pfx_model_free(m);
	variant_free(d);
	/* GemmaConfig's head_dim is 256: 4 heads of it do not fit these weights. */
	expect_refused("gemma-tiny", "head_dim", NULL, -EINVAL, "q_proj.weight' has shape [128, 64]",
		       "expected [1024, 64]");
}

/* Gemma's MLP takes hidden_activation; without it the tanh GELU, whatever
 * hidden_act says. */
Test(arch, gemma_activation_is_hidden_activation)
{
	size_t n;
	float *ref = logits_with("gemma-tiny", "hidden_act", "\"gelu\"", &n);
	float *absent = logits_with("gemma-tiny", "hidden_activation", NULL, &n);
	float *erf = logits_with("gemma-tiny", "hidden_activation", "\"gelu\"", &n);
	size_t nl;
	float *want = expected_f32("gemma-tiny", "logits_full", &nl);
	cr_expect_leq(max_abs_diff(ref, want, n), TOL_LOGITS, "hidden_act is not what Gemma uses");
	cr_expect_eq(max_abs_diff(absent, ref, n), 0.0f, "no hidden_activation: the tanh GELU");
	cr_expect_gt(max_abs_diff(erf, ref, n), 1e-3f, "hidden_activation gelu: the exact GELU");
	free(want);
	free(ref);
	free(absent);
	free(erf);
}

/* A model is its config too: the same weights with another window or rope
 * scaling never share KV blocks. */
Test(arch, fingerprint_covers_the_new_options)
{
	char a[65], b[65];
	struct pfx_model *m = load_fixture_model("mistral-tiny-swa");
	pfx_model_fingerprint_hex(m, a);
	pfx_model_free(m);
	char *d = variant("mistral-tiny-swa", "sliding_window", "17");
	m = load_model_dir(d, 1);
	pfx_model_fingerprint_hex(m, b);
	cr_expect_str_neq(a, b);
	pfx_model_free(m);
	variant_free(d);
	m = load_fixture_model("llama-tiny-gqa");
	pfx_model_fingerprint_hex(m, a);
	pfx_model_free(m);
	d = variant("llama-tiny-gqa", "rope_scaling", "{\"type\": \"linear\", \"factor\": 2.0}");
	m = load_model_dir(d, 1);
	pfx_model_fingerprint_hex(m, b);
	cr_expect_str_neq(a, b);
	pfx_model_free(m);
	variant_free(d);
}

/* prefix-run info says what a model is; --help which architectures load. */
Test(arch, info_tells_what_a_model_is)
{
	static const struct {
		const char *model, *want[4];
	} cases[] = {
		{ "llama3-tiny-ropescaled",
		  { "LlamaForCausalLM",
		    "llama3 scaling (factor 8, low_freq_factor 1, high_freq_factor 4, original context 128)",
		    "embeddings       tied", "biases           none" } },
		{ "qwen2-tiny", { "Qwen2ForCausalLM", "biases           q/k/v projections", "tied", "base 1e+06" } },
		{ "mistral-tiny-swa",
		  { "MistralForCausalLM", "sliding window: each position sees the last 16", "untied",
		    "SwiGLU" } },
		{ "phi3-tiny", { "Phi3ForCausalLM", "fused: q/k/v in qkv_proj, gate/up in gate_up_proj",
				 "no scaling", "untied" } },
		{ "gemma-tiny", { "GemmaForCausalLM", "RMSNorm scaled by (1 + weight)", "GeGLU: tanh GELU",
				  "scaled by 8 (sqrt of hidden)" } },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cmd_result r = run("info --model %s/%s --socket /nonexistent/sock 2>/dev/null",
					  fixtures_dir(), cases[i].model);
		for (size_t k = 0; k < 4; k++)
			cr_expect(strstr(r.out, cases[i].want[k]), "%s: info lacks '%s':\n%s",
				  cases[i].model, cases[i].want[k], r.out);
	}
	struct cmd_result r = run("--help");
	cr_expect_eq(r.status, 0);
	const char *archs[] = { "LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM",
				"Phi3ForCausalLM", "GemmaForCausalLM", "GPTNeoXForCausalLM" };
	const char *at = strstr(r.out, "architectures (");
	cr_assert(at, "%s", r.out);
	for (size_t k = 0; k < 6; k++)
		cr_expect(strstr(at, archs[k]), "--help lacks %s:\n%s", archs[k], at);
}
