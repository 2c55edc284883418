/* SPDX-License-Identifier: MIT */
/*
 * prefix-serve end to end: two processes on one port and one prefixd share
 * a system prompt (the second's first request attaches what the first
 * computed, and answers as a server without any cache does), and the
 * official openai npm client drives a server through chat, streaming,
 * completions and an error. The model is the llama-tiny-gqa fixture with
 * tests/tokenizers/tiny-chat (ChatML) beside it.
 */
#include <criterion/criterion.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon_util.h"
#include "helpers.h"
#include "serve_util.h"
#include "text.h"

#define TOKDIR SOURCE_ROOT "/tests/tokenizers"

static char dir[64];

static void make_model(void)
{
	snprintf(dir, sizeof(dir), "/tmp/pfx-serve-e2e-XXXXXX");
	cr_assert(mkdtemp(dir));
	char out[512];
	cr_assert_eq(td_sh(out, sizeof(out),
			   "mkdir %s/m && ln -s %s/llama-tiny-gqa/config.json "
			   "%s/llama-tiny-gqa/model.safetensors %s/m/ && "
			   "cp %s/tiny-chat/tokenizer.json %s/tiny-chat/tokenizer_config.json %s/m/",
			   dir, fixtures_dir(), fixtures_dir(), dir, TOKDIR, TOKDIR, dir),
		     0, "%s", out);
}

static void cleanup(void)
{
	char out[256];
	cr_assert_eq(td_sh(out, sizeof(out), "rm -rf %s", dir), 0);
}

TestSuite(serve_e2e, .init = make_model, .fini = cleanup, .timeout = 240);

/* A system prompt several blocks long, and a question. */
static const char system_prompt[] =
	"You are the assistant of a small library. Answer in one sentence. The library opens "
	"at nine and closes at six, lends four books at a time for three weeks, and charges "
	"nothing for renewals made before the due date. Members may reserve up to two titles. "
	"The reading room is quiet; the children's corner is not. Staff never discuss members' "
	"loans with anyone else, and the catalogue is searchable by title, author and subject. "
	"Lost cards are replaced the same day at the front desk.";

static char *chat_body(const char *question)
{
	json_object *b = json_object_new_object(), *msgs = json_object_new_array();
	json_object *s = json_object_new_object(), *u = json_object_new_object();
	json_object_object_add(s, "role", json_object_new_string("system"));
	json_object_object_add(s, "content", json_object_new_string(system_prompt));
	json_object_object_add(u, "role", json_object_new_string("user"));
	json_object_object_add(u, "content", json_object_new_string(question));
	json_object_array_add(msgs, s);
	json_object_array_add(msgs, u);
	json_object_object_add(b, "model", json_object_new_string("m"));
	json_object_object_add(b, "messages", msgs);
	json_object_object_add(b, "max_tokens", json_object_new_int(12));
	json_object_object_add(b, "temperature", json_object_new_double(0));
	json_object_object_add(b, "ignore_eos", json_object_new_boolean(1));
	char *r = strdup(json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN));
	json_object_put(b);
	return r;
}

/* The ids the server's template makes of the chat (to count blocks). */
static size_t chat_tokens(const char *question, int32_t **ids)
{
	struct pfx_tokenizer *t;
	struct pfx_error err = { "" };
	char path[128];
	snprintf(path, sizeof(path), "%s/m", dir);
	cr_assert_eq(pfx_tokenizer_load(path, &t, &err), 0, "%s", err.msg);
	struct pfx_chat_message m[2] = { { "system", system_prompt }, { "user", question } };
	size_t n = 0;
	cr_assert_eq(pfx_chat_encode(t, m, 2, true, 0, ids, &n, &err), 0, "%s", err.msg);
	pfx_tokenizer_free(t);
	return n;
}

struct answer {
	char content[4096];
	long prompt, cached, completion;
};

static void ask(int port, const char *question, struct answer *a)
{
	char *body = chat_body(question), *resp = NULL;
	int st = sp_http(port, "POST", "/v1/chat/completions", NULL, body, &resp);
	cr_assert_eq(st, 200, "status %d: %s", st, resp ? resp : "(nothing)");
	json_object *j = json_tokener_parse(sp_body(resp)), *v, *c, *u, *d;
	cr_assert(j, "not JSON: %s", resp);
	cr_assert(json_object_object_get_ex(j, "choices", &c) && json_object_array_length(c) == 1);
	json_object *msg = json_object_object_get(json_object_array_get_idx(c, 0), "message");
	snprintf(a->content, sizeof(a->content), "%s",
		 json_object_get_string(json_object_object_get(msg, "content")));
	cr_assert(json_object_object_get_ex(j, "usage", &u));
	a->prompt = json_object_get_int64(json_object_object_get(u, "prompt_tokens"));
	a->completion = json_object_get_int64(json_object_object_get(u, "completion_tokens"));
	cr_assert(json_object_object_get_ex(u, "prompt_tokens_details", &d) &&
		  json_object_object_get_ex(d, "cached_tokens", &v), "%s", resp);
	a->cached = json_object_get_int64(v);
	json_object_put(j);
	free(resp);
	free(body);
}

static void start(struct serve_proc *p, const char *name, const char *const *args)
{
	char log[128];
	snprintf(log, sizeof(log), "%s/%s.log", dir, name);
	cr_assert_eq(sp_start(p, log, args), 0);
}

Test(serve_e2e, two_processes_one_port_share_a_system_prompt)
{
	struct test_daemon d;
	cr_assert_eq(td_start(&d, NULL), 0);
	char model[80];
	snprintf(model, sizeof(model), "%s/m", dir);
	const char *a_args[] = { "--model", model, "--port", "0", "--reuse-port",
				 "--socket", d.sock, "--parallel", "2", NULL };
	struct serve_proc a, b, alone;
	start(&a, "a", a_args);
	cr_assert_eq(sp_wait_healthy(&a, 60000), 0);
	struct answer first;
	ask(a.port, "When does the library open?", &first);
	cr_assert_eq(first.completion, 12);
	cr_assert_eq(first.cached, 0, "a fresh prefixd held %ld tokens", first.cached);
	cr_assert(strstr(td_read_file(a.log), "sharing prefixes through prefixd"), "%s",
		  td_read_file(a.log));

	/* The second process binds the same port while the first still
	 * listens (SO_REUSEPORT on both). */
	char port[16];
	snprintf(port, sizeof(port), "%d", a.port);
	const char *b_args[] = { "--model", model, "--port", port, "--reuse-port",
				 "--socket", d.sock, "--parallel", "2", NULL };
	start(&b, "b", b_args);
	cr_assert_eq(b.port, a.port);
	/* The first leaves, so the next connection can only reach the second:
	 * its first request. */
	cr_assert_eq(sp_stop(&a), 0);
	cr_assert_eq(sp_wait_healthy(&b, 60000), 0);
	struct answer second;
	const char *q2 = "How many books can I borrow?";
	ask(b.port, q2, &second);
	cr_assert(strstr(td_read_file(b.log), "POST /v1/chat/completions"),
		  "the second process did not log the request:\n%s", td_read_file(b.log));

	/* What the two prompts share, in full blocks, came from prefixd. */
	int32_t *ids1, *ids2;
	size_t n1 = chat_tokens("When does the library open?", &ids1), n2 = chat_tokens(q2, &ids2);
	size_t common = 0;
	while (common < n1 && common < n2 && ids1[common] == ids2[common])
		common++;
	size_t B = PFX_DEFAULT_BLOCK_TOKENS, full = common / B * B;
	cr_assert_geq(full, 2 * B, "the test's system prompt should span blocks (%zu tokens)", common);
	cr_assert_eq((size_t)second.prompt, n2);
	cr_assert_geq((size_t)second.cached, full, "cached_tokens %ld, shared full blocks %zu",
		      second.cached, full);
	free(ids1);
	free(ids2);

	/* And the answer is the one a server without any cache gives. */
	const char *c_args[] = { "--model", model, "--port", "0", "--no-cache", NULL };
	start(&alone, "alone", c_args);
	cr_assert_eq(sp_wait_healthy(&alone, 60000), 0);
	struct answer ref;
	ask(alone.port, q2, &ref);
	cr_assert_eq(ref.cached, 0);
	cr_assert_str_eq(second.content, ref.content);
	cr_assert_eq(sp_stop(&b), 0);
	cr_assert_eq(sp_stop(&alone), 0);
	cr_assert_eq(td_stop(&d), 0);
}

Test(serve_e2e, the_official_openai_npm_client)
{
	char out[8192];
	if (td_sh(out, sizeof(out), "command -v node") != 0)
		cr_skip_test("node is not installed: the openai client test needs it");
	struct stat st;
	if (stat(SOURCE_ROOT "/tests/serve/node_modules/openai/package.json", &st))
		cr_skip_test("the openai npm package is not in tests/serve/node_modules "
			     "(scripts/deps.sh installs it where npm is)");
	char model[80], key[96];
	snprintf(model, sizeof(model), "%s/m", dir);
	snprintf(key, sizeof(key), "%s/key", dir);
	FILE *f = fopen(key, "w");
	cr_assert(f);
	fputs("sk-test-5f2c\n", f);
	fclose(f);
	const char *args[] = { "--model", model, "--port", "0", "--no-cache",
			       "--api-key-file", key, NULL };
	struct serve_proc p;
	start(&p, "openai", args);
	cr_assert_eq(sp_wait_healthy(&p, 60000), 0);
	int rc = td_sh(out, sizeof(out), "node %s/tests/serve/openai_client.mjs http://127.0.0.1:%d/v1 "
				     "sk-test-5f2c 2>&1",
		       SOURCE_ROOT, p.port);
	cr_assert_eq(rc, 0, "the openai client failed:\n%s\nserver log:\n%s", out,
		     td_read_file(p.log));
	cr_assert(strstr(out, "ok stream text equals the whole response"), "%s", out);
	cr_assert_eq(sp_stop(&p), 0);
}
