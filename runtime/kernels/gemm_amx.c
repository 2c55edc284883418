/* SPDX-License-Identifier: MIT */
/*
 * The bf16 product on AMX tiles (kernels.h). Blocks of 32 rows of x by 32
 * outputs: four f32 accumulator tiles (16 x 16) fed by two tiles of x
 * (16 rows x 32 inputs) and two of the panel (16 pairs of inputs x 16
 * outputs x 2), so each tile loaded serves two TDPBF16PS. The tile state is
 * the process's only once Linux grants it (ARCH_REQ_XCOMP_PERM): until then
 * the first tile instruction faults, so nothing here runs before
 * kern_amx_granted() said yes.
 */
#include "kernels.h"

#include <immintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static pthread_once_t asked = PTHREAD_ONCE_INIT;
static bool granted;

static void ask(void)
{
	struct kern_cpu_isa isa;
	kern_cpu_isa_probe(&isa);
	/* Refused by kernels before 5.16 (EINVAL) and where tiles are off. */
	granted = isa.amx_bf16 && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

bool kern_amx_granted(void)
{
	pthread_once(&asked, ask);
	return granted;
}

/* Palette 1: every tile used is 16 rows of 64 bytes. */
struct tile_cfg {
	uint8_t palette, start_row, reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};

/* Tile t's 16 x 16 sums into y's rows [0, rows) and columns [0, cols). */
__attribute__((target("avx512f"))) static void put_tile(const float *c, int rows, int cols,
							  float beta, float *y, int ldy)
{
	__mmask16 mk = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
	for (int r = 0; r < rows && r < 16; r++) {
		__m512 v = _mm512_loadu_ps(c + 16 * r);
		float *yr = y + (size_t)r * ldy;
		if (beta != 0.0f)
			v = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(mk, yr), v);
		_mm512_mask_storeu_ps(yr, mk, v);
	}
}

__attribute__((target("amx-tile,amx-bf16,avx512f"))) void
kern_gemm_amx(int m, int n, int k, const uint16_t *a, const uint16_t *panel, float beta, float *y,
	      int ldy)
{
	struct tile_cfg cfg = { .palette = 1 };
	for (int t = 0; t < 8; t++) {
		cfg.colsb[t] = 64;
		cfg.rows[t] = 16;
	}
	_tile_loadconfig(&cfg);
	int kp = (k + 31) & ~31, lda = kern_bf16_lda(k), nb = (n + 15) / 16;
	size_t bs = (size_t)kp * 16;
	_Alignas(64) float c[4][256];
	for (int m0 = 0; m0 < m; m0 += 32) {
		const uint16_t *a0 = a + (size_t)m0 * lda, *a1 = a0 + (size_t)16 * lda;
		for (int b = 0; b < nb; b += 2) {
			const uint16_t *b0 = panel + (size_t)b * bs, *b1 = b0 + bs;
			_tile_zero(0);
			_tile_zero(1);
			_tile_zero(2);
			_tile_zero(3);
			if (b + 1 < nb) {
				for (int p = 0; p < kp; p += 32) {
					_tile_loadd(4, a0 + p, lda * 2);
					_tile_loadd(6, b0 + (size_t)p * 16, 64);
					_tile_loadd(5, a1 + p, lda * 2);
					_tile_loadd(7, b1 + (size_t)p * 16, 64);
					_tile_dpbf16ps(0, 4, 6);
					_tile_dpbf16ps(1, 4, 7);
					_tile_dpbf16ps(2, 5, 6);
					_tile_dpbf16ps(3, 5, 7);
				}
			} else {
				for (int p = 0; p < kp; p += 32) {
					_tile_loadd(4, a0 + p, lda * 2);
					_tile_loadd(6, b0 + (size_t)p * 16, 64);
					_tile_loadd(5, a1 + p, lda * 2);
					_tile_dpbf16ps(0, 4, 6);
					_tile_dpbf16ps(2, 5, 6);
				}
			}
			_tile_stored(0, c[0], 64);
			_tile_stored(1, c[1], 64);
			_tile_stored(2, c[2], 64);
			_tile_stored(3, c[3], 64);
			for (int t = 0; t < 4; t++) {
				int r0 = m0 + 16 * (t / 2), c0 = 16 * (b + t % 2);
				if (r0 < m && c0 < n)
					put_tile(c[t], m - r0, n - c0, beta, y + (size_t)r0 * ldy + c0, ldy);
			}
		}
	}
	_tile_release();
}
