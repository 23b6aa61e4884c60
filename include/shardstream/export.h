// Symbol visibility for the shardstream shared library. The library is built
// with hidden visibility; only names marked SHARDSTREAM_EXPORT are public.
#ifndef SHARDSTREAM_EXPORT_H_
#define SHARDSTREAM_EXPORT_H_

#if defined(SHARDSTREAM_SHARED_LIBRARY)
#if defined(SHARDSTREAM_COMPILE_LIBRARY)
#define SHARDSTREAM_EXPORT [[gnu::visibility("default")]]
#else
#define SHARDSTREAM_EXPORT
#endif
#else
#define SHARDSTREAM_EXPORT
#endif

#endif  // SHARDSTREAM_EXPORT_H_
