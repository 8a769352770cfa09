// gzip through the system's zlib, loaded at run time: every Linux distribution and every Apple platform
// ships it, but a build must not require its headers or a link against it, and a machine without it
// uploads uncompressed. zlib's z_stream layout and deflateInit2_ are part of its stable 1.x ABI.
#include "CTelemetrySignals.h"

#include <dlfcn.h>
#include <pthread.h>

typedef struct {
    const uint8_t *next_in;
    unsigned int avail_in;
    unsigned long total_in;
    uint8_t *next_out;
    unsigned int avail_out;
    unsigned long total_out;
    const char *msg;
    void *state;
    void *zalloc, *zfree, *opaque;
    int data_type;
    unsigned long adler;
    unsigned long reserved;
} z_stream_abi;

enum { Z_OK = 0, Z_STREAM_END = 1, Z_FINISH = 4, Z_DEFLATED = 8, Z_DEFAULT_COMPRESSION = -1, Z_DEFAULT_STRATEGY = 0 };
// 15 bits of window, + 16: a gzip header and trailer instead of zlib's.
enum { GZIP_WINDOW_BITS = 15 + 16, MEMORY_LEVEL = 8 };

static int (*deflate_init2)(z_stream_abi *, int, int, int, int, int, const char *, int);
static int (*deflate_run)(z_stream_abi *, int);
static int (*deflate_end)(z_stream_abi *);
static pthread_once_t loaded = PTHREAD_ONCE_INIT;

static void load_zlib(void) {
#if defined(__APPLE__)
    void *library = dlopen("/usr/lib/libz.1.dylib", RTLD_NOW | RTLD_LOCAL);
#else
    void *library = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
#endif
    if (!library) return;
    void *init = dlsym(library, "deflateInit2_"), *run = dlsym(library, "deflate"), *end = dlsym(library, "deflateEnd");
    if (!init || !run || !end) return;
    deflate_run = (int (*)(z_stream_abi *, int))run;
    deflate_end = (int (*)(z_stream_abi *))end;
    deflate_init2 = (int (*)(z_stream_abi *, int, int, int, int, int, const char *, int))init;
}

int tb_gzip_available(void) {
    pthread_once(&loaded, load_zlib);
    return deflate_init2 != NULL;
}

size_t tb_gzip(const uint8_t *source, size_t count, uint8_t *destination, size_t capacity) {
    if (!tb_gzip_available() || count > 0xFFFFFFFFu || capacity > 0xFFFFFFFFu) return 0;
    z_stream_abi stream = {0};
    // zlib checks only the major version and the structure's size.
    if (deflate_init2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, GZIP_WINDOW_BITS, MEMORY_LEVEL, Z_DEFAULT_STRATEGY,
                      "1.2.11", (int)sizeof(stream)) != Z_OK) {
        return 0;
    }
    stream.next_in = source;
    stream.avail_in = (unsigned int)count;
    stream.next_out = destination;
    stream.avail_out = (unsigned int)capacity;
    int status = deflate_run(&stream, Z_FINISH);
    size_t written = status == Z_STREAM_END ? (size_t)stream.total_out : 0;
    deflate_end(&stream);
    return written;
}
