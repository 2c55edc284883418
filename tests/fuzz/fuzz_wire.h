/* SPDX-License-Identifier: MIT */
/*
 * The input format of fuzz_wire, shared with gen_wire_corpus:
 *
 *   u8 selector | u32 LE block_tokens | payload
 *
 * The selector (modulo FW_COUNT) names the decoder the payload goes to;
 * block_tokens is what HELLO would have agreed on and matters only to MATCH,
 * PUBLISH and FW_FRAME (the decoders check it against their limit too).
 * FW_FRAME's payload is a whole frame: a 32-byte header, then its body,
 * decoded as prefixd and its clients do for that op, direction and status.
 */
#ifndef PFX_FUZZ_WIRE_H
#define PFX_FUZZ_WIRE_H

enum fw_sel {
	FW_HDR,
	FW_HELLO,
	FW_HELLO_REPLY,
	FW_MATCH,
	FW_MATCH_REPLY,
	FW_RELEASE,
	FW_PUBLISH,
	FW_PUBLISH_REPLY,
	FW_STATS_REPLY,
	FW_LIST,
	FW_LIST_REPLY,
	FW_EVICT,
	FW_EVICT_REPLY,
	FW_PIN,
	FW_PIN_REPLY,
	FW_UNPIN,        /* the PIN body and decoder, as prefixd uses it */
	FW_ERROR,
	FW_FRAME,
	FW_EXPORT,       /* after FW_FRAME: earlier seeds keep their selectors */
	FW_EXPORT_REPLY,
	FW_IMPORT,
	FW_IMPORT_REPLY,
	FW_FLIGHT,       /* a MATCH body with PD_FLAG_FLIGHT: 8 bytes, then MATCH's */
	FW_FLIGHT_REPLY, /* its reply: MATCH's, then 8 bytes */
	FW_COUNT,
};

#define FW_PREFIX 5      /* selector and block_tokens */

#endif
