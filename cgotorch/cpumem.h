/* cpumem.h: a counting CPU allocator (cpumem.cc). It stands in front of libtorch's CPU
 * allocator and counts the bytes of every tensor storage allocated through it and not yet
 * freed, and their peak, so that a training step's CPU memory can be measured the same way
 * in gotrain and in Python: cgotorch compiles cpumem.cc into the Go binary, and the Python
 * side of bench/gpu loads the same file compiled into a shared object with ctypes.
 *
 * Self-contained on purpose (no other cgotorch header, no cg_status): the shared object
 * Python loads is this file alone. None of these functions fail. */
#ifndef GOTRAIN_CPUMEM_H
#define GOTRAIN_CPUMEM_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cg_cpumem_install puts the counting allocator in front of the CPU allocator libtorch
 * uses now, for the rest of the process; calling it again does nothing. Storages allocated
 * before it are not counted (nor are their frees). */
void cg_cpumem_install(void);

/* cg_cpumem_installed is 1 after cg_cpumem_install, else 0. */
int cg_cpumem_installed(void);

/* cg_cpumem_stats writes the bytes allocated and not yet freed, the peak of that since
 * install or the last reset, and the number of allocations since install, into out[0..2]. */
void cg_cpumem_stats(int64_t out[3]);

/* cg_cpumem_reset_peak sets the peak to the bytes allocated now. */
void cg_cpumem_reset_peak(void);

#ifdef __cplusplus
}
#endif
#endif
