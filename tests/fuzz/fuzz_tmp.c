/* SPDX-License-Identifier: MIT */
/* A scratch directory per fuzzing process, for parsers that take a path
 * (under $TMPDIR, else /dev/shm, else /tmp). */
#include "fuzz.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define MAX_NAMES 8

static char dir[4096];
static char names[MAX_NAMES][64];
static int nnames;
static char path[4096 + 64];

static void cleanup(void)
{
	for (int i = 0; i < nnames; i++) {
		snprintf(path, sizeof(path), "%s/%.63s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
}

const char *fuzz_dir(void)
{
	if (!dir[0]) {
		/* Memory-backed where there is one: a file per input adds up. */
		const char *tmp = getenv("TMPDIR");
		if (!tmp || !*tmp)
			tmp = access("/dev/shm", W_OK | X_OK) ? "/tmp" : "/dev/shm";
		snprintf(dir, sizeof(dir), "%s/pfx-fuzz-XXXXXX", tmp);
		if (!mkdtemp(dir)) {
			perror("fuzz: mkdtemp");
			abort();
		}
		atexit(cleanup);
	}
	return dir;
}

static const char *fuzz_path(const char *name)
{
	fuzz_dir();
	int known = 0;
	for (int i = 0; i < nnames; i++)
		known |= !strcmp(names[i], name);
	if (!known) {
		if (nnames == MAX_NAMES || strlen(name) >= sizeof(names[0]))
			abort();
		strcpy(names[nnames++], name);
	}
	snprintf(path, sizeof(path), "%s/%.63s", dir, name);
	return path;
}

const char *fuzz_write(const char *name, const void *data, size_t size)
{
	const char *p = fuzz_path(name);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		perror(p);
		abort();
	}
	const uint8_t *b = data;
	while (size) {
		ssize_t n = write(fd, b, size);
		if (n <= 0) {
			perror(p);
			abort();
		}
		b += n;
		size -= (size_t)n;
	}
	close(fd);
	return p;
}
