/* Large buffers through mmap, so that freeing a session gives its memory back to the OS. */
#include "core/mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

/* Why not calloc: glibc raises its mmap threshold to the size of the largest mapped block it has
 * freed, so after the first session the next session's KV cache comes from the heap, and the free
 * heap top it leaves (up to twice that size) stays resident: a soak saw +2.9 MB after warm-up on
 * stories260K. Sanitizer builds keep calloc: their allocators track every byte of it. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MK_MEM_USE_CALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define MK_MEM_USE_CALLOC 1
#endif
#endif

/* The mapping's length sits in front of the buffer; 64 keeps the buffer cache-line aligned. */
#define MK_MEM_HEADER 64u

void *mk_mem_alloc_big(size_t bytes) {
    if (!bytes) bytes = 1;
#ifdef MK_MEM_USE_CALLOC
    return calloc(1, bytes);
#else
    if (bytes > SIZE_MAX - MK_MEM_HEADER) return NULL;
    size_t len = bytes + MK_MEM_HEADER;
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    *(size_t *)m = len;
    return (char *)m + MK_MEM_HEADER;
#endif
}

void mk_mem_free_big(void *p) {
    if (!p) return;
#ifdef MK_MEM_USE_CALLOC
    free(p);
#else
    char *m = (char *)p - MK_MEM_HEADER;
    munmap(m, *(size_t *)m);
#endif
}
