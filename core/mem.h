/* Large zeroed buffers (KV caches, arenas) taken from and given back to the OS directly. */
#ifndef MK_CORE_MEM_H
#define MK_CORE_MEM_H

#include <stddef.h>

/* Zeroed, 64-byte aligned, at least one byte; NULL when out of memory. Pages are committed as
 * they are first touched, so an unused tail of a KV cache costs nothing. */
void *mk_mem_alloc_big(size_t bytes);

/* Frees a buffer from mk_mem_alloc_big (NULL is fine); its pages leave the process at once. */
void mk_mem_free_big(void *p);

#endif
