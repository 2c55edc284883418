/* SPDX-License-Identifier: MIT */
#include "crc16.h"

#include <string.h>

/* Bitwise rather than a 512-byte table: keys are short and a slot is
 * computed once per key per call, far below the cost of the round trip. */
uint16_t kv_crc16(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint16_t crc = 0;
	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)(p[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
	}
	return crc;
}

unsigned kv_key_slot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len);
	if (open) {
		size_t from = (size_t)(open - key) + 1;
		const char *close = memchr(key + from, '}', len - from);
		if (close && close > key + from)
			return kv_crc16(key + from, (size_t)(close - key - from)) & (KV_SLOTS - 1);
	}
	return kv_crc16(key, len) & (KV_SLOTS - 1);
}
