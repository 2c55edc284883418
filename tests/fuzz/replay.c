/* SPDX-License-Identifier: MIT */
/*
 * The main() of a fuzz harness built without libFuzzer (gcc, or a clang
 * without its runtime), after dav1d's tests/libfuzzer/main.c: runs every
 * file given, and every file of every directory given, through
 * LLVMFuzzerTestOneInput once, in name order. Each input sits in a buffer of
 * exactly its size, as libFuzzer would pass it, so a sanitizer build sees
 * reads past its end.
 *
 * Output is TAP, one case per argument: a crash, a sanitizer report or a
 * failed invariant aborts the run, and the input last named in a
 * "# input" comment is the culprit.
 */
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
	FILE *fp = fopen(path, "rb");
	if (!fp) {
		printf("# %s: %s\n", path, strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fileno(fp), &st) || !S_ISREG(st.st_mode)) {
		fclose(fp);
		printf("# %s: not a regular file\n", path);
		return -1;
	}
	size_t size = (size_t)st.st_size;
	uint8_t *data = malloc(size ? size : 1);
	size_t got = data ? fread(data, 1, size, fp) : 0;
	fclose(fp);
	if (!data || got != size) {
		free(data);
		printf("# %s: cannot read\n", path);
		return -1;
	}
	printf("# input %s (%zu bytes)\n", path, size);
	fflush(stdout);
	/* libFuzzer passes a non-NULL pointer for empty inputs too. */
	LLVMFuzzerTestOneInput(data, size);
	free(data);
	return 0;
}

static int is_dir(const char *path)
{
	struct stat st;
	return !stat(path, &st) && S_ISDIR(st.st_mode);
}

/* Runs path or the files in it; returns how many ran, or -1. */
static long run_path(const char *path)
{
	if (!is_dir(path))
		return run_file(path) ? -1 : 1;
	struct dirent **names;
	int n = scandir(path, &names, NULL, alphasort);
	if (n < 0) {
		printf("# %s: %s\n", path, strerror(errno));
		return -1;
	}
	long ran = 0;
	for (int i = 0; i < n; i++) {
		char file[4096];
		if (names[i]->d_name[0] != '.' &&
		    snprintf(file, sizeof(file), "%s/%s", path, names[i]->d_name) < (int)sizeof(file) &&
		    !is_dir(file)) {
			if (run_file(file))
				ran = -1;
			else if (ran >= 0)
				ran++;
		}
		free(names[i]);
	}
	free(names);
	return ran;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n"
			"Runs each input once through the fuzz harness.\n", argv[0]);
		return 2;
	}
	int failed = 0;
	printf("1..%d\n", argc - 1);
	for (int i = 1; i < argc; i++) {
		long ran = run_path(argv[i]);
		/* An empty corpus is a mistake too: it would test nothing. */
		int ok = ran > 0;
		printf("%s %d - %s: %ld inputs\n", ok ? "ok" : "not ok", i, argv[i], ran < 0 ? 0 : ran);
		failed |= !ok;
	}
	return failed;
}
