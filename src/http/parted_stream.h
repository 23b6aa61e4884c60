// The stream behind HttpClient::OpenStream: the first GET streams straight
// to the reader; when its answer shows an object larger than one part on a
// server that honours Range, the rest is read as ranged parts of
// TransferOptions::part_size over the process's transfer engine, each part
// pinned to the first answer's version, and handed to the reader in order.
// Otherwise (Range ignored, unknown size, a small object, part_size 0) it is
// that one GET. See include/shardstream/transfer.h.
//
// Thread-safety: one reader thread at a time, except the cancel flag.
#ifndef SHARDSTREAM_HTTP_PARTED_STREAM_H_
#define SHARDSTREAM_HTTP_PARTED_STREAM_H_

#include <memory>

#include "http/http_client.h"

namespace shardstream::internal {

// background: a prefetch no reader waits on yet. Its parts (the first
// GET's too, read into a part of its own) come after every reader's, until
// BringToForeground.
Result<std::unique_ptr<InputStream>> OpenPartedStream(std::shared_ptr<HttpClient::Shared> client,
                                                      StreamRequest request,
                                                      bool background = false);
// A reader now waits on a background stream: its parts rank as a reader's.
// Nothing for other streams.
void BringToForeground(InputStream& stream);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_HTTP_PARTED_STREAM_H_
