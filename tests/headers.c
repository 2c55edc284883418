/* SPDX-License-Identifier: MIT */
/*
 * The public headers, used from C and (tests/headers_cxx.cc includes this
 * file) from C++: they compile, and their functions link without name
 * mangling (extern "C"), which C++ inference stacks need. Prints TAP.
 */
#include <stdio.h>
#include <string.h>

#include "cache.h"
#include "model.h"
#include "prefixd.h"
#include "sample.h"
#include "session.h"
#include "text.h"

int main(void)
{
	/* Calls that need no daemon and no model, one per header. */
	struct prefixd *c = NULL;
	int ok = prefixd_connect("/nonexistent/prefixd.sock", NULL, &c) != 0 &&
		 strlen(prefixd_errmsg()) > 0;
	struct pfx_model *m = NULL;
	struct pfx_error err;
	ok = ok && pfx_model_load("/nonexistent/model", NULL, &m, &err) != 0 && err.msg[0];
	ok = ok && pfx_blas_corename() != NULL;
	struct pfx_tokenizer *tok = NULL;
	ok = ok && pfx_tokenizer_load("/nonexistent/model", &tok, &err) != 0 && !tok && err.msg[0];
#ifdef __cplusplus
	const char *lang = "C++";
#else
	const char *lang = "C";
#endif
	printf("1..1\n%s 1 - the headers compile and link as %s\n", ok ? "ok" : "not ok", lang);
	return ok ? 0 : 1;
}
