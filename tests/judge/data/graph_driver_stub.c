/* A stand-in for the six functions of libcuda.so.1 that judge/call_order.py calls, over one
 * graph held here, so that the CPU tests check what crosses ctypes (handles as pointers,
 * arrays, counts, NULLs, edge data) against the driver's documented contracts (cuda.h,
 * CUDA 13.0): a count query with NULL arrays, CUDA_ERROR_LOSSY_QUERY for edge data asked
 * without a place to put it, a NULL edge data meaning full edges, one edge a pair.
 * stub_* are the tests' own: a capture's launches, and a reset. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct { unsigned char from_port, to_port, type, reserved[5]; } EdgeData;
enum { MAX_NODES = 8192, MAX_EDGES = 32768, INVALID_VALUE = 1, LOSSY_QUERY = 223 };

static int graph;  /* &graph is the graph's handle */
static uintptr_t nodes[MAX_NODES];
static size_t node_count;
static uintptr_t sources[MAX_EDGES], targets[MAX_EDGES];
static EdgeData data[MAX_EDGES];
static size_t edge_count;
int stub_capturing = 1;

static int known(uintptr_t node) {
    for (size_t i = 0; i < node_count; i++)
        if (nodes[i] == node) return 1;
    return 0;
}

static int edge(uintptr_t from, uintptr_t to, EdgeData d) {
    if (!known(from) || !known(to) || edge_count == MAX_EDGES) return INVALID_VALUE;
    for (size_t i = 0; i < edge_count; i++)
        if (sources[i] == from && targets[i] == to) return INVALID_VALUE; /* one a pair */
    sources[edge_count] = from, targets[edge_count] = to, data[edge_count] = d;
    edge_count++;
    return 0;
}

void stub_reset(void) { node_count = edge_count = 0; stub_capturing = 1; }

uintptr_t stub_node(void) { /* handles far from small integers, as pointers are */
    uintptr_t node = (uintptr_t)0x7f3a00000000ull + 64 * (node_count + 1);
    nodes[node_count++] = node;
    return node;
}

int stub_edge(uintptr_t from, uintptr_t to, uint64_t raw) {
    EdgeData d;
    memcpy(&d, &raw, sizeof d);
    return edge(from, to, d);
}

int cuGetErrorName(int error, const char **name) {
    *name = error == LOSSY_QUERY ? "CUDA_ERROR_LOSSY_QUERY" : "CUDA_ERROR_INVALID_VALUE";
    return 0;
}

/* _v3 (CUDA 12.3) adds the dependencies' edge data; built with -DONLY_V3 the stand-in has
 * no _v2, as a driver that dropped it would not */
int cuStreamGetCaptureInfo_v3(void *stream, int *status, unsigned long long *id, void **out,
                              const void ***dependencies, const EdgeData **edge_data,
                              size_t *count) {
    if (stream == NULL || status == NULL) return INVALID_VALUE;
    *status = stub_capturing;
    if (id) *id = 1;
    if (out) *out = &graph;
    if (dependencies) *dependencies = NULL;
    if (edge_data) *edge_data = NULL;
    if (count) *count = 0;
    return 0;
}

#ifndef ONLY_V3
int cuStreamGetCaptureInfo_v2(void *stream, int *status, unsigned long long *id, void **out,
                              const void ***dependencies, size_t *count) {
    return cuStreamGetCaptureInfo_v3(stream, status, id, out, dependencies, NULL, count);
}
#endif

int cuGraphGetNodes(void *g, uintptr_t *out, size_t *count) {
    if (g != &graph || count == NULL) return INVALID_VALUE;
    if (out == NULL) {
        *count = node_count;
        return 0;
    }
    size_t n = *count < node_count ? *count : node_count;
    memcpy(out, nodes, n * sizeof *out);
    *count = n;
    return 0;
}

int cuGraphGetEdges_v2(void *g, uintptr_t *from, uintptr_t *to, EdgeData *d, size_t *count) {
    if (g != &graph || count == NULL || (from == NULL) != (to == NULL)) return INVALID_VALUE;
    if (from == NULL) {
        *count = edge_count;
        return 0;
    }
    size_t n = *count < edge_count ? *count : edge_count;
    for (size_t i = 0; i < n; i++) {
        from[i] = sources[i], to[i] = targets[i];
        if (d) d[i] = data[i];
        else if (memcmp(&data[i], &(EdgeData){0}, sizeof data[i])) return LOSSY_QUERY;
    }
    *count = n;
    return 0;
}

int cuGraphAddDependencies_v2(void *g, const uintptr_t *from, const uintptr_t *to,
                              const EdgeData *d, size_t count) {
    if (g != &graph) return INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        int result = edge(from[i], to[i], d ? d[i] : (EdgeData){0});
        if (result) return result;
    }
    return 0;
}

int cuGraphAddEmptyNode(uintptr_t *out, void *g, const uintptr_t *after, size_t count) {
    if (g != &graph || out == NULL || node_count == MAX_NODES) return INVALID_VALUE;
    for (size_t i = 0; i < count; i++)
        if (!known(after[i])) return INVALID_VALUE;
    *out = stub_node();
    for (size_t i = 0; i < count; i++) edge(after[i], *out, (EdgeData){0});
    return 0;
}
