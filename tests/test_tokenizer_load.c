/* SPDX-License-Identifier: MIT */
/*
 * tokenizer.json parsed on two threads (runtime/text/split_parse.c): the
 * real files split and give the tree the whole-file parse gives; files
 * whose layout only looks like Hugging Face's (merges not last, a
 * "merges" key elsewhere, bad JSON in either part) do not split, or fail
 * as the whole-file parse fails.
 * The vocabulary and merges read by model_scan.c: the real files take
 * that path and load to the tables the whole-file load builds; escapes,
 * legacy merges and prefixes come out the same; what the scan leaves to
 * json-c (repeated keys or ids, \u0000, lone surrogates, odd numbers,
 * comments, a "vocab" elsewhere, random edits of a small file) loads or
 * is refused exactly as before, with the same message.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* The model's tables of a and b are the same. */
static void expect_same_tables(const char *what, const struct pfx_tokenizer *a, const struct pfx_tokenizer *b)
{
	cr_assert_eq(a->nid, b->nid, "%s: %zu ids, %zu", what, a->nid, b->nid);
	for (size_t i = 0; i < a->nid; i++)
		cr_assert(!a->piece[i] == !b->piece[i] && (!a->piece[i] || !strcmp(a->piece[i], b->piece[i])),
			  "%s: piece %zu", what, i);
	cr_assert_eq(a->vocab.n, b->vocab.n, "%s: vocabulary sizes", what);
	for (size_t i = 0; i < a->vocab.n; i++) {
		const struct strmap_ent *e = &a->vocab.ent[i];
		cr_assert_eq(strmap_get(&b->vocab, e->key, e->klen), e->val, "%s: vocabulary entry %zu", what, i);
	}
	cr_assert(a->merges.n == b->merges.n && a->merges.mask == b->merges.mask, "%s: merge tables", what);
	cr_assert(!a->merges.n || !memcmp(a->merges.slot, b->merges.slot, (a->merges.mask + 1) * sizeof(*a->merges.slot)),
		  "%s: merge tables differ", what);
	cr_assert(!memcmp(a->special, b->special, a->nid * sizeof(bool)), "%s: special", what);
	cr_assert(!memcmp(a->byte_id, b->byte_id, sizeof(a->byte_id)), "%s: byte ids", what);
	cr_assert(a->unk_id == b->unk_id && a->fuse_unk == b->fuse_unk && a->byte_fallback == b->byte_fallback &&
			  a->ignore_merges == b->ignore_merges,
		  "%s: model flags", what);
	cr_assert(!a->prefix == !b->prefix && (!a->prefix || !strcmp(a->prefix, b->prefix)), "%s: prefix", what);
	cr_assert_eq(a->nadded, b->nadded, "%s: added tokens", what);
	for (size_t i = 0; i < a->nadded; i++)
		cr_assert(a->added[i].id == b->added[i].id && !strcmp(a->added[i].content, b->added[i].content) &&
				  a->added[i].special == b->added[i].special,
			  "%s: added token %zu", what, i);
}

/* Loads dir both ways: the same code, message and tables. */
static void expect_same_load(const char *what, const char *dir)
{
	struct pfx_tokenizer *a = NULL, *b = NULL;
	struct pfx_error ea = { { 0 } }, eb = { { 0 } };
	int ra = pfx_tokenizer_load(dir, &a, &ea), rb = tokenizer_load_whole(dir, &b, &eb);
	cr_expect_eq(ra, rb, "%s: %d (%s), whole %d (%s)", what, ra, ea.msg, rb, eb.msg);
	cr_expect_str_eq(ea.msg, eb.msg, "%s", what);
	if (!ra && !rb)
		expect_same_tables(what, a, b);
	pfx_tokenizer_free(a);
	pfx_tokenizer_free(b);
}

Test(tokenizer_load, real_files_scan_to_the_same_tables, .timeout = 120)
{
	const char *names[] = { "neox", "smollm", "tinyllama", "llama3", "qwen3" };
	for (size_t i = 0; i < 5; i++) {
		char dir[512], path[600];
		snprintf(dir, sizeof(dir), "%s/%s", TOKDIR, names[i]);
		snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
		size_t n;
		char *b = slurp(path, &n);
		struct pfx_tokenizer *t = calloc(1, sizeof(*t));
		struct model_scan s;
		cr_expect_eq(model_scan(t, b, n, &s), 0, "%s: not scanned", names[i]);
		cr_expect(s.nvocab > 30000 && s.nmerges > 30000, "%s: %zu keys, %zu merges", names[i], s.nvocab, s.nmerges);
		model_scan_free(&s);
		pfx_tokenizer_free(t);
		free(b);
		expect_same_load(names[i], dir);
	}
}

#define V3 "\"vocab\":{\"a\":0,\"b\":1,\"ab\":2}"

Test(tokenizer_load, unusual_vocabularies_load_as_the_whole_file)
{
	/* scan: model_scan's verdict (0 taken, 1 left to json-c, -1 either:
	 * json-c's checks decide). */
	static const struct {
		const char *what, *js;
		int scan;
	} cases[] = {
		{ "plain", "{\"model\":{\"type\":\"BPE\"," V3 ",\"merges\":[\"a b\"]}}", 0 },
		{ "pairs, white space", "{ \"model\" : { \"type\" : \"BPE\" , \"vocab\" : { \"a\" : 0 , \"b\" : 1 ,"
		  " \"ab\" : 2 } ,\n\t\"merges\" : [ [ \"a\" , \"b\" ] ] } }\n", 0 },
		{ "empty", "{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}", 0 },
		{ "escapes", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\u0120a\":0,\"\\\"q\\\\\":1,\"\\ud83d\\ude00\":2,"
		  "\"\\t\\/\\b\\f\\n\\r\":3,\"x\":4,\"\\u0120ax\":5,\"\\u00E9\":6,\"\\\"q\\\\\\ud83d\\ude00\":7},"
		  "\"merges\":[\"\\u0120a x\",[\"\\\"q\\\\\",\"\\ud83d\\ude00\"]]}}", 0 },
		{ "escaped merge found", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\u0120a\":0,\"x\":1,\"\\u0120ax\":2},"
		  "\"merges\":[\"\\u0120a x\",[\"\\u0120a\",\"x\"]]}}", 0 },
		{ "legacy spaces", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b c\":1,\"ab c\":2},"
		  "\"merges\":[\"a b c\"]}}", 0 },
		{ "legacy ambiguous", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b c\":1,\"ab c\":2,\"a b\":3,"
		  "\"c\":4,\"a bc\":5},\"merges\":[\"a b c\"]}}", 0 },
		{ "prefix", "{\"model\":{\"type\":\"BPE\",\"continuing_subword_prefix\":\"##\",\"vocab\":{\"a\":0,"
		  "\"##b\":1,\"ab\":2},\"merges\":[[\"a\",\"##b\"],\"a ##b\"]}}", 0 },
		{ "repeated key", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"a\":3,\"ab\":2},"
		  "\"merges\":[\"a b\"]}}", 0 },
		{ "repeated id", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":1,\"ab\":2},"
		  "\"merges\":[\"a b\"]}}", 0 },
		{ "nul in a key", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\\u0000z\":0,\"b\":1,\"ab\":2},"
		  "\"merges\":[\"a b\"]}}", 1 },
		{ "lone surrogate", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\ud800\":0,\"b\":1,\"ab\":2},"
		  "\"merges\":[]}}", 1 },
		{ "low surrogate first", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\udc00\\ud800\":0},\"merges\":[]}}", 1 },
		{ "bad escape", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\x\":0},\"merges\":[]}}", 1 },
		{ "control byte", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\tb\":0},\"merges\":[]}}", 1 },
		{ "leading zero", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":00,\"b\":1},\"merges\":[]}}", 1 },
		{ "fraction", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0.0},\"merges\":[]}}", 1 },
		{ "exponent", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1e1},\"merges\":[]}}", 1 },
		{ "negative", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}", 1 },
		{ "huge id", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":16777216},\"merges\":[]}}", 1 },
		{ "longer id", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1234567890123},\"merges\":[]}}", 1 },
		{ "string id", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"0\"},\"merges\":[]}}", 1 },
		{ "comment", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0 /* c */,\"b\":1,\"ab\":2},"
		  "\"merges\":[\"a b\"]}}", 1 },
		{ "trailing comma", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,},\"merges\":[]}}", 1 },
		{ "vocab twice", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}," V3 ",\"merges\":[\"a b\"]}}", 1 },
		{ "vocab elsewhere", "{\"normalizer\":null,\"x\":{\"vocab\":{\"q\":7}},\"model\":{\"type\":\"BPE\"," V3
		  ",\"merges\":[\"a b\"]}}", 1 },
		{ "model twice", "{\"model\":{\"type\":\"BPE\"," V3 ",\"merges\":[]},\"model\":{\"type\":\"BPE\"," V3
		  ",\"merges\":[\"a b\"]}}", 1 },
		{ "merge not in vocab", "{\"model\":{\"type\":\"BPE\"," V3 ",\"merges\":[\"a b\",\"b a\"]}}", 0 },
		{ "merge of three", "{\"model\":{\"type\":\"BPE\"," V3 ",\"merges\":[[\"a\",\"b\",\"c\"]]}}", 1 },
		{ "merge without space", "{\"model\":{\"type\":\"BPE\"," V3 ",\"merges\":[\"ab\"]}}", 1 },
		{ "merge a number", "{\"model\":{\"type\":\"BPE\"," V3 ",\"merges\":[7]}}", 1 },
		{ "empty half", "{\"model\":{\"type\":\"BPE\"," V3 ",\"merges\":[[\"\",\"ab\"]]}}", 0 },
		{ "bad JSON after", "{\"model\":{\"type\":\"BPE\"," V3 ",\"merges\":[\"a b\"]}}}", 1 },
		{ "unk not in vocab", "{\"model\":{\"type\":\"BPE\",\"unk_token\":\"z\"," V3 ",\"merges\":[]}}", 0 },
		{ "dropout", "{\"model\":{\"type\":\"BPE\",\"dropout\":0.1," V3 ",\"merges\":[]}}", 0 },
		{ "added token", "{\"added_tokens\":[{\"id\":2,\"content\":\"<x>\",\"special\":true}],"
		  "\"model\":{\"type\":\"BPE\"," V3 ",\"merges\":[]}}", 0 },
	};
	char dir[] = "/tmp/pfx-tokload-XXXXXX";
	cr_assert(mkdtemp(dir));
	char path[64];
	snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		const char *js = cases[i].js;
		size_t n = strlen(js);
		FILE *f = fopen(path, "wb");
		cr_assert(f);
		cr_assert_eq(fwrite(js, 1, n, f), n);
		fclose(f);
		struct pfx_tokenizer *t = calloc(1, sizeof(*t));
		struct model_scan s;
		int r = model_scan(t, js, n, &s);
		if (!r)
			model_scan_free(&s);
		pfx_tokenizer_free(t);
		cr_expect(cases[i].scan < 0 || r == cases[i].scan, "%s: scan %d", cases[i].what, r);
		expect_same_load(cases[i].what, dir);
	}
	unlink(path);
	rmdir(dir);
}

/* Files one to three random edits away from a small tokenizer.json (bytes
 * the JSON grammar cares about put in, taken out or replaced): whatever
 * the scan makes of them, the load matches the whole-file load. */
Test(tokenizer_load, edited_files_load_as_the_whole_file, .timeout = 60)
{
	static const char base[] =
		"{\"added_tokens\":[{\"id\":9,\"content\":\"<s>\",\"special\":true}],\"model\":{\"type\":\"BPE\","
		"\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"\\u0120a\":3,\"\\\"q\\\\\":4,\"\\ud83d\\ude00\":5,\"c d\":6,"
		"\"ac d\":7,\"\\u0120ab\":8,\"<s>\":9},\"merges\":[\"a b\",[\"\\u0120a\",\"b\"],\"a c d\"]}}";
	static const char put[] = "\"\\,:{}[] 0123456789u-.eE/\x01\x80\xc3\xa9";
	char dir[] = "/tmp/pfx-tokedit-XXXXXX";
	cr_assert(mkdtemp(dir));
	char path[64];
	snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
	unsigned seed = 26;
	int scanned = 0;
	for (int iter = 0; iter < 2000; iter++) {
		char js[sizeof(base) + 8];
		size_t n = sizeof(base) - 1;
		memcpy(js, base, n);
		for (int k = 0, edits = 1 + rand_r(&seed) % 3; k < edits; k++) {
			size_t at = (size_t)rand_r(&seed) % n;
			char c = put[rand_r(&seed) % (int)(sizeof(put) - 1)];
			switch (rand_r(&seed) % 3) {
			case 0:
				js[at] = c;
				break;
			case 1:
				memmove(js + at, js + at + 1, n - at - 1);
				n--;
				break;
			default:
				memmove(js + at + 1, js + at, n - at);
				js[at] = c;
				n++;
			}
		}
		FILE *f = fopen(path, "wb");
		cr_assert(f);
		cr_assert_eq(fwrite(js, 1, n, f), n);
		fclose(f);
		char what[64];
		snprintf(what, sizeof(what), "edit %d", iter);
		expect_same_load(what, dir);
		struct pfx_tokenizer *t = calloc(1, sizeof(*t));
		struct model_scan s;
		if (!model_scan(t, js, n, &s)) {
			scanned++;
			model_scan_free(&s);
		}
		pfx_tokenizer_free(t);
	}
	/* Both ways were taken often. */
	cr_expect(scanned > 200 && scanned < 1800, "%d of 2000 scanned", scanned);
	unlink(path);
	rmdir(dir);
}
