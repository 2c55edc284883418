/* SPDX-License-Identifier: MIT */
/*
 * What a benchmark prints: one JSON object on stdout, built field by field
 * in the order the calls come (one benchmark, one object a process), and
 * closed by report_end with the targets: each figure that has one, its
 * target and whether it was met, then "target" (the targets by name, as
 * the README cites them), "target_met" and the note. report_machine and
 * report_noise add the same keys in every benchmark, so that a figure
 * says on which machine, and with how much else running, it was taken.
 */
#ifndef PFX_BENCH_REPORT_H
#define PFX_BENCH_REPORT_H

#include <stdbool.h>

/* Opens the object; name ("daemon") heads the messages on stderr. */
void report_begin(const char *name);
/* A field whose value is the JSON text fmt makes ("%.3f", "\"%s\"", an
 * object or an array). */
void report_fmt(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A field holding a JSON string: fmt's text, escaped. */
void report_str(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An array of n numbers with `decimals` decimals; of n integers. */
void report_array(const char *key, const double *v, int n, int decimals);
void report_array_ll(const char *key, const long long *v, int n);
/* A key made by fmt ("attach_us%s"), for the next call's key argument:
 * a buffer the call after that overwrites. */
const char *report_key(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The machine: "cpu" (model name), "cores", "kernel" (the OS's release),
 * "cpu_features" (what CPUID and the OS allow, kernels.h's probe),
 * "cpu_kernels" (which of our own kernels run, cpu.c) and "blas_core"
 * (OpenBLAS's). */
void report_machine(void);
/* The noise while the figures were taken (bench_cpu_since):
 * "cpu_used_by_others", CPUs used on average by other processes, and
 * "steal", the hypervisor's. */
void report_noise(double others, double steal);

enum report_cmp {
	REPORT_AT_LEAST, /* value >= target */
	REPORT_AT_MOST,  /* value <= target */
	REPORT_BELOW,    /* value < target */
};
/* A figure with a target: `name` is the target's key in "target". */
void report_target(const char *name, double value, enum report_cmp cmp, double target);
/* A target that is a condition, not a number: "target" shows want (e.g.
 * "all agree") under name. */
void report_target_holds(const char *name, bool holds, const char *want);
/* Something that must hold besides the targets (a clean stop): when it
 * does not, target_met is false and stderr says why. */
void report_require(bool holds, const char *why);

/* Prints the targets, "target_met" and "note" (fmt's text; none when
 * NULL), closes the object, and says on stderr which target was missed.
 * Whether every target was met and every requirement held. */
bool report_end(const char *note_fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
