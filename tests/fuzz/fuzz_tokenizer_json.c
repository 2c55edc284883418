/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes the tokenizer.json loader (runtime/text/load.c): the input is the
 * file. A load fails with -errno and a message, or gives a tokenizer that
 * encodes and decodes a few texts (with and without special tokens) to ids
 * within its vocabulary, and whose streaming decode ends equal to the whole
 * decode.
 */
#include <string.h>

#include "fuzz.h"
#include "text.h"

static const char *const texts[] = { "Hello, world! 123 ½",	"  two  spaces\n\ttab",
				     "<s>x</s><|endoftext|>", "Ωμέγα 日本語 😂", "" };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_write("tokenizer.json", data, size);
	struct pfx_tokenizer *t = NULL;
	struct pfx_error err = { { 0 } };
	int rc = pfx_tokenizer_load(fuzz_dir(), &t, &err);
	if (rc) {
		FUZZ_CHECK(rc < 0 && !t && err.msg[0]);
		return 0;
	}
	size_t nv = pfx_tokenizer_vocab_size(t);
	for (size_t k = 0; k < sizeof(texts) / sizeof(*texts); k++) {
		for (unsigned flags = 0; flags < 4; flags++) {
			int32_t *ids;
			size_t n;
			rc = pfx_tokenize(t, texts[k], strlen(texts[k]), flags, &ids, &n, &err);
			FUZZ_CHECK(rc == 0 || (rc < 0 && err.msg[0]));
			if (rc)
				continue;
			for (size_t i = 0; i < n; i++)
				FUZZ_CHECK(ids[i] >= 0 && (size_t)ids[i] < nv && pfx_tokenizer_piece(t, ids[i]));
			char *d;
			size_t dl;
			FUZZ_CHECK(pfx_detokenize(t, ids, n, PFX_TEXT_SKIP_SPECIAL, &d, &dl, &err) == 0);
			FUZZ_CHECK(strlen(d) <= dl);
			struct pfx_detok_stream *s;
			FUZZ_CHECK(pfx_detok_stream_new(t, PFX_TEXT_SKIP_SPECIAL, &s, &err) == 0);
			char *acc = malloc(dl + 1);
			size_t an = 0;
			const char *p;
			size_t l;
			for (size_t i = 0; i < n; i++) {
				FUZZ_CHECK(pfx_detok_stream_push(s, ids[i], &p, &l, &err) == 0);
				FUZZ_CHECK(an + l <= dl);
				memcpy(acc + an, p, l);
				an += l;
			}
			FUZZ_CHECK(pfx_detok_stream_finish(s, &p, &l, &err) == 0);
			FUZZ_CHECK(an + l == dl);
			memcpy(acc + an, p, l);
			FUZZ_CHECK(!memcmp(acc, d, dl));
			free(acc);
			pfx_detok_stream_free(s);
			free(d);
			free(ids);
		}
	}
	pfx_tokenizer_free(t);
	return 0;
}
