/* SPDX-License-Identifier: MIT */
/*
 * libprefixd. One blocking request at a time per connection (a mutex), so
 * replies never need matching beyond the echoed opaque value. Arenas are
 * mapped once per connection and stay mapped until it closes: the daemon
 * sends each arena's descriptor once, and mapping is the costly part.
 */
#include "prefixd.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "arena.h"
#include "connection.h"
#include "sock.h"

static _Thread_local char errmsg[512];
/* Of this thread's last match, for prefixd_match_from_disk() alone: the
 * ABI of releases before prefixd_match2() returned it through here. */
static _Thread_local uint32_t from_disk;

const char *prefixd_errmsg(void) { return errmsg; }

int pd_fail(int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
	va_end(ap);
	return rc;
}

static int errno_of(int status)
{
	switch (status) {
	case PD_E_VERSION: return -EPROTONOSUPPORT;
	case PD_E_LAYOUT: return -EINVAL;
	case PD_E_NOSPACE: return -ENOSPC;
	case PD_E_NOTFOUND: return -ENOENT;
	case PD_E_DENIED: return -EACCES;
	case PD_E_LIMIT: return -E2BIG;
	case PD_E_MALFORMED: return -EBADMSG;
	case PD_E_STATE: return -EPROTO;
	default: return -EIO;
	}
}

int pd_call(struct prefixd *c, int op, const uint8_t *body, size_t len, int sfd,
	    uint8_t **rbody, uint32_t *rlen, int *fds, int *nfds)
{
	return pd_call_flags(c, op, 0, body, len, sfd, rbody, rlen, fds, nfds);
}

int pd_call_flags(struct prefixd *c, int op, uint8_t flags, const uint8_t *body, size_t len,
		  int sfd, uint8_t **rbody, uint32_t *rlen, int *fds, int *nfds)
{
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, (uint8_t)op, flags, 0, ++c->opaque, (uint32_t)len };
	struct pd_hdr r;
	int got = 0, tmp[PD_MAX_FDS];
	int *rfds = fds ? fds : tmp;
	*rbody = NULL;
	int rc = pd_send(c->fd, &h, body, sfd >= 0 ? &sfd : NULL, sfd >= 0);
	if (rc)
		return pd_fail(rc, "cannot send to prefixd: %s", strerror(-rc));
	/* Waiting in poll, not recvmsg: the daemon reading the request wakes
	 * a socket's writers, and a reader blocked in recvmsg would wake for
	 * nothing (bench/daemon: ~1/5 of the daemon's time went to that). */
	struct pollfd p = { c->fd, POLLIN, 0 };
	while (poll(&p, 1, -1) < 0 && errno == EINTR)
		;
	if ((rc = pd_recv(c->fd, &r, rbody, rfds, &got))) {
		/* Out of step with the stream: fail every later call at once. */
		shutdown(c->fd, SHUT_RDWR);
		return pd_fail(rc == -ECONNRESET ? rc : -EPROTO, "no reply from prefixd: %s",
			    rc == -ECONNRESET ? "it closed the connection" : strerror(-rc));
	}
	if (!(r.flags & PD_FLAG_REPLY) || r.op != op || r.opaque != h.opaque) {
		shutdown(c->fd, SHUT_RDWR);
		rc = pd_fail(-EPROTO, "prefixd answered another request");
	} else if (r.status) {
		struct pd_error e;
		if (pd_error_decode(*rbody, r.body_len, &e))
			rc = pd_fail(errno_of((int)r.status), "prefixd: %s", pd_status_str((int)r.status));
		else
			rc = pd_fail(errno_of((int)r.status), "prefixd: %s: %.*s",
				  pd_status_str((int)r.status), (int)e.len, e.msg);
	}
	if (rc || !fds)
		for (int i = 0; i < got; i++)
			close(rfds[i]);
	if (rc) {
		free(*rbody);
		*rbody = NULL;
		return rc;
	}
	*rlen = r.body_len;
	if (nfds)
		*nfds = got;
	return 0;
}

static int hello(struct prefixd *c, const struct prefixd_layout *l, unsigned flags)
{
	int rc = prefixd_prompt_new(l, &c->memo); /* checks the layout */
	if (rc)
		return rc;
	struct pd_hello m = pd_hello_of(l);
	uint8_t body[60 + PD_MAX_SALT];
	size_t len = pd_hello_encode(&m, body, sizeof(body));
	uint8_t *rb;
	uint32_t rlen = 0;
	uint8_t hf = flags & PREFIXD_CONNECT_SHARED ? PD_FLAG_SHARED : 0;
	if ((rc = pd_call_flags(c, PD_OP_HELLO, hf, body, len, -1, &rb, &rlen, NULL, NULL))) {
		char why[sizeof(errmsg)];
		snprintf(why, sizeof(why), "%s", errmsg);
		return hf && rc == -ECONNRESET
			       ? pd_fail(rc, "%s (a prefixd older than the shared namespace closes a connection that asks for it)",
					 why)
			       : rc;
	}
	struct pd_hello_reply r;
	rc = pd_hello_reply_decode(rb, rlen, &r);
	free(rb);
	if (rc)
		return pd_fail(-EBADMSG, "prefixd sent a HELLO reply that does not decode");
	c->has_layout = 1;
	c->block_tokens = l->block_tokens;
	c->block_bytes = l->block_bytes;
	c->max_hashes = r.max_hashes < PD_MAX_HASHES ? r.max_hashes : PD_MAX_HASHES;
	c->limits = (struct prefixd_limits){ r.budget_bytes, r.quota_bytes, r.pin_max_bytes,
					     c->max_hashes };
	return 0;
}

int prefixd_connect(const char *path, const struct prefixd_layout *layout, struct prefixd **out)
{
	return prefixd_connect_flags(path, layout, 0, out);
}

int prefixd_connect_flags(const char *path, const struct prefixd_layout *layout, unsigned flags,
			  struct prefixd **out)
{
	char def[PREFIXD_SOCKET_PATH_MAX];
	if (flags & ~(unsigned)PREFIXD_CONNECT_SHARED)
		return pd_fail(-EINVAL, "unknown connect flags %#x", flags & ~(unsigned)PREFIXD_CONNECT_SHARED);
	if (flags && !layout)
		return pd_fail(-EINVAL, "the shared namespace is for a connection with a layout");
	if (!path) {
		int rc = prefixd_default_socket(def, sizeof(def));
		if (rc)
			return rc;
		path = def;
	}
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(a.sun_path))
		return pd_fail(-ENAMETOOLONG, "socket path too long: %s", path);
	strcpy(a.sun_path, path);
	struct prefixd *c = calloc(1, sizeof(*c));
	if (!c)
		return pd_fail(-ENOMEM, "out of memory");
	pthread_mutex_init(&c->lock, NULL);
	c->staging = -1;
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof(a))) {
		int rc = -errno;
		prefixd_close(c);
		return pd_fail(rc, "cannot connect to prefixd at %s: %s", path, strerror(-rc));
	}
	int rc = layout ? hello(c, layout, flags) : 0;
	if (rc) {
		prefixd_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

void prefixd_close(struct prefixd *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	if (c->staging >= 0)
		close(c->staging);
	for (uint32_t i = 0; i < c->narenas; i++)
		if (c->arenas[i].base)
			shm_unmap(c->arenas[i].base, c->arenas[i].size);
	free(c->arenas);
	free(c->leases);
	prefixd_prompt_free(c->memo);
	pd_buf_free(&c->req);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* Token ids travel little-endian: as they are on such hosts, else in a
 * copy (*owned, to free). NULL when out of memory. */
static const uint8_t *le_tokens(const uint32_t *tokens, size_t n, uint8_t **owned)
{
	*owned = NULL;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	(void)n;
	return (const uint8_t *)tokens;
#else
	uint8_t *b = *owned = malloc(4 * n + 1);
	for (size_t i = 0; b && i < n; i++)
		for (int k = 0; k < 4; k++)
			b[4 * i + k] = (uint8_t)(tokens[i] >> 8 * k);
	return b;
#endif
}

static int need_layout(const struct prefixd *c)
{
	return c->has_layout ? 0 : pd_fail(-EINVAL, "this connection was opened without a layout");
}

/* Maps the arenas a MATCH reply brought. Takes the descriptors. */
static int map_arenas(struct prefixd *c, const struct pd_match_reply *r, int *fds, int nfds)
{
	int rc = 0;
	if ((int)r->new_arenas != nfds)
		rc = pd_fail(-EPROTO, "prefixd sent %d descriptors for %u arenas", nfds, r->new_arenas);
	for (uint32_t i = 0; !rc && i < r->new_arenas; i++) {
		struct pd_arena_desc d = pd_arena_at(r, i);
		if (d.arena >= (1u << 20) || (d.arena < c->narenas && c->arenas[d.arena].base)) {
			rc = pd_fail(-EPROTO, "prefixd sent arena %u twice", d.arena);
			break;
		}
		if (d.arena >= c->narenas) {
			uint32_t n = d.arena + 16;
			struct mapped *m = realloc(c->arenas, n * sizeof(*m));
			if (!m) {
				rc = pd_fail(-ENOMEM, "out of memory");
				break;
			}
			memset(m + c->narenas, 0, (n - c->narenas) * sizeof(*m));
			c->arenas = m;
			c->narenas = n;
		}
		const void *p;
		if ((rc = shm_map_ro(fds[i], d.size, &p))) {
			rc = pd_fail(rc, "cannot map arena %u read-only: %s", d.arena, strerror(-rc));
			break;
		}
		c->arenas[d.arena] = (struct mapped){ p, d.size };
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	return rc;
}

/* Sends a one-way RELEASE (no reply comes). Caller holds the lock. */
static int release_oneway(struct prefixd *c, uint64_t lease)
{
	uint8_t body[8];
	struct pd_release m = { lease };
	struct pd_hdr h = { PD_MAGIC, PD_VERSION, PD_OP_RELEASE, PD_FLAG_NOREPLY, 0, ++c->opaque, 8 };
	int rc = pd_release_encode(&m, body, sizeof(body)) == 8 ? pd_send(c->fd, &h, body, NULL, 0)
								: -EINVAL;
	return rc ? pd_fail(rc, "cannot send to prefixd: %s", strerror(-rc)) : 0;
}

/* MATCH of the first nblocks blocks of a prompt, hashed. */
static int do_match(struct prefixd *c, const struct prefixd_prompt *p, uint32_t nblocks,
		    uint32_t wait_ms, uint64_t *lease, uint32_t *hit, uint32_t *disk_out,
		    struct pd_flight_reply *fr, const void **kv)
{
	uint8_t *rb = NULL, *owned;
	int rc;
	/* Single flight: wait for another's claim, or claim the rest. */
	size_t pre = wait_ms ? PD_FLIGHT_SIZE : 0;
	struct pd_flight fl = { wait_ms, PD_FLIGHT_CLAIM };
	size_t cap = pre + pd_chain_body_size(nblocks, c->block_tokens);
	const uint8_t *le = le_tokens(p->tokens, (size_t)nblocks * c->block_tokens, &owned);
	struct pd_match m = { nblocks, p->hashes, le };
	uint8_t *body = pd_buf_reserve(&c->req, cap);
	size_t len = body && le ? pd_match_encode(&m, c->block_tokens, body + pre, cap - pre) : 0;
	free(owned);
	if (len && pre && pd_flight_encode(&fl, body, pre) != pre)
		len = 0;
	if (!len)
		return pd_fail(-ENOMEM, "out of memory");
	len += pre;
	int fds[PD_MAX_FDS], nfds = 0;
	uint32_t rlen = 0;
	rc = pd_call_flags(c, PD_OP_MATCH, wait_ms ? PD_FLAG_FLIGHT : 0, body, len, -1, &rb, &rlen,
			   fds, &nfds);
	pd_buf_trim(&c->req);
	if (rc)
		return rc;
	struct pd_match_reply r;
	*fr = (struct pd_flight_reply){ PD_FLIGHT_NONE, 0 };
	if ((pre && pd_flight_reply_decode(rb, rlen, fr)) ||
	    pd_match_reply_decode(rb, rlen - (pre ? PD_FLIGHT_REPLY_SIZE : 0), &r) ||
	    r.hit > nblocks) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		free(rb);
		return pd_fail(-EBADMSG, "prefixd sent a MATCH reply that does not decode");
	}
	rc = map_arenas(c, &r, fds, nfds);
	uint32_t disk = 0;
	for (uint32_t i = 0; !rc && i < r.hit; i++) {
		struct pd_place pl = pd_place_at(&r, i);
		disk += !!(pl.flags & PD_PLACE_FROM_DISK);
		const struct mapped *a = pl.arena < c->narenas ? &c->arenas[pl.arena] : NULL;
		if (!a || !a->base || pl.offset > a->size || a->size - pl.offset < c->block_bytes)
			rc = pd_fail(-EPROTO, "prefixd placed block %u outside its arenas", i);
		else
			kv[i] = a->base + pl.offset;
	}
	if (!rc && r.lease && c->nleases == c->cap_leases) {
		size_t lcap = c->cap_leases ? 2 * c->cap_leases : 16;
		uint64_t *l = realloc(c->leases, lcap * sizeof(*l));
		if (l) {
			c->leases = l;
			c->cap_leases = lcap;
		} else {
			rc = pd_fail(-ENOMEM, "out of memory");
		}
	}
	if (!rc && r.lease)
		c->leases[c->nleases++] = r.lease;
	*lease = rc ? 0 : r.lease;
	*hit = rc ? 0 : r.hit;
	*disk_out = rc ? 0 : disk;
	if (rc && r.lease)
		release_oneway(c, r.lease);
	/* An arena this connection could not map is never sent again: the
	 * connection cannot serve its blocks any more. */
	if (rc)
		shutdown(c->fd, SHUT_RDWR);
	free(rb);
	return rc;
}

/* Every match call: tokens (then hashed into the connection's memo) or an
 * already hashed prompt p, at most max_blocks of its full blocks. */
static int match_any(struct prefixd *c, const uint32_t *tokens, const struct prefixd_prompt *p,
		     uint32_t max_blocks, uint32_t wait_ms, uint64_t *lease, uint32_t *hit,
		     const void **kv, struct prefixd_match_info *info)
{
	struct prefixd_match_info ignored;
	info = info ? info : &ignored;
	*lease = 0;
	*hit = 0;
	memset(info, 0, sizeof(*info));
	int rc = need_layout(c);
	if (rc)
		return rc;
	if (p && memcmp(p->h0, c->memo->h0, PD_HASH_SIZE))
		return pd_fail(-EINVAL, "the prompt was made for another layout than the connection's");
	size_t n = p ? p->len / p->block_tokens : max_blocks;
	if (n > max_blocks)
		n = max_blocks;
	if (n > c->max_hashes)
		n = c->max_hashes;
	if (!n)
		return 0;
	if (wait_ms > PD_MAX_WAIT_MS)
		wait_ms = PD_MAX_WAIT_MS;
	struct pd_flight_reply fr;
	pthread_mutex_lock(&c->lock);
	if (!p && !(rc = pd_prompt_set(c->memo, tokens, (uint32_t)n)))
		p = c->memo;
	if (!rc)
		rc = do_match(c, p, (uint32_t)n, wait_ms, lease, hit, &info->from_disk, &fr, kv);
	pthread_mutex_unlock(&c->lock);
	if (!rc) {
		info->flight = fr.outcome;
		info->waited_ms = fr.waited_ms;
	}
	return rc;
}

int prefixd_match2(struct prefixd *c, const uint32_t *tokens, uint32_t nblocks, uint64_t *lease,
		   uint32_t *hit, uint32_t *disk, const void **kv)
{
	struct prefixd_match_info info;
	int rc = match_any(c, tokens, NULL, nblocks, 0, lease, hit, kv, &info);
	if (disk)
		*disk = info.from_disk;
	return rc;
}

int prefixd_match_prompt2(struct prefixd *c, const struct prefixd_prompt *p, uint32_t max_blocks,
			  uint64_t *lease, uint32_t *hit, uint32_t *disk, const void **kv)
{
	struct prefixd_match_info info;
	int rc = match_any(c, NULL, p, max_blocks, 0, lease, hit, kv, &info);
	if (disk)
		*disk = info.from_disk;
	return rc;
}

int prefixd_match_wait(struct prefixd *c, const uint32_t *tokens, uint32_t nblocks,
		       uint32_t wait_ms, uint64_t *lease, uint32_t *hit, const void **kv,
		       struct prefixd_match_info *info)
{
	return match_any(c, tokens, NULL, nblocks, wait_ms, lease, hit, kv, info);
}

int prefixd_match_prompt_wait(struct prefixd *c, const struct prefixd_prompt *p,
			      uint32_t max_blocks, uint32_t wait_ms, uint64_t *lease,
			      uint32_t *hit, const void **kv, struct prefixd_match_info *info)
{
	return match_any(c, NULL, p, max_blocks, wait_ms, lease, hit, kv, info);
}

int prefixd_match(struct prefixd *c, const uint32_t *tokens, uint32_t nblocks, uint64_t *lease,
		  uint32_t *hit, const void **kv)
{
	return prefixd_match2(c, tokens, nblocks, lease, hit, &from_disk, kv);
}

int prefixd_match_prompt(struct prefixd *c, const struct prefixd_prompt *p, uint32_t max_blocks,
			 uint64_t *lease, uint32_t *hit, const void **kv)
{
	return prefixd_match_prompt2(c, p, max_blocks, lease, hit, &from_disk, kv);
}

int prefixd_release(struct prefixd *c, uint64_t lease)
{
	int rc = -ENOENT;
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->nleases; i++)
		if (c->leases[i] == lease) {
			c->leases[i] = c->leases[--c->nleases];
			rc = release_oneway(c, lease);
			break;
		}
	pthread_mutex_unlock(&c->lock);
	if (rc == -ENOENT)
		pd_fail(rc, "lease %llu is not held by this connection", (unsigned long long)lease);
	return rc;
}

/*
 * A publish stages its blocks in a memfd the daemon reads them from. The
 * kernel gives a new memfd its pages one by one as they are written
 * (~2.5 us a page on the development VM: 57 ms of a 94 MB publish's 77),
 * so a publish of more than STAGING_BYTES goes in parts through one
 * staging area of that size, each part continuing the last through a
 * lease the daemon takes on what it published (PD_FLAG_LEASE). The
 * client's memory for it stays small, whatever the prefix's size, and the
 * connection keeps it: a prompt published chunk by chunk (prefix-serve
 * publishes at every step) pays for the pages once, not at every call
 * (bench/serve's distinct workload: 53 against 22 ms of CPU for 94 MB).
 * The daemon is done reading it when its reply comes, and calls on one
 * connection take turns (c->lock), so reusing it races with nothing.
 */
#define STAGING_BYTES ((uint64_t)8 << 20)

/* Writes n blocks at the start of the staging memfd. */
static int stage(const struct prefixd *c, int fd, const void *const *kv, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *p = kv[i];
		uint64_t done = 0;
		while (done < c->block_bytes) {
			ssize_t w = pwrite(fd, p + done, c->block_bytes - done,
					   (off_t)(i * c->block_bytes + done));
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				return pd_fail(w < 0 ? -errno : -EIO, "staging memory: %s",
					       strerror(w < 0 ? errno : EIO));
			done += (uint64_t)w;
		}
	}
	return 0;
}

/* One PUBLISH of blocks [first, first + n) of the memo's prompt, staged
 * in sfd; with `flags` PD_FLAG_LEASE, r->lease continues it. Caller holds
 * the lock. */
static int publish_part(struct prefixd *c, uint64_t lease, const uint32_t *tokens, uint32_t first,
			uint32_t n, int sfd, uint8_t flags, struct pd_publish_reply *r)
{
	uint8_t *rb, *owned = NULL;
	uint32_t rlen = 0;
	size_t cap = 8 + pd_chain_body_size(n, c->block_tokens);
	const uint8_t *le = le_tokens(tokens + (size_t)first * c->block_tokens,
				      (size_t)n * c->block_tokens, &owned);
	struct pd_publish m = { lease, n, c->memo->hashes + (size_t)first * PD_HASH_SIZE, le };
	uint8_t *body = pd_buf_reserve(&c->req, cap);
	size_t len = body && le ? pd_publish_encode(&m, c->block_tokens, body, cap) : 0;
	int rc = len ? pd_call_flags(c, PD_OP_PUBLISH, flags, body, len, sfd, &rb, &rlen, NULL, NULL)
		     : pd_fail(-ENOMEM, "out of memory");
	pd_buf_trim(&c->req);
	free(owned);
	if (rc)
		return rc;
	bool leased = flags & PD_FLAG_LEASE;
	if (pd_publish_reply_decode(rb, rlen, r) || r->stored > n || r->deduplicated > n - r->stored ||
	    rlen != (leased ? PD_PUBLISH_LEASE_REPLY_SIZE : PD_PUBLISH_REPLY_SIZE)) {
		free(rb);
		return pd_fail(-EBADMSG, "prefixd sent a PUBLISH reply that does not decode");
	}
	free(rb);
	return 0;
}

int prefixd_publish(struct prefixd *c, uint64_t lease, const uint32_t *tokens, uint32_t first,
		    uint32_t n, const void *const *kv, uint32_t *stored, uint32_t *dedup)
{
	*stored = *dedup = 0;
	int rc = need_layout(c);
	if (rc || !n)
		return rc;
	if (n > c->max_hashes || first > UINT32_MAX - n)
		return pd_fail(-E2BIG, "%u blocks are more than one publish takes (%u)", n, c->max_hashes);
	uint64_t part = STAGING_BYTES / c->block_bytes;
	part = part < 1 ? 1 : part > n ? n : part;
	pthread_mutex_lock(&c->lock);
	if (c->staging < 0 && (c->staging = memfd_create("prefixd-staging", MFD_CLOEXEC)) < 0) {
		rc = pd_fail(-errno, "memfd_create: %s", strerror(errno));
		pthread_mutex_unlock(&c->lock);
		return rc;
	}
	int sfd = c->staging;
	struct pd_publish_reply r = { 0 };
	uint64_t held = 0; /* this call's lease on what it published so far */
	if ((rc = pd_prompt_set(c->memo, tokens, first + n)))
		goto out;
	for (uint32_t off = 0; off < n; off += (uint32_t)part) {
		uint32_t k = n - off < part ? n - off : (uint32_t)part;
		bool more = off + k < n;
		if ((rc = stage(c, sfd, kv + off, k)) ||
		    (rc = publish_part(c, held ? held : lease, tokens, first + off, k, sfd,
				       more ? PD_FLAG_LEASE : 0, &r)))
			break;
		*stored += r.stored;
		*dedup += r.deduplicated;
		if (held)
			release_oneway(c, held);
		held = r.lease;
		if (r.stop != PD_STOP_NONE)
			break;
		if (more && !held) {
			rc = pd_fail(-ENOMEM, "prefixd stored %u of %u blocks and could not lease them to go on (out of memory)",
				     *stored + *dedup, n);
			break;
		}
	}
out:
	if (held)
		release_oneway(c, held);
	pthread_mutex_unlock(&c->lock);
	if (rc)
		return rc;
	if (r.stop == PD_STOP_BUDGET)
		return pd_fail(-ENOSPC, "prefixd stored %u of %u blocks: its memory budget is full of leased or pinned blocks",
			       *stored + *dedup, n);
	if (r.stop == PD_STOP_QUOTA)
		return pd_fail(-EDQUOT, "prefixd stored %u of %u blocks: this user's quota is full of their leased or pinned blocks",
			       *stored + *dedup, n);
	return 0;
}

int prefixd_default_socket(char *buf, size_t cap)
{
	return pd_default_socket(buf, cap)
		       ? pd_fail(-ENAMETOOLONG, "$PREFIXD_SOCKET or $XDG_RUNTIME_DIR is too long for a socket path")
		       : 0;
}

uint32_t prefixd_match_from_disk(void)
{
	return from_disk;
}

int prefixd_limits(struct prefixd *c, struct prefixd_limits *out)
{
	int rc = need_layout(c);
	if (!rc)
		*out = c->limits;
	return rc;
}
