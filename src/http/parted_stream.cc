#include "http/parted_stream.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "common/log.h"
#include "http/http_stream.h"
#include "shardstream/url.h"
#include "transfer/transfer_engine.h"

namespace shardstream::internal {
namespace {

using Clock = std::chrono::steady_clock;

// Bytes a part's GET reads at a time before handing them over.
constexpr size_t kChunk = size_t{256} << 10;
// Added to the ranks of a background (prefetched) stream's parts: after
// every part a reader may wait on.
constexpr int64_t kBackgroundRank = int64_t{1} << 20;
// The least window of a stream whose parts_per_stream is 0 (its share).
constexpr int kLeastWindow = 16;

// A part's bytes, from the engine's kept buffers or fresh anonymous memory
// (TransferEngine::TakeBuffer), handed back when the part is consumed.
class PartBuffer {
 public:
  static std::unique_ptr<PartBuffer> New(TransferEngine* engine, size_t n) {
    char* p = engine->TakeBuffer(n);
    if (p == nullptr) return nullptr;
    return std::unique_ptr<PartBuffer>(new PartBuffer(engine, p, n));
  }
  ~PartBuffer() { engine_->GiveBuffer(data_, size_); }
  char* data() const { return data_; }

 private:
  PartBuffer(TransferEngine* e, char* d, size_t n) : engine_(e), data_(d), size_(n) {}
  TransferEngine* engine_;
  char* data_;
  size_t size_;
};

struct Part {
  uint64_t begin = 0;  // offset in the object
  uint64_t len = 0;
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
  // Below: guarded by PartsShared::mu.
  std::unique_ptr<PartBuffer> buf;
  uint64_t filled = 0;  // bytes [0, filled) are in buf, in order
  bool done = false;
  bool failed = false;
  Status status;  // why it failed
  int running = 0;
  bool hedged = false;
  uint64_t reserved = 0;  // budget bytes taken for it, not yet given back
  Clock::time_point started{};
};

// What a stream shares with its part jobs, which may outlive it.
struct PartsShared {
  ~PartsShared() {
    uint64_t reserved = 0;
    for (auto& p : parts) reserved += p.reserved;
    engine->ReleaseBytes(reserved);
  }
  void Stop() {
    stop->store(true);
    for (auto& p : parts) p.cancel->store(true);
  }

  TransferEngine* engine = nullptr;
  std::shared_ptr<HttpClient::Shared> client;
  StreamRequest base;
  std::string host;
  std::string url;  // redacted
  TransferOptions opts;
  uint64_t total = 0;
  std::string etag, last_modified;
  std::shared_ptr<std::atomic<bool>> stop = std::make_shared<std::atomic<bool>>(false);
  std::atomic<int64_t> cur{0};  // the part the reader is on
  std::atomic<bool> background{false};  // a prefetch no reader has taken yet

  std::mutex mu;
  std::condition_variable cv;
  std::vector<Part> parts;  // begin, len and cancel fixed at construction
};

class PartJob final : public TransferJob {
 public:
  // `opened`: the stream's first GET, when this part is the one it answers
  // (a background stream's part 0); other attempts send a GET of their own.
  PartJob(std::shared_ptr<PartsShared> s, size_t index, bool hedge,
          std::unique_ptr<InputStream> opened = nullptr)
      : s_(std::move(s)), index_(index), hedge_(hedge), opened_(std::move(opened)) {}

  const std::string& host() const override { return s_->host; }
  int64_t Rank() const override {
    if (s_->stop->load() || s_->parts[index_].cancel->load()) return -1;
    return std::max<int64_t>(0, static_cast<int64_t>(index_) - s_->cur.load()) +
           (s_->background.load() ? kBackgroundRank : 0);
  }
  uint64_t Bytes() const override { return hedge_ ? 0 : s_->parts[index_].len; }

  void Run() override {
    PartsShared& s = *s_;
    Part& p = s.parts[index_];
    uint64_t from;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      p.reserved += Bytes();
      if (s.stop->load() || p.done || p.failed) return;
      if (!p.buf) {
        p.buf = PartBuffer::New(s.engine, std::max(p.len, s.opts.part_size));
        if (!p.buf) {
          Fail(p, Status(StatusCode::kIo, "out of memory for a part of " + s.url));
          return;
        }
      }
      from = p.filled;
      p.running++;
      if (!hedge_) p.started = Clock::now();
    }
    StreamRequest r;
    r.urls = s.base.urls;
    r.headers = s.base.headers;
    r.sign = s.base.sign;
    r.error = s.base.error;
    r.offset = p.begin + from;
    r.end = p.begin + p.len;
    r.expected_size = s.total;
    r.if_match = s.etag;
    if (s.etag.empty()) r.if_unmodified_since = s.last_modified;
    r.cancel = p.cancel;
    r.stall_s = s.opts.stall_s;
    Status err;
    Result<std::unique_ptr<InputStream>> opened = std::unique_ptr<InputStream>();
    if (opened_ && from == 0) {
      opened = std::move(opened_);
    } else {
      opened = OpenHttpStream(s.client, std::move(r));
    }
    opened_.reset();
    if (!opened.ok()) {
      err = opened.status();
    } else {
      thread_local std::vector<char> chunk(kChunk);
      uint64_t at = from;
      while (true) {
        auto got = (*opened)->Read(static_cast<size_t>(std::min<uint64_t>(kChunk, p.len - at)),
                                   chunk.data());
        if (!got.ok()) {
          err = got.status();
          break;
        }
        if (*got == 0) break;
        std::lock_guard<std::mutex> lock(s.mu);
        if (p.done || p.failed) break;
        const uint64_t end = at + *got;
        if (end > p.filled) {  // only the bytes no other attempt delivered yet
          const uint64_t skip = p.filled - at;
          std::memcpy(p.buf->data() + p.filled, chunk.data() + skip, *got - skip);
          p.filled = end;
          if (p.filled == p.len) {
            p.done = true;
            p.cancel->store(true);  // the other attempt, if any, stops
            // Counted before the reader can see the last byte, so that the
            // counters agree with what was delivered.
            s.engine->CountPart(std::chrono::duration<double>(Clock::now() - p.started).count());
            if (hedge_) s.engine->CountHedgeWin();
            s.engine->Signal(s.host, HostSignal::kSuccess);
          }
          s.cv.notify_all();
        }
        at = end;
        if (p.done) break;
      }
    }
    std::lock_guard<std::mutex> lock(s.mu);
    p.running--;
    if (!p.done && p.running == 0) {
      if (err.ok()) {
        err = Status(StatusCode::kCorrupt, "GET " + s.url + ": part ended before its last byte",
                     s.url, static_cast<int64_t>(p.begin + p.filled));
      }
      Fail(p, err);
    }
    s.cv.notify_all();
  }

 private:
  void Fail(Part& p, Status err) {
    if (p.failed) return;
    p.failed = true;
    p.status = err.WithContext("", s_->url, static_cast<int64_t>(p.begin + p.filled));
    s_->cv.notify_all();
  }

  std::shared_ptr<PartsShared> s_;
  const size_t index_;
  const bool hedge_;
  std::unique_ptr<InputStream> opened_;
};

class PartedStream final : public InputStream {
 public:
  // A background stream's first GET fills part 0 like any part; otherwise
  // the reader reads it straight through.
  PartedStream(std::shared_ptr<PartsShared> s, std::unique_ptr<InputStream> first,
               uint64_t offset)
      : s_(std::move(s)), url_(s_->url), pos_(offset) {
    s_->engine->StreamOpened();
    if (s_->background) {
      s_->engine->Submit(std::make_shared<PartJob>(s_, 0, false, std::move(first)));
    } else {
      first_ = std::move(first);
    }
    Schedule();
  }
  ~PartedStream() override {
    s_->Stop();
    s_->engine->StreamClosed();
  }

  void Foreground() { s_->background = false; }

  const std::string& url() const override { return url_; }
  uint64_t position() const override { return pos_; }
  std::optional<uint64_t> size() const override { return s_->total; }

  Result<size_t> Read(size_t n, void* out) override { return ReadImpl(n, out, nullptr); }
  Result<size_t> ReadWithin(size_t n, void* out, std::chrono::microseconds wait) override {
    const Clock::time_point deadline = Clock::now() + wait;
    return ReadImpl(n, out, &deadline);
  }

 private:
  Status Cancelled() const {
    return Status(StatusCode::kCancelled, "GET " + url_ + ": cancelled", url_,
                  static_cast<int64_t>(pos_));
  }

  // Parts ahead of the reader it may have asked for: parts_per_stream, or
  // (0) this stream's share of the budget. Measured with two 1 GiB shards
  // from a store capping each connection at 25 MB/s: a fixed 16 left half of
  // the 64 connections idle.
  size_t Window() const {
    const TransferOptions& o = s_->opts;
    if (o.parts_per_stream > 0) return static_cast<size_t>(o.parts_per_stream);
    // The budget's parts, less the engine's kept buffers (which count
    // against it, and which a full budget would return to the system).
    const uint64_t in_budget = o.max_bytes_in_flight / std::max<uint64_t>(o.part_size, 1);
    const uint64_t kept = TransferEngine::KeptBuffers(o);
    const uint64_t budget = std::min<uint64_t>(static_cast<uint64_t>(o.max_connections),
                                               in_budget > kept ? in_budget - kept : 1);
    const uint64_t share = budget / static_cast<uint64_t>(std::max(1, s_->engine->OpenStreams()));
    return static_cast<size_t>(std::max<uint64_t>(kLeastWindow, share));
  }

  // Submits the parts of the window ahead of the reader.
  void Schedule() {
    const size_t last = std::min(s_->parts.size(), cur_ + Window());
    for (; next_ < last; ++next_)
      s_->engine->Submit(std::make_shared<PartJob>(s_, next_, false));
  }

  void NextPart() {
    uint64_t reserved = 0;
    std::unique_ptr<PartBuffer> buf;
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      Part& p = s_->parts[cur_];
      buf = std::move(p.buf);
      p.cancel->store(true);
      reserved = p.reserved;
      p.reserved = 0;
    }
    // The bytes go back before the buffer is kept, which counts them again.
    s_->engine->ReleaseBytes(reserved);
    buf.reset();
    ++cur_;
    s_->cur.store(static_cast<int64_t>(cur_));
    Schedule();
  }

  Result<size_t> ReadImpl(size_t n, void* out, const Clock::time_point* deadline) {
    const auto& cancel = s_->base.cancel;
    if (cancel && cancel->load()) return Cancelled();
    if (n == 0 || pos_ >= s_->total) return size_t{0};
    if (cur_ == 0 && first_) {  // the first GET, straight through
      const Part& p = s_->parts[0];
      const size_t want = static_cast<size_t>(std::min<uint64_t>(n, p.begin + p.len - pos_));
      size_t got;
      if (deadline != nullptr) {
        auto left = std::chrono::duration_cast<std::chrono::microseconds>(*deadline - Clock::now());
        SHARDSTREAM_ASSIGN_OR_RETURN(
            got, first_->ReadWithin(want, out, std::max(left, std::chrono::microseconds(0))));
        if (got == 0) return size_t{0};
      } else {
        SHARDSTREAM_ASSIGN_OR_RETURN(got, first_->Read(want, out));
        if (got == 0) {
          return Status(StatusCode::kCorrupt,
                        "GET " + url_ + ": body ended at byte " + std::to_string(pos_) + " of " +
                            std::to_string(s_->total),
                        url_, static_cast<int64_t>(pos_));
        }
      }
      pos_ += got;
      if (pos_ == p.begin + p.len) {
        first_.reset();  // drops its connection: the next bytes come from part 1
        NextPart();
      }
      return got;
    }
    Part& p = s_->parts[cur_];
    const uint64_t off = pos_ - p.begin;
    const char* src = nullptr;
    size_t k = 0;
    bool hedge = false;
    {
      std::unique_lock<std::mutex> lock(s_->mu);
      const Clock::time_point wait_start = Clock::now();
      const bool waits = p.filled <= off && !p.failed;
      while (p.filled <= off && !p.failed) {
        Clock::time_point now = Clock::now();
        if (deadline != nullptr && now >= *deadline) break;
        if (cancel && cancel->load()) {
          s_->engine->CountReaderWait(now - wait_start);
          return Cancelled();
        }
        if (!p.hedged && p.running > 0 && s_->opts.hedge_factor > 0) {
          const double median = s_->engine->PartMedianSeconds();
          const double after = std::max(s_->opts.hedge_min_s, s_->opts.hedge_factor * median);
          if (median > 0 && std::chrono::duration<double>(now - p.started).count() > after) {
            p.hedged = true;
            hedge = true;
            break;
          }
        }
        auto slice = std::chrono::milliseconds(100);
        if (deadline != nullptr)
          s_->cv.wait_until(lock, std::min(*deadline, now + slice));
        else
          s_->cv.wait_for(lock, slice);
      }
      if (waits) s_->engine->CountReaderWait(Clock::now() - wait_start);
      if (!hedge) {
        if (p.filled > off) {
          src = p.buf->data() + off;
          k = static_cast<size_t>(std::min<uint64_t>(n, p.filled - off));
        } else if (p.failed) {
          return p.status;
        }
      }
    }
    if (hedge) {
      Log().debug("http {}: part at byte {} is slow; asking for it again", url_, p.begin);
      s_->engine->CountHedge();
      s_->engine->Submit(std::make_shared<PartJob>(s_, cur_, true));
      return ReadImpl(n, out, deadline);
    }
    if (k == 0) return size_t{0};  // ReadWithin's deadline passed
    // [off, filled) never changes again, and only this reader frees the buffer.
    std::memcpy(out, src, k);
    pos_ += k;
    if (off + k == p.len) NextPart();
    return k;
  }

  std::shared_ptr<PartsShared> s_;
  std::unique_ptr<InputStream> first_;
  const std::string url_;
  uint64_t pos_;
  size_t cur_ = 0;   // the part being read
  size_t next_ = 1;  // the next part to submit
};

}  // namespace

void BringToForeground(InputStream& stream) {
  if (auto* parted = dynamic_cast<PartedStream*>(&stream)) parted->Foreground();
}

Result<std::unique_ptr<InputStream>> OpenPartedStream(std::shared_ptr<HttpClient::Shared> client,
                                                      StreamRequest request, bool background) {
  const TransferOptions opts = GetTransferOptions();
  TransferEngine& engine = TransferEngine::Get();
  StreamRequest first_request = request;
  first_request.stall_s = opts.stall_s;
  StreamInfo info;
  SHARDSTREAM_ASSIGN_OR_RETURN(auto first,
                               OpenHttpStream(client, std::move(first_request), &info));
  const uint64_t offset = request.offset;
  const bool parted = opts.part_size > 0 && info.ranges && info.total &&
                      *info.total > offset && *info.total - offset > opts.part_size &&
                      (!info.etag.empty() || !info.last_modified.empty());
  engine.CountStream(parted);
  if (!parted) return first;

  auto s = std::make_shared<PartsShared>();
  s->engine = &engine;
  s->client = std::move(client);
  s->host = UrlHost(request.urls.front());
  s->url = RedactUrl(request.urls.front());
  s->opts = opts;
  s->total = *info.total;
  s->etag = info.etag;
  s->last_modified = info.last_modified;
  s->base = std::move(request);
  s->background = background;
  for (uint64_t begin = offset; begin < s->total; begin += opts.part_size) {
    Part p;
    p.begin = begin;
    p.len = std::min(opts.part_size, s->total - begin);
    s->parts.push_back(std::move(p));
  }
  return std::unique_ptr<InputStream>(new PartedStream(std::move(s), std::move(first), offset));
}

}  // namespace shardstream::internal
