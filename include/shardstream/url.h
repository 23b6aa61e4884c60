// Url helpers shared by every Source: scheme detection, joining relative urls,
// and redaction of credentials for messages and logs.
// Thread-safety: pure functions.
#ifndef SHARDSTREAM_URL_H_
#define SHARDSTREAM_URL_H_

#include <string>
#include <string_view>

#include "shardstream/export.h"

namespace shardstream {

// "http", "https", "s3", "file", "pipe", ...; "file" for a plain path.
SHARDSTREAM_EXPORT std::string UrlScheme(std::string_view url);

// The local path of a plain path or file:// url; empty for other schemes.
SHARDSTREAM_EXPORT std::string LocalPath(std::string_view url);

// The parent "directory" of a url (without trailing slash); "." for a bare name.
SHARDSTREAM_EXPORT std::string UrlDirname(std::string_view url);
// The last path component of a url, without query.
SHARDSTREAM_EXPORT std::string UrlBasename(std::string_view url);

// Resolves `ref` against `base_dir` (a directory url): absolute urls and
// absolute paths are returned unchanged.
SHARDSTREAM_EXPORT std::string JoinUrl(std::string_view base_dir, std::string_view ref);

// The url with user:password, and query parameters that carry signatures,
// credentials or tokens (X-Amz-Signature, X-Amz-Credential,
// X-Amz-Security-Token, Signature, token, ...), replaced by "REDACTED".
// Use on every url that reaches a message, a log line or an exception.
SHARDSTREAM_EXPORT std::string RedactUrl(std::string_view url);

// True for a manifest's url (.jsonl, .ndjson, .csv, .json; a query ignored).
SHARDSTREAM_EXPORT bool IsManifestUrl(std::string_view url);
// True for a shard's url (.tar, .tar.zst, .tar.zstd, .tar.gz, .tgz).
SHARDSTREAM_EXPORT bool IsShardUrl(std::string_view url);
// True where a written object appears whole when its write completes, and
// nothing can be renamed (s3://, http(s):// PUT): writers write to the final
// name there, not to a temporary one renamed into place.
SHARDSTREAM_EXPORT bool WritesWholeObjects(std::string_view url);

}  // namespace shardstream

#endif  // SHARDSTREAM_URL_H_
