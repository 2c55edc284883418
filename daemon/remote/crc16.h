/* SPDX-License-Identifier: MIT */
/*
 * Redis Cluster's key slots: CRC16 (the XMODEM variant the cluster
 * specification names: polynomial 0x1021, initial value 0, no reflection)
 * of the key, or of its hash tag, modulo 16384.
 */
#ifndef PD_REMOTE_CRC16_H
#define PD_REMOTE_CRC16_H

#include <stddef.h>
#include <stdint.h>

#define KV_SLOTS 16384u

uint16_t kv_crc16(const void *buf, size_t len);
/* The slot of a key: a hash tag is the bytes between the first '{' and the
 * first '}' after it when there is at least one byte between them;
 * otherwise the whole key counts ("foo{}{bar}" hashes all of itself). */
unsigned kv_key_slot(const char *key, size_t len);

#endif
