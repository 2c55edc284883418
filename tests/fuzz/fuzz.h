/* SPDX-License-Identifier: MIT */
/*
 * What the fuzz harnesses share: the libFuzzer entry point, an invariant
 * check that survives NDEBUG, and a private scratch directory for the
 * parsers that only read files.
 */
#ifndef PFX_FUZZ_H
#define PFX_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Each harness defines it; libFuzzer or replay.c calls it. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of the code under test: a failure is a finding, so it
 * aborts (libFuzzer then saves the input) even in release builds. */
#define FUZZ_CHECK(cond)                                                              \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__,    \
				__LINE__, #cond);                                     \
			abort();                                                      \
		}                                                                     \
	} while (0)

/* A directory made for this process, removed at exit with the files
 * fuzz_write put there. Aborts if it cannot be made. */
const char *fuzz_dir(void);
/* Replaces fuzz_dir()/name with data[0, size) and returns its path (a
 * buffer the next call reuses). */
const char *fuzz_write(const char *name, const void *data, size_t size);

#endif
