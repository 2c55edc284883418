/* SPDX-License-Identifier: MIT */
/*
 * The tree's dependency arrows point one way: tools -> libraries ->
 * proto/shm (README.md, "Source layout"; docs/DESIGN.md). Every
 * #include "..." of a source file must name a header of its own folder or
 * of a folder it may depend on; a library including a tool's header, the
 * admin tool including the model runtime, or the runtime reaching into
 * the protocol's internals fails here, naming the file and the header.
 */
#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILES 1024

static char files[MAX_FILES][256]; /* source files, relative to SOURCE_ROOT */
static int nfiles;

static int collect(const char *path, const struct stat *st, int type, struct FTW *f)
{
	const char *rel = path + strlen(SOURCE_ROOT) + 1;
	const char *base = path + f->base;
	if (type == FTW_D && f->level > 0 && (base[0] == '.' || !strncmp(base, "build", 5)))
		return FTW_SKIP_SUBTREE;
	size_t n = strlen(rel);
	if (type == FTW_F && n > 2 && (!strcmp(rel + n - 2, ".c") || !strcmp(rel + n - 2, ".h")) &&
	    nfiles < MAX_FILES)
		snprintf(files[nfiles++], sizeof(files[0]), "%s", rel);
	return FTW_CONTINUE;
}

static void load_tree(void)
{
	if (nfiles)
		return;
	cr_assert_eq(nftw(SOURCE_ROOT, collect, 16, FTW_ACTIONRETVAL | FTW_PHYS), 0);
	cr_assert_lt(nfiles, MAX_FILES, "more source files than this test holds");
	cr_assert_gt(nfiles, 100, "only %d source files under %s", nfiles, SOURCE_ROOT);
}

static int starts(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

/* Where the files of the folder `from` may take their headers from (the
 * longest `from` that a file's path starts with applies). Inside the
 * runtime, load/ and kernels/ are leaves; the tools see the libraries'
 * installed headers, except devkit, which writes checkpoints from the
 * runtime's own description of a model, and prefix-serve's use of
 * prefix-run's option parsing (cli.h). */
static const struct rule {
	const char *from;
	const char *may[6];
} rules[] = {
	{ "proto/", { "proto/", "include/prefixd_proto.h" } },
	{ "shm/", { "shm/" } },
	{ "client/", { "client/", "proto/", "shm/", "include/prefixd.h", "include/prefixd_proto.h" } },
	{ "daemon/", { "daemon/", "proto/", "shm/", "include/prefixd.h", "include/prefixd_proto.h" } },
	{ "daemon/remote/", { "daemon/remote/" } },
	{ "runtime/", { "runtime/", "include/" } },
	{ "runtime/load/", { "runtime/load/", "include/prefixd-runtime/" } },
	{ "runtime/kernels/", { "runtime/kernels/", "include/prefixd-runtime/" } },
	{ "runtime/text/", { "runtime/text/", "runtime/load/json_buf.h", "include/prefixd-runtime/" } },
	{ "include/", { "include/" } },
	{ "tools/prefixctl/", { "tools/prefixctl/", "include/prefixd.h", "include/prefixd_proto.h" } },
	{ "tools/prefix-run/", { "tools/prefix-run/", "tools/devkit/", "include/" } },
	{ "tools/devkit/", { "tools/devkit/", "runtime/", "include/" } },
	{ "tools/prefix-serve/", { "tools/prefix-serve/", "tools/prefix-run/cli.h", "include/" } },
};

static const struct rule *rule_of(const char *file)
{
	const struct rule *r = NULL;
	for (size_t k = 0; k < sizeof(rules) / sizeof(rules[0]); k++)
		if (starts(file, rules[k].from) && (!r || strlen(rules[k].from) > strlen(r->from)))
			r = &rules[k];
	return r;
}

/* Whether header h, as included by a file of rule r, is a file where r may
 * look (by its path from the including folder's include paths: a match of
 * its last components). */
static int allowed(const struct rule *r, const char *h)
{
	size_t hl = strlen(h);
	for (int i = 0; i < nfiles; i++) {
		size_t fl = strlen(files[i]);
		if (fl < hl || strcmp(files[i] + fl - hl, h) || (fl > hl && files[i][fl - hl - 1] != '/'))
			continue;
		for (int j = 0; j < 6 && r->may[j]; j++)
			if (starts(files[i], r->may[j]))
				return 1;
	}
	return 0;
}

/* The header a line includes: any "name", and <name> of our own installed
 * headers (prefixd.h, prefixd_proto.h, prefixd-runtime/...), whatever the
 * spaces around '#'. 0 for any other line. */
static int include_of(const char *line, char *h, size_t cap)
{
	const char *p = line + strspn(line, " \t");
	if (*p++ != '#')
		return 0;
	p += strspn(p, " \t");
	if (strncmp(p, "include", 7))
		return 0;
	p += 7;
	p += strspn(p, " \t");
	char close = *p == '"' ? '"' : *p == '<' ? '>' : 0;
	const char *end = close ? strchr(p + 1, close) : NULL;
	if (!end || (size_t)(end - p - 1) >= cap)
		return 0;
	snprintf(h, cap, "%.*s", (int)(end - p - 1), p + 1);
	return close == '"' || !strncmp(h, "prefixd", 7);
}

Test(layout, includes_point_from_tools_to_libraries_to_the_protocol)
{
	load_tree();
	int checked = 0, bad = 0;
	for (int i = 0; i < nfiles; i++) {
		const struct rule *r = rule_of(files[i]);
		if (!r)
			continue; /* tests/, bench/: they may see everything */
		char path[512], line[512];
		snprintf(path, sizeof(path), "%s/%.255s", SOURCE_ROOT, files[i]);
		FILE *f = fopen(path, "r");
		cr_assert(f, "cannot read %s", path);
		while (fgets(line, sizeof(line), f)) {
			char h[256];
			if (!include_of(line, h, sizeof(h)) ||
			    !strcmp(h, "prefixd_version.h") /* generated in the build root */)
				continue;
			checked++;
			if (strstr(h, "..") || !allowed(r, h)) {
				bad++;
				cr_expect_fail("%s includes \"%s\", which %s may not depend on", files[i], h,
					       r->from);
			}
		}
		fclose(f);
	}
	cr_expect_gt(checked, 150, "only %d includes checked", checked);
	cr_expect_eq(bad, 0);
}

/* The rules above hold something: a library file that took a tool's
 * header, and prefixctl the runtime's, would be refused. */
Test(layout, the_rules_refuse_a_header_of_a_tool_or_of_the_runtime)
{
	load_tree();
	cr_expect_not(allowed(rule_of("runtime/cache.c"), "cli.h"),
		      "runtime/ may include tools/prefix-run/cli.h");
	cr_expect_not(allowed(rule_of("runtime/cache.c"), "sock.h"), "runtime/ may include proto/sock.h");
	cr_expect_not(allowed(rule_of("tools/prefixctl/x.c"), "model.h"),
		      "prefixctl may include the runtime's model.h");
	cr_expect_not(allowed(rule_of("tools/prefixctl/x.c"), "prefixd-runtime/model.h"),
		      "prefixctl may include <prefixd-runtime/model.h>");
	cr_expect_not(allowed(rule_of("shm/arena.c"), "daemon.h"), "shm/ may include daemon/daemon.h");
	cr_expect_not(allowed(rule_of("runtime/load/x.c"), "model_impl.h"),
		      "load/ may include the model's internals");
	cr_expect_not(allowed(rule_of("tools/prefix-run/x.c"), "kernels.h"),
		      "prefix-run may include the kernels' internal header");
	cr_expect(allowed(rule_of("runtime/ops.c"), "kernels/kernels.h"));
	cr_expect(allowed(rule_of("tools/prefix-run/x.c"), "random_model.h"));
	cr_expect(allowed(rule_of("tools/prefixctl/x.c"), "prefixd.h"));
	char h[64];
	cr_expect(include_of("#  include <prefixd-runtime/model.h>\n", h, sizeof(h)) &&
			  !strcmp(h, "prefixd-runtime/model.h"),
		  "an angle-bracket include of our headers is read: '%s'", h);
	cr_expect(!include_of("#include <stdio.h>\n", h, sizeof(h)), "system headers are not ours");
}

/* docs/DESIGN.md is a design: short, and whole without anything outside
 * the repository. */
Test(layout, the_design_doc_is_short_and_self_contained)
{
	char path[512], line[4096];
	snprintf(path, sizeof(path), "%s/docs/DESIGN.md", SOURCE_ROOT);
	FILE *f = fopen(path, "r");
	cr_assert(f, "cannot read %s", path);
	int lines = 0;
	while (fgets(line, sizeof(line), f)) {
		lines++;
		cr_expect(!strstr(line, "../shared") && !strstr(line, "/work/"),
			  "DESIGN.md line %d points outside the repository: %s", lines, line);
	}
	fclose(f);
	cr_expect_lt(lines, 600, "docs/DESIGN.md has %d lines", lines);
}
