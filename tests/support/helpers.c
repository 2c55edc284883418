/* SPDX-License-Identifier: MIT */
/* Shared helpers for the Criterion suites. */
#include "helpers.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "kernels.h"
#include "safetensors.h"
#include "st_write.h"

const char *fixtures_dir(void)
{
	return FIXTURES_DIR;
}

static struct pfx_model *load(const char *dir, int threads, int block_tokens)
{
	struct pfx_model_opts o = { .threads = threads, .block_tokens = block_tokens };
	struct pfx_error err = { "" };
	struct pfx_model *m = NULL;
	int rc = pfx_model_load(dir, &o, &m, &err);
	cr_assert_eq(rc, 0, "loading %s: %s", dir, err.msg);
	return m;
}

struct pfx_model *load_model_dir(const char *dir, int threads)
{
	return load(dir, threads, 0);
}

struct pfx_model *load_fixture_model_bt(const char *name, int block_tokens)
{
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/%s", fixtures_dir(), name);
	return load(dir, 2, block_tokens);
}

struct pfx_model *load_fixture_model(const char *name)
{
	return load_fixture_model_bt(name, 0);
}

struct pfx_model *load_model_opts(const char *dir, const struct pfx_model_opts *o)
{
	char path[512];
	if (strchr(dir, '/'))
		snprintf(path, sizeof(path), "%s", dir);
	else
		snprintf(path, sizeof(path), "%s/%s", fixtures_dir(), dir);
	struct pfx_error err = { "" };
	struct pfx_model *m = NULL;
	int rc = pfx_model_load(path, o, &m, &err);
	cr_assert_eq(rc, 0, "loading %s: %s", path, err.msg);
	return m;
}

void expect_opts_refused(const struct pfx_model_opts *o, const char *why)
{
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/llama-tiny-gqa", fixtures_dir());
	struct pfx_model *m = NULL;
	struct pfx_error err = { "" };
	cr_expect_eq(pfx_model_load(dir, o, &m, &err), -EINVAL);
	cr_expect_null(m);
	cr_expect(strstr(err.msg, why), "%s", err.msg);
}

int32_t *random_tokens(size_t n, int V, uint64_t seed)
{
	int32_t *t = malloc(n * sizeof(*t));
	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		t[i] = (int32_t)((seed >> 33) % (uint64_t)V);
	}
	return t;
}

int argmax(const float *x, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

static void *expected_raw(const char *name, const char *tensor, enum st_dtype dt, size_t *n)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s/expected.safetensors", fixtures_dir(), name);
	struct st_file *f;
	struct pfx_error err;
	cr_assert_eq(st_open(path, &f, &err), 0, "%s", err.msg);
	const struct st_tensor *t = st_find(f, tensor);
	cr_assert(t, "%s: no tensor %s", path, tensor);
	cr_assert_eq(t->dtype, dt, "%s: %s has dtype %s", path, tensor, t->dtype_name);
	void *p = malloc(t->nbytes + 1);
	memcpy(p, t->data, t->nbytes);
	*n = (size_t)st_numel(t);
	st_close(f);
	return p;
}

float *expected_f32(const char *name, const char *tensor, size_t *n)
{
	return expected_raw(name, tensor, ST_F32, n);
}

int32_t *expected_i32(const char *name, const char *tensor, size_t *n)
{
	return expected_raw(name, tensor, ST_I32, n);
}

float max_abs_diff(const float *a, const float *b, size_t n)
{
	float d = 0;
	for (size_t i = 0; i < n; i++) {
		float e = fabsf(a[i] - b[i]);
		if (!(e <= d)) /* NaN counts as the largest difference */
			d = isnan(e) ? INFINITY : e;
	}
	return d;
}

float *logits_uncached(struct pfx_model *m, const int32_t *t, size_t n)
{
	int V = pfx_model_config(m)->vocab;
	float *out = malloc(n * (size_t)V * sizeof(float));
	struct pfx_session *s;
	struct pfx_error err;
	cr_assert_eq(pfx_session_new(m, &s, &err), 0);
	cr_assert_eq(pfx_session_append(s, t, n, PFX_LOGITS_ALL, out, &err), 0, "%s", err.msg);
	pfx_session_free(s);
	return out;
}

/* Runs prefix-run with args (shell words), stdout+stderr captured. */
struct cmd_result run(const char *fmt, ...)
{
	char args[2048], cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s %s%s", PREFIX_RUN, args, strstr(args, "2>") ? "" : " 2>&1");
	struct cmd_result r = { 0 };
	FILE *p = popen(cmd, "r");
	cr_assert(p);
	size_t n = fread(r.out, 1, sizeof(r.out) - 1, p);
	r.out[n] = 0;
	int st = pclose(p);
	r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
	return r;
}

char *tokens_csv(const int32_t *t, size_t n)
{
	char *s = malloc(n * 12 + 1), *p = s;
	for (size_t i = 0; i < n; i++)
		p += sprintf(p, "%s%d", i ? "," : "", t[i]);
	return s;
}

/* Reads a (rows, cols) float32 .npy written by prefix-run. */
float *read_npy(const char *path, size_t rows, size_t cols)
{
	FILE *fp = fopen(path, "rb");
	cr_assert(fp, "no %s", path);
	char hdr[10];
	cr_assert_eq(fread(hdr, 1, 10, fp), 10);
	cr_assert_eq(memcmp(hdr, "\x93NUMPY\x01\x00", 8), 0);
	size_t hlen = (uint8_t)hdr[8] | (size_t)(uint8_t)hdr[9] << 8;
	char *dict = calloc(1, hlen + 1);
	cr_assert_eq(fread(dict, 1, hlen, fp), hlen);
	char want[96];
	snprintf(want, sizeof(want), "'shape': (%zu, %zu)", rows, cols);
	cr_expect(strstr(dict, want), "header %s lacks %s", dict, want);
	cr_expect(strstr(dict, "'<f4'"));
	cr_expect_eq((10 + hlen) % 64, 0);
	float *d = malloc(rows * cols * sizeof(float));
	cr_assert_eq(fread(d, sizeof(float), rows * cols, fp), rows * cols);
	cr_expect_eq(fgetc(fp), EOF, "data past the array");
	fclose(fp);
	free(dict);
	return d;
}


void count_csv(char *out, size_t cap, int n)
{
	size_t at = 0;
	for (int i = 1; i <= n && at < cap; i++)
		at += (size_t)snprintf(out + at, cap - at, "%s%d", i > 1 ? "," : "", i);
}

const char *write_16bit_checkpoint(const char *src, const char *dst, const char *dtype)
{
	char path[2048];
	snprintf(path, sizeof(path), "mkdir -p '%s' && cp '%s/config.json' '%s/'", dst, src, dst);
	cr_assert_eq(system(path), 0, "%s", path);
	snprintf(path, sizeof(path), "%s/model.safetensors", src);
	struct st_file *f;
	struct pfx_error err;
	cr_assert_eq(st_open(path, &f, &err), 0, "%s", err.msg);
	size_t n = st_count(f);
	struct st_out *out = calloc(n, sizeof(*out));
	cr_assert(out);
	for (size_t i = 0; i < n; i++) {
		const struct st_tensor *t = st_at(f, i);
		cr_assert_eq(t->dtype, ST_F32, "%s: %s is %s", path, t->name, t->dtype_name);
		size_t k = (size_t)st_numel(t);
		uint16_t *h = malloc(2 * k + 2);
		cr_assert(h);
		for (size_t j = 0; j < k; j++) {
			float v;
			memcpy(&v, (const char *)t->data + 4 * j, 4);
			h[j] = !strcmp(dtype, "F16") ? kern_f32_to_f16(v) : kern_f32_to_bf16(v);
		}
		out[i] = (struct st_out){ .name = t->name, .dtype = dtype, .ndim = t->ndim,
					  .data = h, .nbytes = 2 * k };
		memcpy(out[i].shape, t->shape, sizeof(out[i].shape));
	}
	snprintf(path, sizeof(path), "%s/model.safetensors", dst);
	cr_assert_eq(st_write(path, out, n, &err), 0, "%s", err.msg);
	for (size_t i = 0; i < n; i++)
		free((void *)out[i].data);
	free(out);
	st_close(f);
	return dst;
}
