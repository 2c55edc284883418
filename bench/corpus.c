/* SPDX-License-Identifier: MIT */
/* Reading the tokenizer corpus (corpus.h). */
#include "corpus.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *need(void *p)
{
	if (!p) {
		fprintf(stderr, "corpus: out of memory\n");
		exit(1);
	}
	return p;
}

void bench_corpus_read(const char *dir, struct bench_corpus *c)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/corpus.jsonl", dir);
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		exit(1);
	}
	*c = (struct bench_corpus){ 0 };
	size_t cap = 0, lcap = 0;
	char *l = NULL;
	while (getline(&l, &lcap, f) > 0) {
		json_object *s = json_tokener_parse(l);
		if (json_object_is_type(s, json_type_string)) {
			if (c->n == cap) {
				cap = cap ? cap * 2 : 256;
				c->line = need(realloc(c->line, cap * sizeof(*c->line)));
				c->len = need(realloc(c->len, cap * sizeof(*c->len)));
			}
			size_t n = (size_t)json_object_get_string_len(s);
			c->line[c->n] = need(malloc(n + 1));
			memcpy(c->line[c->n], json_object_get_string(s), n + 1);
			c->len[c->n++] = n;
		}
		json_object_put(s);
	}
	free(l);
	fclose(f);
	if (!c->n) {
		fprintf(stderr, "%s: no lines\n", path);
		exit(1);
	}
}

void bench_corpus_free(struct bench_corpus *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->line[i]);
	free(c->line);
	free(c->len);
	*c = (struct bench_corpus){ 0 };
}
