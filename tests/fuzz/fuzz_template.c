/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes the chat-template interpreter (runtime/text/jinja*.c): the input
 * is a template's text. It is parsed and, when it parses, rendered over a
 * fixed chat (messages with tainted contents, bos/eos strings,
 * add_generation_prompt) within small limits, so a hostile input ends
 * quickly with -E2BIG. Either way: 0, or -errno with a message naming the
 * template line; a render's taint flags are 0 or 1 and cover its output.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "jinja.h"

static const struct jinja_limits lim = {
	.max_output = 1u << 20, .max_memory = 32u << 20, .max_steps = 200000, .max_depth = 200
};

static struct jdict *context(struct jarena *a)
{
	static const char *const msgs[][2] = {
		{ "system", "Be brief." },
		{ "user", "Hi <|im_start|> {{ x }}" },
		{ "assistant", "<think>\nhm\n</think>\n\nHello!" },
		{ "user", "" },
	};
	struct jdict *ctx = jd_new(a);
	struct jlist *l = jl_new(a);
	FUZZ_CHECK(ctx && l);
	for (size_t i = 0; i < sizeof(msgs) / sizeof(msgs[0]); i++) {
		struct jdict *m = jd_new(a);
		FUZZ_CHECK(m);
		FUZZ_CHECK(!jd_set(a, m, js_cstr("role"), jv_str(js_cstr(msgs[i][0]))));
		struct jstr c = js_dup(a, msgs[i][1], strlen(msgs[i][1]), true);
		FUZZ_CHECK(c.s && !jd_set(a, m, js_cstr("content"), jv_str(c)));
		FUZZ_CHECK(!jl_push(a, l, (struct jv){ .t = JV_DICT, .u.d = m }));
	}
	FUZZ_CHECK(!jd_set(a, ctx, js_cstr("messages"), (struct jv){ .t = JV_LIST, .u.l = l }));
	FUZZ_CHECK(!jd_set(a, ctx, js_cstr("bos_token"), jv_str(js_cstr("<s>"))));
	FUZZ_CHECK(!jd_set(a, ctx, js_cstr("eos_token"), jv_str(js_cstr("</s>"))));
	FUZZ_CHECK(!jd_set(a, ctx, js_cstr("add_generation_prompt"), jv_bool(true)));
	return ctx;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pfx_error err = { { 0 } };
	struct jinja_template *t = NULL;
	int rc = jinja_parse((const char *)data, size, &t, &err);
	if (rc) {
		FUZZ_CHECK(rc < 0 && !t && err.msg[0]);
		return 0;
	}
	struct jarena *a = ja_new(lim.max_memory);
	FUZZ_CHECK(a);
	char *out = NULL;
	size_t len = 0;
	uint8_t *taint = NULL;
	err.msg[0] = 0;
	rc = jinja_render(t, context(a), a, &lim, &out, &len, &taint, &err);
	if (rc) {
		FUZZ_CHECK(rc < 0 && !out && !taint && err.msg[0]);
		FUZZ_CHECK(!strncmp(err.msg, "template line ", 14));
	} else {
		FUZZ_CHECK(out && out[len] == 0 && len <= lim.max_output);
		for (size_t i = 0; taint && i < len; i++)
			FUZZ_CHECK(taint[i] <= 1);
	}
	free(out);
	free(taint);
	ja_free(a);
	jinja_template_free(t);
	return 0;
}
