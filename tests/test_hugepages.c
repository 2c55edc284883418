/* SPDX-License-Identifier: MIT */
/*
 * The weights in 2 MiB pages (runtime/load/hugepages.h): mappings and buffers the
 * kernel may back with huge pages, the count of those it did, and dropping
 * a checkpoint's cached pages so the next load reads them in again.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <linux/magic.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "hugepages.h"
#include "model.h"
#include "random_model.h"

/* The VmFlags line of the mapping that begins at p, from /proc/self/smaps. */
static char *vm_flags(const void *p)
{
	static char flags[512];
	char line[512], head[32];
	snprintf(head, sizeof(head), "%" PRIxPTR "-", (uintptr_t)p);
	FILE *f = fopen("/proc/self/smaps", "r");
	cr_assert(f);
	bool in = false;
	flags[0] = 0;
	while (fgets(line, sizeof(line), f)) {
		uintptr_t start, end;
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &start, &end) == 2)
			in = !strncmp(line, head, strlen(head));
		else if (in && !strncmp(line, "VmFlags:", 8))
			snprintf(flags, sizeof(flags), "%s", line + 8);
	}
	fclose(f);
	return flags;
}

static bool advised_huge(const void *p)
{
	return strstr(vm_flags(p), " hg") != NULL;
}

/* Whether the mapping that holds p (wherever it begins) is advised huge. */
static bool inside_huge_advice(const void *p)
{
	char line[512];
	FILE *f = fopen("/proc/self/smaps", "r");
	cr_assert(f);
	bool in = false, found = false, huge = false;
	while (fgets(line, sizeof(line), f)) {
		uintptr_t start, end;
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &start, &end) == 2) {
			in = (uintptr_t)p >= start && (uintptr_t)p < end;
			found |= in;
		} else if (in && !strncmp(line, "VmFlags:", 8)) {
			huge = strstr(line, " hg") != NULL;
		}
	}
	fclose(f);
	cr_assert(found, "no mapping holds %p", p);
	return huge;
}

static char *write_file(size_t bytes)
{
	char *path = strdup("/tmp/pfx-huge-XXXXXX");
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	uint8_t *buf = malloc(bytes);
	for (size_t i = 0; i < bytes; i++)
		buf[i] = (uint8_t)(i * 7 + i / 4096);
	cr_assert_eq(write(fd, buf, bytes), (ssize_t)bytes);
	free(buf);
	close(fd);
	return path;
}

/* Also a file smaller than a huge page, which the kernel itself would not
 * align (for larger ones some kernels do). */
static void map_and_check(size_t bytes)
{
	char *path = write_file(bytes);
	int fd = open(path, O_RDONLY);
	const uint8_t *p = huge_map_file(fd, bytes);
	close(fd);
	cr_assert(p != MAP_FAILED, "%s", strerror(errno));
	cr_expect_eq((uintptr_t)p % HUGE_PAGE_BYTES, 0, "mapped at %p", (void *)p);
	cr_expect(advised_huge(p), "VmFlags:%s", vm_flags(p));
	for (size_t i = 0; i < bytes; i++)
		if (p[i] != (uint8_t)(i * 7 + i / 4096))
			cr_assert_fail("byte %zu differs", i);
	cr_expect_eq(munmap((void *)p, bytes), 0);
	unlink(path);
	free(path);
}

Test(hugepages, a_file_is_mapped_at_a_2_mib_boundary_and_advised)
{
	map_and_check(100000);
	map_and_check(HUGE_PAGE_BYTES + 12345); /* a page's tail past a huge page */
}

Test(hugepages, big_buffers_are_aligned_and_advised_small_ones_plain)
{
	void *big = huge_alloc(HUGE_PAGE_BYTES + 1), *small = huge_alloc(100);
	cr_assert(big && small);
	cr_expect_eq((uintptr_t)big % HUGE_PAGE_BYTES, 0);
	cr_expect(advised_huge(big), "VmFlags:%s", vm_flags(big));
	memset(big, 1, HUGE_PAGE_BYTES + 1);
	/* A small buffer is a plain malloc: neither rounded up to a huge page
	 * nor in memory advised huge. */
	cr_expect_lt(malloc_usable_size(small), HUGE_PAGE_BYTES, "100 bytes took %zu",
		     malloc_usable_size(small));
	cr_expect_not(inside_huge_advice(small), "a 100-byte buffer is in memory advised huge");
	memset(small, 2, 100);
	free(big);
	free(small);
}

/* Two mappings of 4 and 8 MiB in huge pages, one inside the range. */
static const char smaps_text[] =
	"7f0000000000-7f0000400000 r--p 00000000 fe:01 12 /m/model.safetensors\n"
	"Size:               4096 kB\n"
	"AnonHugePages:      2048 kB\n"
	"ShmemPmdMapped:        0 kB\n"
	"FilePmdMapped:      2048 kB\n"
	"VmFlags: rd mr mw me hg\n"
	"7f0000400000-7f0000c00000 rw-p 00000000 00:00 0 \n"
	"Size:               8192 kB\n"
	"AnonHugePages:      8192 kB\n"
	"VmFlags: rd wr mr mw me ac hg\n";

Test(hugepages, smaps_counts_the_mappings_that_begin_in_a_range)
{
	FILE *f = fmemopen((void *)smaps_text, sizeof(smaps_text) - 1, "r");
	struct huge_range r = { 0x7f0000000000, 0x7f0000000000 + 4000000 }; /* ends before the page */
	cr_expect_eq(huge_bytes_in(f, &r, 1), (size_t)4 << 20);
	rewind(f);
	struct huge_range both[2] = { r, { 0x7f0000400000, 0x7f0000c00000 } };
	cr_expect_eq(huge_bytes_in(f, both, 2), (size_t)12 << 20);
	rewind(f);
	struct huge_range none = { 0x7f0000000001, 0x7f0000400000 }; /* begins in neither */
	cr_expect_eq(huge_bytes_in(f, &none, 1), 0);
	fclose(f);
}

/* Pages of path in the page cache, by mincore over a mapping of it that
 * nothing touches. */
static size_t resident_pages(const char *path)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	cr_assert(fd >= 0 && !fstat(fd, &st));
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	cr_assert(p != MAP_FAILED);
	long page = sysconf(_SC_PAGESIZE);
	size_t n = ((size_t)st.st_size + (size_t)page - 1) / (size_t)page, in = 0;
	unsigned char *v = malloc(n);
	cr_assert(!mincore(p, (size_t)st.st_size, v));
	for (size_t i = 0; i < n; i++)
		in += v[i] & 1;
	free(v);
	munmap(p, (size_t)st.st_size);
	return in;
}

static void need_a_disk_file_system(const char *dir)
{
	struct statfs fs;
	cr_assert(!statfs(dir, &fs));
	if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)
		cr_skip_test("%s is in memory: its pages cannot be dropped", dir);
}

/* Read in front to back at once, rather than by whoever touches it first
 * (the load's hashing threads, which left part of a checkpoint in small
 * folios); mapping it alone reads nothing. */
Test(hugepages, reading_a_mapping_in_makes_all_of_it_resident)
{
	need_a_disk_file_system("/tmp");
	size_t bytes = 3 * HUGE_PAGE_BYTES + 12345;
	char *path = write_file(bytes);
	struct pfx_error err;
	cr_assert_eq(huge_drop_cached(path, &err), 0, "%s", err.msg);
	cr_assert_eq(resident_pages(path), 0, "the file is still cached");
	int fd = open(path, O_RDONLY);
	void *p = huge_map_file(fd, bytes);
	close(fd);
	cr_assert(p != MAP_FAILED, "%s", strerror(errno));
	cr_expect_eq(resident_pages(path), 0, "mapping read the file in");
	huge_read_in(p, bytes);
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	cr_expect_eq(resident_pages(path), (bytes + page - 1) / page);
	munmap(p, bytes);
	unlink(path);
	free(path);
}

Test(hugepages, a_checkpoint_written_a_moment_ago_leaves_the_page_cache)
{
	need_a_disk_file_system("/tmp");
	char dir[] = "/tmp/pfx-recache-XXXXXX", file[64], cfg[64];
	cr_assert(mkdtemp(dir));
	struct pfx_config c = pfx_config_smollm135m(); /* its shape, cut to 19 MB */
	c.n_layers = 2;
	c.vocab = 4096;
	struct pfx_error err;
	cr_assert_eq(pfx_random_checkpoint(dir, &c, "BF16", 1, &err), 0, "%s", err.msg);
	snprintf(file, sizeof(file), "%s/model.safetensors", dir);
	cr_assert_gt(resident_pages(file), 0, "the file just written is cached");
	cr_assert_eq(pfx_checkpoint_recache(dir, &err), 0, "%s", err.msg);
	cr_expect_eq(resident_pages(file), 0, "pages left in the page cache");
	/* And the next load reads it in again. */
	struct pfx_model *m;
	struct pfx_model_opts o = { .threads = 1 };
	cr_assert_eq(pfx_model_load(dir, &o, &m, &err), 0, "%s", err.msg);
	cr_expect_gt(resident_pages(file), 0);
	cr_expect_leq(pfx_model_weight_huge_bytes(m), pfx_model_weight_bytes(m));
	pfx_model_free(m);
	snprintf(cfg, sizeof(cfg), "%s/config.json", dir);
	unlink(file);
	unlink(cfg);
	rmdir(dir);
}

Test(hugepages, recache_says_which_checkpoint_it_cannot_read)
{
	struct pfx_error err;
	cr_expect_eq(pfx_checkpoint_recache("/nonexistent/model", &err), -ENOENT);
	cr_expect(strstr(err.msg, "/nonexistent/model"), "%s", err.msg);
	cr_expect_eq(huge_drop_cached("/nonexistent/file", &err), -ENOENT);
	cr_expect(strstr(err.msg, "/nonexistent/file: cannot open"), "%s", err.msg);
}
