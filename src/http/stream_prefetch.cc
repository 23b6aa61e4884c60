#include "http/stream_prefetch.h"

#include <unistd.h>

#include <atomic>
#include <condition_variable>

#include "http/parted_stream.h"
#include "transfer/transfer_engine.h"

namespace shardstream::internal {

using Clock = std::chrono::steady_clock;

struct StreamPrefetcher::Entry {
  std::string url;
  // The process that started it: a forked child finds the parent's entries
  // in its copy of the client, but not the engine jobs that fill them.
  pid_t pid = ::getpid();
  Clock::time_point started = Clock::now();
  std::mutex mu;
  std::condition_variable cv;
  // For its OpenJob, which must not touch the entry from the engine's
  // queue: 0 background, 1 a reader waits for it to open, -1 dropped.
  std::shared_ptr<std::atomic<int>> state = std::make_shared<std::atomic<int>>(0);
  ~Entry() { state->store(-1); }
  bool done = false;
  Result<std::unique_ptr<InputStream>> stream = std::unique_ptr<InputStream>();
};

namespace {

// Sends a prefetch's first GET on an engine worker, after every part a
// reader may wait on; dropped unrun when the prefetch was.
class OpenJob final : public TransferJob {
 public:
  OpenJob(std::shared_ptr<HttpClient::Shared> client, StreamRequest request,
          std::weak_ptr<StreamPrefetcher::Entry> entry)
      : client_(std::move(client)),
        request_(std::move(request)),
        state_(entry.lock()->state),
        entry_(std::move(entry)),
        host_(UrlHost(request_.urls.front())) {}
  const std::string& host() const override { return host_; }
  int64_t Rank() const override {
    const int state = state_->load();
    return state < 0 ? -1 : state > 0 ? 0 : int64_t{1} << 30;
  }
  uint64_t Bytes() const override { return 0; }
  void Run() override {
    if (state_->load() < 0) return;
    auto opened = OpenPartedStream(client_, std::move(request_), /*background=*/true);
    auto entry = entry_.lock();
    if (!entry) return;  // dropped meanwhile: the stream goes with `opened`
    {
      std::lock_guard<std::mutex> lock(entry->mu);
      entry->stream = std::move(opened);
      entry->done = true;
    }
    entry->cv.notify_all();
  }

 private:
  std::shared_ptr<HttpClient::Shared> client_;
  StreamRequest request_;
  std::shared_ptr<const std::atomic<int>> state_;
  std::weak_ptr<StreamPrefetcher::Entry> entry_;
  std::string host_;
};

}  // namespace

std::deque<std::shared_ptr<StreamPrefetcher::Entry>> StreamPrefetcher::ExpireLocked() {
  std::deque<std::shared_ptr<Entry>> gone;
  const auto now = Clock::now();
  const pid_t me = ::getpid();
  for (auto it = entries_.begin(); it != entries_.end();) {
    if ((*it)->pid != me) {
      new std::shared_ptr<Entry>(std::move(*it));  // leaked: never touched here
      it = entries_.erase(it);
    } else if (now - (*it)->started > kTtl) {
      gone.push_back(std::move(*it));
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  return gone;
}

void StreamPrefetcher::Start(std::shared_ptr<HttpClient::Shared> client, StreamRequest request) {
  request.offset = 0;
  request.end.reset();
  request.cancel.reset();
  auto entry = std::make_shared<Entry>();
  entry->url = request.urls.front();
  std::deque<std::shared_ptr<Entry>> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone = ExpireLocked();
    for (const auto& e : entries_)
      if (e->url == entry->url) return;
    entries_.push_back(entry);
    if (entries_.size() > kMaxEntries) {
      gone.push_back(std::move(entries_.front()));
      entries_.pop_front();
    }
  }
  TransferEngine::Get().Submit(
      std::make_shared<OpenJob>(std::move(client), std::move(request), entry));
}

Result<std::unique_ptr<InputStream>> StreamPrefetcher::Take(const StreamRequest& request) {
  if (request.offset != 0 || request.end || request.cancel) return std::unique_ptr<InputStream>();
  std::shared_ptr<Entry> entry;
  std::deque<std::shared_ptr<Entry>> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone = ExpireLocked();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if ((*it)->url == request.urls.front()) {
        entry = std::move(*it);
        entries_.erase(it);
        break;
      }
    }
  }
  if (!entry) return std::unique_ptr<InputStream>();
  entry->state->store(1);  // its job, if not run yet, goes first now
  std::unique_lock<std::mutex> lock(entry->mu);
  entry->cv.wait(lock, [&] { return entry->done; });
  if (!entry->stream.ok()) return std::unique_ptr<InputStream>();  // opened anew: its own error
  std::unique_ptr<InputStream> stream = std::move(*entry->stream);
  if (request.expected_size && stream->size() && *stream->size() != *request.expected_size)
    return std::unique_ptr<InputStream>();  // opened anew, and the size checked there
  BringToForeground(*stream);
  return stream;
}

void StreamPrefetcher::Clear() {
  std::deque<std::shared_ptr<Entry>> gone;
  std::lock_guard<std::mutex> lock(mu_);
  gone = ExpireLocked();
  for (auto& e : entries_) gone.push_back(std::move(e));
  entries_.clear();
}

}  // namespace shardstream::internal
