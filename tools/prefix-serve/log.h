/* SPDX-License-Identifier: MIT */
/* prefix-serve's log: lines on stderr, each written whole by one write(2). */
#ifndef SERVE_LOG_H
#define SERVE_LOG_H

/* "prefix-serve: " and the message, then a newline. Any thread. */
void serve_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
