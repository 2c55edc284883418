/* SPDX-License-Identifier: MIT */
#include "report.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench_util.h"
#include "kernels.h"
#include "model.h"

#define MAX_TARGETS 24

struct target {
	char name[64]; /* a copy: report_key's buffer is reused */
	double value, target;
	enum report_cmp cmp;
	const char *want; /* a condition's target; NULL for a number */
	bool met;
};

/* One object a process: the calls come from the benchmarks' print
 * helpers, which need not pass it around. */
static struct {
	const char *name;
	int fields;
	int ntargets;
	struct target t[MAX_TARGETS];
	bool required_ok;
	char why[256];
} rep;

static void key(const char *k)
{
	printf("%s  \"%s\": ", rep.fields++ ? ",\n" : "", k);
}

void report_begin(const char *name)
{
	memset(&rep, 0, sizeof(rep));
	rep.name = name;
	rep.required_ok = true;
	printf("{\n");
}

void report_fmt(const char *k, const char *fmt, ...)
{
	va_list ap;
	key(k);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
}

static void put_escaped(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

void report_str(const char *k, const char *fmt, ...)
{
	char buf[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	key(k);
	put_escaped(buf);
}

void report_array(const char *k, const double *v, int n, int decimals)
{
	key(k);
	printf("[");
	for (int i = 0; i < n; i++)
		printf("%s%.*f", i ? ", " : "", decimals, v[i]);
	printf("]");
}

void report_array_ll(const char *k, const long long *v, int n)
{
	key(k);
	printf("[");
	for (int i = 0; i < n; i++)
		printf("%s%lld", i ? ", " : "", v[i]);
	printf("]");
}

const char *report_key(const char *fmt, ...)
{
	static char buf[128];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return buf;
}

void report_machine(void)
{
	char cpu[128];
	struct utsname u;
	bench_cpu_model(cpu, sizeof(cpu));
	if (uname(&u))
		snprintf(u.release, sizeof(u.release), "unknown");
	report_str("cpu", "%s", cpu);
	report_fmt("cores", "%ld", sysconf(_SC_NPROCESSORS_ONLN));
	report_str("kernel", "%s", u.release);
	struct kern_cpu_isa isa;
	kern_cpu_isa_probe(&isa);
	const struct {
		bool on;
		const char *name;
	} f[] = {
		{ isa.sse42, "sse4.2" },       { isa.avx, "avx" },
		{ isa.avx2, "avx2" },          { isa.fma, "fma" },
		{ isa.avx512f, "avx512f" },    { isa.avx512bw, "avx512bw" },
		{ isa.avx512vl, "avx512vl" },  { isa.avx512_bf16, "avx512_bf16" },
		{ isa.amx_bf16, "amx_bf16" },
	};
	char feat[256] = "";
	size_t at = 0;
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		if (f[i].on && at < sizeof(feat))
			at += (size_t)snprintf(feat + at, sizeof(feat) - at, "%s%s", at ? " " : "",
					       f[i].name);
	report_str("cpu_features", "%s", feat);
	report_str("cpu_kernels", "%s", kern_cpu_kernels());
	report_str("blas_core", "%s", pfx_blas_corename());
}

void report_noise(double others, double steal)
{
	report_fmt("cpu_used_by_others", "%.2f", others);
	report_fmt("steal", "%.3f", steal);
}

static struct target *add(const char *name)
{
	if (rep.ntargets == MAX_TARGETS) {
		/* A benchmark with more is a programming error: refuse it
		 * loudly rather than drop a target. */
		fprintf(stderr, "bench/%s: more than %d targets\n", rep.name, MAX_TARGETS);
		rep.required_ok = false;
		return &rep.t[MAX_TARGETS - 1];
	}
	return &rep.t[rep.ntargets++];
}

void report_target(const char *name, double value, enum report_cmp cmp, double target)
{
	bool met = cmp == REPORT_AT_LEAST ? value >= target
		   : cmp == REPORT_AT_MOST ? value <= target
					   : value < target;
	struct target *t = add(name);
	*t = (struct target){ .value = value, .target = target, .cmp = cmp, .met = met };
	snprintf(t->name, sizeof(t->name), "%s", name);
}

void report_target_holds(const char *name, bool holds, const char *want)
{
	struct target *t = add(name);
	*t = (struct target){ .want = want, .met = holds };
	snprintf(t->name, sizeof(t->name), "%s", name);
}

void report_require(bool holds, const char *why)
{
	if (!holds && rep.required_ok)
		snprintf(rep.why, sizeof(rep.why), "%s", why);
	rep.required_ok &= holds;
}

static const char *const cmp_key[] = { "at_least", "at_most", "below" };
static const char *const cmp_sign[] = { ">=", "<=", "<" };

bool report_end(const char *note_fmt, ...)
{
	bool met = rep.required_ok;
	if (rep.ntargets) {
		key("target");
		printf("{");
		for (int i = 0; i < rep.ntargets; i++) {
			const struct target *t = &rep.t[i];
			printf("%s\"%s\": ", i ? ", " : "", t->name);
			if (t->want)
				put_escaped(t->want);
			else
				printf("%g", t->target);
		}
		printf("}");
		key("targets");
		printf("{");
		for (int i = 0; i < rep.ntargets; i++) {
			const struct target *t = &rep.t[i];
			printf("%s\"%s\": {", i ? ", " : "", t->name);
			if (t->want)
				printf("\"holds\": %s", t->met ? "true" : "false");
			else
				printf("\"value\": %g, \"%s\": %g", t->value, cmp_key[t->cmp], t->target);
			printf(", \"met\": %s}", t->met ? "true" : "false");
			met &= t->met;
		}
		printf("}");
		key("target_met");
		printf("%s", met ? "true" : "false");
	}
	if (note_fmt) {
		char note[8192];
		va_list ap;
		va_start(ap, note_fmt);
		vsnprintf(note, sizeof(note), note_fmt, ap);
		va_end(ap);
		key("note");
		put_escaped(note);
	}
	printf("\n}\n");
	fflush(stdout);
	for (int i = 0; i < rep.ntargets; i++) {
		const struct target *t = &rep.t[i];
		if (t->met)
			continue;
		if (t->want)
			fprintf(stderr, "bench/%s: target missed: %s (target: %s)\n", rep.name, t->name,
				t->want);
		else
			fprintf(stderr, "bench/%s: target missed: %s %g (target %s %g)\n", rep.name,
				t->name, t->value, cmp_sign[t->cmp], t->target);
	}
	if (!rep.required_ok)
		fprintf(stderr, "bench/%s: %s\n", rep.name, rep.why);
	return met;
}
