/* SPDX-License-Identifier: MIT */
/*
 * prefixctl end to end: every command run as the binary, against a private
 * prefixd, and its output read the way a script or a person reads it: the
 * JSON, the text tables, the Prometheus text, the exit statuses and the
 * messages. The tests run as root (the daemon's user); another user is a
 * child process that drops to uid 60001 (group nogroup) before it runs
 * prefixctl or publishes blocks.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <json-c/json.h>
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon_asserts.h"
#include "helpers.h"

#define UID_OTHER 60001u
#define GID_OTHERS 65534u
#define KIB 1024ull
#define MIB (1024ull * 1024)
#define BT TD_BLOCK_TOKENS /* tokens per block: the daemons run with --block-tokens 4 */
#define ID_CHARS PREFIXD_ID_CHARS
#define FP_CHARS (2 * PREFIXD_FINGERPRINT_BYTES)

static struct test_daemon td;

TestSuite(prefixctl, .timeout = 60);

static void sleep_ms(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&t, &t) && errno == EINTR)
		;
}

/* The first size - 1 characters of src (a prefix of an id or a
 * fingerprint) into dst. */
static void cut(char *dst, size_t size, const char *src)
{
	size_t n = strnlen(src, size - 1);
	memcpy(dst, src, n);
	dst[n] = 0;
}

/* ==== Models ====
 * M1 and M3 have blocks of 8 KiB, M2 of 64 KiB. M2's and M3's fingerprints
 * share their first 62 hex digits, so a short prefix names both. */

enum { M1 = 1, M2, M3 };

static struct prefixd_layout layout_of(int m)
{
	struct prefixd_layout l = { .block_tokens = BT, .block_bytes = m == M2 ? 64 * KIB : 8 * KIB };
	memset(l.fingerprint, m == M1 ? 0xa1 : 0xb2, sizeof(l.fingerprint));
	if (m == M3)
		l.fingerprint[PREFIXD_FINGERPRINT_BYTES - 1] = 0x33;
	return l;
}

/* The fingerprint in hex, as prefixctl prints it. */
static const char *fp_hex(int m)
{
	static char s[4][FP_CHARS + 1];
	struct prefixd_layout l = layout_of(m);
	for (int i = 0; i < PREFIXD_FINGERPRINT_BYTES; i++)
		sprintf(s[m] + 2 * i, "%02x", l.fingerprint[i]);
	return s[m];
}

/* What the daemon charges for one block of model m: whole pages. */
static uint64_t charged(int m)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), b = layout_of(m).block_bytes;
	return (b + page - 1) / page * page;
}

/* The id (72 hex digits) of the chain of a prompt's n blocks, in user's
 * namespace. */
static void chain_id(int m, const uint32_t *t, uint32_t n, uint32_t user, char out[ID_CHARS + 1])
{
	struct prefixd_layout l = layout_of(m);
	struct prefixd_prompt *p;
	struct prefixd_id id;
	cr_assert_eq(prefixd_prompt_new(&l, &p), 0, "%s", prefixd_errmsg());
	cr_assert_eq(prefixd_prompt_append(p, t, (size_t)n * BT), 0, "%s", prefixd_errmsg());
	cr_assert_eq(prefixd_prompt_id(p, &id), 0, "%s", prefixd_errmsg());
	prefixd_prompt_free(p);
	id.user = user; /* the key does not depend on the user; the namespace does */
	prefixd_id_format(&id, out);
}

static struct prefixd_id parse_id(const char *s)
{
	struct prefixd_id id;
	cr_assert_eq(prefixd_id_parse(s, &id), 0, "'%s' parses as an id", s);
	return id;
}

/* Publishes the n blocks of t (KV content does not matter here); 0 or the
 * error, *done the blocks now cached. No Criterion: children use it. */
static int publish_raw(struct prefixd *c, int m, const uint32_t *t, uint32_t n, uint32_t *done)
{
	size_t bb = layout_of(m).block_bytes;
	const void *ptrs[64];
	uint8_t *kv = n <= 64 ? malloc(n * bb) : NULL;
	if (!kv)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		memset(kv + i * bb, (int)(t[i * BT] & 0xff), bb);
		ptrs[i] = kv + i * bb;
	}
	uint32_t stored = 0, dedup = 0;
	int rc = prefixd_publish(c, 0, t, 0, n, ptrs, &stored, &dedup);
	free(kv);
	*done = stored + dedup;
	return rc;
}

/* ==== The daemon, and root's connections to it ==== */

static struct prefixd *conns[4]; /* root's, one per model */

static void stop(void)
{
	for (int m = 0; m < 4; m++) {
		prefixd_close(conns[m]);
		conns[m] = NULL;
	}
	t_stop(&td);
}

static struct prefixd *conn(int m)
{
	if (!conns[m]) {
		struct prefixd_layout l = layout_of(m);
		cr_assert_eq(prefixd_connect(td.sock, &l, &conns[m]), 0, "%s", prefixd_errmsg());
	}
	return conns[m];
}

/* Root publishes the n blocks of t. */
static void publish(int m, const uint32_t *t, uint32_t n)
{
	uint32_t done = 0;
	int rc = publish_raw(conn(m), m, t, n, &done);
	cr_assert_eq(rc, 0, "publish: %s", prefixd_errmsg());
	cr_assert_eq(done, n, "%u of %u blocks cached", done, n);
}

/* Root publishes the prompt (base, n) and names its chain in id. */
static void publish_prompt(int m, uint32_t base, uint32_t n, char id[ID_CHARS + 1])
{
	uint32_t t[64 * BT];
	cr_assert_leq(n, 64);
	td_prompt(t, n, base);
	publish(m, t, n);
	if (id)
		chain_id(m, t, n, 0, id);
}

/* Root matches the prompt (base, n): every block must hit. The lease is
 * released, or kept in *keep. */
static void match_prompt(int m, uint32_t base, uint32_t n, uint64_t *keep)
{
	uint32_t t[64 * BT], hit = 0;
	const void *kv[64];
	uint64_t lease = 0;
	cr_assert_leq(n, 64);
	td_prompt(t, n, base);
	cr_assert_eq(prefixd_match(conn(m), t, n, &lease, &hit, kv), 0, "%s", prefixd_errmsg());
	cr_assert_eq(hit, n, "%u of %u blocks hit", hit, n);
	if (keep)
		*keep = lease;
	else
		cr_assert_eq(prefixd_release(conn(m), lease), 0, "%s", prefixd_errmsg());
}

/* In a child: become uid 60001 of group nogroup, or exit 64. */
static void drop_to_other(void)
{
	gid_t g = GID_OTHERS;
	if (setgroups(1, &g) || setresgid(g, g, g) || setresuid(UID_OTHER, UID_OTHER, UID_OTHER) ||
	    geteuid() != UID_OTHER)
		_exit(64);
}

/* Uid 60001 publishes the prompt (base, n) from a child process, and the
 * chain's id goes in id. */
static void publish_as_other(int m, uint32_t base, uint32_t n, char id[ID_CHARS + 1])
{
	uint32_t t[64 * BT];
	cr_assert_leq(n, 64);
	td_prompt(t, n, base);
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		drop_to_other();
		struct prefixd_layout l = layout_of(m);
		struct prefixd *c = NULL;
		uint32_t done = 0;
		int rc = prefixd_connect(td.sock, &l, &c);
		if (!rc)
			rc = publish_raw(c, m, t, n, &done);
		prefixd_close(c);
		_exit(rc ? 1 : done == n ? 0 : 2);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "uid %u published %u blocks (status %d: 64 is a failed setuid)", UID_OTHER, n, st);
	if (id)
		chain_id(m, t, n, UID_OTHER, id);
}

/* ==== Running prefixctl ==== */

struct ctl {
	int status; /* the exit status; 128 + the signal that killed it */
	char cmd[512];
	char out[1 << 16];
	char err[1 << 13];
};

/* Starts prefixctl (as uid 60001 when other), with --socket td.sock first
 * when with_socket; its stdout and stderr come back through *out and *err. */
static pid_t ctl_spawn(int other, int with_socket, const char *const *args, int *out, int *err,
		       char *cmd, size_t cmdlen)
{
	const char *argv[48];
	int n = 0;
	argv[n++] = PREFIXCTL;
	if (with_socket) {
		argv[n++] = "--socket";
		argv[n++] = td.sock;
	}
	for (int i = 0; args[i]; i++) {
		cr_assert_lt(n, 47);
		argv[n++] = args[i];
	}
	argv[n] = NULL;
	size_t at = (size_t)snprintf(cmd, cmdlen, "%sprefixctl", other ? "(uid 60001) " : "");
	for (int i = 1; i < n && at < cmdlen; i++)
		at += (size_t)snprintf(cmd + at, cmdlen - at, " %s", argv[i]);
	int o[2], e[2];
	cr_assert_eq(pipe2(o, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(e, O_CLOEXEC), 0);
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (other)
			drop_to_other();
		int null = open("/dev/null", O_RDONLY);
		if (null < 0 || dup2(null, 0) < 0 || dup2(o[1], 1) < 0 || dup2(e[1], 2) < 0)
			_exit(126);
		execv(PREFIXCTL, (char *const *)argv);
		_exit(127);
	}
	close(o[1]);
	close(e[1]);
	*out = o[0];
	*err = e[0];
	return pid;
}

/* Appends what fd has to buf (of cap, NUL-terminated); 0 at its end. */
static int read_some(int fd, char *buf, size_t cap, size_t *len)
{
	char tmp[4096];
	ssize_t r = read(fd, tmp, sizeof(tmp));
	if (r < 0 && (errno == EINTR || errno == EAGAIN))
		return 1;
	if (r <= 0)
		return 0;
	size_t take = (size_t)r < cap - 1 - *len ? (size_t)r : cap - 1 - *len;
	memcpy(buf + *len, tmp, take);
	*len += take;
	buf[*len] = 0;
	return 1;
}

static int exit_status(int st)
{
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Runs prefixctl to its end (at most 30 s) with its output in *r. */
static void ctl_run(struct ctl *r, int other, int with_socket, const char *const *args)
{
	int fds[2];
	pid_t pid = ctl_spawn(other, with_socket, args, &fds[0], &fds[1], r->cmd, sizeof(r->cmd));
	char *buf[2] = { r->out, r->err };
	size_t cap[2] = { sizeof(r->out), sizeof(r->err) }, len[2] = { 0, 0 };
	int open_[2] = { 1, 1 };
	r->out[0] = r->err[0] = 0;
	double end = td_now_s() + 30;
	while ((open_[0] || open_[1]) && td_now_s() < end) {
		struct pollfd p[2] = { { open_[0] ? fds[0] : -1, POLLIN, 0 },
				       { open_[1] ? fds[1] : -1, POLLIN, 0 } };
		if (poll(p, 2, 100) <= 0)
			continue;
		for (int i = 0; i < 2; i++)
			if (open_[i] && p[i].revents && !read_some(fds[i], buf[i], cap[i], &len[i]))
				open_[i] = 0;
	}
	if (open_[0] || open_[1])
		kill(pid, SIGKILL);
	close(fds[0]);
	close(fds[1]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	r->status = exit_status(st);
	cr_assert(!open_[0] && !open_[1], "%s did not end within 30 s", r->cmd);
}

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })
/* As root, on the test's daemon. */
#define CTL(r, ...) ctl_run((r), 0, 1, ARGS(__VA_ARGS__))
/* As uid 60001, on the test's daemon. */
#define CTL_OTHER(r, ...) ctl_run((r), 1, 1, ARGS(__VA_ARGS__))
/* As root, with no --socket added. */
#define CTL_BARE(r, ...) ctl_run((r), 0, 0, ARGS(__VA_ARGS__))

/* The command succeeded and said nothing on stderr. */
static void expect_ok(const struct ctl *r)
{
	cr_assert_eq(r->status, 0, "%s: exit %d: %s%s", r->cmd, r->status, r->err, r->out);
	cr_expect_eq(r->err[0], 0, "%s: nothing on stderr: %s", r->cmd, r->err);
}

/* The command failed with status and said why on stderr: "prefixctl: "
 * and every one of says (NULL-terminated), nothing on stdout. */
static void expect_fail(const struct ctl *r, int status, const char *const *says)
{
	cr_expect_eq(r->status, status, "%s: exit %d, not %d: %s%s", r->cmd, r->status, status,
		     r->err, r->out);
	cr_expect(!strncmp(r->err, "prefixctl: ", 11), "%s: says why on stderr: '%s'", r->cmd, r->err);
	cr_expect_eq(r->out[0], 0, "%s: nothing on stdout: %s", r->cmd, r->out);
	for (int i = 0; says && says[i]; i++)
		cr_expect(strstr(r->err, says[i]), "%s: stderr mentions '%s': %s", r->cmd, says[i], r->err);
	if (status == 2)
		cr_expect(strstr(r->err, "--help'."), "%s: a usage error points at --help: %s", r->cmd,
			  r->err);
}

/* ==== JSON ==== */

/* Exactly one JSON value in text (and blanks). */
static json_object *parse_json(const char *text, const char *what)
{
	struct json_tokener *tok = json_tokener_new();
	size_t len = strlen(text);
	json_object *o = json_tokener_parse_ex(tok, text, (int)len);
	enum json_tokener_error e = json_tokener_get_error(tok);
	size_t end = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	cr_assert(o && e == json_tokener_success, "%s: not JSON (%s): %s", what,
		  json_tokener_error_desc(e), text);
	cr_assert_eq(strspn(text + end, " \n"), len - end, "%s: only one JSON value: %s", what, text);
	return o;
}

static json_object *jkey(json_object *o, const char *key)
{
	json_object *v;
	cr_assert(json_object_object_get_ex(o, key, &v), "no \"%s\" in %s", key,
		  json_object_to_json_string(o));
	return v;
}

static uint64_t ju64(json_object *o, const char *key)
{
	json_object *v = jkey(o, key);
	cr_assert(json_object_is_type(v, json_type_int), "\"%s\" is a number in %s", key,
		  json_object_to_json_string(o));
	cr_assert_geq(json_object_get_int64(v), 0, "\"%s\" is not negative", key);
	return json_object_get_uint64(v);
}

static const char *jstr(json_object *o, const char *key)
{
	json_object *v = jkey(o, key);
	cr_assert(json_object_is_type(v, json_type_string), "\"%s\" is a string in %s", key,
		  json_object_to_json_string(o));
	return json_object_get_string(v);
}

static int jbool(json_object *o, const char *key)
{
	json_object *v = jkey(o, key);
	cr_assert(json_object_is_type(v, json_type_boolean), "\"%s\" is a boolean in %s", key,
		  json_object_to_json_string(o));
	return json_object_get_boolean(v);
}

static int is_hex(const char *s, size_t len)
{
	return strlen(s) == len && strspn(s, "0123456789abcdef") == len;
}

/* ls --json plus args: the array (put it when done). */
static json_object *ls_json(const char *const *args)
{
	const char *argv[16] = { "ls", "--json" };
	int n = 2;
	for (int i = 0; args && args[i]; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	static struct ctl buf; /* static: a failed assertion leaks nothing */
	struct ctl *r = &buf;
	ctl_run(r, 0, 1, argv);
	expect_ok(r);
	json_object *arr = parse_json(r->out, r->cmd);
	cr_assert(json_object_is_type(arr, json_type_array), "%s: an array: %s", r->cmd, r->out);
	return arr;
}

/* The object of chain id in an ls --json array, or NULL. */
static json_object *chain_in(json_object *arr, const char *id)
{
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		json_object *o = json_object_array_get_idx(arr, i);
		if (!strcmp(jstr(o, "id"), id))
			return o;
	}
	return NULL;
}

/* One chain from ls --json; asserts it is listed. */
static json_object *one_chain(const char *id)
{
	static json_object *last;
	if (last)
		json_object_put(last);
	last = ls_json(NULL);
	json_object *o = chain_in(last, id);
	cr_assert(o, "chain %.12s is listed", id);
	return o;
}

/* An evict command's --json answer. */
static struct prefixd_evicted evict_json(const char *const *args)
{
	const char *argv[16] = { "evict" };
	int n = 1;
	for (int i = 0; args[i]; i++)
		argv[n++] = args[i];
	argv[n++] = "--json";
	argv[n] = NULL;
	static struct ctl buf; /* static: a failed assertion leaks nothing */
	struct ctl *r = &buf;
	ctl_run(r, 0, 1, argv);
	expect_ok(r);
	json_object *o = parse_json(r->out, r->cmd);
	cr_assert(json_object_is_type(o, json_type_object), "%s: an object", r->cmd);
	cr_expect_eq(json_object_object_length(o), 5, "%s: five keys: %s", r->cmd, r->out);
	struct prefixd_evicted e = { ju64(o, "evicted_blocks"), ju64(o, "evicted_bytes"), ju64(o, "kept_leased"),
			     ju64(o, "kept_pinned"), ju64(o, "kept_parent") };
	json_object_put(o);
	return e;
}

/* One counter of stats --json. */
static uint64_t stat_json(const char *key)
{
	static struct ctl buf; /* static: a failed assertion leaks nothing */
	struct ctl *r = &buf;
	CTL(r, "stats", "--json");
	expect_ok(r);
	json_object *o = parse_json(r->out, r->cmd);
	uint64_t v = ju64(o, key);
	json_object_put(o);
	return v;
}

/* ==== Text ==== */

/* The lines of text (modified in place), at most max. */
static int split_lines(char *text, char **lines, int max)
{
	int n = 0;
	for (char *s = text, *nl; *s && n < max; s = nl + 1) {
		lines[n++] = s;
		if (!(nl = strchr(s, '\n')))
			break;
		*nl = 0;
	}
	return n;
}

/* Whether the words of line (split at blanks) are words (NULL-terminated). */
static int words_are(const char *line, const char *const *words)
{
	char copy[1024], *save = NULL;
	snprintf(copy, sizeof(copy), "%s", line);
	int i = 0;
	for (char *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save), i++)
		if (!words[i] || strcmp(w, words[i]))
			return 0;
	return !words[i];
}

/* A row of ls's table. */
struct ls_row {
	char id[64], model[64], size[64], pinned[64], idle[32], where[32];
	unsigned user, tokens, blocks, leases;
	unsigned long long hits;
};

static const char *const ls_head[] = { "ID",     "USER",   "MODEL", "TOKENS", "BLOCKS", "SIZE",
				       "HITS",   "LEASES", "PINNED", "IDLE",  "WHERE",  NULL };

/* The end (one past) of header title in the header line. */
static size_t title_end(const char *head, const char *title)
{
	const char *at = strstr(head, title);
	cr_assert(at, "'%s' in the header '%s'", title, head);
	return (size_t)(at - head) + strlen(title);
}

/* Parses ls's human output (in r->out, modified): its rows into rows (at
 * most max), the count line into footer. Checks the header, the rows'
 * shapes and that numbers are right-aligned under their titles. */
static int ls_rows(struct ctl *r, struct ls_row *rows, int max, char *footer, size_t flen)
{
	char *lines[128];
	int n = split_lines(r->out, lines, 128);
	cr_assert_geq(n, 2, "%s: a header and a count", r->cmd);
	const char *head = lines[0];
	cr_assert(words_are(head, ls_head), "%s: the header: '%s'", r->cmd, head);
	snprintf(footer, flen, "%s", lines[n - 1]);
	int k = 0;
	for (int i = 1; i < n - 1; i++, k++) {
		cr_assert_lt(k, max);
		struct ls_row *w = &rows[k];
		char size2[32], *line = lines[i];
		int pos = 0;
		cr_assert_eq(sscanf(line, "%63s %u %63s %u %u %31s %31s %llu %u %n", w->id, &w->user,
				    w->model, &w->tokens, &w->blocks, w->size, size2, &w->hits,
				    &w->leases, &pos),
			     9, "%s: row '%s'", r->cmd, line);
		strcat(w->size, " ");
		strcat(w->size, size2);
		/* PINNED ("-", "yes" or "yes (ttl 2h)"), IDLE, WHERE. */
		const char *rest = line + pos;
		const char *last = strrchr(rest, ' ');
		cr_assert(last, "%s: row '%s'", r->cmd, line);
		snprintf(w->where, sizeof(w->where), "%s", last + 1);
		const char *prev = last;
		while (prev > rest && prev[-1] == ' ')
			prev--;
		const char *idle = prev;
		while (idle > rest && idle[-1] != ' ')
			idle--;
		snprintf(w->idle, sizeof(w->idle), "%.*s", (int)(prev - idle), idle);
		const char *pend = idle;
		while (pend > rest && pend[-1] == ' ')
			pend--;
		snprintf(w->pinned, sizeof(w->pinned), "%.*s", (int)(pend - rest), rest);
		/* Right-aligned numbers end under their titles; the line has no
		 * trailing blank. */
		static const char *const right[] = { "USER", "TOKENS", "BLOCKS", "SIZE", "HITS",
						     "LEASES", "IDLE" };
		const char *cells[] = { NULL, NULL, NULL, w->size, NULL, NULL, w->idle };
		for (size_t c = 0; c < sizeof(right) / sizeof(right[0]); c++) {
			size_t end = title_end(head, right[c]);
			cr_expect(strlen(line) > end && line[end] == ' ' && line[end - 1] != ' ',
				  "%s: column %s ends at %zu in '%s'", r->cmd, right[c], end, line);
			if (cells[c]) {
				size_t len = strlen(cells[c]);
				cr_expect(end >= len && !strncmp(line + end - len, cells[c], len),
					  "%s: '%s' ends under %s in '%s'", r->cmd, cells[c], right[c],
					  line);
			}
		}
		cr_expect(!strncmp(line, w->id, strlen(w->id)), "%s: the ID starts the row", r->cmd);
		cr_expect_neq(line[strlen(line) - 1], ' ', "%s: no trailing blank: '%s'", r->cmd, line);
	}
	return k;
}

/* ==== ls ==== */

/*
 * The chains of the ls tests:
 *   A  root       M1  3 blocks of 8 KiB   (24 KiB)   3 hits
 *   B  root       M1  20 blocks of 8 KiB  (160 KiB)  1 hit, its lease held
 *   C  root       M2  16 blocks of 64 KiB (1 MiB)    2 hits
 *   D  uid 60001  M1  4 blocks of 8 KiB   (32 KiB)
 * By bytes: C B D A; by tokens: B C D A; by hits: A C B D.
 */
struct fixture {
	char name;
	int model;
	uint32_t base, blocks, user, hits, leases;
	const char *size;
	char id[ID_CHARS + 1];
};

static struct fixture fx[] = {
	{ 'A', M1, 1000, 3, 0, 3, 0, "24.0 KiB", "" },
	{ 'B', M1, 2000, 20, 0, 1, 1, "160.0 KiB", "" },
	{ 'C', M2, 3000, 16, 0, 2, 0, "1.0 MiB", "" },
	{ 'D', M1, 4000, 4, UID_OTHER, 0, 0, "32.0 KiB", "" },
};
#define NFX 4
static uint64_t lease_b;

static void setup_chains(void)
{
	t_start_shared(&td, NULL);
	for (int i = 0; i < NFX; i++) {
		struct fixture *f = &fx[i];
		if (f->user)
			publish_as_other(f->model, f->base, f->blocks, f->id);
		else
			publish_prompt(f->model, f->base, f->blocks, f->id);
	}
	for (int i = 0; i < NFX; i++)
		for (uint32_t h = 0; h < fx[i].hits; h++)
			match_prompt(fx[i].model, fx[i].base, fx[i].blocks,
				     fx[i].leases ? &lease_b : NULL);
	t_wait_leases(&td, 1);
}

static const struct fixture *fixture_of(const char *id)
{
	for (int i = 0; i < NFX; i++)
		if (!strcmp(fx[i].id, id))
			return &fx[i];
	return NULL;
}

/* The chains' names in the order ls --json (plus args) lists them. */
static void expect_order(const char *const *args, const char *want, const char *what)
{
	json_object *arr = ls_json(args);
	char got[16] = "";
	for (size_t i = 0; i < json_object_array_length(arr) && i < 15; i++) {
		const struct fixture *f = fixture_of(jstr(json_object_array_get_idx(arr, i), "id"));
		got[i] = f ? f->name : '?';
		got[i + 1] = 0;
	}
	cr_expect_str_eq(got, want, "%s: chains %s, not %s", what, got, want);
	json_object_put(arr);
}

Test(prefixctl, ls_json_lists_each_chain_with_what_was_published)
{
	setup_chains();
	json_object *arr = ls_json(NULL);
	cr_assert_eq(json_object_array_length(arr), NFX, "%s", json_object_to_json_string(arr));
	static const char *const keys[] = { "id",     "user",   "namespace", "model",
					    "tokens", "blocks", "bytes",     "hits",
					    "leases", "pinned", "pin_ttl_s", "idle_s",
					    "where" };
	int seen[NFX] = { 0 };
	for (size_t i = 0; i < NFX; i++) {
		json_object *o = json_object_array_get_idx(arr, i);
		cr_assert(json_object_is_type(o, json_type_object));
		cr_expect_eq(json_object_object_length(o), sizeof(keys) / sizeof(keys[0]),
			     "the documented keys only: %s", json_object_to_json_string(o));
		for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
			jkey(o, keys[k]);
		const char *id = jstr(o, "id");
		cr_expect(is_hex(id, ID_CHARS), "the whole id, 72 lowercase hex digits: %s", id);
		const struct fixture *f = fixture_of(id);
		cr_assert(f, "chain %s is one that was published", id);
		seen[f - fx]++;
		cr_expect_eq(ju64(o, "user"), f->user, "%c: user", f->name);
		cr_expect_str_eq(jstr(o, "model"), fp_hex(f->model), "%c: model", f->name);
		cr_expect_eq(ju64(o, "tokens"), f->blocks * BT, "%c: tokens", f->name);
		cr_expect_eq(ju64(o, "blocks"), f->blocks, "%c: blocks", f->name);
		cr_expect_eq(ju64(o, "bytes"), f->blocks * charged(f->model), "%c: bytes", f->name);
		cr_expect_eq(ju64(o, "hits"), f->hits, "%c: hits", f->name);
		cr_expect_eq(ju64(o, "leases"), f->leases, "%c: leases", f->name);
		cr_expect_eq(jbool(o, "pinned"), 0, "%c: not pinned", f->name);
		cr_expect_eq(ju64(o, "pin_ttl_s"), 0, "%c", f->name);
		cr_expect_lt(ju64(o, "idle_s"), 3600, "%c: used just now", f->name);
		cr_expect_str_eq(jstr(o, "where"), "memory", "%c", f->name);
	}
	for (int i = 0; i < NFX; i++)
		cr_expect_eq(seen[i], 1, "%c listed once", fx[i].name);
	json_object_put(arr);
	expect_order(NULL, "CBDA", "largest first by default");
	stop();
}

Test(prefixctl, ls_prints_a_table_with_units_and_a_count)
{
	setup_chains();
	static struct ctl r;
	CTL(&r, "ls");
	expect_ok(&r);
	struct ls_row rows[8];
	char footer[128];
	int n = ls_rows(&r, rows, 8, footer, sizeof(footer));
	cr_assert_eq(n, NFX, "a row per chain");
	cr_expect_str_eq(footer, "4 chains");
	static const char order[] = "CBDA";
	for (int i = 0; i < n; i++) {
		const struct fixture *f = NULL;
		for (int j = 0; j < NFX; j++)
			if (fx[j].name == order[i])
				f = &fx[j];
		const struct ls_row *w = &rows[i];
		cr_expect(!strncmp(w->id, f->id, 12) && strlen(w->id) == 12,
			  "row %d is %c: the first 12 digits of its id (%s)", i, f->name, w->id);
		cr_expect_eq(w->user, f->user, "%c", f->name);
		cr_expect(!strncmp(w->model, fp_hex(f->model), 8) && strlen(w->model) == 8,
			  "%c: the first 8 digits of the fingerprint (%s)", f->name, w->model);
		cr_expect_eq(w->tokens, f->blocks * BT, "%c", f->name);
		cr_expect_eq(w->blocks, f->blocks, "%c", f->name);
		cr_expect_str_eq(w->size, f->size, "%c: size in binary units", f->name);
		cr_expect_eq(w->hits, f->hits, "%c", f->name);
		cr_expect_eq(w->leases, f->leases, "%c", f->name);
		cr_expect_str_eq(w->pinned, "-", "%c", f->name);
		unsigned idle;
		char unit[8];
		cr_expect(sscanf(w->idle, "%u%7s", &idle, unit) == 2 && !strcmp(unit, "s"),
			  "%c: idle in seconds: '%s'", f->name, w->idle);
		cr_expect_str_eq(w->where, "memory", "%c", f->name);
	}
	stop();
}

Test(prefixctl, ls_sorts_limits_and_filters)
{
	setup_chains();
	static struct ctl r;
	struct ls_row rows[8];
	char footer[128];
	/* Sorting. */
	expect_order(ARGS("--sort", "bytes"), "CBDA", "--sort bytes");
	expect_order(ARGS("--sort", "tokens"), "BCDA", "--sort tokens");
	expect_order(ARGS("--sort", "hits"), "ACBD", "--sort hits");
	json_object *arr = ls_json(ARGS("--sort", "idle"));
	cr_expect_eq(json_object_array_length(arr), NFX, "--sort idle lists every chain");
	json_object_put(arr);
	CTL(&r, "ls", "--sort", "hits");
	expect_ok(&r);
	cr_assert_eq(ls_rows(&r, rows, 8, footer, sizeof(footer)), NFX);
	cr_expect(!strncmp(rows[0].id, fx[0].id, 12) && rows[0].hits == 3, "A first by hits");
	cr_expect(!strncmp(rows[3].id, fx[3].id, 12) && rows[3].hits == 0, "D last by hits");
	/* --limit. */
	CTL(&r, "ls", "--limit", "2");
	expect_ok(&r);
	cr_expect_eq(ls_rows(&r, rows, 8, footer, sizeof(footer)), 2, "only 2 rows");
	cr_expect_str_eq(footer, "2 of 4 chains");
	cr_expect(!strncmp(rows[0].id, fx[2].id, 12) && !strncmp(rows[1].id, fx[1].id, 12),
		  "the 2 largest: C, B");
	expect_order(ARGS("--limit", "2"), "CB", "--limit 2");
	expect_order(ARGS("--limit", "1", "--sort", "tokens"), "B", "--limit 1 --sort tokens");
	expect_order(ARGS("--limit", "10"), "CBDA", "--limit past the count");
	/* --user. */
	expect_order(ARGS("--user", "60001"), "D", "--user 60001");
	expect_order(ARGS("--user", "0"), "CBA", "--user 0");
	expect_order(ARGS("--user", "root"), "CBA", "--user root (a name)");
	CTL(&r, "ls", "--user", "60001");
	expect_ok(&r);
	cr_expect_eq(ls_rows(&r, rows, 8, footer, sizeof(footer)), 1);
	cr_expect_str_eq(footer, "1 chain", "singular");
	cr_expect_eq(rows[0].user, UID_OTHER);
	/* --model: the whole fingerprint or a prefix of 8 digits or more, any case. */
	char m1_8[9], m2_8[9], m1_upper[11];
	cut(m1_8, sizeof(m1_8), fp_hex(M1));
	cut(m2_8, sizeof(m2_8), fp_hex(M2));
	snprintf(m1_upper, sizeof(m1_upper), "A1A1A1A1A1");
	expect_order(ARGS("--model", m2_8), "C", "--model, 8 digits of M2");
	expect_order(ARGS("--model", m1_8), "BDA", "--model, 8 digits of M1");
	expect_order(ARGS("--model", fp_hex(M1)), "BDA", "--model, all of M1");
	expect_order(ARGS("--model", m1_upper), "BDA", "--model in capitals");
	expect_order(ARGS("--model", m1_8, "--user", "0"), "BA", "--model and --user");
	expect_order(ARGS("--model", m1_8, "--sort", "hits", "--limit", "1"), "A",
		     "--model --sort --limit");
	CTL(&r, "ls", "--model", "a1a1a1a");
	expect_fail(&r, 2, ARGS("--model", "at least 8"));
	CTL(&r, "ls", "--model", "a1a1a1ag");
	expect_fail(&r, 2, ARGS("--model", "a1a1a1ag"));
	char too_long[FP_CHARS + 3];
	snprintf(too_long, sizeof(too_long), "%sa1", fp_hex(M1));
	CTL(&r, "ls", "--model", too_long);
	expect_fail(&r, 2, ARGS("--model", "64 hex digits"));
	/* A prefix that two models' fingerprints start with names neither. */
	publish_prompt(M3, 5000, 1, NULL);
	CTL(&r, "ls", "--model", m2_8);
	expect_fail(&r, 1, ARGS("starts the fingerprints of 2 models", "give more of its digits"));
	expect_order(ARGS("--model", fp_hex(M2)), "C", "--model, all of M2 beside M3");
	/* Bad values. */
	CTL(&r, "ls", "--sort", "size");
	expect_fail(&r, 2, ARGS("--sort takes hits, bytes, idle or tokens, not 'size'"));
	CTL(&r, "ls", "--limit", "0");
	expect_fail(&r, 2, ARGS("--limit takes a whole number"));
	CTL(&r, "ls", "--limit", "2x");
	expect_fail(&r, 2, ARGS("--limit", "'2x'"));
	CTL(&r, "ls", "--limit", "-1");
	expect_fail(&r, 2, ARGS("--limit"));
	CTL(&r, "ls", "--user", "no-such-user-here");
	expect_fail(&r, 2, ARGS("no user 'no-such-user-here'"));
	CTL(&r, "ls", "--user", "4294967296");
	expect_fail(&r, 2, ARGS("--user"));
	stop();
}

/* Kept apart: with nothing to list, prefixctl ls passes qsort_r a NULL
 * array (prefixctl_chains.c, cmd_ls), which UBSan reports. */
Test(prefixctl, ls_with_nothing_to_list_says_0_chains)
{
	t_start_shared(&td, NULL);
	static struct ctl r;
	struct ls_row rows[4];
	char footer[64];
	CTL(&r, "ls");
	expect_ok(&r);
	cr_expect_eq(ls_rows(&r, rows, 4, footer, sizeof(footer)), 0, "an empty cache: no rows");
	cr_expect_str_eq(footer, "0 chains");
	json_object *arr = ls_json(NULL);
	cr_expect_eq(json_object_array_length(arr), 0, "an empty array");
	json_object_put(arr);
	publish_prompt(M1, 100, 2, NULL);
	expect_order(ARGS("--user", "4242"), "", "--user with no chains");
	expect_order(ARGS("--model", "c3c3c3c3"), "", "a model no chain has selects nothing");
	CTL(&r, "ls", "--model", "c3c3c3c3");
	expect_ok(&r);
	cr_expect_eq(ls_rows(&r, rows, 4, footer, sizeof(footer)), 0);
	cr_expect_str_eq(footer, "0 chains");
	CTL(&r, "ls", "--user", "4242", "--limit", "1");
	expect_ok(&r);
	cr_expect_eq(ls_rows(&r, rows, 4, footer, sizeof(footer)), 0);
	cr_expect_str_eq(footer, "0 chains");
	expect_order(ARGS("--user", "0"), "?", "the chain is there");
	stop();
}

/* ==== pin, unpin, evict ==== */

Test(prefixctl, a_pinned_chain_stays_through_evict_all_until_unpinned)
{
	setup_chains();
	static struct ctl r;
	struct ls_row rows[8];
	char footer[128], id12[16] = "";
	/* The ID column names the chain, as the help says. */
	CTL(&r, "ls");
	expect_ok(&r);
	int n = ls_rows(&r, rows, 8, footer, sizeof(footer));
	for (int i = 0; i < n; i++)
		if (rows[i].tokens == fx[0].blocks * BT)
			cut(id12, sizeof(id12), rows[i].id);
	cr_assert_eq(strlen(id12), 12, "A's row");
	cr_assert(!strncmp(id12, fx[0].id, 12));
	CTL(&r, "pin", id12);
	expect_ok(&r);
	char want[128];
	snprintf(want, sizeof(want), "pinned %s (pins hold 24.0 KiB)\n", id12);
	cr_expect_str_eq(r.out, want);
	json_object *arr = ls_json(NULL);
	for (int i = 0; i < NFX; i++) {
		json_object *o = chain_in(arr, fx[i].id);
		cr_assert(o, "%c listed", fx[i].name);
		cr_expect_eq(jbool(o, "pinned"), i == 0, "%c: %s", fx[i].name,
			     i == 0 ? "pinned" : "not pinned");
		cr_expect_eq(ju64(o, "pin_ttl_s"), 0, "%c: no TTL", fx[i].name);
	}
	json_object_put(arr);
	CTL(&r, "ls");
	expect_ok(&r);
	n = ls_rows(&r, rows, 8, footer, sizeof(footer));
	for (int i = 0; i < n; i++)
		cr_expect_str_eq(rows[i].pinned, strcmp(rows[i].id, id12) ? "-" : "yes",
				 "PINNED of %s", rows[i].id);
	cr_expect_eq(stat_json("pins"), 1);
	cr_expect_eq(stat_json("pinned_bytes"), 3 * charged(M1));
	/* evict --all: C and D go; A is pinned, B leased. */
	CTL(&r, "evict", "--all");
	expect_ok(&r);
	cr_expect_str_eq(r.out, "evicted 20 blocks (1.0 MiB); kept 20 leased, 3 pinned, 0 parent\n");
	CTL(&r, "ls");
	expect_ok(&r);
	n = ls_rows(&r, rows, 8, footer, sizeof(footer));
	cr_expect_eq(n, 2, "A and B stay");
	cr_expect_str_eq(footer, "2 chains");
	one_chain(fx[0].id);
	one_chain(fx[1].id);
	/* Unpinned (and B released), everything goes. */
	cr_assert_eq(prefixd_release(conn(M1), lease_b), 0, "%s", prefixd_errmsg());
	t_wait_leases(&td, 0);
	CTL(&r, "unpin", id12);
	expect_ok(&r);
	snprintf(want, sizeof(want), "unpinned %s\n", id12);
	cr_expect_str_eq(r.out, want);
	cr_expect_eq(jbool(one_chain(fx[0].id), "pinned"), 0, "A unpinned");
	CTL(&r, "unpin", id12);
	expect_fail(&r, 1, ARGS("no pinned chain with that id"));
	t_expect_evicted(evict_json(ARGS("--all")), 23, 23 * charged(M1), 0, 0, 0, "A and B");
	cr_expect_eq(stat_json("blocks"), 0, "nothing left");
	CTL(&r, "pin", id12);
	expect_fail(&r, 1, ARGS("no cached chain has an id starting with", id12));
	CTL(&r, "unpin", id12);
	expect_fail(&r, 1, ARGS("no cached chain has an id starting with", id12));
	cr_expect_eq(stat_json("pins"), 0);
	cr_expect_eq(stat_json("admin_evictions"), 43);
	cr_expect_eq(stat_json("evictions"), 0, "admin evictions are counted apart");
	stop();
}

Test(prefixctl, a_pin_with_a_ttl_ends_and_a_new_pin_sets_it_anew)
{
	t_start_shared(&td, NULL);
	static struct ctl r;
	char ida[ID_CHARS + 1], idb[ID_CHARS + 1], a8[9], b8[9], want[128];
	publish_prompt(M1, 100, 3, ida);
	publish_prompt(M1, 200, 2, idb);
	cut(a8, sizeof(a8), ida);
	cut(b8, sizeof(b8), idb);
	/* B: 2.5 hours, then no end. ls shows whole units rounded down, so
	 * "2h" for the next half hour: one answer, whenever the test runs. */
	CTL(&r, "pin", b8, "--ttl", "9000");
	expect_ok(&r);
	snprintf(want, sizeof(want), "pinned %.12s for 9000 s (pins hold 16.0 KiB)\n", idb);
	cr_expect_str_eq(r.out, want);
	json_object *o = one_chain(idb);
	cr_expect(jbool(o, "pinned"));
	uint64_t ttl = ju64(o, "pin_ttl_s");
	cr_expect(ttl >= 8990 && ttl <= 9000, "%llu s left", (unsigned long long)ttl);
	struct ls_row rows[4];
	char footer[64];
	CTL(&r, "ls");
	expect_ok(&r);
	cr_assert_eq(ls_rows(&r, rows, 4, footer, sizeof(footer)), 2);
	int b_rows = 0;
	for (int i = 0; i < 2; i++)
		if (!strncmp(rows[i].id, idb, 12)) {
			b_rows++;
			cr_expect_str_eq(rows[i].pinned, "yes (ttl 2h)", "B's PINNED");
		} else {
			cr_expect_str_eq(rows[i].pinned, "-", "A is not pinned yet");
		}
	cr_expect_eq(b_rows, 1, "ls lists B once:\n%s", r.out);
	CTL(&r, "pin", idb); /* the whole id */
	expect_ok(&r);
	snprintf(want, sizeof(want), "pinned %.12s (pins hold 16.0 KiB)\n", idb);
	cr_expect_str_eq(r.out, want, "pinning again holds nothing more");
	o = one_chain(idb);
	cr_expect(jbool(o, "pinned"));
	cr_expect_eq(ju64(o, "pin_ttl_s"), 0, "the new pin has no end");
	/* A: 1 s. TTLs are whole seconds of the daemon's (monotonic) clock: a
	 * pin of 1 s ends at the next whole second, however little is left of
	 * this one. So it is made at the start of a second, and lasts most of
	 * one: time to see it. */
	for (double t0 = td_now_s(), t = t0; t - (double)(long)t > 0.1 && t - t0 < 2; t = td_now_s())
		sleep_ms(5);
	CTL(&r, "pin", a8, "--ttl", "1");
	expect_ok(&r);
	snprintf(want, sizeof(want), "pinned %.12s for 1 s (pins hold 40.0 KiB)\n", ida);
	cr_expect_str_eq(r.out, want);
	o = one_chain(ida);
	cr_expect(jbool(o, "pinned"), "A pinned");
	cr_expect_leq(ju64(o, "pin_ttl_s"), 1);
	/* Then it ends (in 1 s; 5 s is the margin). */
	double t1 = td_now_s();
	int pinned = 1;
	while (pinned && td_now_s() - t1 < 5) {
		sleep_ms(100);
		pinned = jbool(one_chain(ida), "pinned");
	}
	cr_expect_eq(pinned, 0, "A's pin ended: ls shows it unpinned");
	o = one_chain(ida);
	cr_expect_eq(ju64(o, "pin_ttl_s"), 0);
	cr_expect(jbool(one_chain(idb), "pinned"), "B's pin stays");
	cr_expect_eq(stat_json("pins_expired"), 1);
	cr_expect_eq(stat_json("pins"), 1);
	CTL(&r, "unpin", a8);
	expect_fail(&r, 1, ARGS("no pinned chain"));
	t_expect_evicted(evict_json(ARGS("--all")), 3, 3 * charged(M1), 0, 2, 0, "A goes, B stays");
	/* Bad TTLs. */
	CTL(&r, "pin", b8, "--ttl", "0");
	expect_fail(&r, 2, ARGS("--ttl takes a whole number from 1 to 4294967295"));
	CTL(&r, "pin", b8, "--ttl", "4294967296");
	expect_fail(&r, 2, ARGS("--ttl"));
	CTL(&r, "pin", b8, "--ttl", "1h");
	expect_fail(&r, 2, ARGS("--ttl", "'1h'"));
	CTL(&r, "unpin", b8, "--ttl", "5");
	expect_fail(&r, 2, ARGS("unpin takes no --ttl"));
	stop();
}

Test(prefixctl, evict_by_each_selector_says_what_it_freed_and_kept)
{
	t_start_shared(&td, NULL);
	static struct ctl r;
	const uint64_t small = charged(M1), big = charged(M2);
	/* P and Q share their first 2 blocks; L is leased; C is M2's; D is
	 * uid 60001's. */
	uint32_t tp[4 * BT], tq[4 * BT];
	td_prompt(tp, 4, 5000);
	memcpy(tq, tp, 2 * BT * sizeof(uint32_t));
	td_prompt(tq + 2 * BT, 2, 6000);
	char idp[ID_CHARS + 1], idq[ID_CHARS + 1], idl[ID_CHARS + 1], idc[ID_CHARS + 1],
		idd[ID_CHARS + 1], idx[ID_CHARS + 1], idy[ID_CHARS + 1], p10[11];
	publish(M1, tp, 4);
	publish(M1, tq, 4);
	chain_id(M1, tp, 4, 0, idp);
	chain_id(M1, tq, 4, 0, idq);
	publish_prompt(M1, 7000, 3, idl);
	uint64_t lease;
	match_prompt(M1, 7000, 3, &lease);
	publish_prompt(M2, 8000, 2, idc);
	publish_as_other(M1, 9000, 3, idd);
	json_object *arr = ls_json(NULL);
	cr_expect_eq(json_object_array_length(arr), 5, "P, Q, L, C, D");
	json_object_put(arr);
	/* --id: P's own 2 blocks go, the 2 it shares with Q stay as parents. */
	cut(p10, sizeof(p10), idp);
	t_expect_evicted(evict_json(ARGS("--id", p10)), 2, 2 * small, 0, 0, 2, "--id P");
	arr = ls_json(NULL);
	cr_expect_null(chain_in(arr, idp), "P is gone");
	json_object *q = chain_in(arr, idq);
	cr_expect(q && ju64(q, "blocks") == 4, "Q is whole");
	json_object_put(arr);
	CTL(&r, "evict", "--id", p10);
	expect_fail(&r, 1, ARGS("no cached chain has an id starting with", p10));
	/* --user: uid 60001's blocks only. */
	t_expect_evicted(evict_json(ARGS("--user", "60001")), 3, 3 * small, 0, 0, 0, "--user 60001");
	arr = ls_json(NULL);
	cr_expect_null(chain_in(arr, idd), "uid 60001 has nothing left");
	cr_expect_eq(json_object_array_length(arr), 3, "P, Q and L stay");
	json_object_put(arr);
	/* --model: every M1 block but the leased ones (L). */
	char m1_8[9];
	cut(m1_8, sizeof(m1_8), fp_hex(M1));
	t_expect_evicted(evict_json(ARGS("--model", m1_8)), 4, 4 * small, 3, 0, 0, "--model M1");
	arr = ls_json(NULL);
	cr_expect_eq(json_object_array_length(arr), 2, "L and C stay");
	cr_expect(chain_in(arr, idl) && chain_in(arr, idc));
	json_object_put(arr);
	CTL(&r, "evict", "--model", "c3c3c3c3");
	expect_fail(&r, 1, ARGS("no cached chain is of a model whose fingerprint starts with 'c3c3c3c3'"));
	/* --idle: X waits until it has been idle 2 s by the daemon's clock
	 * (C and L, older, too); Y, published then, has not. */
	publish_prompt(M1, 11000, 2, idx);
	double t0 = td_now_s();
	uint64_t idle = 0;
	while (idle < 2 && td_now_s() - t0 < 5) {
		sleep_ms(100);
		idle = ju64(one_chain(idx), "idle_s");
	}
	cr_assert_geq(idle, 2, "X idle for 2 s");
	publish_prompt(M1, 12000, 1, idy);
	t_expect_evicted(evict_json(ARGS("--idle", "3600")), 0, 0, 0, 0, 0, "nothing is an hour old");
	CTL(&r, "evict", "--idle", "2");
	expect_ok(&r);
	cr_expect_str_eq(r.out, "evicted 4 blocks (144.0 KiB); kept 3 leased, 0 pinned, 0 parent\n",
			 "C and X go, L is leased, Y is new");
	cr_expect_eq(2 * big + 2 * small, 144 * KIB);
	arr = ls_json(NULL);
	cr_expect_eq(json_object_array_length(arr), 2, "L and Y stay");
	cr_expect(chain_in(arr, idl) && chain_in(arr, idy));
	json_object_put(arr);
	/* --all, once L is released. */
	cr_assert_eq(prefixd_release(conn(M1), lease), 0, "%s", prefixd_errmsg());
	t_wait_leases(&td, 0);
	t_expect_evicted(evict_json(ARGS("--all")), 4, 4 * small, 0, 0, 0, "--all: L and Y");
	CTL(&r, "evict", "--all");
	expect_ok(&r);
	cr_expect_str_eq(r.out, "evicted 0 blocks (0 B); kept 0 leased, 0 pinned, 0 parent\n");
	cr_expect_eq(stat_json("blocks"), 0);
	cr_expect_eq(stat_json("admin_evictions"), 2 + 3 + 4 + 4 + 4);
	/* Selectors: exactly one, each well formed. */
	CTL(&r, "evict");
	expect_fail(&r, 2, ARGS("exactly one of --all, --id, --model, --user and --idle"));
	CTL(&r, "evict", "--all", "--user", "0");
	expect_fail(&r, 2, ARGS("exactly one"));
	CTL(&r, "evict", "--id", "12345");
	expect_fail(&r, 2, ARGS("--id", "chain id (72 hex digits)", "at least 8"));
	CTL(&r, "evict", "--idle", "soon");
	expect_fail(&r, 2, ARGS("--idle takes a whole number"));
	CTL(&r, "evict", "--all", "--sort", "bytes");
	expect_fail(&r, 2, ARGS("evict takes no --sort"));
	stop();
}

/* Two one-block prompts (base *a and *b) of model m whose chains' ids, in
 * one user's namespace, share their first 8 digits: found by trying bases
 * in a fixed order (a birthday search: ~2^16 tries). One user's ids are
 * their keys under one mask, so the keys' first 4 bytes decide. */
struct id_head {
	uint32_t head, base;
};

static int by_head(const void *x, const void *y)
{
	const struct id_head *p = x, *q = y;
	return (p->head > q->head) - (p->head < q->head);
}

static void id_twins(int m, uint32_t *a, uint32_t *b)
{
	enum { TRIES = 1 << 18 };
	struct id_head *v = calloc(TRIES, sizeof(*v));
	cr_assert(v);
	uint32_t t[BT];
	struct prefixd_layout l = layout_of(m);
	struct prefixd_prompt *p;
	struct prefixd_id id;
	cr_assert_eq(prefixd_prompt_new(&l, &p), 0, "%s", prefixd_errmsg());
	for (uint32_t i = 0; i < TRIES; i++) {
		td_prompt(t, 1, 1000000 + i * BT);
		prefixd_prompt_truncate(p, 0);
		cr_assert_eq(prefixd_prompt_append(p, t, BT), 0);
		cr_assert_eq(prefixd_prompt_id(p, &id), 0);
		v[i] = (struct id_head){ (uint32_t)id.key[0] << 24 | (uint32_t)id.key[1] << 16 |
						 (uint32_t)id.key[2] << 8 | id.key[3],
					 1000000 + i * BT };
	}
	prefixd_prompt_free(p);
	qsort(v, TRIES, sizeof(*v), by_head);
	for (uint32_t i = 1; i < TRIES; i++)
		if (v[i].head == v[i - 1].head) {
			*a = v[i - 1].base;
			*b = v[i].base;
			free(v);
			return;
		}
	free(v);
	cr_assert_fail("no two of %d ids share their first 8 digits", TRIES);
}

Test(prefixctl, ids_and_fingerprints_given_by_a_prefix_must_name_one)
{
	t_start_shared(&td, NULL);
	static struct ctl r;
	/* The same prompt of one model from two users: two chains whose ids
	 * differ in their first 12 digits, the short id that ls prints. */
	char ida[ID_CHARS + 1], idb[ID_CHARS + 1], id12[13], id8[9];
	publish_prompt(M1, 100, 3, ida);
	publish_as_other(M1, 100, 3, idb);
	cr_assert(strncmp(ida, idb, 12), "the short ids differ: %.12s and %.12s", ida, idb);
	cr_expect(!strcmp(ida + 2 * PREFIXD_HASH_BYTES, "00000000") &&
		  !strcmp(idb + 2 * PREFIXD_HASH_BYTES, "0000ea61"), "the uid last: %s %s", ida, idb);
	CTL(&r, "ls");
	expect_ok(&r);
	char s12[13];
	cut(s12, sizeof(s12), ida);
	cr_expect(strstr(r.out, s12), "ls shows root's short id %s: %s", s12, r.out);
	cut(s12, sizeof(s12), idb);
	cr_expect(strstr(r.out, s12), "ls shows uid 60001's short id %s: %s", s12, r.out);
	/* Two of root's chains whose ids share 8 digits: a prefix that starts
	 * both names neither. */
	uint32_t ta, tb;
	char twa[ID_CHARS + 1], twb[ID_CHARS + 1];
	id_twins(M1, &ta, &tb);
	publish_prompt(M1, ta, 1, twa);
	publish_prompt(M1, tb, 1, twb);
	cut(id8, sizeof(id8), twa);
	cr_assert(!strncmp(twa, twb, 8) && strcmp(twa, twb));
	CTL(&r, "pin", id8);
	expect_fail(&r, 1, ARGS("starts the ids of 2 cached chains", "give more of its digits"));
	CTL(&r, "evict", "--id", id8);
	expect_fail(&r, 1, ARGS("starts the ids of 2 cached chains"));
	cr_expect_eq(stat_json("admin_evictions"), 0, "nothing was evicted");
	t_expect_evicted(evict_json(ARGS("--id", twa)), 1, charged(M1), 0, 0, 0, "one twin by its whole id");
	t_expect_evicted(evict_json(ARGS("--id", twb)), 1, charged(M1), 0, 0, 0, "the other");
	/* The short id names one: root pins uid 60001's chain. */
	cut(id12, sizeof(id12), idb);
	CTL(&r, "pin", id12);
	expect_ok(&r);
	json_object *arr = ls_json(NULL);
	cr_expect_eq(jbool(chain_in(arr, idb), "pinned"), 1, "uid 60001's chain pinned");
	cr_expect_eq(jbool(chain_in(arr, ida), "pinned"), 0, "root's not");
	json_object_put(arr);
	t_expect_evicted(evict_json(ARGS("--id", ida)), 3, 3 * charged(M1), 0, 0, 0, "root's by its whole id");
	CTL(&r, "unpin", idb);
	expect_ok(&r);
	char upper[ID_CHARS + 1];
	for (int i = 0; i <= ID_CHARS; i++)
		upper[i] = (char)(idb[i] >= 'a' && idb[i] <= 'f' ? idb[i] - 32 : idb[i]);
	CTL(&r, "pin", upper);
	expect_ok(&r); /* ids in capitals too */
	cr_expect_eq(jbool(one_chain(idb), "pinned"), 1);
	/* Fingerprints: M2's and M3's start alike. */
	publish_prompt(M2, 300, 1, NULL);
	publish_prompt(M3, 400, 1, NULL);
	char m2_8[9];
	cut(m2_8, sizeof(m2_8), fp_hex(M2));
	CTL(&r, "evict", "--model", m2_8);
	expect_fail(&r, 1, ARGS("starts the fingerprints of 2 models"));
	cr_expect_eq(stat_json("blocks"), 5, "nothing was evicted");
	t_expect_evicted(evict_json(ARGS("--model", fp_hex(M3))), 1, charged(M3), 0, 0, 0, "all of M3's");
	/* Malformed: not hex, too short, too long. */
	CTL(&r, "pin", "xyzxyzxyz");
	expect_fail(&r, 2, ARGS("pin: 'xyzxyzxyz' is not a chain id"));
	CTL(&r, "unpin", "abc");
	expect_fail(&r, 2, ARGS("unpin: 'abc'", "at least 8"));
	char too_long[ID_CHARS + 2];
	snprintf(too_long, sizeof(too_long), "%s0", ida);
	CTL(&r, "pin", too_long);
	expect_fail(&r, 2, ARGS("72 hex digits"));
	CTL(&r, "pin", id12, "extra");
	expect_fail(&r, 2, ARGS("unexpected argument 'extra'"));
	stop();
}

/* ==== stats ==== */

/*
 * The figures of the stats tests, on a daemon of 64 MiB, a quota of 32 MiB
 * and pins up to 8 MiB:
 *   root       M1  A: 3 blocks (24 KiB), matched once (12 tokens), and a
 *                  2-block miss
 *   root       M2  C: 2 blocks (128 KiB), pinned
 *   uid 60001  M1  D: 4 blocks (32 KiB)
 */
static char stat_ids[3][ID_CHARS + 1];

static void setup_stats(void)
{
	const char *args[] = { "--memory", "64M", "--quota", "32M", "--pin-max", "8M", NULL };
	t_start_shared(&td, args);
	publish_prompt(M1, 1000, 3, stat_ids[0]);
	publish_prompt(M2, 3000, 2, stat_ids[1]);
	publish_as_other(M1, 4000, 4, stat_ids[2]);
	match_prompt(M1, 1000, 3, NULL);
	uint32_t t[2 * BT], hit = 1;
	uint64_t lease = 1;
	const void *kv[2];
	td_prompt(t, 2, 90000);
	cr_assert_eq(prefixd_match(conn(M1), t, 2, &lease, &hit, kv), 0, "%s", prefixd_errmsg());
	cr_assert_eq(hit, 0, "a miss");
	cr_assert_eq(lease, 0);
	struct prefixd_id id = parse_id(stat_ids[1]);
	cr_assert_eq(prefixd_pin(conn(M2), &id, 0, NULL), 0, "%s", prefixd_errmsg());
	t_wait_leases(&td, 0);
}

#define NAME_OF_(field, kind, help) #field,
static const char *const counter_names[] = { PREFIXD_COUNTERS(NAME_OF_) };
#undef NAME_OF_
#define NCOUNTERS (sizeof(counter_names) / sizeof(counter_names[0]))

struct usage_want {
	int user, model; /* -1: not in this array */
	uint64_t blocks, bytes, pinned_bytes, hits, hit_tokens, query_tokens;
};

/* An array of stats --json ("users", "models", "usage"): a row per want. */
static void expect_usage(json_object *arr, const char *what, const struct usage_want *want, size_t n)
{
	cr_assert(json_object_is_type(arr, json_type_array), "%s: an array", what);
	cr_assert_eq(json_object_array_length(arr), n, "%s: %zu rows: %s", what, n,
		     json_object_to_json_string(arr));
	for (size_t i = 0; i < n; i++) {
		const struct usage_want *w = &want[i];
		json_object *row = NULL;
		for (size_t j = 0; j < n && !row; j++) {
			json_object *o = json_object_array_get_idx(arr, j);
			if (w->user >= 0 && ju64(o, "user") != (uint64_t)w->user)
				continue;
			if (w->model >= 0 && strcmp(jstr(o, "model"), fp_hex(w->model)))
				continue;
			row = o;
		}
		cr_assert(row, "%s: a row of user %d, model %d", what, w->user, w->model);
		json_object *v;
		cr_expect_eq(json_object_object_get_ex(row, "user", &v), w->user >= 0,
			     "%s: \"user\" only where rows are by user", what);
		cr_expect_eq(json_object_object_get_ex(row, "model", &v), w->model >= 0,
			     "%s: \"model\" only where rows are by model", what);
		const char *row_s = json_object_to_json_string(row);
		cr_expect_eq(ju64(row, "blocks"), w->blocks, "%s: %s", what, row_s);
		cr_expect_eq(ju64(row, "bytes"), w->bytes, "%s: %s", what, row_s);
		cr_expect_eq(ju64(row, "pinned_bytes"), w->pinned_bytes, "%s: %s", what, row_s);
		cr_expect_eq(ju64(row, "hits"), w->hits, "%s: %s", what, row_s);
		cr_expect_eq(ju64(row, "hit_tokens"), w->hit_tokens, "%s: %s", what, row_s);
		cr_expect_eq(ju64(row, "query_tokens"), w->query_tokens, "%s: %s", what, row_s);
		cr_expect_eq(ju64(row, "evictions"), 0, "%s: %s", what, row_s);
	}
}

Test(prefixctl, stats_json_has_every_counter_and_the_use_by_user_and_model)
{
	setup_stats();
	static struct ctl r;
	const uint64_t a = 3 * charged(M1), c = 2 * charged(M2), d = 4 * charged(M1);
	CTL(&r, "stats", "--json");
	expect_ok(&r);
	struct prefixd_stats lib = t_stats(&td);
	json_object *o = parse_json(r.out, r.cmd);
	cr_assert(json_object_is_type(o, json_type_object));
	cr_expect_eq(json_object_object_length(o), NCOUNTERS + 3, "every counter, users, models, usage");
	/* Every counter by its name, as the library reads it. */
	uint64_t libv[NCOUNTERS];
	memcpy(libv, &lib, sizeof(libv));
	for (size_t i = 0; i < NCOUNTERS; i++) {
		uint64_t v = ju64(o, counter_names[i]);
		if (strcmp(counter_names[i], "connections"))
			cr_expect_eq(v, libv[i], "%s: %llu, the library says %llu", counter_names[i],
				     (unsigned long long)v, (unsigned long long)libv[i]);
		else
			cr_expect_geq(v, 1, "prefixctl's own connection at least");
	}
	/* The figures of what was done. */
	static const struct {
		const char *key;
		uint64_t v;
	} want[] = {
		{ "hits", 1 }, { "misses", 1 }, { "matches", 2 }, { "hit_tokens", 12 },
		{ "query_tokens", 20 }, { "blocks", 9 }, { "published", 9 }, { "dedup", 0 },
		{ "evictions", 0 }, { "leases", 0 }, { "errors", 0 }, { "collisions", 0 },
		{ "budget", 64 * MIB }, { "quota", 32 * MIB }, { "pin_max", 8 * MIB }, { "pins", 1 },
		{ "refused_blocks", 0 }, { "admin_evictions", 0 }, { "pins_expired", 0 },
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		cr_expect_eq(ju64(o, want[i].key), want[i].v, "%s: %llu, not %llu", want[i].key,
			     (unsigned long long)ju64(o, want[i].key), (unsigned long long)want[i].v);
	cr_expect_eq(ju64(o, "bytes_used"), a + c + d);
	cr_expect_eq(ju64(o, "idle_bytes"), a + c + d, "no lease held");
	cr_expect_eq(ju64(o, "pinned_bytes"), c);
	/* By user, by model, and by both. */
	const struct usage_want users[] = {
		{ 0, -1, 5, a + c, c, 1, 12, 20 },
		{ UID_OTHER, -1, 4, d, 0, 0, 0, 0 },
	};
	const struct usage_want models[] = {
		{ -1, M1, 7, a + d, 0, 1, 12, 20 },
		{ -1, M2, 2, c, c, 0, 0, 0 },
	};
	const struct usage_want usage[] = {
		{ 0, M1, 3, a, 0, 1, 12, 20 },
		{ 0, M2, 2, c, c, 0, 0, 0 },
		{ UID_OTHER, M1, 4, d, 0, 0, 0, 0 },
	};
	expect_usage(jkey(o, "users"), "users", users, 2);
	expect_usage(jkey(o, "models"), "models", models, 2);
	expect_usage(jkey(o, "usage"), "usage", usage, 3);
	json_object_put(o);
	/* The text: each counter's line, then the tables. */
	CTL(&r, "stats");
	expect_ok(&r);
	cr_expect(strstr(r.out, "MATCH requests with a hit "), "%s", r.out);
	char *lines[128];
	int n = split_lines(r.out, lines, 128);
	int found = 0, per_user = -1, per_model = -1;
	for (int i = 0; i < n; i++) {
		unsigned long long v;
		char unit[32];
		if (sscanf(lines[i], "blocks cached %llu", &v) == 1)
			found |= (v == 9) << 0;
		if (sscanf(lines[i], "bytes of cached blocks in memory %llu (%31[^)])", &v, unit) == 2)
			found |= (v == a + c + d && !strcmp(unit, "184.0 KiB")) << 1;
		if (sscanf(lines[i], "memory budget in bytes %llu (%31[^)])", &v, unit) == 2)
			found |= (v == 64 * MIB && !strcmp(unit, "64.0 MiB")) << 2;
		if (!strcmp(lines[i], "budget in use: 0.3%"))
			found |= 1 << 3;
		if (!strcmp(lines[i], "per user:"))
			per_user = i;
		if (!strcmp(lines[i], "per model:"))
			per_model = i;
	}
	cr_expect_eq(found, 15, "blocks, bytes (with units), budget and its use (%#x)", found);
	cr_assert(per_user > 0 && per_model > per_user + 3, "a table per user, then per model");
	static const char *const user_head[] = { "USER", "BLOCKS", "SIZE", "PINNED", "HITS",
						 "HIT", "TOKENS", "EVICTIONS", NULL };
	static const char *const model_head[] = { "MODEL", "BLOCKS", "SIZE", "PINNED", "HITS",
						  "HIT", "TOKENS", "EVICTIONS", NULL };
	cr_expect(words_are(lines[per_user + 1], user_head), "'%s'", lines[per_user + 1]);
	cr_expect(words_are(lines[per_user + 2], ARGS("0", "5", "152.0", "KiB", "128.0", "KiB", "1",
						       "12", "0")),
		  "root's row: '%s'", lines[per_user + 2]);
	cr_expect(words_are(lines[per_user + 3], ARGS("60001", "4", "32.0", "KiB", "0", "B", "0",
						       "0", "0")),
		  "uid 60001's row: '%s'", lines[per_user + 3]);
	cr_expect(words_are(lines[per_model + 1], model_head), "'%s'", lines[per_model + 1]);
	cr_expect(words_are(lines[per_model + 2], ARGS("a1a1a1a1", "7", "56.0", "KiB", "0", "B",
							"1", "12", "0")),
		  "M1's row: '%s'", lines[per_model + 2]);
	cr_expect(words_are(lines[per_model + 3], ARGS("b2b2b2b2", "2", "128.0", "KiB", "128.0",
							"KiB", "0", "0", "0")),
		  "M2's row: '%s'", lines[per_model + 3]);
	CTL(&r, "stats", "--json", "--prometheus");
	expect_fail(&r, 2, ARGS("--json and --prometheus exclude each other"));
	CTL(&r, "stats", "--sort", "hits");
	expect_fail(&r, 2, ARGS("stats takes no --sort"));
	stop();
}

/* A sample of the Prometheus text: name, labels (the text inside {}), value. */
struct sample {
	char name[128], labels[256];
	unsigned long long value;
};

/* The value of the sample name{labels} ("" for none) in samples; asserts
 * there is one. */
static unsigned long long sample_value(const struct sample *s, int n, const char *name,
				       const char *labels)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(s[i].name, name) && !strcmp(s[i].labels, labels))
			return s[i].value;
	cr_assert_fail("no sample %s{%s}", name, labels);
	return 0;
}

Test(prefixctl, stats_prometheus_is_the_text_format_labelled_by_user_and_model_only)
{
	setup_stats();
	static struct ctl r;
	const uint64_t a = 3 * charged(M1), c = 2 * charged(M2), d = 4 * charged(M1);
	CTL(&r, "stats", "--prometheus");
	expect_ok(&r);
	cr_assert(r.out[0] && r.out[strlen(r.out) - 1] == '\n', "lines end in a newline");
	/* No chain is named: neither a whole id nor the ID column. */
	for (int i = 0; i < 3; i++) {
		char id12[13];
		cut(id12, sizeof(id12), stat_ids[i]);
		cr_expect_null(strstr(r.out, stat_ids[i]), "chain id %s is not in the metrics", id12);
		cr_expect_null(strstr(r.out, id12), "nor its ID column %s", id12);
	}
	regex_t sample_re, help_re, type_re;
	/* The text exposition format: name{label="value",...} value */
	cr_assert_eq(regcomp(&sample_re,
			     "^([a-zA-Z_:][a-zA-Z0-9_:]*)"
			     "(\\{([a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\\n]|\\\\.)*\""
			     "(,[a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\\n]|\\\\.)*\")*)\\})?"
			     " ([0-9]+)$",
			     REG_EXTENDED),
		     0);
	cr_assert_eq(regcomp(&help_re, "^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) [^\n]+$", REG_EXTENDED), 0);
	cr_assert_eq(regcomp(&type_re, "^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge)$",
			     REG_EXTENDED),
		     0);
	static struct sample samples[512];
	static char helped[64][128], typed[64][128], kinds[64][16];
	int ns = 0, nh = 0, nt = 0;
	char *lines[1024];
	int n = split_lines(r.out, lines, 1024);
	for (int i = 0; i < n; i++) {
		const char *l = lines[i];
		regmatch_t m[10];
		if (l[0] == '#') {
			if (!regexec(&help_re, l, 2, m, 0)) {
				cr_assert_lt(nh, 64);
				snprintf(helped[nh++], 128, "%.*s", (int)(m[1].rm_eo - m[1].rm_so), l + m[1].rm_so);
				continue;
			}
			cr_assert_eq(regexec(&type_re, l, 3, m, 0), 0, "line %d: '%s' is # HELP or # TYPE",
				     i + 1, l);
			cr_assert_lt(nt, 64);
			snprintf(typed[nt], 128, "%.*s", (int)(m[1].rm_eo - m[1].rm_so), l + m[1].rm_so);
			snprintf(kinds[nt], 16, "%.*s", (int)(m[2].rm_eo - m[2].rm_so), l + m[2].rm_so);
			for (int j = 0; j < nt; j++)
				cr_expect_str_neq(typed[j], typed[nt], "one # TYPE for %s", typed[nt]);
			cr_expect(nh > 0 && !strcmp(helped[nh - 1], typed[nt]), "# HELP before # TYPE of %s",
				  typed[nt]);
			/* Counters end in _total; gauges do not. */
			size_t len = strlen(typed[nt]);
			int total = len > 6 && !strcmp(typed[nt] + len - 6, "_total");
			cr_expect_eq(total, !strcmp(kinds[nt], "counter"), "%s is a %s", typed[nt], kinds[nt]);
			nt++;
			continue;
		}
		cr_assert_eq(regexec(&sample_re, l, 8, m, 0), 0,
			     "line %d: '%s' is name{labels} value or name value", i + 1, l);
		cr_assert_lt(ns, 512);
		struct sample *s = &samples[ns++];
		snprintf(s->name, sizeof(s->name), "%.*s", (int)(m[1].rm_eo - m[1].rm_so), l + m[1].rm_so);
		s->labels[0] = 0;
		if (m[3].rm_so >= 0)
			snprintf(s->labels, sizeof(s->labels), "%.*s", (int)(m[3].rm_eo - m[3].rm_so),
				 l + m[3].rm_so);
		s->value = strtoull(l + m[7].rm_so, NULL, 10);
		cr_expect(nt > 0 && !strcmp(typed[nt - 1], s->name),
			  "line %d: %s follows its own # TYPE", i + 1, s->name);
		cr_expect(!strncmp(s->name, "prefixd_", 8), "%s: prefixd_*", s->name);
		/* Labelled series: exactly user (a uid) and model (64 hex). */
		int labelled = !strncmp(s->name, "prefixd_user_model_", 19);
		if (!labelled) {
			cr_expect_eq(s->labels[0], 0, "daemon-wide %s has no labels", s->name);
			continue;
		}
		unsigned user;
		char fp[80];
		int end = 0;
		cr_expect(sscanf(s->labels, "user=\"%u\",model=\"%79[0-9a-f]\"%n", &user, fp, &end) == 2 &&
				  (size_t)end == strlen(s->labels) && strlen(fp) == FP_CHARS,
			  "%s: labels are user and model only: {%s}", s->name, s->labels);
	}
	regfree(&sample_re);
	regfree(&help_re);
	regfree(&type_re);
	cr_expect_eq(nh, nt, "a # HELP for every # TYPE");
	/* The documented names, with what was done. */
	cr_expect_eq(sample_value(samples, ns, "prefixd_prefix_cache_queries_total", ""), 20);
	cr_expect_eq(sample_value(samples, ns, "prefixd_prefix_cache_hits_total", ""), 12);
	cr_expect_eq(sample_value(samples, ns, "prefixd_cache_usage_bytes", ""), a + c + d);
	cr_expect_eq(sample_value(samples, ns, "prefixd_cache_budget_bytes", ""), 64 * MIB);
	cr_expect_eq(sample_value(samples, ns, "prefixd_cache_quota_bytes", ""), 32 * MIB);
	cr_expect_eq(sample_value(samples, ns, "prefixd_cache_pin_max_bytes", ""), 8 * MIB);
	cr_expect_eq(sample_value(samples, ns, "prefixd_cache_pinned_bytes", ""), c);
	cr_expect_eq(sample_value(samples, ns, "prefixd_cache_blocks", ""), 9);
	cr_expect_eq(sample_value(samples, ns, "prefixd_match_hits_total", ""), 1);
	cr_expect_eq(sample_value(samples, ns, "prefixd_match_misses_total", ""), 1);
	cr_expect_eq(sample_value(samples, ns, "prefixd_published_blocks_total", ""), 9);
	cr_expect_eq(sample_value(samples, ns, "prefixd_pins", ""), 1);
	int unlabelled = 0;
	for (int i = 0; i < ns; i++)
		unlabelled += !samples[i].labels[0];
	cr_expect_eq(unlabelled, NCOUNTERS, "one daemon-wide series per counter");
	/* A series per (user, model) pair of each prefixd_user_model_* family. */
	char l_a[160], l_c[160], l_d[160];
	snprintf(l_a, sizeof(l_a), "user=\"0\",model=\"%s\"", fp_hex(M1));
	snprintf(l_c, sizeof(l_c), "user=\"0\",model=\"%s\"", fp_hex(M2));
	snprintf(l_d, sizeof(l_d), "user=\"60001\",model=\"%s\"", fp_hex(M1));
	static const char *const families[] = {
		"prefixd_user_model_cache_blocks", "prefixd_user_model_cache_usage_bytes",
		"prefixd_user_model_cache_pinned_bytes", "prefixd_user_model_prefix_cache_hits_total",
		"prefixd_user_model_prefix_cache_queries_total", "prefixd_user_model_evictions_total",
	};
	int labelled = 0;
	for (int i = 0; i < ns; i++)
		labelled += samples[i].labels[0] != 0;
	cr_expect_eq(labelled, 3 * 6, "three pairs in six families");
	for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++) {
		sample_value(samples, ns, families[f], l_a);
		sample_value(samples, ns, families[f], l_c);
		sample_value(samples, ns, families[f], l_d);
	}
	cr_expect_eq(sample_value(samples, ns, "prefixd_user_model_cache_blocks", l_a), 3);
	cr_expect_eq(sample_value(samples, ns, "prefixd_user_model_cache_blocks", l_d), 4);
	cr_expect_eq(sample_value(samples, ns, "prefixd_user_model_cache_usage_bytes", l_c), c);
	cr_expect_eq(sample_value(samples, ns, "prefixd_user_model_cache_usage_bytes", l_d), d);
	cr_expect_eq(sample_value(samples, ns, "prefixd_user_model_cache_pinned_bytes", l_c), c);
	cr_expect_eq(sample_value(samples, ns, "prefixd_user_model_cache_pinned_bytes", l_a), 0);
	cr_expect_eq(sample_value(samples, ns, "prefixd_user_model_prefix_cache_hits_total", l_a), 12);
	cr_expect_eq(sample_value(samples, ns, "prefixd_user_model_prefix_cache_queries_total", l_a), 20);
	cr_expect_eq(sample_value(samples, ns, "prefixd_user_model_prefix_cache_queries_total", l_d), 0);
	stop();
}

Test(prefixctl, stats_watch_draws_a_frame_a_period_until_interrupted)
{
	t_start_shared(&td, NULL);
	char cmd[512];
	int out, err;
	pid_t pid = ctl_spawn(0, 1, ARGS("stats", "--watch", "1"), &out, &err, cmd, sizeof(cmd));
	static char buf[1 << 17], ebuf[4096];
	size_t len = 0, elen = 0;
	buf[0] = ebuf[0] = 0;
	int published = 0, eof = 0;
	double t0 = td_now_s();
	/* Frames until one shows the block published after the first. */
	while (!eof && td_now_s() - t0 < 8) {
		struct pollfd p[2] = { { out, POLLIN, 0 }, { err, POLLIN, 0 } };
		if (poll(p, 2, 100) > 0) {
			if (p[0].revents && !read_some(out, buf, sizeof(buf), &len))
				eof = 1;
			if (p[1].revents)
				read_some(err, ebuf, sizeof(ebuf), &elen);
		}
		if (!published && strstr(buf, "\nper model:\n")) {
			publish_prompt(M1, 100, 1, NULL);
			published = 1;
		}
		/* The first frame (read whole before the publish) shows 0. */
		int shown = 0;
		for (const char *at = buf; published && (at = strstr(at, "\nblocks cached ")); at++) {
			unsigned long long v = 0;
			shown |= sscanf(at, "\nblocks cached %llu", &v) == 1 && v == 1;
		}
		if (shown)
			break;
	}
	double took = td_now_s() - t0;
	cr_expect_eq(eof, 0, "still running: %s%s", buf, ebuf);
	cr_expect_eq(kill(pid, SIGINT), 0);
	int st;
	double t1 = td_now_s();
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	cr_expect_lt(td_now_s() - t1, 3, "SIGINT ends the wait at once");
	cr_expect_eq(exit_status(st), 0, "Ctrl-C is the way out: exit 0, not %d (%s)", exit_status(st),
		     ebuf);
	while (read_some(out, buf, sizeof(buf), &len))
		;
	close(out);
	close(err);
	cr_expect_eq(ebuf[0], 0, "nothing on stderr: %s", ebuf);
	cr_expect_lt(took, 8, "a later frame showed the new block: %s", buf);
	/* Frames, each whole, the later ones after a dated line (not a
	 * terminal: no escape codes). */
	int frames = 0, dated = 0;
	for (const char *s = buf; (s = strstr(s, "MATCH requests with a hit ")); s++)
		frames++;
	for (const char *s = buf; (s = strstr(s, "\n---- ")); s++) {
		int y, mo, d, h, mi, se;
		dated += sscanf(s, "\n---- %4d-%2d-%2d %2d:%2d:%2d\n", &y, &mo, &d, &h, &mi, &se) == 6;
	}
	cr_expect_geq(frames, 2, "two frames or more: %s", buf);
	cr_expect_eq(dated, frames - 1, "a dated line between frames: %d frames, %d dates", frames, dated);
	cr_expect_null(strchr(buf, '\033'), "no terminal codes into a pipe");
	cr_expect(!strncmp(buf, "MATCH requests with a hit ", 26), "the first frame starts at once");
	static struct ctl r;
	CTL(&r, "stats", "--watch", "0");
	expect_fail(&r, 2, ARGS("--watch takes a whole number from 1"));
	stop();
}

/* Runs stats --watch 1 with more (not on a terminal) until its output
 * holds `reports` times `end` (at most 20 s), then interrupts it. */
static void watch_reports(const char *more, const char *end, int reports, char *buf, size_t cap)
{
	char cmd[512];
	int out, err;
	pid_t pid = ctl_spawn(0, 1, ARGS("stats", "--watch", "1", more), &out, &err, cmd, sizeof(cmd));
	static char ebuf[4096];
	size_t len = 0, elen = 0;
	buf[0] = ebuf[0] = 0;
	int seen = 0, eof = 0;
	double t0 = td_now_s();
	while (!eof && seen < reports && td_now_s() - t0 < 20) {
		struct pollfd p[2] = { { out, POLLIN, 0 }, { err, POLLIN, 0 } };
		if (poll(p, 2, 100) > 0) {
			if (p[0].revents && !read_some(out, buf, cap, &len))
				eof = 1;
			if (p[1].revents)
				read_some(err, ebuf, sizeof(ebuf), &elen);
		}
		seen = 0;
		for (const char *at = buf; (at = strstr(at, end)); at += strlen(end))
			seen++;
	}
	cr_expect_eq(kill(pid, SIGINT), 0);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	cr_expect_eq(exit_status(st), 0, "%s: %s", cmd, ebuf);
	close(out);
	close(err);
	cr_assert_geq(seen, reports, "%s: %d reports in 20 s: %s%s", cmd, seen, buf, ebuf);
	/* The reports counted, without the start of one more. */
	char *at = buf;
	for (int i = 0; i < reports; i++)
		at = strstr(at, end) + strlen(end);
	*at = 0;
}

/* A program reads the stream: one JSON object a line, nothing between. */
Test(prefixctl, stats_watch_json_is_one_object_a_line)
{
	t_start_shared(&td, NULL);
	static char buf[1 << 17];
	watch_reports("--json", "\n", 3, buf, sizeof(buf));
	int lines = 0;
	for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
		json_object *o = json_tokener_parse(line);
		cr_expect(o && json_object_is_type(o, json_type_object), "line %d is not a JSON object: '%s'",
			  lines, line);
		json_object *users;
		cr_expect(o && json_object_object_get_ex(o, "users", &users), "line %d: '%s'", lines, line);
		json_object_put(o);
		lines++;
	}
	cr_expect_geq(lines, 3);
	stop();
}

/* One complete exposition an interval, each ending "# EOF"; no other lines
 * than samples and comments. */
Test(prefixctl, stats_watch_prometheus_is_one_exposition_an_interval)
{
	t_start_shared(&td, NULL);
	static char buf[1 << 18];
	watch_reports("--prometheus", "\n# EOF\n", 2, buf, sizeof(buf));
	regex_t sample;
	cr_assert_eq(regcomp(&sample, "^[a-z_]+(\\{[^}]*\\})? [0-9]+$", REG_EXTENDED | REG_NOSUB), 0);
	int expositions = 0, types = 0;
	for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
		if (!strcmp(line, "# EOF")) {
			cr_expect_eq(types, 1, "exposition %d has the queries family %d times", expositions,
				     types);
			expositions++;
			types = 0;
			continue;
		}
		types += !strcmp(line, "# TYPE prefixd_prefix_cache_queries_total counter");
		cr_expect(line[0] == '#' || !regexec(&sample, line, 0, NULL, 0),
			  "neither a sample nor a comment: '%s'", line);
	}
	regfree(&sample);
	cr_expect_geq(expositions, 2);
	stop();
}

/* ==== info ==== */

/* What a model's prefixes cost moved to prefix-run info (test_prefix_run.c):
 * prefixctl does not load models. Any options of the old command line get
 * the same pointer, not an error about them. */
Test(prefixctl, info_says_where_it_moved)
{
	static struct ctl r;
	CTL_BARE(&r, "info", "--model", "/srv/m", "--block-tokens", "4", "--kv-dtype", "f16");
	expect_fail(&r, 2, ARGS("info moved to prefix-run", "prefix-run info --model DIR"));
	CTL_BARE(&r, "info");
	expect_fail(&r, 2, ARGS("info moved to prefix-run"));
	CTL_BARE(&r, "help", "info");
	expect_ok(&r);
	cr_expect(strstr(r.out, "prefix-run info --model DIR"), "%s", r.out);
}

/* ==== the command line ==== */

Test(prefixctl, every_command_has_help_and_says_what_is_wrong_with_a_command_line)
{
	static struct ctl r;
	static const char *const cmds[] = { "ls", "evict", "pin", "unpin", "stats", "info" };
	char want[64];
	CTL_BARE(&r, "--help");
	expect_ok(&r);
	cr_expect(!strncmp(r.out, "usage: prefixctl [--socket PATH] COMMAND [OPTIONS]\n", 51), "%s", r.out);
	for (size_t i = 0; i < 6; i++) {
		snprintf(want, sizeof(want), "\n  %-7s ", cmds[i]);
		cr_expect(strstr(r.out, want), "--help lists %s: %s", cmds[i], r.out);
	}
	CTL_BARE(&r, "-h");
	expect_ok(&r);
	cr_expect(!strncmp(r.out, "usage:", 6));
	for (size_t i = 0; i < 6; i++) {
		snprintf(want, sizeof(want), "usage: prefixctl [--socket PATH] %s", cmds[i]);
		CTL_BARE(&r, cmds[i], "--help");
		expect_ok(&r);
		cr_expect(!strncmp(r.out, want, strlen(want)), "%s --help: %s", cmds[i], r.out);
		cr_expect(strstr(r.out, "-h, --help"), "%s --help", cmds[i]);
		CTL_BARE(&r, "--help", cmds[i]);
		expect_ok(&r);
		cr_expect(!strncmp(r.out, want, strlen(want)), "--help %s: %s", cmds[i], r.out);
		CTL_BARE(&r, "help", cmds[i]); /* as prefix-run help CMD */
		expect_ok(&r);
		cr_expect(!strncmp(r.out, want, strlen(want)), "help %s: %s", cmds[i], r.out);
		if (!strcmp(cmds[i], "info"))
			continue; /* it takes any options, to say where it moved */
		CTL_BARE(&r, cmds[i], "--frobnicate");
		snprintf(want, sizeof(want), "Try 'prefixctl %s --help'.", cmds[i]);
		expect_fail(&r, 2, ARGS("unknown option '--frobnicate'", want));
		cr_expect_eq(r.out[0], 0, "%s: nothing on stdout", cmds[i]);
		CTL_BARE(&r, cmds[i], "-x");
		expect_fail(&r, 2, ARGS("unknown option"));
	}
	CTL_BARE(&r, "help");
	expect_ok(&r);
	cr_expect(!strncmp(r.out, "usage: prefixctl [--socket PATH] COMMAND", 40), "%s", r.out);
	CTL_BARE(&r, "help", "frobnicate");
	expect_fail(&r, 2, ARGS("unknown command 'frobnicate'"));
	/* Options documented per command. */
	CTL_BARE(&r, "ls", "--help");
	cr_expect(strstr(r.out, "--sort KEY") && strstr(r.out, "--limit N") && strstr(r.out, "--user UID") &&
		  strstr(r.out, "--model FP") && strstr(r.out, "--json"), "%s", r.out);
	CTL_BARE(&r, "evict", "--help");
	cr_expect(strstr(r.out, "evicted_blocks") && strstr(r.out, "kept_parent") && strstr(r.out, "--idle SECS"), "%s", r.out);
	CTL_BARE(&r, "stats", "--help");
	cr_expect(strstr(r.out, "prefixd_prefix_cache_queries_total") && strstr(r.out, "--watch SECS"), "%s", r.out);
	/* What is missing. */
	ctl_run(&r, 0, 0, ARGS(NULL));
	cr_expect_eq(r.status, 2, "no arguments at all");
	cr_expect(!strncmp(r.err, "usage:", 6), "the usage on stderr: %s", r.err);
	CTL_BARE(&r, "--socket", "/nonexistent/x");
	expect_fail(&r, 2, ARGS("no command given"));
	CTL_BARE(&r, "frobnicate");
	expect_fail(&r, 2, ARGS("unknown command 'frobnicate'", "ls, evict, pin, unpin, stats, info"));
	CTL_BARE(&r, "pin");
	expect_fail(&r, 2, ARGS("pin needs a chain ID"));
	CTL_BARE(&r, "unpin");
	expect_fail(&r, 2, ARGS("unpin needs a chain ID"));
	CTL_BARE(&r, "evict");
	expect_fail(&r, 2, ARGS("exactly one of"));
	CTL_BARE(&r, "ls", "--limit");
	expect_fail(&r, 2, ARGS("option '--limit' needs a value"));
	CTL_BARE(&r, "ls", "extra");
	expect_fail(&r, 2, ARGS("unexpected argument 'extra'"));
	CTL_BARE(&r, "ls", "--ttl", "5");
	expect_fail(&r, 2, ARGS("ls takes no --ttl"));
	CTL_BARE(&r, "stats", "--ttl", "4");
	expect_fail(&r, 2, ARGS("stats takes no --ttl"));
	/* No daemon there: exit 1. */
	char dir[] = "/tmp/prefixctl-test-XXXXXX", sock[64];
	cr_assert(mkdtemp(dir));
	snprintf(sock, sizeof(sock), "%s/sock", dir);
	const char *const *unreachable[] = {
		ARGS("--socket", sock, "ls"),
		ARGS("--socket", sock, "ls", "--json"),
		ARGS("--socket", sock, "evict", "--all"),
		ARGS("--socket", sock, "pin", "0123456789ab"),
		ARGS("--socket", sock, "unpin", "0123456789ab"),
		ARGS("--socket", sock, "stats"),
		ARGS("--socket", sock, "stats", "--prometheus"),
		ARGS("stats", "--socket", "/nonexistent/dir/sock"),
	};
	for (size_t i = 0; i < sizeof(unreachable) / sizeof(unreachable[0]); i++) {
		ctl_run(&r, 0, 0, unreachable[i]);
		expect_fail(&r, 1, ARGS("cannot connect to prefixd at "));
		cr_expect_eq(r.out[0], 0, "%s: nothing on stdout: %s", r.cmd, r.out);
	}
	rmdir(dir);
}

/* ==== another user ==== */

/* prefixctl --json's output as uid 60001, parsed; the command must succeed. */
static json_object *other_json(const char *const *args)
{
	static struct ctl buf; /* static: a failed assertion leaks nothing */
	ctl_run(&buf, 1, 1, args);
	expect_ok(&buf);
	return parse_json(buf.out, buf.cmd);
}

Test(prefixctl, another_user_lists_counts_evicts_and_pins_only_their_own_chains)
{
	t_start_shared(&td, NULL);
	static struct ctl r;
	char ida[ID_CHARS + 1], idb[ID_CHARS + 1], a8[9], b12[13];
	publish_prompt(M1, 100, 3, ida);
	publish_as_other(M1, 500, 2, idb);
	cut(a8, sizeof(a8), ida);
	cut(b12, sizeof(b12), idb);
	/* ls: their own chain, not root's. */
	json_object *arr = other_json(ARGS("ls", "--json"));
	cr_expect_eq(json_object_array_length(arr), 1, "uid 60001 sees one chain: %s",
		     json_object_to_json_string(arr));
	cr_expect(chain_in(arr, idb), "its own");
	json_object_put(arr);
	CTL_OTHER(&r, "ls");
	expect_ok(&r);
	cr_expect(strstr(r.out, b12) && !strstr(r.out, a8), "ls: %s", r.out);
	CTL_OTHER(&r, "ls", "--user", "0");
	expect_fail(&r, 1, ARGS("permission denied", "uid 60001 may act on its own chains only",
				"not uid 0's"));
	/* stats: the counters and usage rows of their own blocks. */
	json_object *st = other_json(ARGS("stats", "--json"));
	cr_expect_eq(ju64(st, "blocks"), 2, "its 2 blocks, not root's 3: %s",
		     json_object_to_json_string(st));
	cr_expect_eq(ju64(st, "bytes_used"), 2 * charged(M1));
	cr_expect_eq(ju64(st, "budget"), t_stats(&td).budget, "the budget, which HELLO tells anyway");
	json_object *users = jkey(st, "users");
	cr_expect_eq(json_object_array_length(users), 1, "one usage row: %s",
		     json_object_to_json_string(users));
	cr_expect_eq(ju64(json_object_array_get_idx(users, 0), "user"), UID_OTHER);
	json_object_put(st);
	cr_expect_eq(stat_json("blocks"), 5, "root sees everyone's");
	/* Another's chain: named in full it is refused; by a prefix it is not
	 * even found. */
	const char *const *refused[] = {
		ARGS("evict", "--user", "0"),
		ARGS("evict", "--id", ida),
		ARGS("pin", ida),
		ARGS("unpin", ida),
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		ctl_run(&r, 1, 1, refused[i]);
		expect_fail(&r, 1, ARGS("permission denied", "its own chains only", "not uid 0's"));
	}
	CTL_OTHER(&r, "pin", a8);
	expect_fail(&r, 1, ARGS("no cached chain has an id starting with"));
	/* Export and import stay the daemon's user's and root's. */
	char file[256];
	snprintf(file, sizeof(file), "/tmp/prefixctl-other-%d.export", (int)getpid());
	CTL_OTHER(&r, "export", file);
	expect_fail(&r, 1, ARGS("permission denied", "only for the daemon's user (uid 0) and root"));
	unlink(file);
	/* Their own: pinned, unpinned, evicted. */
	CTL_OTHER(&r, "pin", b12);
	expect_ok(&r);
	cr_expect_eq(jbool(one_chain(idb), "pinned"), 1, "uid 60001 pinned its chain");
	cr_expect_eq(stat_json("pins"), 1);
	CTL_OTHER(&r, "evict", "--all");
	expect_ok(&r);
	cr_expect_str_eq(r.out, "evicted 0 blocks (0 B); kept 0 leased, 2 pinned, 0 parent\n",
			 "its pin holds, and root's blocks are not counted");
	CTL_OTHER(&r, "unpin", idb);
	expect_ok(&r);
	CTL_OTHER(&r, "evict", "--all");
	expect_ok(&r);
	cr_expect(!strncmp(r.out, "evicted 2 blocks", 16), "--all: its own 2 blocks: %s", r.out);
	arr = ls_json(NULL);
	cr_expect_eq(json_object_array_length(arr), 1, "root's chain is still there");
	cr_expect(chain_in(arr, ida), "root's");
	json_object_put(arr);
	cr_expect_eq(stat_json("blocks"), 3);
	cr_expect_eq(stat_json("admin_evictions"), 2);
	stop();
}
