/* SPDX-License-Identifier: MIT */
#include "kv.h"
#include "kv_seed.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define DB_MAX 999999

static int refuse(char *why, size_t why_len, const char *seed, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int refuse(char *why, size_t why_len, const char *seed, const char *fmt, ...)
{
	if (why && why_len) {
		int n = snprintf(why, why_len, "remote seed \"%.200s\": ", seed);
		if (n > 0 && (size_t)n < why_len) {
			va_list ap;
			va_start(ap, fmt);
			vsnprintf(why + n, why_len - (size_t)n, fmt, ap);
			va_end(ap);
		}
	}
	return -EINVAL;
}

/* Decimal digits at *p into v (no sign, no leading junk), at most max:
 * the number of digits read, 0 when none, -1 when above max. */
static int number(const char **p, long max, long *v)
{
	const char *s = *p;
	long x = 0;
	int n = 0;
	for (; *s >= '0' && *s <= '9'; s++, n++) {
		x = x * 10 + (*s - '0');
		if (x > max)
			return -1;
	}
	*p = s;
	*v = x;
	return n;
}

static bool host_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_';
}

static int parse_tcp(const char *seed, const char *p, struct kv_endpoint *e, char *why,
		     size_t why_len)
{
	const char *h = p, *end;
	if (*p == '[') {
		end = strchr(++h, ']');
		if (!end)
			return refuse(why, why_len, seed, "an IPv6 address opened with [ has no ]");
		for (const char *q = h; q < end; q++)
			if (!strchr("0123456789abcdefABCDEF:.", *q))
				return refuse(why, why_len, seed, "\"%.*s\" is not an IPv6 address",
					      (int)(end - h), h);
		p = end + 1;
	} else {
		while (host_char(*p))
			p++;
		end = p;
	}
	if (end == h)
		return refuse(why, why_len, seed,
			      "no host: expected redis://HOST:PORT[/DB] or unix:PATH");
	if ((size_t)(end - h) >= sizeof(e->host))
		return refuse(why, why_len, seed, "the host is longer than %zu bytes",
			      sizeof(e->host) - 1);
	memcpy(e->host, h, (size_t)(end - h));
	e->host[end - h] = 0;
	if (*p == '@' || strchr(p, '@'))
		return refuse(why, why_len, seed,
			      "a password is not taken from the seed: give it apart (a file)");
	if (*p != ':')
		return refuse(why, why_len, seed, "no port after the host (redis://HOST:PORT)");
	p++;
	long v;
	int n = number(&p, 65535, &v);
	if (n <= 0 || v == 0)
		return refuse(why, why_len, seed, "the port is not a number in 1..65535");
	e->port = (int)v;
	bool db = *p == '/';
	if (db) {
		p++;
		n = number(&p, DB_MAX, &v);
		if (n <= 0)
			return refuse(why, why_len, seed, "the DB after / is not a number in 0..%d",
				      DB_MAX);
		e->db = (int)v;
	}
	if (*p)
		return refuse(why, why_len, seed, "unexpected \"%.40s\" after the %s", p,
			      db ? "DB" : "port");
	return 0;
}

int kv_seed_parse(const char *seed, struct kv_endpoint *e, char *why, size_t why_len)
{
	memset(e, 0, sizeof(*e));
	if (!seed || !*seed)
		return refuse(why, why_len, "", "empty: expected redis://HOST:PORT[/DB] or unix:PATH");
	if (!strncmp(seed, "unix:", 5)) {
		const char *path = seed + 5;
		if (!strncmp(path, "//", 2))
			path += 2; /* unix://PATH as well */
		if (!*path)
			return refuse(why, why_len, seed, "no path after unix:");
		if (strlen(path) >= sizeof(e->path))
			return refuse(why, why_len, seed,
				      "the socket path is longer than %zu bytes",
				      sizeof(e->path) - 1);
		e->is_unix = true;
		strcpy(e->path, path);
		return 0;
	}
	if (!strncmp(seed, "redis://", 8))
		return parse_tcp(seed, seed + 8, e, why, why_len);
	if (!strncmp(seed, "rediss://", 9))
		return refuse(why, why_len, seed, "TLS (rediss://) is not supported");
	return refuse(why, why_len, seed,
		      "unknown scheme: expected redis://HOST:PORT[/DB] or unix:PATH");
}

int kv_parse_seed(const char *seed, char *why, size_t why_len)
{
	struct kv_endpoint e;
	return kv_seed_parse(seed, &e, why, why_len);
}

bool kv_endpoint_same(const struct kv_endpoint *a, const struct kv_endpoint *b)
{
	if (a->is_unix != b->is_unix)
		return false;
	return a->is_unix ? !strcmp(a->path, b->path)
			  : a->port == b->port && !strcmp(a->host, b->host);
}

const char *kv_endpoint_name(const struct kv_endpoint *e, char *buf, size_t cap)
{
	if (e->is_unix)
		snprintf(buf, cap, "unix:%s", e->path);
	else if (strchr(e->host, ':'))
		snprintf(buf, cap, "[%s]:%d", e->host, e->port);
	else
		snprintf(buf, cap, "%s:%d", e->host, e->port);
	return buf;
}
