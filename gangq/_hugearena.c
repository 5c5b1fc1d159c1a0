/* pymalloc arenas on transparent huge pages (see gangq/huge_pages.py for why and when).
 *
 * CPython's small-object allocator (pymalloc) takes its memory from the system in arenas of 1 MiB,
 * each its own mmap of 4 KiB pages. A controller holding 100,000 pending gangs has ~350 MB of
 * small objects, and a scheduling cycle touches them all over: most of the cost of an admission
 * is then TLB misses and the page walks behind them. This allocator hands pymalloc its arenas
 * from 2 MiB-aligned regions advised with MADV_HUGEPAGE, so that the kernel backs them with huge
 * pages where transparent huge pages are enabled ("always" or "madvise").
 *
 * Installed with PyObject_SetArenaAllocator, the documented hook for exactly this. Arenas that
 * existed before installing it stay where they are: freeing one hands it back to the previous
 * allocator. A freed arena of ours keeps its address range for the next arena, and its memory goes
 * back to the kernel (MADV_DONTNEED, as munmap would) with the last arena of its huge page.
 * pymalloc calls the hooks with the GIL held, so the state below needs no lock.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)
#define REGION ((size_t)64 << 20) /* address space reserved at a time (touched pages only count) */

static PyObjectArenaAllocator previous;
static int installed = 0;
static size_t arena_size = 0; /* the size pymalloc asks for (all its arenas have one size) */

/* Regions reserved so far, oldest first, and the unused tail of the newest. */
static void **regions = NULL;
static size_t n_regions = 0, cap_regions = 0;
static char *bump = NULL, *bump_end = NULL;

/* Arenas of ours that were freed, ready for reuse. */
static void **spare = NULL;
static size_t n_spare = 0, cap_spare = 0;

/* Counters for gangq.huge_pages.stats(). */
static size_t n_alloc = 0, n_fallback = 0, n_freed = 0;

static int grow(void ***items, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t cap2 = *cap ? *cap * 2 : 64;
    while (cap2 < need) cap2 *= 2;
    void **grown = PyMem_RawRealloc(*items, cap2 * sizeof(void *));
    if (grown == NULL) return -1;
    *items = grown;
    *cap = cap2;
    return 0;
}

static char *reserve_region(void) {
    size_t length = REGION + HUGE_PAGE; /* room to align the start to a huge page */
    char *raw = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    char *start = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    char *end = start + REGION;
    if (start > raw) munmap(raw, (size_t)(start - raw));
    if (raw + length > end) munmap(end, (size_t)(raw + length - end));
    if (grow(&regions, &cap_regions, n_regions + 1) < 0) {
        munmap(start, REGION);
        return NULL;
    }
    regions[n_regions++] = start;
    (void)madvise(start, REGION, MADV_HUGEPAGE); /* advice only: without THP, plain pages */
    return start;
}

static int ours(void *ptr) {
    char *p = ptr;
    for (size_t i = n_regions; i-- > 0;) { /* newest first: most arenas live there */
        char *start = regions[i];
        if (p >= start && p < start + REGION) return 1;
    }
    return 0;
}

static void *arena_alloc(void *ctx, size_t size) {
    (void)ctx;
    if (arena_size == 0) arena_size = size;
    if (size != arena_size || size > REGION) {
        n_fallback++;
        return previous.alloc(previous.ctx, size);
    }
    if (n_spare > 0) {
        n_alloc++;
        return spare[--n_spare];
    }
    if (bump == NULL || (size_t)(bump_end - bump) < size) {
        char *start = reserve_region();
        if (start == NULL) {
            n_fallback++;
            return previous.alloc(previous.ctx, size);
        }
        bump = start;
        bump_end = start + REGION;
    }
    void *arena = bump;
    bump += size;
    n_alloc++;
    return arena;
}

static int spare_has(void *ptr) {
    for (size_t i = 0; i < n_spare; i++) {
        if (spare[i] == ptr) return 1;
    }
    return 0;
}

static void arena_free(void *ctx, void *ptr, size_t size) {
    (void)ctx;
    if (!ours(ptr)) { /* allocated before install() */
        previous.free(previous.ctx, ptr, size);
        return;
    }
    n_freed++;
    if (grow(&spare, &cap_spare, n_spare + 1) < 0) {
        (void)madvise(ptr, size, MADV_DONTNEED); /* cannot keep it: give the memory back */
        return;
    }
    spare[n_spare++] = ptr;
    /* Give the memory back to the kernel (as munmap would) once every arena of its huge page is
     * free: the whole page goes, where releasing one arena alone would split it into 4 KiB
     * pages, and the arena that reuses it would miss the TLB like any other. */
    char *page = (char *)((uintptr_t)ptr & ~(uintptr_t)(HUGE_PAGE - 1));
    if (size >= HUGE_PAGE || HUGE_PAGE % size != 0) {
        (void)madvise(ptr, size, MADV_DONTNEED);
        return;
    }
    for (char *arena = page; arena < page + HUGE_PAGE; arena += size) {
        if (arena != ptr && !spare_has(arena)) return;
    }
    (void)madvise(page, HUGE_PAGE, MADV_DONTNEED);
}

static PyObject *install(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    if (!installed) {
        PyObject_GetArenaAllocator(&previous);
        PyObjectArenaAllocator ours_allocator = {NULL, arena_alloc, arena_free};
        PyObject_SetArenaAllocator(&ours_allocator);
        installed = 1;
    }
    Py_RETURN_NONE;
}

static PyObject *stats(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return Py_BuildValue("{s:O,s:n,s:n,s:n,s:n,s:n,s:n}", "installed", installed ? Py_True : Py_False,
                         "arena_size", (Py_ssize_t)arena_size, "regions", (Py_ssize_t)n_regions, "region_size",
                         (Py_ssize_t)REGION, "arenas_allocated", (Py_ssize_t)n_alloc, "arenas_freed",
                         (Py_ssize_t)n_freed, "fallbacks", (Py_ssize_t)n_fallback);
}

static PyObject *regions_list(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    PyObject *out = PyList_New((Py_ssize_t)n_regions);
    if (out == NULL) return NULL;
    for (size_t i = 0; i < n_regions; i++) {
        uintptr_t start = (uintptr_t)regions[i];
        PyObject *pair = Py_BuildValue("(KK)", (unsigned long long)start, (unsigned long long)(start + REGION));
        if (pair == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, pair);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"install", install, METH_NOARGS, "Allocate pymalloc's arenas from huge-page-advised regions from now on."},
    {"stats", stats, METH_NOARGS, "Counters of the arena allocator."},
    {"regions", regions_list, METH_NOARGS, "(start, end) of every region reserved for arenas."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gangq._hugearena", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__hugearena(void) { return PyModule_Create(&module); }
