/* SPDX-License-Identifier: MIT */
/*
 * tokenizer.json parsed on two threads (runtime/text/split_parse.c): the
 * real files split and give the tree the whole-file parse gives; files
 * whose layout only looks like Hugging Face's (merges not last, a
 * "merges" key elsewhere, bad JSON in either part) do not split, or fail
 * as the whole-file parse fails.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load/json_buf.h"
#include "load_json.h"

#define TOKDIR SOURCE_ROOT "/tests/tokenizers"

static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	cr_assert(f, "%s", path);
	fseek(f, 0, SEEK_END);
	long l = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc((size_t)l + 1);
	cr_assert_eq(fread(b, 1, (size_t)l, f), (size_t)l);
	fclose(f);
	b[l] = 0;
	*n = (size_t)l;
	return b;
}

/* The whole-file parse of buf, NULL when it fails. */
static json_object *whole(const char *buf, size_t n)
{
	json_object *o = NULL;
	struct pfx_error err;
	return json_parse_object(buf, n, &o, &err) ? NULL : o;
}

/* tokenizer_json_parse gives what the whole-file parse gives (both fail
 * alike), and the split was taken or not as split says. */
static void expect_same(const char *what, const char *buf, size_t n, bool split)
{
	json_object *s = tokenizer_json_split(buf, n);
	cr_expect_eq(s != NULL, split, "%s: split %d", what, s != NULL);
	json_object *w = whole(buf, n), *p = NULL;
	struct pfx_error err;
	int rc = tokenizer_json_parse(buf, n, &p, &err);
	cr_expect_eq(rc == 0, w != NULL, "%s: rc %d", what, rc);
	cr_expect(!w || json_object_equal(w, p), "%s: the trees differ", what);
	cr_expect(!s || json_object_equal(w, s), "%s: the split tree differs", what);
	json_object_put(s);
	json_object_put(w);
	if (!rc)
		json_object_put(p);
}

Test(tokenizer_load, real_files_split_to_the_same_tree, .timeout = 120)
{
	const char *names[] = { "neox", "smollm", "tinyllama", "llama3", "qwen3" };
	for (size_t i = 0; i < 5; i++) {
		char path[512];
		snprintf(path, sizeof(path), "%s/%s/tokenizer.json", TOKDIR, names[i]);
		size_t n;
		char *b = slurp(path, &n);
		expect_same(names[i], b, n, true);
		free(b);
	}
}

/* A file of at least 1 MiB (the split's threshold): head, 1 MiB of
 * spaces, tail. */
static char *padded(const char *head, const char *tail, size_t *n)
{
	size_t hl = strlen(head), tl = strlen(tail), pad = 1u << 20;
	char *b = malloc(hl + pad + tl + 1);
	memcpy(b, head, hl);
	memset(b + hl, ' ', pad);
	memcpy(b + hl + pad, tail, tl + 1);
	*n = hl + pad + tl;
	return b;
}

Test(tokenizer_load, lookalike_layouts_parse_as_the_whole_file)
{
	static const struct {
		const char *what, *head, *tail;
		bool split;
	} cases[] = {
		{ "plain", "{\"model\": {\"vocab\": {\"a\": 0},", "\"merges\": [[\"a\", \"a\"]]}}\n", true },
		{ "nul padding", "{\"model\": {\"vocab\": {\"a\": 0},", "\"merges\": [\"a a\"]}\n}\n\n", true },
		{ "merges not last", "{\"model\": {\"merges\": [1],", "\"vocab\": {\"a\": [2]}}}", false },
		{ "merges elsewhere", "{\"model\": {\"merges\": [\"a a\"]}, \"decoder\": {",
		  "\"merges\": [\"b b\"]}}", false },
		{ "merges in a string", "{\"model\": {\"merges\": [\"x\"], \"v\": \"a ,",
		  "\\\"merges\\\": [\"]}}", false },
		{ "key ends in merges", "{\"model\": {\"merges\": [7], \"x\\\"merges\":", "[1]}}", false },
		{ "duplicate merges", "{\"model\": {\"merges\": [\"x\"],", "\"merges\": [\"y\"]}}", true },
		{ "bad JSON in the merges", "{\"model\": {\"vocab\": {},", "\"merges\": [\"a\" \"b\"]}}", false },
		{ "two values as the merges", "{\"model\": {\"vocab\": {},", "\"merges\": [1], [2]}}", false },
		{ "bad JSON before", "{\"model\": {\"vocab\": {,},", "\"merges\": []}}", true },
		{ "trailing bytes", "{\"model\": {\"vocab\": {},", "\"merges\": []}} x", false },
		{ "not an object", "[{\"model\": {},", "\"merges\": []}}]", false },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		size_t n;
		char *b = padded(cases[i].head, cases[i].tail, &n);
		if (!strcmp(cases[i].what, "nul padding"))
			b[n - 1] = 0;
		/* A split that json-c refuses falls back: "bad JSON before"
		 * finds the split but its rest does not parse. */
		json_object *w = whole(b, n);
		expect_same(cases[i].what, b, n, cases[i].split && w);
		json_object_put(w);
		free(b);
	}
}
