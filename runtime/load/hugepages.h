/* SPDX-License-Identifier: MIT */
/*
 * The weights in 2 MiB pages. Decode streams every weight once a token, and
 * on the development machine it ran faster from a checkpoint whose page
 * cache sat in 2 MiB folios, mapped by PMDs, than from one in small folios
 * (docs/perf/2026-11-25-huge-pages.md). Whether a file's page cache is in
 * large folios is decided when the pages are read in: readahead into a
 * mapping advised MADV_HUGEPAGE makes 2 MiB ones when it reads the file
 * front to back (not when threads fault it in here and there), while a
 * file written a moment ago keeps the folios its writer made. These
 * helpers map and allocate so that the kernel can use 2 MiB pages, count
 * how many it did, and drop a file's cached pages so that the next load
 * reads them in again.
 */
#ifndef PFX_HUGEPAGES_H
#define PFX_HUGEPAGES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pfx_error.h"

#define HUGE_PAGE_BYTES ((size_t)2 << 20)

/* fd's first size bytes, read-only and private, at a 2 MiB-aligned address
 * and advised MADV_HUGEPAGE (advice a kernel without THP ignores). Returns
 * MAP_FAILED with errno set on failure; munmap(p, size) releases it. */
void *huge_map_file(int fd, size_t size);
/* Reads the size bytes of a mapping from huge_map_file in now, front to
 * back (MADV_POPULATE_READ: advice a kernel before 5.14 ignores), so that
 * pages not yet cached go into 2 MiB folios. */
void huge_read_in(const void *p, size_t size);

/* bytes of anonymous memory; from 2 MiB on, 2 MiB-aligned with its whole
 * huge pages advised MADV_HUGEPAGE (the tail stays in small pages). NULL
 * when out of memory. free() it. */
void *huge_alloc(size_t bytes);

struct huge_range {
	uintptr_t lo, hi; /* [lo, hi) */
};

/* Bytes that smaps (the text of /proc/PID/smaps) says are mapped by huge
 * pages (FilePmdMapped, AnonHugePages, ShmemPmdMapped), summed over the
 * mappings that begin inside one of the n ranges: a file mapped by
 * huge_map_file, whose mapping ends at a page boundary past its last byte,
 * or a buffer from huge_alloc, which madvise made a mapping of its own. */
size_t huge_bytes_in(FILE *smaps, const struct huge_range *r, size_t n);
/* The same from this process's own smaps; 0 where it cannot be read. */
size_t huge_bytes_mapped(const struct huge_range *r, size_t n);

/* Writes back path's dirty pages and drops its cached ones, so that the
 * next read of it, through a mapping from huge_map_file, fills the page
 * cache in 2 MiB folios where the file system can. Pages some process maps
 * stay cached. 0, or -errno with err naming the file. */
int huge_drop_cached(const char *path, struct pfx_error *err);

#endif
