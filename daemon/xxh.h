/* SPDX-License-Identifier: MIT */
/*
 * XXH3 from Debian's libxxhash, through the library's own run-time
 * dispatch on x86 (AVX-512, AVX2 or SSE2, whichever the CPU has): the
 * plain entry points run its baseline SSE2 build. On a 2.9 MB record
 * (AMD EPYC with AVX-512): 53-55 GB/s dispatched, 5-18 GB/s plain; the
 * tier's writer spent its longest stretches in that checksum (perf sched
 * of bench/disk). Same algorithm, same values: records written either way
 * read back either way.
 */
#ifndef PD_XXH_H
#define PD_XXH_H

#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xxh_x86dispatch.h>
#endif

#endif
