/* SPDX-License-Identifier: MIT */
/* prefix-serve's listening socket, made here and handed to libmicrohttpd. */
#ifndef SERVE_LISTEN_H
#define SERVE_LISTEN_H

#include <stdbool.h>

#include <prefixd-runtime/pfx_error.h>

/*
 * A non-blocking TCP socket bound to host:port (port 0: one the kernel
 * picks) and listening, with SO_REUSEADDR, and SO_REUSEPORT when
 * reuse_port (several processes on one port, the kernel spreading
 * connections). The descriptor, or -errno with err (EADDRINUSE says what
 * to do). *bound: "HOST:PORT" as bound ("[::1]:8080" for IPv6).
 */
int listen_tcp(const char *host, int port, bool reuse_port, char bound[128],
	       struct pfx_error *err);

#endif
