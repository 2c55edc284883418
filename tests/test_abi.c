/* SPDX-License-Identifier: MIT */
/*
 * libprefixd exports its API and nothing else: the wire, socket and arena
 * code linked into it must not clash with an application's own symbols.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

Test(abi, libprefixd_exports_only_its_api)
{
	char cmd[1024], line[512];
	snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s'", LIBPREFIXD);
	FILE *p = popen(cmd, "r");
	cr_assert(p, "cannot run nm");
	int api = 0;
	while (fgets(line, sizeof(line), p)) {
		char type, name[256];
		if (sscanf(line, "%*s %c %255s", &type, name) != 2)
			continue;
		if (type == 'A') /* the version node */
			continue;
		cr_expect(!strncmp(name, "prefixd_", 8), "libprefixd exports %s", name);
		api++;
	}
	cr_assert_eq(pclose(p), 0, "nm failed on %s", LIBPREFIXD);
	cr_expect_geq(api, 13, "only %d prefixd_ symbols", api);

	void *lib = dlopen(LIBPREFIXD, RTLD_NOW | RTLD_LOCAL);
	cr_assert(lib, "%s", dlerror());
	cr_expect(dlsym(lib, "prefixd_connect") && dlsym(lib, "prefixd_match_prompt"));
	cr_expect_null(dlsym(lib, "pd_fail"));
	cr_expect_null(dlsym(lib, "shm_map_ro"));
	dlclose(lib);
}
