/* SPDX-License-Identifier: MIT */
/*
 * Chat rendering with a template given as text (pfx_chat_render uses the
 * tokenizer's own): for templates a tokenizer_config.json does not carry,
 * and for the tests.
 */
#ifndef PFX_TEXT_CHAT_H
#define PFX_TEXT_CHAT_H

#include "text.h"

/* pfx_chat_render_opts with template src (NUL-terminated) instead of the
 * tokenizer's; t gives the special-token strings of the context. */
int chat_render_with(const struct pfx_tokenizer *t, const char *src,
		     const struct pfx_chat_message *m, size_t n, const struct pfx_chat_opts *o,
		     char **text, size_t *len, struct pfx_text_span **spans, size_t *nspans,
		     struct pfx_error *err);

#endif
