/* SPDX-License-Identifier: MIT */
/*
 * prefix-serve's counters and histograms, rendered in Prometheus' text
 * format for GET /metrics. vLLM's names where vLLM has the figure (so its
 * dashboards work), prefix_serve_* for the rest. Any thread may record;
 * one mutex guards everything (a request records once, at its end).
 */
#ifndef SERVE_METRICS_H
#define SERVE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"

struct metrics;

/* model: the name requests report (the model_name label). NULL: no memory. */
struct metrics *metrics_new(const char *model);
void metrics_free(struct metrics *m);

/* One finished HTTP request: its status, and u when it ran a job (NULL
 * otherwise). ttft and the time per output token are observed only for
 * requests that generated tokens. */
void metrics_request(struct metrics *m, int status, const struct serve_job_usage *u);

/* The page: counters, histograms, and the gauges of s (NULL: the engine
 * is not running yet) and ready. malloc'd, NULL when out of memory. */
char *metrics_render(struct metrics *m, const struct serve_engine_stats *s, int ready);

#endif
