/* SPDX-License-Identifier: MIT */
/* prefixctl: the prefixd admin command line. */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "prefixd.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: prefixctl [--socket PATH] stats [--json]\n"
		"\n"
		"Administers a running prefixd.\n"
		"\n"
		"  --socket PATH   the daemon's socket (default: $XDG_RUNTIME_DIR/prefixd.sock,\n"
		"                  else /run/prefixd.sock)\n"
		"  stats           the daemon's counters; --json prints them as one JSON object\n"
		"  -h, --help      this text\n"
		"\n"
		"Exit status: 0 done, 1 the daemon refused or cannot be reached, 2 bad usage.\n");
}

static int usage_error(const char *what, const char *arg)
{
	fprintf(stderr, "prefixctl: %s '%s'\nTry 'prefixctl --help'.\n", what, arg);
	return 2;
}

struct counter {
	const char *key, *label;
	size_t offset;
};

#define C(f, label) { #f, label, offsetof(struct prefixd_stats, f) }
static const struct counter counters[] = {
	C(hits, "hits (MATCH with a hit)"),
	C(misses, "misses"),
	C(hit_tokens, "tokens served from the cache"),
	C(matches, "MATCH requests"),
	C(blocks, "blocks cached"),
	C(bytes_used, "bytes used"),
	C(budget, "memory budget (bytes)"),
	C(arenas, "shared-memory arenas"),
	C(published, "blocks published"),
	C(dedup, "blocks deduplicated"),
	C(evictions, "blocks evicted"),
	C(collisions, "hash collisions caught"),
	C(connections, "connections open"),
	C(leases, "leases held"),
	C(errors, "requests refused"),
};
#undef C

static uint64_t value(const struct prefixd_stats *s, const struct counter *c)
{
	uint64_t v;
	memcpy(&v, (const char *)s + c->offset, sizeof(v));
	return v;
}

static int print_stats(const struct prefixd_stats *s, int json)
{
	size_t n = sizeof(counters) / sizeof(counters[0]);
	if (json) {
		json_object *o = json_object_new_object();
		for (size_t i = 0; i < n; i++)
			json_object_object_add(o, counters[i].key,
					       json_object_new_uint64(value(s, &counters[i])));
		puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
							       JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		printf("%-30s %llu\n", counters[i].label, (unsigned long long)value(s, &counters[i]));
	if (s->budget)
		printf("%-30s %.1f%%\n", "budget in use", 100.0 * (double)s->bytes_used / (double)s->budget);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *path = NULL;
	int json = 0, o;
	opterr = 0;
	/* GNU getopt moves options after the command in front of it. */
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 's': path = optarg; break;
		case 'j': json = 1; break;
		case 'h': usage(stdout); return 0;
		default: return usage_error("unknown or incomplete option", argv[optind - 1]);
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[optind++];
	if (strcmp(cmd, "stats"))
		return usage_error("unknown command", cmd);
	if (optind < argc)
		return usage_error("unexpected argument", argv[optind]);
	struct prefixd *c;
	struct prefixd_stats s;
	int rc = prefixd_connect(path, NULL, &c);
	if (!rc) {
		rc = prefixd_stats(c, &s);
		prefixd_close(c);
	}
	if (rc) {
		fprintf(stderr, "prefixctl: %s\n", prefixd_errmsg());
		return 1;
	}
	return print_stats(&s, json);
}
