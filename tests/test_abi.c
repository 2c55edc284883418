/* SPDX-License-Identifier: MIT */
/*
 * libprefixd exports its API and nothing else: the wire, socket and arena
 * code linked into it must not clash with an application's own symbols.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon_util.h"

/* prefixd.h, whole. */
static const char *header(void)
{
	const char *h = td_read_file(PREFIXD_HEADER);
	cr_assert(*h, "cannot read %s", PREFIXD_HEADER);
	return h;
}

Test(abi, libprefixd_exports_exactly_the_functions_of_its_header)
{
	const char *h = header();
	char cmd[1024], line[512];
	snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s'", LIBPREFIXD);
	FILE *p = popen(cmd, "r");
	cr_assert(p, "cannot run nm");
	int exported = 0;
	while (fgets(line, sizeof(line), p)) {
		char type, name[256], call[260];
		if (sscanf(line, "%*s %c %255[^@\n]", &type, name) != 2 || type == 'A')
			continue; /* 'A': the version node */
		snprintf(call, sizeof(call), "%s(", name);
		cr_expect(strstr(h, call), "libprefixd exports %s, which prefixd.h does not declare",
			  name);
		exported++;
	}
	cr_assert_eq(pclose(p), 0, "nm failed on %s", LIBPREFIXD);

	/* Every function the header declares resolves. */
	void *lib = dlopen(LIBPREFIXD, RTLD_NOW | RTLD_LOCAL);
	cr_assert(lib, "%s", dlerror());
	char seen[64][64];
	int declared = 0;
	for (const char *s = h; (s = strstr(s, "prefixd_")); s++) {
		size_t n = strspn(s, "prefixd_abcdefghijklmnopqrstuvwxyz0123456789");
		if (s[n] != '(' || n >= sizeof(seen[0]) || (s > h && s[-1] != ' ' && s[-1] != '*'))
			continue;
		int dup = 0;
		for (int i = 0; i < declared && !dup; i++)
			dup = strlen(seen[i]) == n && !strncmp(seen[i], s, n);
		if (dup)
			continue;
		cr_assert_lt(declared, 64);
		snprintf(seen[declared], sizeof(seen[0]), "%.*s", (int)n, s);
		cr_expect(dlsym(lib, seen[declared]), "%s is declared but not exported", seen[declared]);
		declared++;
	}
	dlclose(lib);
	cr_expect_geq(declared, 10, "only %d functions found in prefixd.h", declared);
	cr_expect_eq(exported, declared, "%d exported, %d declared", exported, declared);
}
