/* SPDX-License-Identifier: MIT */
/* NumPy .npy format 1.0: magic, version, u16 header length, dict, data. */
#include "npy.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int npy_write_f32(const char *path, const float *data, size_t rows, size_t cols,
		  struct pfx_error *err)
{
	char dict[128];
	int n = snprintf(dict, sizeof(dict),
			 "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu), }", rows, cols);
	/* magic(6) + version(2) + len(2) + dict + padding + '\n', a multiple of 64 */
	size_t total = (10 + (size_t)n + 1 + 63) & ~(size_t)63;
	size_t hlen = total - 10;
	char hdr[256];
	memcpy(hdr, "\x93NUMPY\x01\x00", 8);
	hdr[8] = (char)(hlen & 0xff);
	hdr[9] = (char)(hlen >> 8);
	memcpy(hdr + 10, dict, (size_t)n);
	memset(hdr + 10 + n, ' ', hlen - (size_t)n - 1);
	hdr[total - 1] = '\n';
	FILE *fp = fopen(path, "wb");
	if (!fp)
		return pfx_errorf(err, -errno, "%s: cannot create: %s", path, strerror(errno));
	int ok = fwrite(hdr, 1, total, fp) == total &&
		 fwrite(data, sizeof(float), rows * cols, fp) == rows * cols;
	if (fclose(fp) || !ok)
		return pfx_errorf(err, -EIO, "%s: write failed", path);
	return 0;
}
