// SPDX-License-Identifier: MIT
// tests/headers.c, compiled as C++.
#include "headers.c"
