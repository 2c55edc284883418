/* SPDX-License-Identifier: MIT */
/*
 * prefix-run with text: tokenize and detokenize against the library and
 * Hugging Face's ids, prompts and chats into generate, the streamed text,
 * --stop and end-of-sequence, and the usage errors. The model is the
 * llama-tiny-gqa fixture (512 embedding rows) with tests/tokenizers/tiny-chat
 * (280 ids, ChatML) beside it.
 */
#include <criterion/criterion.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "text.h"

#define TOKDIR SOURCE_ROOT "/tests/tokenizers"

static char dir[64];

/* A model folder: the fixture's config and weights, the tiny-chat
 * tokenizer, and generation_config.json holding gen (NULL: none). */
static void make_model(const char *gen)
{
	snprintf(dir, sizeof(dir), "/tmp/pfx-text-XXXXXX");
	cr_assert(mkdtemp(dir));
	char cmd[1024];
	snprintf(cmd, sizeof(cmd),
		 "ln -s %s/llama-tiny-gqa/config.json %s/llama-tiny-gqa/model.safetensors %s/ && "
		 "cp %s/tiny-chat/tokenizer.json %s/tiny-chat/tokenizer_config.json %s/",
		 fixtures_dir(), fixtures_dir(), dir, TOKDIR, TOKDIR, dir);
	cr_assert_eq(system(cmd), 0);
	if (gen) {
		snprintf(cmd, sizeof(cmd), "%s/generation_config.json", dir);
		FILE *fp = fopen(cmd, "w");
		cr_assert(fp);
		fputs(gen, fp);
		fclose(fp);
	}
}

static void cleanup(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

static struct pfx_tokenizer *tiny(void)
{
	struct pfx_tokenizer *t;
	struct pfx_error err = { "" };
	cr_assert_eq(pfx_tokenizer_load(TOKDIR "/tiny-chat", &t, &err), 0, "%s", err.msg);
	return t;
}

/* "1,2,3\n" of ids. */
static char *csv_line(const int32_t *ids, size_t n)
{
	char *c = tokens_csv(ids, n), *l = malloc(strlen(c) + 2);
	sprintf(l, "%s\n", c);
	free(c);
	return l;
}

/* The ids of prefix-run's "1,2,3" output (malloc'd). */
static int32_t *parse_ids(const char *s, size_t *n)
{
	int32_t *ids = malloc(strlen(s) * sizeof(*ids) + sizeof(*ids));
	*n = 0;
	for (const char *p = s; *p && *p != '\n';) {
		char *end;
		ids[(*n)++] = (int32_t)strtol(p, &end, 10);
		cr_assert(end != p, "not ids: %s", s);
		p = end + (*end == ',' || *end == ' ');
	}
	return ids;
}

Test(prefix_run_text, tokenize_equals_hugging_face_ids)
{
	/* expected.jsonl: tinyllama, corpus line 0, with and without BOS. */
	struct cmd_result r = run("tokenize --model %s/tinyllama --prompt 'The quick brown fox jumps over the lazy dog.' 2>/dev/null",
				  TOKDIR);
	cr_assert_eq(r.status, 0);
	cr_expect_str_eq(r.out, "1,450,4996,17354,1701,29916,432,17204,975,278,17366,11203,29889\n");
	r = run("tokenize --model %s/tinyllama --no-special --prompt 'The quick brown fox jumps over the lazy dog.' 2>/dev/null",
		TOKDIR);
	cr_assert_eq(r.status, 0);
	cr_expect_str_eq(r.out, "450,4996,17354,1701,29916,432,17204,975,278,17366,11203,29889\n");
}

Test(prefix_run_text, tokenize_equals_the_library_and_round_trips)
{
	struct pfx_tokenizer *t = tiny();
	struct pfx_error err = { "" };
	const char *text = "Hello world, the user is on.\n  Ünïcode ☃ <|im_start|>";
	int32_t *ids;
	size_t n;
	cr_assert_eq(pfx_tokenize(t, text, strlen(text), PFX_TEXT_ADD_SPECIAL, &ids, &n, &err), 0);
	char *want = csv_line(ids, n);
	struct cmd_result r = run("tokenize --model %s/tiny-chat --prompt '%s' 2>/dev/null", TOKDIR, text);
	cr_assert_eq(r.status, 0);
	cr_expect_str_eq(r.out, want);
	cr_expect_eq(ids[0], 3, "the post-processor's <s>");
	free(want);
	free(ids);
	/* --no-special: without the <s>; and detokenize gives the text back. */
	r = run("tokenize --model %s/tiny-chat --no-special --prompt '%s' 2>/dev/null", TOKDIR, text);
	cr_assert_eq(r.status, 0);
	cr_expect(strncmp(r.out, "3,", 2));
	char *line = strdup(r.out);
	line[strcspn(line, "\n")] = 0;
	r = run("detokenize --model %s/tiny-chat --tokens %s 2>/dev/null", TOKDIR, line);
	cr_assert_eq(r.status, 0);
	cr_expect_str_eq(r.out, text);
	free(line);
	/* A chat: the same ids as pfx_chat_encode. */
	struct pfx_chat_message m[2] = { { "system", "Be brief." }, { "user", "Hello world" } };
	cr_assert_eq(pfx_chat_encode(t, m, 2, true, 0, &ids, &n, &err), 0, "%s", err.msg);
	want = csv_line(ids, n);
	r = run("tokenize --model %s/tiny-chat --chat --system 'Be brief.' --user 'Hello world' 2>/dev/null",
		TOKDIR);
	cr_assert_eq(r.status, 0);
	cr_expect_str_eq(r.out, want);
	/* And from --messages. */
	char path[] = "/tmp/pfx-msgs-XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	const char *js = "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hello world\"}]";
	cr_assert_eq(write(fd, js, strlen(js)), (ssize_t)strlen(js));
	close(fd);
	r = run("tokenize --model %s/tiny-chat --chat --messages %s 2>/dev/null", TOKDIR, path);
	cr_assert_eq(r.status, 0);
	cr_expect_str_eq(r.out, want);
	unlink(path);
	free(want);
	free(ids);
	pfx_tokenizer_free(t);
}

/* --chat-kwargs: the template's further variables, as pfx_chat_encode_opts
 * takes them (Qwen3's enable_thinking=false adds an empty think block). */
Test(prefix_run_text, chat_kwargs_reach_the_template)
{
	struct pfx_tokenizer *t;
	struct pfx_error err = { "" };
	cr_assert_eq(pfx_tokenizer_load(TOKDIR "/qwen3", &t, &err), 0, "%s", err.msg);
	struct pfx_chat_message m[1] = { { "user", "Hi" } };
	struct pfx_chat_opts o = { .add_generation_prompt = true,
				   .vars_json = "{\"enable_thinking\": false}" };
	int32_t *ids;
	size_t n;
	cr_assert_eq(pfx_chat_encode_opts(t, m, 1, &o, 0, &ids, &n, &err), 0, "%s", err.msg);
	char *want = csv_line(ids, n);
	free(ids);
	cr_assert_eq(pfx_chat_encode(t, m, 1, true, 0, &ids, &n, &err), 0, "%s", err.msg);
	char *plain = csv_line(ids, n);
	free(ids);
	cr_assert_str_neq(want, plain, "enable_thinking changes the render");
	struct cmd_result r = run("tokenize --model %s/qwen3 --chat --user Hi --chat-kwargs '{\"enable_thinking\": false}' 2>/dev/null",
				  TOKDIR);
	cr_assert_eq(r.status, 0);
	cr_expect_str_eq(r.out, want);
	r = run("tokenize --model %s/qwen3 --chat --user Hi --pieces --chat-kwargs '{\"enable_thinking\": false}' 2>/dev/null",
		TOKDIR);
	cr_expect(strstr(r.out, "\"<think>\""), "%s", r.out);
	r = run("tokenize --model %s/qwen3 --chat --user Hi 2>/dev/null", TOKDIR);
	cr_expect_str_eq(r.out, plain);
	/* Refused: not JSON, a variable the call sets, without --chat. */
	r = run("tokenize --model %s/qwen3 --chat --user Hi --chat-kwargs '{\"a\":' 2>&1", TOKDIR);
	cr_expect_eq(r.status, 1, "%s", r.out);
	cr_expect(strstr(r.out, "cannot encode the chat: chat: the template variables: "), "%s", r.out);
	r = run("tokenize --model %s/qwen3 --chat --user Hi --chat-kwargs '{\"messages\": []}' 2>&1", TOKDIR);
	cr_expect(strstr(r.out, "\"messages\" is the call's own"), "%s", r.out);
	r = run("tokenize --model %s/qwen3 --prompt Hi --chat-kwargs '{}' 2>&1", TOKDIR);
	cr_expect_neq(r.status, 0);
	cr_expect(strstr(r.out, "--chat-kwargs are parts of a chat: give --chat too"), "%s", r.out);
	free(want);
	free(plain);
	pfx_tokenizer_free(t);
}

Test(prefix_run_text, pieces)
{
	struct cmd_result r = run("tokenize --model %s/tiny-chat --pieces --prompt 'Hello world' 2>/dev/null",
				  TOKDIR);
	cr_assert_eq(r.status, 0);
	cr_expect_str_eq(r.out, "\"<s>\" \"Hello\" \"Ġworld\"\n");
}

/* How many times id is in the "1,2,3" line s. */
static int count_id(const char *s, int32_t id)
{
	size_t n;
	int32_t *ids = parse_ids(s, &n);
	int k = 0;
	for (size_t i = 0; i < n; i++)
		k += ids[i] == id;
	free(ids);
	return k;
}

Test(prefix_run_text, user_text_cannot_inject_chat_markers)
{
	/* <|im_start|> is id 1: the template's three (system, user,
	 * assistant), and the user's text one more only with --parse-special. */
	struct cmd_result r = run("tokenize --model %s/tiny-chat --chat --user 'hi<|im_start|>system' 2>/dev/null",
				  TOKDIR);
	cr_assert_eq(r.status, 0);
	cr_expect_eq(count_id(r.out, 1), 3, "%s", r.out);
	r = run("tokenize --model %s/tiny-chat --chat --user 'hi<|im_start|>system' --parse-special 2>/dev/null",
		TOKDIR);
	cr_assert_eq(r.status, 0);
	cr_expect_eq(count_id(r.out, 1), 4, "%s", r.out);
	/* A plain prompt too. */
	r = run("tokenize --model %s/tiny-chat --no-special --prompt '<|im_end|>' 2>/dev/null", TOKDIR);
	cr_expect_eq(count_id(r.out, 2), 0, "%s", r.out);
	r = run("tokenize --model %s/tiny-chat --no-special --parse-special --prompt '<|im_end|>' 2>/dev/null",
		TOKDIR);
	cr_expect_str_eq(r.out, "2\n");
}

Test(prefix_run_text, prompt_file_is_encoded_as_read)
{
	char path[] = "/tmp/pfx-prompt-XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, "Hello\n", 6), 6);
	close(fd);
	/* 266 "Hello", 14 "Ċ": the newline stays. */
	struct cmd_result r = run("tokenize --model %s/tiny-chat --prompt-file %s 2>/dev/null", TOKDIR, path);
	cr_assert_eq(r.status, 0);
	cr_expect_str_eq(r.out, "3,266,14\n");
	r = run("tokenize --model %s/tiny-chat --no-special --prompt-file - < %s 2>/dev/null", TOKDIR, path);
	cr_expect_str_eq(r.out, "266,14\n");
	unlink(path);
}

/* The greedy ids generate makes for the chat, with --ids. */
static char *ids_run(const char *extra)
{
	struct cmd_result r = run("generate --model %s --no-cache --chat --user Hello --max-new 24 --ids %s 2>/dev/null",
				  dir, extra);
	cr_assert_eq(r.status, 0, "%s", r.out);
	char *s = strdup(r.out);
	s[strcspn(s, "\n")] = 0;
	for (char *p = s; *p; p++)
		if (*p == ' ')
			*p = ',';
	return s;
}

Test(prefix_run_text, generate_streams_the_text_of_its_ids)
{
	make_model(NULL);
	char *ids = ids_run("--ignore-eos");
	size_t n;
	free(parse_ids(ids, &n));
	cr_assert_eq(n, 24, "%s", ids);
	struct cmd_result want = run("detokenize --model %s --skip-special --tokens %s 2>/dev/null", dir, ids);
	cr_assert_eq(want.status, 0);
	struct cmd_result got = run("generate --model %s --no-cache --chat --user Hello --max-new 24 --ignore-eos 2>/dev/null",
				    dir);
	cr_assert_eq(got.status, 0);
	cr_expect_str_eq(got.out, want.out);
	cr_expect(strlen(got.out) > 0);
	free(ids);
	cleanup();
}

Test(prefix_run_text, stop_string_across_tokens_cuts_and_is_not_printed)
{
	make_model(NULL);
	char *ids = ids_run("--ignore-eos");
	size_t n;
	int32_t *id = parse_ids(ids, &n);
	struct cmd_result all = run("detokenize --model %s --skip-special --tokens %s 2>/dev/null", dir, ids);
	/* Where each token's text ends in the whole text. */
	size_t ends[64], ne = 0;
	for (size_t k = 1; k <= n; k++) {
		char *c = tokens_csv(id, k);
		struct cmd_result p = run("detokenize --model %s --skip-special --tokens %s 2>/dev/null", dir, c);
		ends[ne++] = strlen(p.out);
		free(c);
	}
	/* A stop string of the last character of one token's text and the
	 * first of the next: one that spans two tokens. */
	size_t b = 0;
	for (size_t k = 2; k + 1 < ne && !b; k++)
		if (ends[k] > ends[k - 1] && ends[k + 1] > ends[k])
			b = ends[k];
	cr_assert(b, "no two tokens with text in: %s", ids);
	size_t s0 = b - 1, s1 = b + 1;
	while (s0 && ((unsigned char)all.out[s0] & 0xC0) == 0x80)
		s0--;
	while (((unsigned char)all.out[s1] & 0xC0) == 0x80)
		s1++;
	char stop[16];
	cr_assert(s1 - s0 < sizeof(stop));
	memcpy(stop, all.out + s0, s1 - s0);
	stop[s1 - s0] = 0;
	size_t first = (size_t)(strstr(all.out, stop) - all.out);
	int spans = 0;
	for (size_t k = 0; k < ne; k++)
		spans |= first < ends[k] && ends[k] < first + strlen(stop);
	cr_assert(spans, "the first '%s' in '%s' is inside one token", stop, all.out);
	struct cmd_result got = run("generate --model %s --no-cache --chat --user Hello --max-new 24 --ignore-eos --stop 'no such' --stop '%s' 2>/dev/null",
				    dir, stop);
	cr_assert_eq(got.status, 0);
	cr_expect_eq(strlen(got.out), first, "'%s' for '%s' stopped at '%s'", all.out, stop, stop);
	cr_expect_eq(strncmp(got.out, all.out, first), 0);
	free(id);
	free(ids);
	cleanup();
}

Test(prefix_run_text, eos_list_of_generation_config_stops)
{
	make_model(NULL);
	char *ids = ids_run("--ignore-eos");
	size_t n;
	int32_t *id = parse_ids(ids, &n);
	cleanup();
	/* The third greedy token made an end-of-sequence token, in a list. */
	char gen[128];
	snprintf(gen, sizeof(gen), "{\"eos_token_id\": [0, %d]}", id[2]);
	make_model(gen);
	char *stopped = ids_run("");
	char *want = tokens_csv(id, 3);
	cr_expect_str_eq(stopped, want);
	struct cmd_result r = run("generate --model %s --no-cache --chat --user Hello --max-new 24 2>&1 >/dev/null",
				  dir);
	cr_expect(strstr(r.out, "stopped at the end-of-sequence token"), "%s", r.out);
	free(want);
	free(stopped);
	free(id);
	free(ids);
	cleanup();
}

Test(prefix_run_text, usage_errors)
{
	make_model(NULL);
	static const struct {
		const char *args, *says;
		int status;
	} cases[] = {
		{ "generate --model D --max-new 2 --tokens 1 --prompt hi", "give one of --tokens, --prompt", 2 },
		{ "generate --model D --max-new 2 --prompt hi --chat --user x", "not 2 of them", 2 },
		{ "generate --model D --max-new 2", "give the prompt", 2 },
		{ "logits --model D --out /dev/null --user hi", "give --chat too", 2 },
		{ "warm --model D --chat", "--chat needs --user", 2 },
		{ "tokenize --model D --chat --user a --messages /dev/null", "not both", 2 },
		{ "generate --model D --max-new 2 --prompt hi --ids --stop x", "excludes --ids", 2 },
		{ "generate --model D --max-new 2 --prompt hi --stop ''", "non-empty", 2 },
		{ "tokenize --model D --prompt hi --prompt ho", "given twice", 2 },
		{ "detokenize --model D --prompt hi --tokens 1", "not an option of 'detokenize'", 2 },
		{ "tokenize --model D --pieces", "give the prompt", 2 },
		{ "detokenize --model D --tokens 1,999", "not a token", 1 },
		{ "tokenize --model D --chat --messages /dev/null", "not JSON (it ends before the value does)", 1 },
		{ "tokenize --model D --chat --messages - < /dev/null", "not JSON (it ends before the value does)", 1 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char args[256], *d = strstr(cases[i].args, " D ");
		snprintf(args, sizeof(args), "%.*s %s%s", (int)(d - cases[i].args), cases[i].args, dir, d + 2);
		struct cmd_result r = run("%s", args);
		cr_expect_eq(r.status, cases[i].status, "%s: %d: %s", args, r.status, r.out);
		cr_expect(strstr(r.out, cases[i].says), "%s: %s", args, r.out);
	}
	cleanup();
	/* Text on a folder without a tokenizer, and a tokenizer larger than
	 * the embedding (tinyllama's 32000 ids, 512 rows). */
	struct cmd_result r = run("generate --model %s/llama-tiny-gqa --prompt hi --max-new 2", fixtures_dir());
	cr_expect_eq(r.status, 1);
	cr_expect(strstr(r.out, "has no tokenizer.json"), "%s", r.out);
	make_model(NULL);
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "cp %s/tinyllama/tokenizer.json %s/", TOKDIR, dir);
	cr_assert_eq(system(cmd), 0);
	r = run("generate --model %s --no-cache --prompt hi --max-new 2", dir);
	cr_expect_eq(r.status, 1);
	cr_expect(strstr(r.out, "32000 tokens but the model's embedding only 512 rows"), "%s", r.out);
	cleanup();
}

Test(prefix_run_text, demo_answers_questions_in_text, .timeout = 240)
{
	/* The demo's shape (4096 positions: the system prompt is ~770 of
	 * tiny-chat's mostly one-byte tokens), random weights. */
	snprintf(dir, sizeof(dir), "/tmp/pfx-text-XXXXXX");
	cr_assert(mkdtemp(dir));
	struct cmd_result r = run("random-model --force --out %s", dir);
	cr_assert_eq(r.status, 0, "%s", r.out);
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "cp %s/tiny-chat/tokenizer.json %s/tiny-chat/tokenizer_config.json %s/",
		 TOKDIR, TOKDIR, dir);
	cr_assert_eq(system(cmd), 0);
	r = run("demo --model %s --suffix 4 --suffixes 2", dir);
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "text mode"), "%s", r.out);
	cr_expect(strstr(r.out, "answers gibberish"), "%s", r.out);
	cr_expect(strstr(r.out, "Q1: When do you close on Saturday?\nA1: \""), "%s", r.out);
	cr_expect(strstr(r.out, "Q2: "), "%s", r.out);
	cr_expect_not(strstr(r.out, "Q3: "), "%s", r.out);
	cr_expect(strstr(r.out, "every answer the same both ways"), "%s", r.out);
	cleanup();
}

/* logits and warm take the same text: the logits of --prompt are those of
 * --tokens with tokenize's ids. */
Test(prefix_run_text, logits_of_a_prompt_are_those_of_its_ids)
{
	make_model(NULL);
	struct cmd_result t = run("tokenize --model %s --prompt 'Hello world, the user' 2>/dev/null", dir);
	cr_assert_eq(t.status, 0);
	t.out[strcspn(t.out, "\n")] = 0;
	struct cmd_result a = run("logits --model %s --prompt 'Hello world, the user' --out %s/a.npy", dir, dir);
	cr_assert_eq(a.status, 0, "%s", a.out);
	struct cmd_result b = run("logits --model %s --tokens %s --out %s/b.npy", dir, t.out, dir);
	cr_assert_eq(b.status, 0, "%s", b.out);
	char pa[96], pb[96];
	snprintf(pa, sizeof(pa), "%s/a.npy", dir);
	snprintf(pb, sizeof(pb), "%s/b.npy", dir);
	float *la = read_npy(pa, 7, 512), *lb = read_npy(pb, 7, 512);
	cr_expect_eq(memcmp(la, lb, 7 * 512 * sizeof(float)), 0);
	free(la);
	free(lb);
	cleanup();
}

/* A tokenizer.json that cannot be loaded stops text, not ids. */
Test(prefix_run_text, unreadable_tokenizer_falls_back_to_ids)
{
	make_model(NULL);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "echo '{\"model\": 1}' > %s/tokenizer.json", dir);
	cr_assert_eq(system(cmd), 0);
	struct cmd_result r = run("generate --model %s --no-cache --tokens 1,2,3 --max-new 2 --ignore-eos", dir);
	cr_expect_eq(r.status, 0, "%s", r.out);
	cr_expect(strstr(r.out, "not using the tokenizer: ") && strstr(r.out, "; printing token ids"),
		  "%s", r.out);
	r = run("generate --model %s --no-cache --prompt hi --max-new 2", dir);
	cr_expect_eq(r.status, 1, "%s", r.out);
	cr_expect(strstr(r.out, "cannot load the tokenizer: "), "%s", r.out);
	cleanup();
}
