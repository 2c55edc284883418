/* SPDX-License-Identifier: MIT */
/*
 * Fuzzes config.json parsing: the input is the file's contents. The parse
 * runs where prefix-run and prefixctl run it, in pfx_model_load (read as a
 * JSON object in checkpoint.c, the architecture picked, its parse_config,
 * then model.c's range checks), on a scratch checkpoint directory whose
 * model.safetensors holds no tensors. Loading must therefore always fail:
 * with -errno and a message, at the config or at the first missing tensor,
 * and without leaking (LeakSanitizer sees that).
 */
#include "fuzz.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	if (!ready) {
		/* u64 LE header length 2, header "{}": a valid file, no tensors. */
		static const uint8_t empty[] = { 2, 0, 0, 0, 0, 0, 0, 0, '{', '}' };
		fuzz_write("model.safetensors", empty, sizeof(empty));
		ready = 1;
	}
	fuzz_write("config.json", data, size);
	struct pfx_model_opts opts = { .threads = 1 };
	struct pfx_model *m = NULL;
	struct pfx_error err = { { 0 } };
	int rc = pfx_model_load(fuzz_dir(), &opts, &m, &err);
	FUZZ_CHECK(rc < 0 && !m && err.msg[0]);
	pfx_model_free(m);
	return 0;
}
