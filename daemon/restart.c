/* SPDX-License-Identifier: MIT */
/*
 * Warm restart (restart.h): a scan of the directory, every head read and
 * checked, then the blocks loaded parents first (by depth), each into the
 * group and partition its HELLO would have made.
 */
#include "restart.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "xxh.h"

#include "groups.h"
#include "record.h"

struct found {
	struct idx_block b;
	uint64_t payload;
	uint32_t *tokens;
	uint64_t pin_until;   /* b.pin_end: when its pin ends (Unix s); 0: never */
};

static bool has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), k = strlen(suf);
	return n > k && !strcmp(s + n - k, suf);
}

/* Checks a record's head: its sizes, and its name (NULL: the manifest
 * names it by its head) and file size (0: unknown) when given; its hash
 * must follow its chain. 0 and *f, -EBADMSG, -EACCES (another block
 * size) or -ENOMEM. */
static int check_head(const uint8_t *head, size_t head_bytes, uint32_t bt, const char *name,
		      uint64_t size, struct found *f, const char **why)
{
	struct rec_meta m;
	struct rec_expect want = { .block_tokens = bt };
	int rc = rec_check_head(head, head_bytes, &want, &m, why);
	if (rc)
		return rc == -ENOTSUP ? -EBADMSG : rc;
	if (size && size != rec_size(bt, m.payload)) {
		*why = "its size is not its record's (cut short, or grown)";
		return -EBADMSG;
	}
	char own[TIER_NAME_MAX];
	tier_name(m.ns, m.hash, ".rec", own);
	if (name && strcmp(own, name)) {
		*why = "it is filed under another block's name";
		return -EBADMSG;
	}
	if (!(f->tokens = malloc(bt * sizeof(uint32_t))))
		return -ENOMEM;
	if ((rc = groups_record_block(&m, bt, f->tokens, &f->b, why))) {
		free(f->tokens);
		f->tokens = NULL;
		return rc;
	}
	f->payload = m.payload;
	return 0;
}

/* Reads and checks the head of the record file `name`. */
static int read_one(int dirfd, const char *name, uint32_t bt, uint8_t *head, size_t head_bytes,
		    struct found *f, const char **why)
{
	/* O_NONBLOCK: a FIFO by that name must not hang the start. */
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	struct stat st;
	int rc = 0;
	ssize_t r = fstat(fd, &st) ? -1 : !S_ISREG(st.st_mode) ? -2 : pread(fd, head, head_bytes, 0);
	if (r == -1)
		rc = -errno;
	close(fd);
	if (r == -2) {
		*why = "it is not a regular file";
		return -EBADMSG;
	}
	if (rc)
		return rc;
	if ((size_t)r != head_bytes) {
		*why = "it is shorter than a record's head";
		return -EBADMSG;
	}
	return check_head(head, head_bytes, bt, name, (uint64_t)st.st_size, f, why);
}

struct found_list {
	struct found *v;
	size_t n, cap;
};

/* Room for one more; NULL when out of memory. */
static struct found *next_found(struct found_list *l)
{
	if (l->n == l->cap) {
		size_t c = l->cap ? 2 * l->cap : 256;
		struct found *m = realloc(l->v, c * sizeof(*m));
		if (!m)
			return NULL;
		l->v = m;
		l->cap = c;
	}
	return &l->v[l->n];
}

/* ==== The manifest ====
 *
 * Written at a graceful stop: MANIFEST_MAGIC, u32 version, u32
 * block_tokens, u64 count, u64 0; then each record's head as in its file,
 * followed (version 2) by its use: u64 hits, u64 last use (Unix seconds),
 * u64 LRU clock, u32 flags (MAN_PIN_END: a pin ends here), u32 0, u64 the
 * pin's end (Unix seconds; 0: none); then the XXH3-64 of all that. Read
 * (and deleted) at the next start in place of a scan of every file; a
 * missing or damaged one means a scan, which keeps the records but not
 * their use. Version 1 (heads alone) is still read. */

#define MANIFEST "manifest"
#define MANIFEST_HDR 32
#define MANIFEST_VERSION 2
#define MAN_USE 40 /* a record's use, after its head */
#define MAN_PIN_END 1u
static const uint8_t manifest_magic[8] = { 'P', 'F', 'X', 'D', 'M', 'A', 'N', 0 };

static uint64_t unix_s(void)
{
	return (uint64_t)time(NULL);
}

/* A record's use from the manifest into f (now: Unix seconds). */
static void use_decode(const uint8_t *u, uint64_t now, struct found *f)
{
	uint64_t last = rec_get_le(u + 8, 8), pin_until = rec_get_le(u + 32, 8);
	f->b.hits = rec_get_le(u, 8);
	f->b.idle_s = now > last ? now - last : 0;
	f->b.use = rec_get_le(u + 16, 8);
	f->b.pin_end = rec_get_le(u + 24, 4) & MAN_PIN_END;
	f->pin_until = f->b.pin_end ? pin_until : 0;
}

/* The records the manifest lists into l: 1, 0 when there is none, or
 * -EBADMSG (with *why) when it is damaged; -ENOMEM. It is deleted, so
 * that a crash later cannot make a stale one look current. */
static int read_manifest(int dirfd, uint32_t bt, struct found_list *l, const char **why)
{
	int fd = openat(dirfd, MANIFEST, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	struct stat st;
	uint8_t *buf = NULL;
	size_t head_bytes = rec_head_size(bt), len = 0;
	int rc = fstat(fd, &st) ? -errno : 0;
	if (!rc) {
		len = (size_t)st.st_size;
		buf = malloc(len ? len : 1);
		rc = buf ? 0 : -ENOMEM;
	}
	if (!rc && pread(fd, buf, len, 0) != (ssize_t)len)
		rc = -EIO;
	close(fd);
	if (!rc && (unlinkat(dirfd, MANIFEST, 0) || fsync(dirfd)))
		rc = -errno;
	uint64_t count = 0, version = len >= 12 ? rec_get_le(buf + 8, 4) : 0;
	size_t stride = head_bytes + (version >= 2 ? MAN_USE : 0);
	if (!rc) {
		*why = "it is damaged";
		if (len < MANIFEST_HDR + 8 || memcmp(buf, manifest_magic, 8) || version < 1 ||
		    version > MANIFEST_VERSION || rec_get_le(buf + 24, 8) ||
		    XXH3_64bits(buf, len - 8) != rec_get_le(buf + len - 8, 8))
			rc = -EBADMSG;
		else if (rec_get_le(buf + 12, 4) != bt)
			*why = "it lists records of another block size", rc = -EBADMSG;
		else if ((count = rec_get_le(buf + 16, 8)) != (len - MANIFEST_HDR - 8) / stride ||
			 (len - MANIFEST_HDR - 8) % stride)
			rc = -EBADMSG;
	}
	uint64_t now = unix_s();
	for (uint64_t i = 0; !rc && i < count; i++) {
		struct found *f = next_found(l);
		if (!f) {
			rc = -ENOMEM;
			break;
		}
		/* Its own checksum passed with the manifest's: a head that fails
		 * here was written wrong, and the whole manifest is suspect. */
		const uint8_t *rec = buf + MANIFEST_HDR + i * stride;
		if ((rc = check_head(rec, head_bytes, bt, NULL, 0, f, why)))
			break;
		f->pin_until = 0;
		if (version >= 2)
			use_decode(rec + head_bytes, now, f);
		l->n++;
	}
	free(buf);
	if (rc < 0) {
		for (size_t i = 0; i < l->n; i++)
			free(l->v[i].tokens);
		l->n = 0;
	}
	return rc < 0 ? rc : 1;
}

struct manifest_writer {
	FILE *f;
	XXH3_state_t *sum;
	uint32_t bt;
	uint8_t *head;
	size_t head_bytes;
	uint64_t count;
	int rc;
};

static void man_put(struct manifest_writer *w, const void *p, size_t n)
{
	errno = 0;
	if (!w->rc && fwrite(p, 1, n, w->f) != n)
		w->rc = errno ? -errno : -EIO; /* ENOSPC, EDQUOT: the caller says so */
	XXH3_64bits_update(w->sum, p, n);
}

static int man_record(void *ctx, const struct idx_block *b)
{
	struct manifest_writer *w = ctx;
	struct rec_meta m;
	rec_meta_of(b, w->bt, &m);
	if (rec_encode_head(&m, b->tokens, b->sum, w->head, w->head_bytes) < 0)
		return 0; /* a block no record can hold was never written */
	man_put(w, w->head, w->head_bytes);
	/* Wall-clock times: the monotonic clock starts again with a reboot. */
	uint8_t u[MAN_USE] = { 0 };
	uint64_t now = unix_s();
	rec_put_le(u, b->hits, 8);
	rec_put_le(u + 8, now > b->idle_s ? now - b->idle_s : 0, 8);
	rec_put_le(u + 16, b->use, 8);
	rec_put_le(u + 24, b->pin_end ? MAN_PIN_END : 0, 4);
	rec_put_le(u + 32, b->pin_end && b->pin_ttl_s ? now + b->pin_ttl_s : 0, 8);
	man_put(w, u, sizeof(u));
	w->count++;
	return w->rc;
}

static int man_count(void *ctx, const struct idx_block *b)
{
	(void)b;
	(*(uint64_t *)ctx)++;
	return 0;
}

int restart_save(struct daemon *d, struct tier *t, uint64_t *records)
{
	int dirfd = tier_dirfd(t);
	struct manifest_writer w = { .bt = d->block_tokens,
				     .head_bytes = rec_head_size(d->block_tokens) };
	/* Counted first, to head the file: the daemon is stopping, nothing
	 * comes or goes any more. */
	uint64_t count = 0;
	idx_each_record(d->idx, man_count, &count);
	int fd = openat(dirfd, MANIFEST ".tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	w.f = fd < 0 ? NULL : fdopen(fd, "w");
	w.sum = XXH3_createState();
	w.head = malloc(w.head_bytes);
	int rc = w.f && w.sum && w.head ? 0 : fd < 0 ? -errno : -ENOMEM;
	if (!w.f && fd >= 0)
		close(fd);
	if (!rc) {
		uint8_t hdr[MANIFEST_HDR] = { 0 }, tail[8];
		memcpy(hdr, manifest_magic, 8);
		rec_put_le(hdr + 8, MANIFEST_VERSION, 4);
		rec_put_le(hdr + 12, d->block_tokens, 4);
		rec_put_le(hdr + 16, count, 8);
		XXH3_64bits_reset(w.sum);
		man_put(&w, hdr, sizeof(hdr));
		rc = idx_each_record(d->idx, man_record, &w);
		if (!rc && w.count != count)
			rc = -EAGAIN;
		rec_put_le(tail, XXH3_64bits_digest(w.sum), 8);
		errno = 0;
		if (!rc && fwrite(tail, 1, 8, w.f) != 8)
			rc = errno ? -errno : -EIO;
		if (!rc && (fflush(w.f) || fsync(fileno(w.f))))
			rc = -errno;
	}
	if (w.f && fclose(w.f) && !rc)
		rc = -errno;
	free(w.head);
	XXH3_freeState(w.sum);
	if (!rc && (renameat(dirfd, MANIFEST ".tmp", dirfd, MANIFEST) || fsync(dirfd)))
		rc = -errno;
	if (rc)
		unlinkat(dirfd, MANIFEST ".tmp", 0);
	*records = w.count;
	return rc;
}

static int by_depth(const void *a, const void *b)
{
	const struct found *x = a, *y = b;
	return (x->b.depth > y->b.depth) - (x->b.depth < y->b.depth);
}

static double ms_since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Every record file's head into l; deletes torn and damaged ones. */
static int scan(int dirfd, uint32_t bt, struct found_list *l, struct restart_report *r)
{
	int fd = dup(dirfd);
	DIR *dir = fd < 0 ? NULL : fdopendir(fd);
	if (!dir) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return -e;
	}
	size_t head_bytes = rec_head_size(bt);
	uint8_t *head = malloc(head_bytes);
	int rc = head ? 0 : -ENOMEM;
	struct dirent *de;
	while (!rc && (de = readdir(dir))) {
		const char *name = de->d_name;
		if (has_suffix(name, ".tmp")) {
			/* A write the stop cut short: never renamed, never seen. */
			unlinkat(dirfd, name, 0);
			r->torn++;
			continue;
		}
		if (!has_suffix(name, ".rec"))
			continue;
		r->records++;
		struct found *f = next_found(l);
		const char *why = NULL;
		int e = f ? read_one(dirfd, name, bt, head, head_bytes, f, &why) : -ENOMEM;
		if (!e) {
			l->n++;
			continue;
		}
		if (e == -ENOMEM) {
			rc = e;
			break;
		}
		if (e == -EACCES) {
			pd_log("disk tier: %s: a record of another block size (this daemon's blocks have %u tokens): deleted",
			       name, bt);
			r->dropped++;
		} else {
			pd_log("disk tier: %s: %s: deleted", name, why ? why : strerror(-e));
			r->corrupt++;
		}
		unlinkat(dirfd, name, 0);
	}
	closedir(dir);
	free(head);
	return rc;
}

/* The pin that ended at f when the last run stopped, once f and every
 * block before it are loaded (its children are not needed). */
static void pin_again(struct daemon *d, const struct found *f, struct restart_report *r)
{
	uint64_t now = unix_s(), pinned;
	if (f->pin_until && f->pin_until <= now) {
		r->pins_expired++;
		return;
	}
	struct pd_id id = { .uid = f->b.ns };
	memcpy(id.key, f->b.hash, PD_HASH_SIZE);
	uint32_t ttl = f->pin_until ? (uint32_t)(f->pin_until - now) : 0;
	int e = idx_pin(d->idx, &id, ttl, &pinned);
	if (!e) {
		r->pins++;
		return;
	}
	r->pins_lost++;
	char name[TIER_NAME_MAX];
	tier_name(f->b.ns, f->b.hash, ".rec", name);
	pd_log("disk tier: the pin of the chain ending at %s is not kept: %s", name,
	       e == -E2BIG ? "pins would hold more than --pin-max" : strerror(-e));
}

int restart_load(struct daemon *d, struct tier *t, struct restart_report *r)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	memset(r, 0, sizeof(*r));
	int dirfd = tier_dirfd(t);
	uint32_t bt = d->block_tokens;
	struct found_list l = { 0 };
	const char *why = NULL;
	int rc = read_manifest(dirfd, bt, &l, &why);
	if (rc < 0 && rc != -ENOMEM)
		pd_log("disk tier: the manifest: %s: scanning the directory instead",
		       why ? why : strerror(-rc));
	r->manifest = rc == 1;
	r->records = r->manifest ? l.n : 0;
	rc = rc == 1 ? 0 : rc == -ENOMEM ? rc : scan(dirfd, bt, &l, r);
	if (l.n) /* qsort of NULL, 0 is undefined */
		qsort(l.v, l.n, sizeof(*l.v), by_depth);
	struct group_set gs = { 0 };
	for (size_t i = 0; i < l.n; i++) {
		struct found *f = &l.v[i];
		int e = 0;
		struct idx_group *g = rc ? NULL : group_set_get(&gs, d, f->b.ns, f->b.h0, f->b.fp,
								 f->payload, NULL, &e);
		if (g)
			e = idx_load(d->idx, g, &f->b);
		if (!e) {
			r->loaded++;
			r->bytes += rec_size(bt, f->payload);
			if (f->b.pin_end)
				pin_again(d, f, r);
		} else if (!rc) {
			char name[TIER_NAME_MAX];
			tier_name(f->b.ns, f->b.hash, ".rec", name);
			unlinkat(dirfd, name, 0);
			r->dropped++;
			/* Loaded by depth: once the budget is full, nothing deeper
			 * loads, and a block whose parent went for it goes for it
			 * too. Those are counted, not logged one by one. */
			if ((e == -ENOSPC && g) || (e == -ENOENT && r->over_budget)) {
				r->over_budget++;
				r->over_budget_bytes += rec_size(bt, f->payload);
			} else {
				static const char *const reason[] = { "its parent is not there",
								      "no partition is left for its user and block size",
								      "its chain root's blocks are of another size" };
				pd_log("disk tier: %s: %s: deleted", name,
				       e == -ENOENT || e == -EEXIST ? reason[0]
				       : e == -EUSERS || e == -EMFILE ? reason[1]
				       : e == -EXDEV ? reason[2] : strerror(-e));
			}
		}
		free(f->tokens);
	}
	free(l.v);
	group_set_release(&gs, d);
	idx_count_corrupt(d->idx, r->corrupt);
	r->ms = ms_since(&t0);
	return rc;
}
