// Transfers: how remote objects (http://, https://, s3://) are fetched. A
// stream of an object larger than one part is read as ranged GETs of
// part_size bytes over several connections at once, pinned to the object's
// version (If-Match on the ETag, else If-Unmodified-Since), and handed to the
// reader in order as parts arrive: the first part streams straight to the
// reader, so the first sample does not wait for the rest. A server that
// ignores Range, or an object of unknown size, is read as one stream.
//
// One engine per process runs every part: a budget of connections and of
// bytes buffered ahead of readers bounds the memory, whatever the object
// sizes; the part a reader waits on goes first; per host, the connections in
// use grow while parts succeed and halve on 503/429 or connection errors
// (AIMD). A part with no bytes for stall_s is dropped and its remaining range
// asked for again; a part that keeps a reader waiting much longer than
// parts usually take is asked for a second time on another connection, and
// the first answer wins (a hedge).
//
// Checkpoint uploads (uploader.h) run their multipart parts on the same
// engine, after every read and on at most a quarter of max_connections.
//
// Processes on one node: each process has its own engine. Give each its
// share with SetTransferOptions or the environment; shardstream.torch gives
// every rank and DataLoader worker its share of a node budget
// (docs/object-storage.md).
//
// Thread-safety: every function here may be called from any thread.
#ifndef SHARDSTREAM_TRANSFER_H_
#define SHARDSTREAM_TRANSFER_H_

#include <cstdint>

#include "shardstream/export.h"

namespace shardstream {

struct SHARDSTREAM_EXPORT TransferOptions {
  // Bytes per ranged GET; 0 reads every object as one stream.
  // Default: 8 MiB (SHARDSTREAM_PART_SIZE).
  uint64_t part_size = uint64_t{8} << 20;
  // Parts of one stream in flight or buffered ahead of its reader. 0: its
  // share of the budget (max_connections and max_bytes_in_flight in parts,
  // over the parted streams open), at least 16, so that a few large
  // objects use the connections many small ones would. Default: 0.
  int parts_per_stream = 0;
  // Connections this process uses for parts at most, over all hosts.
  // Default: 64 (SHARDSTREAM_MAX_CONNECTIONS).
  int max_connections = 64;
  // Connections per host to start with; AIMD moves between 1 and
  // max_connections from there. Default: 16.
  int initial_host_connections = 16;
  // Bytes of parts held for readers at most (each reader's current part may
  // go past it, so a reader never waits on the budget). Default: 512 MiB
  // (SHARDSTREAM_MAX_INFLIGHT).
  uint64_t max_bytes_in_flight = uint64_t{512} << 20;
  // A GET stream (a part, or a whole object) with no byte for this long is
  // dropped and the rest of its range asked for again. The smaller of this
  // and HttpOptions::low_speed_time_s applies. Default: 5 s.
  double stall_s = 5;
  // A host that sends no byte on any connection for this long while asked
  // (every GET to it stalls) fails each stream to it at its next stall,
  // with an error naming the url: a store that stalls everything fails in
  // well under a minute, whatever the number of streams waiting on it.
  // 0: off (each stream gives up on its own, after (max_retries + 1) *
  // stall_s). Default: 30 s.
  double host_stall_s = 30;
  // A reader waiting on a part that has run hedge_factor times the median
  // part time (and at least hedge_min_s) asks for its rest again on another
  // connection; 0 turns hedging off. Default: 3, 1 s.
  double hedge_factor = 3;
  double hedge_min_s = 1;
};

// Replaces the options for streams opened from now on (streams already
// open keep theirs). Values out of range are clamped.
SHARDSTREAM_EXPORT void SetTransferOptions(const TransferOptions& options);
// The options in force: the defaults, with SHARDSTREAM_PART_SIZE,
// SHARDSTREAM_MAX_CONNECTIONS and SHARDSTREAM_MAX_INFLIGHT applied, unless
// SetTransferOptions replaced them.
SHARDSTREAM_EXPORT TransferOptions GetTransferOptions();

// Counters of this process's remote reads since it started.
struct SHARDSTREAM_EXPORT TransferStats {
  uint64_t bytes = 0;          // body bytes received from remote sources
  double busy_seconds = 0;     // time at least one transfer was running
  double bytes_per_s = 0;      // bytes / busy_seconds
  int connections = 0;         // GETs running now
  int peak_connections = 0;
  uint64_t bytes_in_flight = 0;  // part bytes held for readers now
  uint64_t streams = 0;        // streams opened
  uint64_t parted_streams = 0; // of those, read in ranged parts
  uint64_t parts = 0;          // parts completed
  double part_p50_s = 0, part_p99_s = 0;  // time from request to last byte
  uint64_t hedges = 0;         // parts asked for a second time
  uint64_t hedge_wins = 0;     // of those, won by the second request
  uint64_t retries = 0;        // GETs retried (resets, stalls, 5xx, 429)
  uint64_t stalls = 0;         // of those, after stall_s without a byte
  uint64_t throttles = 0;      // 503 and 429 answers
  double reader_wait_seconds = 0;  // readers waiting for a part's bytes
  uint64_t upload_parts = 0;   // checkpoint multipart parts uploaded
  uint64_t upload_bytes = 0;   // their bytes
};
SHARDSTREAM_EXPORT TransferStats GetTransferStats();

}  // namespace shardstream

#endif  // SHARDSTREAM_TRANSFER_H_
