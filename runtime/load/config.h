/* SPDX-License-Identifier: MIT */
/* Typed access to config.json for the architectures (arch/), which
 * rejects wrong types and options the runtime does not implement. */
#ifndef PFX_LOAD_CONFIG_H
#define PFX_LOAD_CONFIG_H

#include <json-c/json.h>
#include <stdbool.h>

#include "model.h"

/* config.json accessors for parse_config; they reject wrong types. */
int cfg_int(json_object *cfg, const char *key, int dflt, int required, int *out, struct pfx_error *err);
int cfg_float(json_object *cfg, const char *key, double dflt, float *out, struct pfx_error *err);
int cfg_bool(json_object *cfg, const char *key, bool dflt, bool *out, struct pfx_error *err);
/* Rejects a key whose presence (non-null) means an option we do not support. */
int cfg_reject(json_object *cfg, const char *key, struct pfx_error *err);
int cfg_act(json_object *cfg, const char *key, const char *dflt, enum pfx_act *out, struct pfx_error *err);
/* The keys every causal LM config shares (sizes, positions, tying), and
 * their writing for random checkpoints. */
int cfg_parse_common(json_object *cfg, struct pfx_config *c, struct pfx_error *err);
void cfg_write_common(const struct pfx_config *c, const char *model_type, json_object *cfg);
/* rope_scaling (null, default, linear, dynamic, llama3; any other type is
 * refused by name) into c->rope_scaling, and back. */
int cfg_rope_scaling(json_object *cfg, struct pfx_config *c, struct pfx_error *err);
void cfg_write_rope_scaling(const struct pfx_config *c, json_object *cfg);
/* sliding_window (null: none) into c->sliding_window. */
int cfg_sliding_window(json_object *cfg, struct pfx_config *c, struct pfx_error *err);

#endif
