/* SPDX-License-Identifier: MIT */
/*
 * The disk tier (tier.h). One writer thread owns one io_uring: it takes
 * batches of blocks from the index, checksums each payload where it lies
 * in shared memory, and submits one vectored write per record (head,
 * payload, zero padding) for the whole batch at once; the records that
 * were written whole are then renamed into place. Restores run in the
 * thread of the MATCH that needs them, with a ring of their own.
 *
 * Deletions (the index's drop callback, under its lock) only queue a name.
 * The writer takes a batch, then the deletions queued so far: their files
 * become the batch's records (renamed to a record's temporary name and
 * written over in place), and those left are unlinked before the batch's
 * renames, so a record deleted and then written again under the same name
 * is never lost to a late unlink.
 */
#include "tier.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "record.h"
#include "store.h"

/* Records written by one submission: enough to keep a disk's queue busy,
 * few enough that a stop waits for little; and at most SPILL_BYTES of
 * them (one record at least). A batch's writes and completions come
 * together: 32 SmolLM-sized records (94 MB) at once put MATCH p99 while
 * spilling at 346-755 us, batches of 4 (12 MB) at 150-203 and of 8 MiB
 * (2) at 125-146, all at 1.0-1.2 GB/s (bench/disk, runs interleaved;
 * idle 13-25 us). */
#define SPILL_BATCH 32
#define SPILL_BYTES ((uint64_t)8 << 20)
/* Records read by one submission of a restore (two reads each). */
#define RESTORE_BATCH 64
/* The writer's nice value (per thread on Linux). */
#define WRITER_NICE 10
/* After a write failed for want of space: how long the disk is left alone. */
#define FULL_BACKOFF_MS 1000

struct drop {
	uint32_t ns;
	uint8_t hash[PD_HASH_SIZE];
};

/* Records deleted meanwhile, whose files the next writes take over. */
struct recycle {
	struct drop *d;
	size_t n, next;
};

struct spill {
	struct idx_block b;
	int fd;
	int rc;
	bool done;                  /* its write completed */
	size_t total;
	struct iovec iov[3];
	int niov;
};

struct tier {
	int dirfd, lockfd;
	uint32_t block_tokens;
	size_t head_bytes;          /* rec_head_size(block_tokens) */
	char dir[256];
	struct idx *x;

	pthread_t thread;
	bool started;
	bool sync;                  /* --disk-sync: records synced before they count */
	/* The writer thread's own (no lock): */
	struct io_uring ring;
	bool broken;                /* the ring is gone: write nothing */
	uint8_t *bufs;              /* SPILL_BATCH x (head, one page of padding) */
	struct spill batch[SPILL_BATCH];

	/* Guards what follows. Taken alone, or under the index lock (on_drop,
	 * on_wake); nothing is taken under it, and it is never held across
	 * I/O (but on_drop's log line when out of memory) or a call into the
	 * index (the writer lets it go first). */
	pthread_mutex_t mu;
	pthread_cond_t cv;          /* the writer's wake-up; its wait drops mu */
	pthread_cond_t done;        /* a drain's end; tier_drain's wait drops mu */
	bool stop, kick, draining, drained;
	struct drop *drops;         /* records to delete, for the writer */
	size_t ndrops, cap_drops;
};

static int64_t mono_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void tier_name(uint32_t ns, const uint8_t *hash, const char *ext, char out[TIER_NAME_MAX])
{
	int n = snprintf(out, TIER_NAME_MAX, "u%u-", (unsigned)ns);
	for (int i = 0; i < PD_HASH_SIZE; i++)
		n += snprintf(out + n, (size_t)(TIER_NAME_MAX - n), "%02x", hash[i]);
	snprintf(out + n, (size_t)(TIER_NAME_MAX - n), "%s", ext);
}

int tier_dirfd(const struct tier *t)
{
	return t->dirfd;
}

int tier_open(const char *dir, uint32_t block_tokens, struct tier **out, const char **why,
	      long *holder)
{
	*out = NULL;
	*holder = 0;
	if (mkdir(dir, 0700) && errno != EEXIST) {
		*why = "cannot make the disk directory";
		return -errno;
	}
	*why = "cannot open the disk directory";
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	/* flock, not a pid file alone: the kernel ends the lock with its
	 * holder, so a kill -9 leaves no stale lock behind. */
	int lfd = openat(dfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lfd < 0 || flock(lfd, LOCK_EX | LOCK_NB)) {
		int e = errno;
		char pid[32] = "";
		if (lfd >= 0 && e == EWOULDBLOCK) {
			ssize_t r = pread(lfd, pid, sizeof(pid) - 1, 0);
			pid[r > 0 ? r : 0] = 0;
			char *end;
			long v = strtol(pid, &end, 10);
			*holder = end != pid && (*end == '\n' || !*end) && v > 0 ? v : 0;
			*why = "is in use by another prefixd";
			e = EBUSY;
		} else {
			*why = "cannot lock the lock file of the disk directory";
		}
		if (lfd >= 0)
			close(lfd);
		close(dfd);
		return -e;
	}
	char pid[32];
	int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (ftruncate(lfd, 0) || pwrite(lfd, pid, (size_t)n, 0) != n) {
		/* Only the message of a refused second daemon needs it. */
	}
	struct tier *t = calloc(1, sizeof(*t));
	if (!t) {
		close(lfd);
		close(dfd);
		return -ENOMEM;
	}
	t->dirfd = dfd;
	t->lockfd = lfd;
	t->block_tokens = block_tokens;
	t->head_bytes = rec_head_size(block_tokens);
	snprintf(t->dir, sizeof(t->dir), "%s", dir);
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cv, NULL);
	pthread_cond_init(&t->done, NULL);
	*out = t;
	return 0;
}

/* ==== The index's callbacks (under its lock: queue only) ==== */

static void on_drop(void *ctx, uint32_t ns, const uint8_t *hash)
{
	struct tier *t = ctx;
	pthread_mutex_lock(&t->mu);
	if (t->ndrops == t->cap_drops) {
		size_t cap = t->cap_drops ? 2 * t->cap_drops : 64;
		struct drop *d = realloc(t->drops, cap * sizeof(*d));
		if (d) {
			t->drops = d;
			t->cap_drops = cap;
		}
	}
	if (t->ndrops < t->cap_drops) {
		t->drops[t->ndrops].ns = ns;
		memcpy(t->drops[t->ndrops].hash, hash, PD_HASH_SIZE);
		t->ndrops++;
		pthread_cond_signal(&t->cv);
	} else {
		/* Out of memory: the record stays, an orphan the next start
		 * finds without its parent or with its name taken, and drops. */
		static struct pd_log_limit cut;
		pd_log_limited(&cut, "disk tier: out of memory: a deleted block's record stays in %s until the next start",
			       t->dir);
	}
	pthread_mutex_unlock(&t->mu);
}

static void on_wake(void *ctx)
{
	struct tier *t = ctx;
	pthread_mutex_lock(&t->mu);
	t->kick = true;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
}

/* ==== The writer ==== */

/* A record just written under a name whose deletion is still queued: the
 * deletion was of an earlier block of that name (it was queued before
 * this block was taken to be written), and must not take the new record. */
static void forget_drop(struct tier *t, uint32_t ns, const uint8_t *hash)
{
	pthread_mutex_lock(&t->mu);
	for (size_t i = 0; i < t->ndrops;)
		if (t->drops[i].ns == ns && !memcmp(t->drops[i].hash, hash, PD_HASH_SIZE))
			t->drops[i] = t->drops[--t->ndrops];
		else
			i++;
	pthread_mutex_unlock(&t->mu);
}

static void unlink_drops(struct tier *t, const struct drop *d, size_t n)
{
	char name[TIER_NAME_MAX];
	for (size_t i = 0; i < n; i++) {
		tier_name(d[i].ns, d[i].hash, ".rec", name);
		if (unlinkat(t->dirfd, name, 0) && errno != ENOENT) {
			static struct pd_log_limit cut;
			pd_log_limited(&cut, "disk tier: cannot delete %s/%s: %s", t->dir, name,
				       strerror(errno));
		}
	}
}

/*
 * The file of a deleted record, renamed to tmp and opened for s: written
 * over in place, its blocks and inode are reused. Creating a file for
 * every record and deleting one for every record that left cost the
 * writer ext4's inode search (it skips inodes deleted recently, block
 * after block of the inode table) and block allocation, runs of 1-3 ms in
 * the kernel that no MATCH could preempt on a kernel without preemption
 * (perf sched, bench/disk). 0, or -1 when no deleted record's file is
 * left.
 */
static int recycled(struct tier *t, struct recycle *r, const char *tmp, struct spill *s)
{
	char name[TIER_NAME_MAX];
	while (r && r->next < r->n) {
		const struct drop *d = &r->d[r->next++];
		tier_name(d->ns, d->hash, ".rec", name);
		if (renameat(t->dirfd, name, t->dirfd, tmp)) {
			if (errno != ENOENT) /* it must go all the same */
				unlink_drops(t, d, 1);
			continue; /* ENOENT: never written, or gone */
		}
		struct stat st;
		s->fd = openat(t->dirfd, tmp, O_WRONLY | O_CLOEXEC | O_DIRECT);
		if (s->fd < 0 && errno == EINVAL)
			s->fd = openat(t->dirfd, tmp, O_WRONLY | O_CLOEXEC);
		if (s->fd >= 0 && !fstat(s->fd, &st) &&
		    ((uint64_t)st.st_size == s->total || !ftruncate(s->fd, (off_t)s->total)))
			return 0;
		if (s->fd >= 0)
			close(s->fd);
		s->fd = -1;
		unlinkat(t->dirfd, tmp, 0);
	}
	return -1;
}

/* Prepares record s: its temporary file (a deleted record's, from
 * rc_list, or a new one), its head, its write. */
static int spill_prepare(struct tier *t, struct spill *s, uint8_t *head, uint8_t *pad,
			 struct recycle *rc_list)
{
	const struct idx_block *b = &s->b;
	uint64_t len = b->store.block_bytes;
	const uint8_t *payload = store_slot(b->store.ctx, b->loc);
	if (!payload)
		return -EINVAL;
	struct rec_meta m;
	rec_meta_of(b, t->block_tokens, &m);
	s->b.sum = rec_payload_sum(payload, len);
	int rc = rec_encode_head(&m, b->tokens, s->b.sum, head, t->head_bytes);
	if (rc < 0)
		return rc;
	/* The payload from its slot; its last partial page from a zeroed
	 * copy, since a slot's tail past the block is not ours to trust. */
	uint64_t whole = len / REC_ALIGN * REC_ALIGN, rest = len - whole;
	s->niov = 0;
	s->iov[s->niov++] = (struct iovec){ head, t->head_bytes };
	if (whole)
		s->iov[s->niov++] = (struct iovec){ (void *)payload, whole };
	if (rest) {
		memset(pad, 0, REC_ALIGN);
		memcpy(pad, payload + whole, rest);
		s->iov[s->niov++] = (struct iovec){ pad, REC_ALIGN };
	}
	s->total = t->head_bytes + rec_payload_span(len);
	char tmp[TIER_NAME_MAX];
	tier_name(b->ns, b->hash, ".tmp", tmp);
	if (!recycled(t, rc_list, tmp, s))
		return 0;
	/* O_DIRECT: from the slot to the disk, no copy into the page cache
	 * (bench/disk: the copy took a core's worth of CPU from the workers,
	 * MATCH p99 20 us -> 2 ms while spilling). Every part is whole,
	 * aligned pages. A file system without it (tmpfs) gets plain writes. */
	s->fd = openat(t->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0600);
	if (s->fd < 0 && errno == EINVAL)
		s->fd = openat(t->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	return s->fd < 0 ? -errno : 0;
}

/* Submits the `queued` operations on batch entries in the ring and takes
 * their completions: each entry done, with its error (of `writes`, one
 * shorter than the record: the disk is full). The ring's error, or 0. */
static int complete_batch(struct tier *t, uint32_t queued, bool writes)
{
	int rc = queued ? io_uring_submit_and_wait(&t->ring, queued) : 0;
	for (uint32_t done = 0; rc >= 0 && done < queued; done++) {
		struct io_uring_cqe *cqe;
		if ((rc = io_uring_wait_cqe(&t->ring, &cqe)))
			break;
		struct spill *s = &t->batch[io_uring_cqe_get_data64(cqe)];
		if (cqe->res < 0)
			s->rc = cqe->res;
		else if (writes && (size_t)cqe->res != s->total)
			s->rc = -ENOSPC;
		s->done = true;
		io_uring_cqe_seen(&t->ring, cqe);
	}
	return rc < 0 ? rc : 0;
}

/* --disk-sync: the records written whole reach the disk before their
 * renames (one submission of syncs for the batch); one whose sync did not
 * complete is not done, so not renamed. The ring's error, or 0. */
static int sync_batch(struct tier *t, uint32_t n)
{
	uint32_t queued = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct spill *s = &t->batch[i];
		if (s->fd < 0 || s->rc || !s->done)
			continue;
		struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
		io_uring_prep_fsync(sqe, s->fd, IORING_FSYNC_DATASYNC);
		io_uring_sqe_set_data64(sqe, i);
		s->done = false;
		queued++;
	}
	return complete_batch(t, queued, false);
}

/* The write of the record of b's parent failed in this batch (before
 * batch[i]): rc of it, else 0. */
static int parent_failed(const struct tier *t, uint32_t i)
{
	const struct idx_block *b = &t->batch[i].b;
	for (uint32_t j = 0; b->depth && j < i; j++) {
		const struct spill *p = &t->batch[j];
		if (p->rc && p->b.ns == b->ns && !memcmp(p->b.hash, b->parent, PD_HASH_SIZE))
			return p->rc;
	}
	return 0;
}

/* Writes a batch: one submission, then renames what was written whole.
 * The deleted records' files are taken over first; those left are
 * deleted before any rename, which could otherwise give a new record a
 * name whose deletion is still to come. */
static void spill_batch(struct tier *t, uint32_t n, struct recycle *r)
{
	uint32_t queued = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct spill *s = &t->batch[i];
		uint8_t *head = t->bufs + i * (t->head_bytes + REC_ALIGN);
		s->fd = -1;
		s->done = false;
		s->rc = spill_prepare(t, s, head, head + t->head_bytes, r);
		if (s->rc)
			continue;
		struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
		io_uring_prep_writev(sqe, s->fd, s->iov, (unsigned)s->niov, 0);
		io_uring_sqe_set_data64(sqe, i);
		queued++;
	}
	int rc = complete_batch(t, queued, true);
	if (rc >= 0 && t->sync)
		rc = sync_batch(t, n);
	if (rc < 0) {
		/* Out of step: what did not complete counts as not written, and
		 * a new ring, so that no late completion is taken for a record
		 * of the next batch. */
		pd_log("disk tier: io_uring: %s", strerror(-rc));
		io_uring_queue_exit(&t->ring);
		if ((rc = io_uring_queue_init(SPILL_BATCH, &t->ring, 0)) < 0) {
			pd_err("disk tier: no io_uring any more (%s): blocks stay in memory only",
			       strerror(-rc));
			t->broken = true;
		}
	}
	unlink_drops(t, r->d + r->next, r->n - r->next);
	r->next = r->n;
	/* In batch order, parents before children (idx_spill_take): a child's
	 * record goes in only after its parent's, so that no kill between
	 * two renames leaves a child on disk without its parent. */
	bool renamed = false;
	for (uint32_t i = 0; i < n; i++) {
		struct spill *s = &t->batch[i];
		char tmp[TIER_NAME_MAX], name[TIER_NAME_MAX];
		tier_name(s->b.ns, s->b.hash, ".tmp", tmp);
		tier_name(s->b.ns, s->b.hash, ".rec", name);
		if (s->fd >= 0 && !s->rc && !s->done)
			s->rc = -EIO;
		if (!s->rc)
			s->rc = parent_failed(t, i);
		if (s->fd >= 0)
			close(s->fd);
		if (!s->rc && renameat(t->dirfd, tmp, t->dirfd, name))
			s->rc = -errno;
		renamed |= !s->rc;
		if (!s->rc)
			forget_drop(t, s->b.ns, s->b.hash);
		if (s->rc) {
			unlinkat(t->dirfd, tmp, 0);
			static struct pd_log_limit cut;
			pd_log_limited(&cut, s->rc == -ENOSPC || s->rc == -EDQUOT
					     ? "disk tier: %s is full: blocks stay in memory only until it has room (%s)"
					     : "disk tier: cannot write a record in %s: %s",
				       t->dir, strerror(-s->rc));
			if (s->rc == -EDQUOT)
				s->rc = -ENOSPC;
		}
	}
	/* --disk-sync: the renames reach the disk before a publish hears of
	 * its records. */
	if (renamed && t->sync && fsync(t->dirfd))
		pd_log("disk tier: syncing %s: %s", t->dir, strerror(errno));
	for (uint32_t i = 0; i < n; i++)
		idx_spilled(t->x, &t->batch[i].b, t->batch[i].rc);
}

static void *writer(void *arg)
{
	struct tier *t = arg;
	/* Writing behind is never urgent: MATCHes come first on a busy CPU. */
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), WRITER_NICE))
		pd_log("disk tier: cannot lower the writer's priority: %s", strerror(errno));
	int64_t quiet_until = 0; /* after a full disk */
	bool budget_full = false; /* said in the log */
	pthread_mutex_lock(&t->mu);
	for (;;) {
		int64_t now = mono_ms();
		bool can_write = t->kick && (now >= quiet_until || t->draining);
		if (!t->stop && !t->ndrops && !can_write && !(t->draining && !t->drained)) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1; /* a full disk is tried again, kicked or not */
			if (pthread_cond_timedwait(&t->cv, &t->mu, &ts) == ETIMEDOUT)
				t->kick = true;
			continue;
		}
		if (t->stop)
			break;
		bool draining = t->draining;
		t->kick = false;
		pthread_mutex_unlock(&t->mu);

		uint32_t n = 0, failed = 0;
		bool write = (can_write || draining) && !t->broken;
		struct idx_block blocks[SPILL_BATCH];
		if (write)
			n = idx_spill_take(t->x, blocks, SPILL_BATCH, SPILL_BYTES);
		/* The deletions queued so far, those that made room for this
		 * batch included: their files are the batch's first. */
		pthread_mutex_lock(&t->mu);
		struct recycle r = { t->drops, t->ndrops, 0 };
		t->drops = NULL;
		t->ndrops = t->cap_drops = 0;
		pthread_mutex_unlock(&t->mu);
		for (uint32_t i = 0; i < n; i++)
			t->batch[i].b = blocks[i];
		spill_batch(t, n, &r);
		free(r.d);
		if (write) {
			for (uint32_t i = 0; i < n; i++)
				failed += t->batch[i].rc != 0;
			if (failed)
				quiet_until = mono_ms() + FULL_BACKOFF_MS;
			uint64_t waiting = n ? 0 : idx_dirty(t->x);
			if (waiting && !budget_full)
				pd_log("disk tier: the disk budget is full of blocks also held in memory: %llu blocks stay in memory only until some leave it",
				       (unsigned long long)waiting);
			else if (n && budget_full)
				pd_log("disk tier: writing again");
			budget_full = n ? false : waiting ? true : budget_full;
		}

		pthread_mutex_lock(&t->mu);
		if (n && !failed)
			t->kick = true; /* more may wait */
		if (draining && (!n || failed)) {
			t->drained = true;
			pthread_cond_broadcast(&t->done);
		}
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

void tier_set_sync(struct tier *t, bool sync)
{
	t->sync = sync;
}

int tier_start(struct tier *t, struct idx *x)
{
	size_t per = t->head_bytes + REC_ALIGN;
	if (posix_memalign((void **)&t->bufs, REC_ALIGN, SPILL_BATCH * per))
		return -ENOMEM;
	int rc = io_uring_queue_init(SPILL_BATCH, &t->ring, 0);
	if (rc < 0) {
		free(t->bufs);
		t->bufs = NULL;
		return rc;
	}
	t->x = x;
	struct idx_tier cb = { on_drop, on_wake, t, t->sync };
	idx_set_tier(x, &cb);
	if ((rc = -pthread_create(&t->thread, NULL, writer, t))) {
		io_uring_queue_exit(&t->ring);
		free(t->bufs);
		t->bufs = NULL;
		return rc;
	}
	t->started = true;
	return 0;
}

static void writer_stop(struct tier *t)
{
	pthread_mutex_lock(&t->mu);
	t->stop = true;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
	pthread_join(t->thread, NULL);
	io_uring_queue_exit(&t->ring);
	t->started = false;
}

uint64_t tier_drain(struct tier *t)
{
	if (!t->started)
		return 0;
	pthread_mutex_lock(&t->mu);
	t->draining = true;
	t->drained = false;
	pthread_cond_signal(&t->cv);
	while (!t->drained)
		pthread_cond_wait(&t->done, &t->mu);
	t->draining = false;
	pthread_mutex_unlock(&t->mu);
	/* Nothing is written or deleted for disk room after this: the
	 * manifest (restart_save) lists what is there. */
	writer_stop(t);
	if (syncfs(t->dirfd))
		pd_log("disk tier: syncing %s: %s", t->dir, strerror(errno));
	return idx_dirty(t->x);
}

void tier_close(struct tier *t)
{
	if (!t)
		return;
	if (t->started)
		writer_stop(t);
	unlink_drops(t, t->drops, t->ndrops);
	free(t->drops);
	free(t->bufs);
	pthread_cond_destroy(&t->done);
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mu);
	close(t->lockfd);
	close(t->dirfd);
	free(t);
}

/* ==== Restores ==== */

struct fetch {
	int fd;
	int reads;      /* of its two, done */
	uint8_t *head;
	uint8_t *slot;
	size_t span;
	int rc;
	const char *why; /* what fetch_check found */
};

static int fetch_open(struct tier *t, const struct idx_block *b, struct fetch *f)
{
	char name[TIER_NAME_MAX];
	tier_name(b->ns, b->hash, ".rec", name);
	/* Straight into the slot when the file system allows (tmpfs may not). */
	f->fd = openat(t->dirfd, name, O_RDONLY | O_CLOEXEC | O_DIRECT);
	if (f->fd < 0 && errno == EINVAL)
		f->fd = openat(t->dirfd, name, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0)
		return -errno;
	struct stat st;
	if (fstat(f->fd, &st))
		return -errno;
	if ((uint64_t)st.st_size != rec_size(t->block_tokens, b->store.block_bytes))
		return -ENODATA;
	f->slot = store_slot(b->store.ctx, b->loc);
	f->span = rec_payload_span(b->store.block_bytes);
	return f->slot ? 0 : -EINVAL;
}

/* What block b's record must say of itself (root is want's storage). */
static void expect_of(const struct tier *t, const struct idx_block *b, struct idx_root *root,
		      struct rec_expect *want)
{
	root->ns = b->ns;
	memcpy(root->h0, b->h0, PD_HASH_SIZE);
	*want = (struct rec_expect){ t->block_tokens, b->store.block_bytes, root, b->fp, b->hash };
}

/* The record's head names this block, its payload is the one written. */
static int fetch_check(struct tier *t, const struct idx_block *b, struct fetch *f,
		       const char **why)
{
	struct idx_root root;
	struct rec_expect want;
	expect_of(t, b, &root, &want);
	struct rec_meta m;
	int rc = rec_check_head(f->head, t->head_bytes, &want, &m, why);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < t->block_tokens; i++)
		if (pd_token_at(m.tokens, t->block_tokens, 0, i) != b->tokens[i]) {
			*why = "its tokens are not the block's";
			return -EACCES;
		}
	if (m.payload_sum != b->sum) {
		*why = "its payload is not the one written";
		return -EBADMSG;
	}
	return rec_check_payload(&m, f->slot, f->span, why);
}

/* Each thread that restores keeps one ring for its life: set up once, not
 * per MATCH, and its mapping is never handed to another thread (liburing
 * maps rings with raw system calls, which ThreadSanitizer cannot see, so
 * a ring's address reused by another thread would look like a race). */
static pthread_key_t ring_key;
static pthread_once_t ring_once = PTHREAD_ONCE_INIT;

static void ring_free(void *p)
{
	io_uring_queue_exit(p);
	free(p);
}

static void ring_key_make(void)
{
	pthread_key_create(&ring_key, ring_free);
}

static struct io_uring *restore_ring(int *rc)
{
	pthread_once(&ring_once, ring_key_make);
	struct io_uring *r = pthread_getspecific(ring_key);
	if (r)
		return r;
	if (!(r = malloc(sizeof(*r)))) {
		*rc = -ENOMEM;
		return NULL;
	}
	if ((*rc = io_uring_queue_init(2 * RESTORE_BATCH, r, 0)) < 0) {
		free(r);
		return NULL;
	}
	pthread_setspecific(ring_key, r);
	return r;
}

void tier_restore(struct tier *t, const struct idx_block *b, uint32_t n, int *ok)
{
	struct fetch f[RESTORE_BATCH];
	uint8_t *heads = NULL;
	int rc = 0;
	struct io_uring *ring = restore_ring(&rc);
	if (!rc && posix_memalign((void **)&heads, REC_ALIGN, RESTORE_BATCH * t->head_bytes))
		rc = -ENOMEM;
	for (uint32_t base = 0; base < n; base += RESTORE_BATCH) {
		uint32_t m = n - base < RESTORE_BATCH ? n - base : RESTORE_BATCH, queued = 0;
		for (uint32_t i = 0; i < m; i++) {
			struct fetch *fi = &f[i];
			fi->fd = -1;
			fi->head = heads + i * t->head_bytes;
			fi->reads = 0;
			fi->why = NULL;
			fi->rc = rc ? rc : fetch_open(t, &b[base + i], fi);
			if (fi->rc)
				continue;
			struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
			io_uring_prep_read(sqe, fi->fd, fi->head, (unsigned)t->head_bytes, 0);
			io_uring_sqe_set_data64(sqe, i);
			sqe = io_uring_get_sqe(ring);
			io_uring_prep_read(sqe, fi->fd, fi->slot, (unsigned)fi->span, t->head_bytes);
			io_uring_sqe_set_data64(sqe, i | 1ull << 32);
			/* Handed to io_uring's workers rather than issued inline:
			 * the slots of a restore after a restart are new memory,
			 * and pinning them for the read faults in every page
			 * (~2.5 us each here). Inline, the submitting thread did
			 * that for one record after the other (57 ms of a 94 MB
			 * restore's 82-93); the workers fault records in parallel
			 * while earlier ones are read (bench/disk: 65 ms). */
			io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
			queued += 2;
		}
		int e = queued ? io_uring_submit(ring) : 0;
		e = e < 0 ? e : 0;
		/* Each record is checked as its second read lands, while the
		 * others are still being read. */
		for (uint32_t done = 0; !e && done < queued; done++) {
			struct io_uring_cqe *cqe;
			if ((e = io_uring_wait_cqe(ring, &cqe)))
				break;
			uint64_t d = io_uring_cqe_get_data64(cqe);
			struct fetch *fi = &f[(uint32_t)d];
			size_t want = d >> 32 ? fi->span : t->head_bytes;
			if (!fi->rc && cqe->res != (int)want)
				fi->rc = cqe->res < 0 ? cqe->res : -ENODATA;
			io_uring_cqe_seen(ring, cqe);
			if (++fi->reads == 2 && !fi->rc)
				fi->rc = fetch_check(t, &b[base + (uint32_t)d], fi, &fi->why);
		}
		if (e < 0) {
			/* The ring is out of step: a new one for the next restore.
			 * What was not read stays on disk; this MATCH misses it. */
			pd_log("disk tier: io_uring: %s", strerror(-e));
			pthread_setspecific(ring_key, NULL);
			ring_free(ring);
			ring = NULL;
			rc = e;
		}
		for (uint32_t i = 0; i < m; i++) {
			if (!f[i].rc && f[i].reads != 2)
				f[i].rc = -EIO;
			const char *why = f[i].why;
			if (f[i].rc == -ENODATA && !why)
				why = "it is cut short";
			if (f[i].fd >= 0)
				close(f[i].fd);
			ok[base + i] = f[i].rc;
			if (f[i].rc) {
				char name[TIER_NAME_MAX];
				tier_name(b[base + i].ns, b[base + i].hash, ".rec", name);
				static struct pd_log_limit cut;
				pd_log_limited(&cut, "disk tier: record %s/%s: %s%s%s", t->dir, name,
					       why ? why : strerror(-f[i].rc),
					       f[i].rc == -EIO || f[i].rc == -ENOMEM ? "" : ": dropped, ",
					       f[i].rc == -EIO || f[i].rc == -ENOMEM ? "" : "the client computes the block again");
			}
		}
	}
	free(heads);
}

int tier_read_record(struct tier *t, const struct idx_block *b, uint8_t *buf, size_t len,
		     const char **why)
{
	char name[TIER_NAME_MAX];
	tier_name(b->ns, b->hash, ".rec", name);
	int fd = openat(t->dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		*why = "its record is gone from the disk directory";
		return -errno;
	}
	ssize_t r = pread(fd, buf, len, 0);
	close(fd);
	if (r != (ssize_t)len) {
		*why = "its record on disk is cut short";
		return -ENODATA;
	}
	struct idx_root root;
	struct rec_expect want;
	expect_of(t, b, &root, &want);
	struct rec_meta m;
	int rc = rec_check(buf, len, &want, &m, why);
	if (!rc && m.payload_sum != b->sum) {
		*why = "its record on disk is not the one written";
		rc = -EBADMSG;
	}
	return rc;
}
