/* SPDX-License-Identifier: MIT */
#include "hugepages.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static uintptr_t round_up(uintptr_t x, uintptr_t to)
{
	return (x + to - 1) / to * to;
}

void *huge_map_file(int fd, size_t size)
{
	/* Reserve a huge page more than the file needs, map the file at the
	 * first 2 MiB boundary inside and give the rest back: file offset 0
	 * on a 2 MiB boundary lets the kernel map every 2 MiB folio of the
	 * file with one PMD. */
	size_t span = size + HUGE_PAGE_BYTES;
	uint8_t *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		return MAP_FAILED;
	uint8_t *a = (uint8_t *)round_up((uintptr_t)r, HUGE_PAGE_BYTES);
	void *p = mmap(a, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		munmap(r, span);
		errno = e;
		return MAP_FAILED;
	}
	uint8_t *end = a + round_up(size, (uintptr_t)sysconf(_SC_PAGESIZE));
	if (a > r)
		munmap(r, (size_t)(a - r));
	if (end < r + span)
		munmap(end, (size_t)(r + span - end));
	(void)madvise(p, size, MADV_HUGEPAGE); /* advice: without THP, 4 KiB pages */
	return p;
}

void huge_read_in(const void *p, size_t size)
{
	/* Front to back on this thread, so that readahead fills the page cache
	 * in 2 MiB folios. Left to the load's hashing, two threads faulting in
	 * tensors at both ends left 12% of a checkpoint in small folios, and
	 * bf16 decode ran 6-7% slower in the development machine's fast state
	 * (docs/perf/2026-11-25-huge-pages.md, fourth session). Advice: a
	 * kernel before 5.14 refuses it, and whoever touches the pages first
	 * reads them in as before. */
	(void)madvise((void *)p, size, MADV_POPULATE_READ);
}

void *huge_alloc(size_t bytes)
{
	if (bytes < HUGE_PAGE_BYTES)
		return malloc(bytes ? bytes : 1);
	void *p = aligned_alloc(HUGE_PAGE_BYTES, round_up(bytes, HUGE_PAGE_BYTES));
	/* Only the whole huge pages: a huge page over the tail would hold up
	 * to 2 MiB less a byte that nothing uses. */
	if (p)
		(void)madvise(p, bytes / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES, MADV_HUGEPAGE);
	return p;
}

static bool in_ranges(uintptr_t start, const struct huge_range *r, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (start >= r[i].lo && start < r[i].hi)
			return true;
	return false;
}

size_t huge_bytes_in(FILE *smaps, const struct huge_range *r, size_t n)
{
	static const char *const keys[] = { "AnonHugePages:", "ShmemPmdMapped:", "FilePmdMapped:" };
	char line[512];
	bool inside = false;
	size_t bytes = 0;
	while (fgets(line, sizeof(line), smaps)) {
		uintptr_t start, end;
		/* A mapping's first line: "start-end perms offset dev inode path". */
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &start, &end) == 2 && strchr(line, ' ')) {
			inside = start < end && in_ranges(start, r, n);
			continue;
		}
		if (!inside)
			continue;
		for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
			size_t kl = strlen(keys[k]);
			unsigned long long kb;
			if (!strncmp(line, keys[k], kl) && sscanf(line + kl, "%llu kB", &kb) == 1)
				bytes += (size_t)kb << 10;
		}
	}
	return bytes;
}

size_t huge_bytes_mapped(const struct huge_range *r, size_t n)
{
	FILE *f = fopen("/proc/self/smaps", "re");
	if (!f)
		return 0;
	size_t bytes = huge_bytes_in(f, r, n);
	fclose(f);
	return bytes;
}

int huge_drop_cached(const char *path, struct pfx_error *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return pfx_errorf(err, -errno, "%s: cannot open: %s", path, strerror(errno));
	int rc = 0;
	/* Dirty pages are not dropped: a file written a moment ago has them. */
	if (fdatasync(fd) && errno != EINVAL && errno != EROFS)
		rc = pfx_errorf(err, -errno, "%s: cannot write back its cached pages: %s", path,
				strerror(errno));
	int e = rc ? 0 : posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	if (e)
		rc = pfx_errorf(err, -e, "%s: cannot drop its cached pages: %s", path, strerror(e));
	close(fd);
	return rc;
}
