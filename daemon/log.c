/* SPDX-License-Identifier: MIT */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include "daemon.h"

/* Syslog priorities, as sd-daemon.h's SD_WARNING and SD_INFO. */
#define PRIO_ERR 3
#define PRIO_WARNING 4
#define PRIO_INFO 6

static pthread_once_t journal_once = PTHREAD_ONCE_INIT;
static int to_journal;

/* Whether stderr is systemd's journal stream: JOURNAL_STREAM names its
 * device and inode. A child whose stderr was redirected inherits the
 * variable, so it alone is not enough. */
static void check_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	to_journal = js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && !fstat(2, &st) &&
		     (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

/*
 * "2024-05-01T12:34:56.789Z info prefixd: MESSAGE" on a terminal or in a
 * file; "<6>MESSAGE" in the journal, which adds the time and the name
 * itself and reads the priority from the prefix.
 */
static void vlog(int prio, const char *fmt, va_list ap, uint64_t skipped)
{
	/* One fprintf per line: lines of concurrent workers do not interleave. */
	char line[1024], more[64] = "";
	vsnprintf(line, sizeof(line), fmt, ap);
	if (skipped)
		snprintf(more, sizeof(more), " (and %llu more like it)", (unsigned long long)skipped);
	pthread_once(&journal_once, check_journal);
	if (to_journal) {
		fprintf(stderr, "<%d>%s%s\n", prio, line, more);
		return;
	}
	struct timespec t;
	struct tm tm;
	char stamp[32] = "";
	clock_gettime(CLOCK_REALTIME, &t);
	if (gmtime_r(&t.tv_sec, &tm))
		strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
	fprintf(stderr, "%s.%03ldZ %s prefixd: %s%s\n", stamp, t.tv_nsec / 1000000,
		prio == PRIO_ERR ? "error" : prio == PRIO_WARNING ? "warn" : "info", line, more);
}

void pd_log(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(PRIO_INFO, fmt, ap, 0);
	va_end(ap);
}

/* What the operator should know of, though the daemon runs on. */
void pd_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(PRIO_WARNING, fmt, ap, 0);
	va_end(ap);
}

void pd_err(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(PRIO_ERR, fmt, ap, 0);
	va_end(ap);
}

/* What a client can cause at will is a warning: a misbehaving client or
 * an overload. */
void pd_log_limited(struct pd_log_limit *l, const char *fmt, ...)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	int64_t last = atomic_load(&l->last_s);
	if (t.tv_sec == last || !atomic_compare_exchange_strong(&l->last_s, &last, t.tv_sec)) {
		atomic_fetch_add(&l->skipped, 1);
		return;
	}
	va_list ap;
	va_start(ap, fmt);
	vlog(PRIO_WARNING, fmt, ap, atomic_exchange(&l->skipped, 0));
	va_end(ap);
}
