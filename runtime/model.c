/* SPDX-License-Identifier: MIT */
/* Loading a checkpoint into a pfx_model: config, weights, fingerprint. */
#include <errno.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "forward.h"
#include "load/hugepages.h"
#include "model_impl.h"

static const struct arch *const arches[] = { &arch_llama, &arch_qwen2, &arch_mistral, &arch_phi3,
					     &arch_gemma, &arch_neox };

/* Architectures people ask for that differ in ways not implemented. */
static const struct {
	const char *name, *why;
} refused[] = {
	{ "Gemma2ForCausalLM",
	  "its attention and final logit soft-capping and alternating local/global attention layers are not implemented" },
	{ "Qwen3ForCausalLM", "its per-head RMSNorm of queries and keys is not implemented" },
	{ "Qwen2MoeForCausalLM", "mixture-of-experts layers are not implemented" },
	{ "MixtralForCausalLM", "mixture-of-experts layers are not implemented" },
};

/* ==== Binding checkpoint tensors ==== */

struct binder {
	struct pfx_model *m;          /* NULL: only describe (arch_describe) */
	struct tensor_desc *desc;
	size_t ndesc;
	struct pfx_error *err;
	int status;
	const struct st_tensor **bound; /* (nbound) for the fingerprint */
	size_t nbound, cap;
};

static enum kern_wtype wtype_of(enum st_dtype d)
{
	return d == ST_F16 ? KERN_W_F16 : d == ST_BF16 ? KERN_W_BF16 : KERN_W_F32;
}

/* A buffer the model owns until pfx_model_free; NULL when out of memory. */
static void *own(struct pfx_model *m, size_t bytes)
{
	struct owned *owned = realloc(m->owned, (m->nowned + 1) * sizeof(*owned));
	if (!owned)
		return NULL;
	m->owned = owned;
	void *p = huge_alloc(bytes); /* streamed once a token, as the mapping is */
	if (p)
		owned[m->nowned++] = (struct owned){ p, bytes };
	return p;
}

/* t as f32: zero-copy from the mapping where it is f32 and aligned. */
static const float *to_f32(struct binder *b, const struct st_tensor *t)
{
	size_t n = (size_t)st_numel(t);
	if (t->dtype == ST_F32 && ((uintptr_t)t->data & 3) == 0) {
		b->m->weight_bytes += t->nbytes;
		b->m->weights_mapped = true;
		return t->data;
	}
	float *dst = own(b->m, n * sizeof(float));
	if (dst) {
		kern_wmat_to_f32((struct kern_wmat){ t->data, wtype_of(t->dtype) }, n, dst);
		b->m->weight_bytes += n * sizeof(float);
	}
	return dst;
}

/* Adds dtype name d to the "+"-separated list in buf (once). */
static void note_dtype(char *buf, size_t cap, const char *d)
{
	if (strstr(buf, d))
		return;
	size_t len = strlen(buf);
	snprintf(buf + len, cap - len, "%s%s", len ? "+" : "", d);
}

static const float *describe(struct binder *b, const char *name, int ndim, int64_t d0,
			     int64_t d1)
{
	static const float placeholder;
	struct tensor_desc *d = realloc(b->desc, (b->ndesc + 1) * sizeof(*d));
	if (!d) {
		b->status = -ENOMEM;
		return NULL;
	}
	b->desc = d;
	d += b->ndesc++;
	snprintf(d->name, sizeof(d->name), "%s", name);
	d->ndim = ndim;
	d->shape[0] = d0;
	d->shape[1] = ndim > 1 ? d1 : 0;
	return &placeholder;
}

int arch_describe(const struct arch *a, const struct pfx_config *c, struct tensor_desc **out,
		  size_t *n)
{
	struct binder b = { 0 };
	struct weights w = { 0 };
	w.layers = calloc((size_t)c->n_layers, sizeof(*w.layers));
	int rc = w.layers ? a->bind(&b, c, &w) : -ENOMEM;
	free(w.layers);
	if (rc) {
		free(b.desc);
		return rc;
	}
	*out = b.desc;
	*n = b.ndesc;
	return 0;
}

/* The checked tensor name of the given shape, recorded for the
 * fingerprint; NULL if absent (an error unless optional) or wrong. */
static const struct st_tensor *find(struct binder *b, const char *name, int ndim, int64_t d0,
				    int64_t d1, int optional)
{
	const char *file = NULL;
	const struct st_tensor *t = ckpt_find(b->m->ckpt, name, &file);
	if (!t) {
		if (!optional)
			b->status = pfx_errorf(b->err, -EINVAL, "%s: missing tensor '%s'",
					       ckpt_source(b->m->ckpt), name);
		return NULL;
	}
	int64_t want[2] = { d0, d1 };
	int shape_ok = t->ndim == ndim;
	for (int i = 0; shape_ok && i < ndim; i++)
		shape_ok = t->shape[i] == want[i];
	if (!shape_ok) {
		char got[96] = "", exp[64];
		for (int i = 0; i < t->ndim; i++) {
			size_t l = strlen(got);
			snprintf(got + l, sizeof(got) - l, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
		}
		if (ndim == 1)
			snprintf(exp, sizeof(exp), "%lld", (long long)d0);
		else
			snprintf(exp, sizeof(exp), "%lld, %lld", (long long)d0, (long long)d1);
		b->status = pfx_errorf(b->err, -EINVAL, "%s: tensor '%s' has shape [%s], expected [%s]",
				       file, name, got, exp);
		return NULL;
	}
	if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) {
		b->status = pfx_errorf(b->err, -EINVAL,
				       "%s: tensor '%s' has dtype %s; weights must be F32, F16 or BF16",
				       file, name, t->dtype_name);
		return NULL;
	}
	if (b->nbound == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 64;
		const struct st_tensor **nb = realloc(b->bound, cap * sizeof(*nb));
		if (!nb) {
			b->status = pfx_errorf(b->err, -ENOMEM, "out of memory");
			return NULL;
		}
		b->bound = nb;
		b->cap = cap;
	}
	b->bound[b->nbound++] = t;
	b->m->params += st_numel(t);
	note_dtype(b->m->weight_dtype, sizeof(b->m->weight_dtype), t->dtype_name);
	return t;
}

static const float *bind_any(struct binder *b, const char *name, int ndim, int64_t d0,
			     int64_t d1, int optional)
{
	if (b->status)
		return NULL;
	if (!b->m)
		return describe(b, name, ndim, d0, d1);
	const struct st_tensor *t = find(b, name, ndim, d0, d1, optional);
	if (!t)
		return NULL;
	const float *p = to_f32(b, t);
	if (!p)
		b->status = pfx_errorf(b->err, -ENOMEM, "out of memory converting '%s'", name);
	return p;
}

const float *bind_tensor(struct binder *b, const char *name, int ndim, int64_t d0, int64_t d1)
{
	return bind_any(b, name, ndim, d0, d1, 0);
}

const float *bind_tensor_plus_one(struct binder *b, const char *name, int64_t d0)
{
	if (b->status)
		return NULL;
	if (!b->m)
		return describe(b, name, 1, d0, 0);
	const struct st_tensor *t = find(b, name, 1, d0, 0, 0);
	if (!t)
		return NULL;
	float *p = own(b->m, (size_t)d0 * sizeof(float));
	if (!p) {
		b->status = pfx_errorf(b->err, -ENOMEM, "out of memory converting '%s'", name);
		return NULL;
	}
	kern_wmat_to_f32((struct kern_wmat){ t->data, wtype_of(t->dtype) }, (size_t)d0, p);
	for (int64_t i = 0; i < d0; i++)
		p[i] = 1.0f + p[i];
	b->m->weight_bytes += (size_t)d0 * sizeof(float);
	return p;
}

const float *bind_optional(struct binder *b, const char *name, int ndim, int64_t d0, int64_t d1)
{
	return bind_any(b, name, ndim, d0, d1, 1);
}

struct kern_wmat bind_matrix(struct binder *b, const char *name, int64_t d0, int64_t d1)
{
	if (b->status)
		return (struct kern_wmat){ 0 };
	if (!b->m)
		return (struct kern_wmat){ describe(b, name, 2, d0, d1), KERN_W_F32 };
	const struct st_tensor *t = find(b, name, 2, d0, d1, 0);
	if (!t)
		return (struct kern_wmat){ 0 };
	struct pfx_model *m = b->m;
	if (t->dtype != ST_F32 && m->weights == PFX_WEIGHTS_NATIVE) {
		struct kern_wmat w = { t->data, wtype_of(t->dtype) };
		if ((uintptr_t)t->data & 1) { /* a hand-made file: realign, still 16-bit */
			void *copy = own(m, t->nbytes);
			if (!copy) {
				b->status = pfx_errorf(b->err, -ENOMEM, "out of memory copying '%s'", name);
				return (struct kern_wmat){ 0 };
			}
			w.p = memcpy(copy, t->data, t->nbytes);
		} else {
			m->weights_mapped = true;
		}
		m->weight_bytes += t->nbytes;
		m->held16 = true;
		m->held_bf16 |= w.type == KERN_W_BF16;
		note_dtype(m->weight_held, sizeof(m->weight_held), t->dtype_name);
		return w;
	}
	const float *p = to_f32(b, t);
	if (!p) {
		b->status = pfx_errorf(b->err, -ENOMEM, "out of memory converting '%s'", name);
		return (struct kern_wmat){ 0 };
	}
	note_dtype(m->weight_held, sizeof(m->weight_held), "F32");
	return (struct kern_wmat){ p, KERN_W_F32 };
}

int binder_status(const struct binder *b)
{
	return b->status;
}

/* ==== Tensors nothing uses ==== */

bool arch_layer_buffer(const char *name, const char *prefix, const char *const *suffixes,
		       size_t n)
{
	size_t len = strlen(prefix);
	if (strncmp(name, prefix, len))
		return false;
	const char *p = name + len;
	if (*p < '0' || *p > '9')
		return false;
	while (*p >= '0' && *p <= '9')
		p++;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(p, suffixes[i]))
			return true;
	return false;
}

static int by_address(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
	return (x > y) - (x < y);
}

/*
 * A tensor that the config does not use means the two disagree (e.g.
 * num_hidden_layers 11 on a 12-layer checkpoint) and the model would run
 * without it, silently wrong: refuse, naming the tensors, as transformers
 * warns "Some weights ... were not used".
 */
static int check_unused(const struct pfx_model *m, const struct binder *b, struct pfx_error *err)
{
	const struct st_tensor **used = malloc((b->nbound + 1) * sizeof(*used));
	if (!used)
		return pfx_errorf(err, -ENOMEM, "out of memory");
	memcpy(used, b->bound, b->nbound * sizeof(*used));
	qsort(used, b->nbound, sizeof(*used), by_address);
	char names[320] = "";
	size_t unused = 0, listed = 0, len = 0;
	for (size_t f = 0; f < ckpt_nfiles(m->ckpt); f++) {
		const struct st_file *file = ckpt_file(m->ckpt, f);
		for (size_t i = 0; i < st_count(file); i++) {
			const struct st_tensor *t = st_at(file, i);
			if (bsearch(&t, used, b->nbound, sizeof(*used), by_address) ||
			    m->arch->may_carry(&m->cfg, t->name))
				continue;
			if (unused++ < 8 && len + strlen(t->name) + 8 < sizeof(names)) {
				len += (size_t)snprintf(names + len, sizeof(names) - len, "%s'%s'",
						      len ? ", " : "", t->name);
				listed++;
			}
		}
	}
	free(used);
	if (!unused)
		return 0;
	char more[48] = "";
	if (listed < unused)
		snprintf(more, sizeof(more), " and %zu more", unused - listed);
	return pfx_errorf(err, -EINVAL,
			  "%s: %zu tensor%s that config.json (%s, %d layer%s) does not use: %s%s; "
			  "the config does not describe these weights",
			  ckpt_source(m->ckpt), unused, unused == 1 ? "" : "s", m->cfg.arch,
			  m->cfg.n_layers, m->cfg.n_layers == 1 ? "" : "s", names, more);
}

/* ==== Fingerprint ==== */

struct hash_job {
	const struct st_tensor **t;
	uint8_t (*digest)[PFX_FINGERPRINT_BYTES];
};

static void hash_tensor(void *ctx, int i, int thread)
{
	struct hash_job *j = ctx;
	crypto_generichash(j->digest[i], PFX_FINGERPRINT_BYTES, j->t[i]->data, j->t[i]->nbytes,
			   NULL, 0);
}

/* Per-tensor digests (in parallel), then one hash over the config text and
 * the ordered (name, dtype, shape, digest) records. The text's "kv_dtype=f32"
 * predates 16-bit KV and stays so that fingerprints stay what they were:
 * the KV dtype is in prefixd's layout (cache.c), not in the model's name. */
static int fingerprint(struct pfx_model *m, struct binder *b, struct pfx_error *err)
{
	const struct pfx_config *c = &m->cfg;
	uint8_t (*dig)[PFX_FINGERPRINT_BYTES] = calloc(b->nbound + 1, sizeof(*dig));
	if (!dig)
		return pfx_errorf(err, -ENOMEM, "out of memory");
	struct hash_job job = { b->bound, dig };
	pool_run(m->pool, hash_tensor, &job, (int)b->nbound);
	crypto_generichash_state st;
	crypto_generichash_init(&st, NULL, 0, PFX_FINGERPRINT_BYTES);
	char text[512];
	int n = snprintf(text, sizeof(text),
			 "prefixd-model-fingerprint-v1\narch=%s\nhidden=%d\nlayers=%d\nheads=%d\n"
			 "kv_heads=%d\nhead_dim=%d\nintermediate=%d\nvocab=%d\nrotary_dim=%d\n"
			 "rope_base=%.9g\nnorm_eps=%.9g\nnorm=%d\nact=%d\nparallel=%d\ntied=%d\n"
			 "attn_bias=%d\nmlp_bias=%d\nkv_dtype=f32\n",
			 c->arch, c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
			 c->intermediate, c->vocab, c->rotary_dim, c->rope_base, c->norm_eps, c->norm,
			 c->act, c->parallel_residual, c->tied_embeddings, c->attn_bias, c->mlp_bias);
	crypto_generichash_update(&st, (const uint8_t *)text, (size_t)n);
	/* What the newer architectures add, only where it is not the default,
	 * so that the fingerprints of the others stay what they were. */
	const struct pfx_rope_scaling *rs = &c->rope_scaling;
	n = 0;
	if (rs->type != PFX_ROPE_DEFAULT)
		n += snprintf(text + n, sizeof(text) - (size_t)n,
			      "rope_scaling=%d factor=%.9g low=%.9g high=%.9g original=%d\n", rs->type,
			      rs->factor, rs->low_freq_factor, rs->high_freq_factor,
			      rs->original_max_positions);
	if (c->sliding_window)
		n += snprintf(text + n, sizeof(text) - (size_t)n, "sliding_window=%d\n", c->sliding_window);
	if (c->qkv_bias_only || c->fused_qkv || c->norm_plus_one || c->embed_scale)
		n += snprintf(text + n, sizeof(text) - (size_t)n,
			      "qkv_bias_only=%d fused=%d norm_plus_one=%d embed_scale=%.9g\n",
			      c->qkv_bias_only, c->fused_qkv, c->norm_plus_one, c->embed_scale);
	crypto_generichash_update(&st, (const uint8_t *)text, (size_t)n);
	for (size_t i = 0; i < b->nbound; i++) {
		const struct st_tensor *t = b->bound[i];
		n = snprintf(text, sizeof(text), "%s:%s:%d", t->name, t->dtype_name, t->ndim);
		crypto_generichash_update(&st, (const uint8_t *)text, (size_t)n + 1);
		crypto_generichash_update(&st, (const uint8_t *)t->shape, sizeof(t->shape[0]) * t->ndim);
		crypto_generichash_update(&st, dig[i], PFX_FINGERPRINT_BYTES);
	}
	crypto_generichash_final(&st, m->fingerprint, PFX_FINGERPRINT_BYTES);
	free(dig);
	return 0;
}

/* ==== Loading ==== */

const struct arch *arch_find(const char *name)
{
	for (size_t i = 0; i < sizeof(arches) / sizeof(arches[0]); i++)
		if (!strcmp(arches[i]->name, name))
			return arches[i];
	return NULL;
}

static int pick_arch(json_object *cfg, const struct arch **out, struct pfx_error *err)
{
	json_object *a;
	if (!json_object_object_get_ex(cfg, "architectures", &a) ||
	    !json_object_is_type(a, json_type_array) || json_object_array_length(a) < 1 ||
	    !json_object_is_type(json_object_array_get_idx(a, 0), json_type_string))
		return pfx_errorf(err, -EINVAL, "config.json: no \"architectures\" list");
	const char *name = json_object_get_string(json_object_array_get_idx(a, 0));
	if ((*out = arch_find(name)))
		return 0;
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		if (!strcmp(refused[i].name, name))
			return pfx_errorf(err, -ENOTSUP,
					  "config.json: architecture '%s' is not supported: %s", name,
					  refused[i].why);
	char list[256];
	return pfx_errorf(err, -ENOTSUP, "config.json: architecture '%s' is not supported (%s)", name,
			  pfx_architectures(list, sizeof(list)));
}

const char *pfx_architectures(char *buf, size_t cap)
{
	size_t len = 0;
	if (!cap)
		return buf;
	buf[0] = 0;
	for (size_t i = 0; i < sizeof(arches) / sizeof(arches[0]) && len < cap; i++)
		len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", arches[i]->name);
	return buf;
}

static int check_config(const struct pfx_config *c, struct pfx_error *err)
{
#define NEED(cond, ...) \
	if (!(cond))    \
		return pfx_errorf(err, -EINVAL, "config.json: " __VA_ARGS__)
	NEED(c->hidden > 0 && c->hidden <= 65536, "hidden_size %d out of range", c->hidden);
	NEED(c->n_layers > 0 && c->n_layers <= 1024, "num_hidden_layers %d out of range", c->n_layers);
	NEED(c->n_heads > 0 && c->n_kv_heads > 0 && c->n_heads % c->n_kv_heads == 0,
	     "%d attention heads do not divide into %d key/value heads", c->n_heads, c->n_kv_heads);
	NEED(c->n_heads / c->n_kv_heads <= 64, "more than 64 query heads per key/value head");
	NEED(c->head_dim > 0 && c->head_dim % 2 == 0 && c->head_dim <= 1024,
	     "head dimension %d must be even and at most 1024", c->head_dim);
	NEED(c->rotary_dim >= 0 && c->rotary_dim % 2 == 0 && c->rotary_dim <= c->head_dim,
	     "rotary dimension %d must be even and at most the head dimension", c->rotary_dim);
	NEED(c->intermediate > 0 && c->intermediate <= 1 << 20, "intermediate_size %d out of range",
	     c->intermediate);
	NEED(c->vocab > 0 && c->vocab <= 1 << 24, "vocab_size %d out of range", c->vocab);
	NEED(c->max_positions > 0, "max_position_embeddings must be positive");
	NEED(c->norm_eps > 0, "the norm epsilon must be positive");
	NEED(c->rope_base > 0, "the rotary base must be positive");
	NEED(c->sliding_window >= 0, "sliding_window %d must not be negative", c->sliding_window);
#undef NEED
	return 0;
}

int pfx_model_load(const char *dir, const struct pfx_model_opts *opts, struct pfx_model **out,
		   struct pfx_error *err)
{
	int rc;
	kern_blas_init();
	if (sodium_init() < 0)
		return pfx_errorf(err, -EIO, "libsodium failed to initialise");
	int threads = opts && opts->threads > 0 ? opts->threads : pool_cpu_count();
	int bt = opts && opts->block_tokens > 0 ? opts->block_tokens : PFX_DEFAULT_BLOCK_TOKENS;
	if (opts && opts->weights != PFX_WEIGHTS_NATIVE && opts->weights != PFX_WEIGHTS_F32)
		return pfx_errorf(err, -EINVAL, "weights option %d is neither native nor f32",
				  (int)opts->weights);
	enum pfx_kv_dtype kvt = opts ? opts->kv_dtype : PFX_KV_F32;
	if (kvt != PFX_KV_F32 && kvt != PFX_KV_F16 && kvt != PFX_KV_BF16)
		return pfx_errorf(err, -EINVAL, "KV dtype %d is not f32, f16 or bf16", (int)kvt);
	enum pfx_matmul mm = opts ? opts->matmul : PFX_MATMUL_F32;
	if (mm != PFX_MATMUL_F32 && mm != PFX_MATMUL_BF16)
		return pfx_errorf(err, -EINVAL, "matmul option %d is neither f32 nor bf16", (int)mm);
	if (bt & (bt - 1) || bt > PFX_MAX_BLOCK_TOKENS)
		return pfx_errorf(err, -EINVAL, "block size %d is not a power of two up to %d", bt,
				  PFX_MAX_BLOCK_TOKENS);
	struct pfx_model *m = calloc(1, sizeof(*m));
	if (!m)
		return pfx_errorf(err, -ENOMEM, "out of memory");
	pthread_mutex_init(&m->fwd_lock, NULL);
	pthread_mutex_init(&m->spare.lock, NULL);
	m->block_tokens = bt;
	m->weights = opts ? opts->weights : PFX_WEIGHTS_NATIVE;
	/* pfx_kv_dtype and kern_wtype name the same types in the same order. */
	m->kv_type = (enum kern_wtype)kvt;
	struct binder b = { .m = m, .err = err };
	if ((rc = pool_new(threads, &m->pool))) {
		pfx_errorf(err, rc, "cannot start %d worker threads", threads);
		goto fail;
	}
	if ((rc = ckpt_open(dir, &m->ckpt, err)))
		goto fail;
	if ((rc = pick_arch(ckpt_config(m->ckpt), &m->arch, err)))
		goto fail;
	m->cfg.arch = m->arch->name;
	if ((rc = m->arch->parse_config(ckpt_config(m->ckpt), &m->cfg, err)) ||
	    (rc = check_config(&m->cfg, err)))
		goto fail;
	m->w.layers = calloc((size_t)m->cfg.n_layers, sizeof(*m->w.layers));
	m->inv_freq = calloc((size_t)m->cfg.rotary_dim / 2 + 1, sizeof(float));
	if (!m->w.layers || !m->inv_freq) {
		rc = pfx_errorf(err, -ENOMEM, "out of memory");
		goto fail;
	}
	rope_inv_freq(&m->cfg, m->inv_freq);
	/* Before binding and hashing touch it: see huge_read_in. */
	for (size_t i = 0; i < ckpt_nfiles(m->ckpt); i++)
		huge_read_in(st_map(ckpt_file(m->ckpt, i)), st_size(ckpt_file(m->ckpt, i)));
	if ((rc = m->arch->bind(&b, &m->cfg, &m->w)) || (rc = check_unused(m, &b, err)))
		goto fail;
	if ((rc = fingerprint(m, &b, err)))
		goto fail;
	m->matmul_bf16 = mm == PFX_MATMUL_BF16;
	if (m->matmul_bf16 && !m->held_bf16) {
		rc = pfx_errorf(err, -EINVAL,
				"the bf16 matmul multiplies bf16 weights as stored, and this model "
				"holds none (weights %s, held as %s): use a bf16 checkpoint with "
				"native weights",
				m->weight_dtype, m->weight_held);
		goto fail;
	}
	if ((rc = kv_spare_fill(m))) {
		pfx_errorf(err, rc, "out of memory for %d KV blocks of %zu bytes", KV_SPARE_MAX,
			   kv_block_bytes(m));
		goto fail;
	}
	if ((rc = fwd_scratch_prepare(m))) {
		pfx_errorf(err, rc, "out of memory for the forward pass's scratch");
		goto fail;
	}
	free(b.bound);
	*out = m;
	return 0;
fail:
	free(b.bound);
	pfx_model_free(m);
	return rc;
}

void pfx_model_free(struct pfx_model *m)
{
	if (!m)
		return;
	fwd_scratch_free(m->scratch);
	pool_free(m->pool);
	for (size_t i = 0; i < m->nowned; i++)
		free(m->owned[i].p);
	free(m->owned);
	free(m->w.layers);
	free(m->inv_freq);
	ckpt_close(m->ckpt);
	pthread_mutex_destroy(&m->fwd_lock);
	kv_spare_free(m);
	free(m);
}

const struct pfx_config *pfx_model_config(const struct pfx_model *m) { return &m->cfg; }
const uint8_t *pfx_model_fingerprint(const struct pfx_model *m) { return m->fingerprint; }
int64_t pfx_model_params(const struct pfx_model *m) { return m->params; }
int pfx_model_threads(const struct pfx_model *m) { return pool_threads(m->pool); }
int pfx_model_block_tokens(const struct pfx_model *m) { return m->block_tokens; }
const char *pfx_model_weight_dtype(const struct pfx_model *m) { return m->weight_dtype; }
const char *pfx_model_weight_held(const struct pfx_model *m) { return m->weight_held; }
size_t pfx_model_weight_bytes(const struct pfx_model *m) { return m->weight_bytes; }

size_t pfx_model_weight_huge_bytes(const struct pfx_model *m)
{
	size_t nfiles = m->weights_mapped ? ckpt_nfiles(m->ckpt) : 0, n = 0;
	struct huge_range *r = malloc((nfiles + m->nowned + 1) * sizeof(*r));
	if (!r)
		return 0;
	for (size_t i = 0; i < nfiles; i++) {
		const struct st_file *f = ckpt_file(m->ckpt, i);
		r[n++] = (struct huge_range){ (uintptr_t)st_map(f), (uintptr_t)st_map(f) + st_size(f) };
	}
	for (size_t i = 0; i < m->nowned; i++)
		if (m->owned[i].bytes >= HUGE_PAGE_BYTES)
			r[n++] = (struct huge_range){ (uintptr_t)m->owned[i].p,
						      (uintptr_t)m->owned[i].p + m->owned[i].bytes };
	size_t bytes = huge_bytes_mapped(r, n);
	free(r);
	/* The mapping also holds the header and any tensor left unused. */
	return bytes < m->weight_bytes ? bytes : m->weight_bytes;
}

int pfx_checkpoint_recache(const char *dir, struct pfx_error *err)
{
	struct ckpt *c;
	int rc = ckpt_open(dir, &c, err);
	if (rc)
		return rc;
	size_t n = ckpt_nfiles(c);
	char **paths = calloc(n, sizeof(*paths));
	for (size_t i = 0; paths && i < n; i++)
		paths[i] = strdup(st_path(ckpt_file(c, i)));
	/* Unmapped first: pages this process maps would stay cached. */
	ckpt_close(c);
	for (size_t i = 0; !rc && i < n; i++)
		rc = paths && paths[i] ? huge_drop_cached(paths[i], err)
				       : pfx_errorf(err, -ENOMEM, "out of memory");
	for (size_t i = 0; paths && i < n; i++)
		free(paths[i]);
	free(paths);
	return rc;
}

void pfx_model_fingerprint_hex(const struct pfx_model *m, char out[2 * PFX_FINGERPRINT_BYTES + 1])
{
	sodium_bin2hex(out, 2 * PFX_FINGERPRINT_BYTES + 1, m->fingerprint, PFX_FINGERPRINT_BYTES);
}

size_t pfx_kv_bytes_per_token(const struct pfx_config *c, enum pfx_kv_dtype t)
{
	return 2 * (size_t)c->n_layers * c->n_kv_heads * c->head_dim * (t == PFX_KV_F32 ? 4 : 2);
}

enum pfx_kv_dtype pfx_model_kv_dtype(const struct pfx_model *m)
{
	return (enum pfx_kv_dtype)m->kv_type;
}

static const char *const kv_names[] = { "f32", "f16", "bf16" };

const char *pfx_kv_dtype_name(enum pfx_kv_dtype t)
{
	return (unsigned)t < 3 ? kv_names[t] : "?";
}

int pfx_kv_dtype_parse(const char *name, enum pfx_kv_dtype *out)
{
	for (int i = 0; i < 3; i++)
		if (!strcmp(name, kv_names[i])) {
			*out = (enum pfx_kv_dtype)i;
			return 0;
		}
	return -EINVAL;
}

const char *pfx_model_matmul(const struct pfx_model *m)
{
	return m->matmul_bf16 ? kern_bf16_path_name() : "f32";
}
